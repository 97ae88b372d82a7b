//! The user-facing [`Tensor`]: an immutable, cheaply cloned view (shape, strides, offset) of
//! storage on one device.
//!
//! Invariants: a tensor never changes after creation (ops return new tensors); views share
//! storage through `Arc` and never copy; `layout.max_offset() <= storage.len()`; every op
//! checks devices (no silent copies between devices) and dtypes before touching data.
//! Copies across devices and dtypes (`to`, `to_dtype`) keep the strides of dense views and
//! the memory order of the others, as PyTorch's `preserve_format` does: a transposed weight or
//! a channels-last activation stays so on the Xpu, and ops never assume their inputs are
//! contiguous.

mod creation;
mod display;
mod format;
mod random;
mod views;

pub use format::MemoryFormat;
pub(crate) use format::{NCHW_FROM_NHWC, NHWC};

use std::sync::Arc;

use crate::backend::Storage;
use crate::layout::Layout;
use crate::{DType, Device, Error, Result, WithDType};

struct Inner {
    storage: Arc<Storage>,
    layout: Layout,
}

/// An n-dimensional array on a [`Device`]. Cloning is O(1).
#[derive(Clone)]
pub struct Tensor(Arc<Inner>);

impl Tensor {
    pub(crate) fn from_storage(storage: Storage, layout: Layout) -> Tensor {
        Tensor(Arc::new(Inner {
            storage: Arc::new(storage),
            layout,
        }))
    }

    /// A new view of this tensor's storage.
    pub(crate) fn with_layout(&self, layout: Layout) -> Tensor {
        Tensor(Arc::new(Inner {
            storage: self.0.storage.clone(),
            layout,
        }))
    }

    pub(crate) fn storage(&self) -> &Storage {
        &self.0.storage
    }

    /// The view's layout (shape, strides, offset).
    pub fn layout(&self) -> &Layout {
        &self.0.layout
    }

    /// The dims.
    pub fn shape(&self) -> &[usize] {
        self.0.layout.shape()
    }

    /// Element strides.
    pub fn strides(&self) -> &[usize] {
        self.0.layout.strides()
    }

    /// Number of dims.
    pub fn rank(&self) -> usize {
        self.0.layout.rank()
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.0.layout.numel()
    }

    /// Size of dim `dim` (negative counts from the end).
    pub fn dim(&self, dim: isize) -> Result<usize> {
        let d = crate::layout::resolve_dim("dim", dim, self.rank())?;
        Ok(self.shape()[d])
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.0.storage.dtype()
    }

    /// Where the data lives.
    pub fn device(&self) -> Device {
        self.0.storage.device()
    }

    /// True if the view is row-major without gaps.
    pub fn is_contiguous(&self) -> bool {
        self.0.layout.is_contiguous()
    }

    /// This tensor if it is contiguous, else a contiguous copy on the same device.
    pub fn contiguous(&self) -> Result<Tensor> {
        if self.is_contiguous() {
            return Ok(self.clone());
        }
        let s = self.storage().to_device(self.layout(), self.device())?;
        Ok(Tensor::from_storage(s, Layout::contiguous(self.shape())))
    }

    /// A new tensor with its own contiguous storage on the same device (PyTorch's
    /// `clone(memory_format=torch.contiguous_format)`: plain `clone()` would keep a dense
    /// view's strides, as [`Tensor::to`] does; Rust's `Clone` shares storage instead).
    pub fn copy(&self) -> Result<Tensor> {
        let s = self.storage().to_device(self.layout(), self.device())?;
        Ok(Tensor::from_storage(s, Layout::contiguous(self.shape())))
    }

    /// These values laid out by `strides`, dense strides of this shape (e.g. PyTorch's
    /// `empty_like` of another tensor): the dims are copied in the memory order the strides
    /// give, or, where the strides address elements as a contiguous layout does (they differ
    /// at most on size-1 dims) and this tensor is contiguous, only relabelled.
    pub(crate) fn copy_to_strides(&self, strides: &[usize]) -> Result<Tensor> {
        let shape = self.shape().to_vec();
        let target = Layout::from_parts(shape.clone(), strides.to_vec(), 0);
        if strides.len() != shape.len() || (self.numel() > 0 && target.dense_span().is_none()) {
            return Err(Error::invalid(
                "copy_to_strides",
                format!("strides {strides:?} are not dense for shape {shape:?}"),
            ));
        }
        let plain = crate::layout::contiguous_strides(&shape);
        let same = shape
            .iter()
            .zip(strides.iter().zip(&plain))
            .all(|(&n, (a, b))| n <= 1 || a == b);
        if same && self.is_contiguous() && self.layout().offset() == 0 {
            return Ok(self.with_layout(target));
        }
        let (_, outer_first) = target.dense_strides_like();
        Ok(self.permute(&outer_first)?.copy()?.with_layout(target))
    }

