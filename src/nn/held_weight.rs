//! A layer weight held once: as a tensor, or — on the Cpu, where the layer keeps the weight
//! prepacked for its products — only as those panels, rebuilt into a tensor on demand (from the
//! panels themselves, or, for convolutions whose panels cannot give it back, by a
//! [`super::restore::WeightRestore`]).
//!
//! Why: a prepacked Cpu layer that also kept its weight tensor held every weight twice (an SD
//! 1.5 UNet in f32 peaked near 7 GB for 3.4 GB of weights). The panels hold exactly the packed
//! values (16-bit weights widened exactly), so the tensor they give back is bit for bit the
//! weight the layer was built from.
//!
//! Invariants: a [`HeldWeight`] made by [`HeldWeight::packed_only`] is only made for a layer
//! that can give the weight back (its panels, or a restore; the caller checks); the rebuilt
//! tensor is contiguous, in the weight's shape and dtype, on the Cpu. [`HeldWeight::get`] caches
//! the rebuilt tensor in the layer (for callers that borrow it); [`HeldWeight::owned`] does not
//! (conversions such as `to_dtype` would otherwise leave a second copy in the source layer).

use std::sync::OnceLock;

use crate::backend::Storage;
use crate::{DType, Device, Layout, Tensor};

/// A weight tensor, or the shape and dtype of one that a layer's packs can rebuild.
#[derive(Clone)]
pub(crate) struct HeldWeight {
    shape: Vec<usize>,
    dtype: DType,
    device: Device,
    tensor: OnceLock<Tensor>,
}

impl HeldWeight {
    /// Holds `t` itself.
    pub(crate) fn tensor(t: Tensor) -> HeldWeight {
        HeldWeight {
            shape: t.shape().to_vec(),
            dtype: t.dtype(),
            device: t.device(),
            tensor: OnceLock::from(t),
        }
    }

    /// Keeps only `t`'s shape, dtype and device: the layer's packs rebuild it (see the module
    /// invariants).
    pub(crate) fn packed_only(t: &Tensor) -> HeldWeight {
        HeldWeight {
            shape: t.shape().to_vec(),
            dtype: t.dtype(),
            device: t.device(),
            tensor: OnceLock::new(),
        }
    }

    /// The weight's shape.
    pub(crate) fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The weight's dtype.
    pub(crate) fn dtype(&self) -> DType {
        self.dtype
    }

    /// The weight's device.
    pub(crate) fn device(&self) -> Device {
        self.device
    }

    /// True when the tensor is held (not only the packs).
    pub(crate) fn is_held(&self) -> bool {
        self.tensor.get().is_some()
    }

    /// The tensor, rebuilt by `rebuild` (row-major values in the weight's dtype) on first use and
    /// kept from then on.
    pub(crate) fn get(&self, rebuild: impl FnOnce() -> Option<Storage>) -> &Tensor {
        self.get_tensor(|| rebuild().and_then(|s| self.wrap(s)))
    }

    /// The tensor (a cheap clone when held, else rebuilt by `rebuild` and not kept).
    pub(crate) fn owned(&self, rebuild: impl FnOnce() -> Option<Storage>) -> Tensor {
        self.owned_tensor(|| rebuild().and_then(|s| self.wrap(s)))
    }

    /// [`HeldWeight::get`] with a rebuild that makes the tensor itself (contiguous, on the Cpu).
    pub(crate) fn get_tensor(&self, rebuild: impl FnOnce() -> Option<Tensor>) -> &Tensor {
        self.tensor.get_or_init(|| self.build(rebuild))
    }

    /// [`HeldWeight::owned`] with a rebuild that makes the tensor itself.
    pub(crate) fn owned_tensor(&self, rebuild: impl FnOnce() -> Option<Tensor>) -> Tensor {
        match self.tensor.get() {
            Some(t) => t.clone(),
            None => self.build(rebuild),
        }
    }

    /// Row-major values of the weight as a tensor (`None` if they do not fit its shape/dtype).
    fn wrap(&self, storage: Storage) -> Option<Tensor> {
        let n: usize = self.shape.iter().product();
        (storage.len() == n && storage.dtype() == self.dtype)
            .then(|| Tensor::from_storage(storage, Layout::contiguous(&self.shape)))
    }

    fn build(&self, rebuild: impl FnOnce() -> Option<Tensor>) -> Tensor {
        let fits = |t: &Tensor| {
            t.shape() == self.shape.as_slice()
                && t.dtype() == self.dtype
                && t.device() == Device::Cpu
                && t.is_contiguous()
        };
        // `packed_only` is only used for layers that can rebuild (module invariants); zeros
        // would only appear if that were broken (or memory ran out while rebuilding), and the
        // rebuild tests would catch the former.
        rebuild().filter(fits).unwrap_or_else(|| {
            let n: usize = self.shape.iter().product();
            let zeros = Storage::zeros("weight", self.dtype, n, Device::Cpu)
                .unwrap_or_else(|_| Storage::empty(self.dtype));
            Tensor::from_storage(zeros, Layout::contiguous(&self.shape))
        })
    }
}