    /// The layouts of a format-preserving copy (PyTorch's `preserve_format` in `_to_copy`):
    /// what to read from this tensor's storage (its elements in the order the copy stores
    /// them), and the layout the copy's own storage then has. A dense view (contiguous, a
    /// transpose, a permute, channels-last) is copied as its storage span and keeps its strides
    /// exactly, size-1 dims' included (so a `[N, 1, H, W]` channels-last tensor stays
    /// channels-last); an empty one keeps them too. One with gaps or repeats (a slice, a
    /// broadcast) becomes dense with its dims in the same memory order
    /// ([`Layout::dense_strides_like`]): a channel slice of a channels-last tensor stays
    /// channels-last.
    fn preserving_layouts(&self) -> Result<(Layout, Layout)> {
        let shape = self.shape().to_vec();
        if self.numel() == 0 {
            let kept = Layout::from_parts(shape, self.strides().to_vec(), 0);
            return Ok((self.layout().clone(), kept));
        }
        if let Some(span) = self.layout().dense_span() {
            return Ok((span, Layout::from_parts(shape, self.strides().to_vec(), 0)));
        }
        let (strides, outer_first) = self.layout().dense_strides_like();
        let read = self.layout().permute(&outer_first)?;
        Ok((read, Layout::from_parts(shape, strides, 0)))
    }

    /// A copy on `device` (the same tensor if it is already there). As PyTorch's `.to`, a
    /// dense view (a transpose, a permute, a channels-last tensor) keeps its strides, and so
    /// its memory format; a slice or a broadcast arrives dense with its dims in the same
    /// memory order (a channel slice of a channels-last tensor stays channels-last). Moving to
    /// `Device::Xpu` records an upload and returns at once; moving back waits for the GPU.
    pub fn to(&self, device: Device) -> Result<Tensor> {
        if device == self.device() {
            return Ok(self.clone());
        }
        let (read, kept) = self.preserving_layouts()?;
        let s = self.storage().to_device(&read, device)?;
        Ok(Tensor::from_storage(s, kept))
    }

    /// Converts to another dtype on the same device (floats round to nearest even; float to
    /// integer truncates toward zero and saturates, NaN becomes 0). Strides are kept as by
    /// [`Tensor::to`].
    pub fn to_dtype(&self, dtype: DType) -> Result<Tensor> {
        if dtype == self.dtype() {
            return Ok(self.clone());
        }
        let (read, kept) = self.preserving_layouts()?;
        let s = self.storage().cast(&read, dtype)?;
        Ok(Tensor::from_storage(s, kept))
    }

    /// All elements in row-major order, from any device (waits for the GPU). `T` must match
    /// the dtype exactly.
    pub fn to_vec<T: WithDType>(&self) -> Result<Vec<T>> {
        if T::DTYPE != self.dtype() {
            return Err(Error::DTypeMismatch {
                op: "to_vec",
                expected: self.dtype(),
                got: T::DTYPE,
            });
        }
        self.storage().to_vec::<T>(self.layout())
    }

    /// The single element of a one-element tensor.
    pub fn to_scalar<T: WithDType>(&self) -> Result<T> {
        if self.numel() != 1 {
            return Err(Error::shape(
                "to_scalar",
                "a tensor with exactly one element",
                self.shape(),
            ));
        }
        let v = self.to_vec::<T>()?;
        v.first()
            .copied()
            .ok_or_else(|| Error::invalid("to_scalar", "empty read-back"))
    }

    /// Errors with `DeviceMismatch` unless `other` is on this tensor's device.
    pub(crate) fn same_device(&self, other: &Tensor, op: &'static str) -> Result<()> {
        if self.device() != other.device() {
            return Err(Error::DeviceMismatch {
                op,
                lhs: self.device(),
                rhs: other.device(),
            });
        }
        Ok(())
    }

    /// Errors with `DTypeMismatch` unless `other` has this tensor's dtype.
    pub(crate) fn same_dtype(&self, other: &Tensor, op: &'static str) -> Result<()> {
        if self.dtype() != other.dtype() {
            return Err(Error::DTypeMismatch {
                op,
                expected: self.dtype(),
                got: other.dtype(),
            });
        }
        Ok(())
    }
}

/// Releases the host's recycled large buffers (what a model loader calls once its weights are
/// built, so the buffers that built them go back to the system).
pub(crate) fn release_host_cache() {
    crate::backend::prepared::release_host_cache()
}

/// `n` zeroed host values of `T` for `op`, or `Error::CpuOutOfMemory` when the host will not
/// give them (the one fallible path for host buffers sized by data, e.g. weights read from a
/// file).
pub(crate) fn zeroed_host<T: bytemuck::Zeroable>(op: &'static str, n: usize) -> Result<Vec<T>> {
    crate::backend::alloc::zeroed(op, n)
}

/// What `device` can take for one model step (see [`crate::memory_budget`]): models check it
/// before they work.
pub(crate) fn memory_budget(device: crate::Device) -> Result<crate::backend::MemoryBudget> {
    crate::backend::memory_budget(device)
}

/// Waits for the queued work of `device` (a no-op on the Cpu): for timing phases.
pub(crate) fn synchronize(device: crate::Device) -> Result<()> {
    match device {
        crate::Device::Cpu => Ok(()),
        crate::Device::Xpu => crate::backend::synchronize(),
    }
}
