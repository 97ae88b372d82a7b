//! Shape ops. All but `cat` (and `reshape` of a non-contiguous view) are views: they build a
//! new layout over the same storage and copy nothing.

use super::Tensor;
use crate::backend::Storage;
use crate::layout::{numel, resolve_dim, Layout};
use crate::{Error, Result};

impl Tensor {
    /// The same elements with a new shape. A view when the tensor is contiguous; otherwise the
    /// data is first copied into a contiguous tensor (like PyTorch's `reshape`).
    pub fn reshape(&self, shape: &[usize]) -> Result<Tensor> {
        if numel(shape) != self.numel() {
            return Err(Error::ShapeMismatch {
                op: "reshape",
                expected: format!(
                    "a shape with {} elements (from {:?})",
                    self.numel(),
                    self.shape()
                ),
                got: format!("{shape:?}"),
            });
        }
        if let Some(l) = self.layout().reshape(shape) {
            return Ok(self.with_layout(l));
        }
        let dense = self.contiguous()?;
        match dense.layout().reshape(shape) {
            Some(l) => Ok(dense.with_layout(l)),
            None => Err(Error::invalid(
                "reshape",
                format!("a contiguous copy of {:?} did not reshape", self.shape()),
            )),
        }
    }

    /// Flattens to one dim.
    pub fn flatten_all(&self) -> Result<Tensor> {
        self.reshape(&[self.numel()])
    }

    /// Reorders dims (`perm` is a permutation of `0..rank`).
    pub fn permute(&self, perm: &[usize]) -> Result<Tensor> {
        Ok(self.with_layout(self.layout().permute(perm)?))
    }

    /// Swaps two dims (negative dims count from the end).
    pub fn transpose(&self, dim0: isize, dim1: isize) -> Result<Tensor> {
        if self.rank() == 0 {
            // As PyTorch: a 0-d tensor takes dims 0 and -1 and stays as it is.
            resolve_dim("transpose", dim0, 1)?;
            resolve_dim("transpose", dim1, 1)?;
            return Ok(self.clone());
        }
        let a = resolve_dim("transpose", dim0, self.rank())?;
        let b = resolve_dim("transpose", dim1, self.rank())?;
        Ok(self.with_layout(self.layout().transpose(a, b)))
    }

    /// Transpose of the last two dims (rank >= 2).
    pub fn t(&self) -> Result<Tensor> {
        if self.rank() < 2 {
            return Err(Error::shape("t", "a tensor of rank >= 2", self.shape()));
        }
        self.transpose(-2, -1)
    }

    /// Elements `start..start + len` of `dim`.
    pub fn narrow(&self, dim: isize, start: usize, len: usize) -> Result<Tensor> {
        let d = resolve_dim("narrow", dim, self.rank())?;
        Ok(self.with_layout(self.layout().narrow(d, start, len)?))
    }

    /// Splits `dim` into at most `n` views as `torch.chunk` does: each `ceil(size / n)` long,
    /// the last one shorter (so fewer than `n` chunks when `size` is small: a dim of 6 in 4
    /// chunks gives three of 2); a dim of size 0 gives `n` empty views. `n = 0` is an error.
    pub fn chunk(&self, n: usize, dim: isize) -> Result<Vec<Tensor>> {
        let d = resolve_dim("chunk", dim, self.rank())?;
        if n == 0 {
            return Err(Error::invalid("chunk", "cannot split into 0 chunks"));
        }
        let size = self.shape()[d];
        if size == 0 {
            let mut views = crate::backend::alloc::with_capacity("chunk", n)?;
            views.extend(std::iter::repeat_n(self, n).cloned());
            return Ok(views);
        }
        self.split(size.div_ceil(n), dim)
    }

    /// Views of `size` elements along `dim`, the last one shorter where `size` does not divide
    /// the dim (`torch.split(x, size, dim)`); a dim of size 0 gives one empty view. `size = 0`
    /// is an error unless the dim is empty.
    pub fn split(&self, size: usize, dim: isize) -> Result<Vec<Tensor>> {
        let d = resolve_dim("split", dim, self.rank())?;
        let total = self.shape()[d];
        if total == 0 {
            return Ok(vec![self.clone()]);
        }
        if size == 0 {
            return Err(Error::invalid(
                "split",
                format!("a split size of 0 for dim {d} of size {total}"),
            ));
        }
        let mut views = crate::backend::alloc::with_capacity("split", total.div_ceil(size))?;
        for start in (0..total).step_by(size) {
            views.push(self.narrow(d as isize, start, size.min(total - start))?);
        }
        Ok(views)
    }

    /// Views of the given `sizes` along `dim`, which must add up to its size
    /// (`torch.split(x, [..], dim)`; sizes of 0 give empty views).
    pub fn split_sizes(&self, sizes: &[usize], dim: isize) -> Result<Vec<Tensor>> {
        let d = resolve_dim("split_sizes", dim, self.rank())?;
        let total = self.shape()[d];
        let sum = sizes.iter().try_fold(0usize, |a, &s| a.checked_add(s));
        if sum != Some(total) {
            return Err(Error::invalid(
                "split_sizes",
                format!(
                    "sizes {sizes:?} that add up to {total} (dim {d} of {:?})",
                    self.shape()
                ),
            ));
        }
        let mut start = 0;
        sizes
            .iter()
            .map(|&len| {
                let v = self.narrow(d as isize, start, len);
                start += len;
                v
            })
            .collect()
    }

    /// Broadcasts to `shape` with NumPy rules (no copy: broadcast dims get stride 0).
    pub fn broadcast_to(&self, shape: &[usize]) -> Result<Tensor> {
        Ok(self.with_layout(self.layout().broadcast_to(shape)?))
    }

    /// Removes `dim` if it has size 1 (otherwise returns the same view, like PyTorch).
    pub fn squeeze(&self, dim: isize) -> Result<Tensor> {
        if self.rank() == 0 {
            // As PyTorch: a 0-d tensor takes dim 0 or -1 and stays as it is.
            resolve_dim("squeeze", dim, 1)?;
            return Ok(self.clone());
        }
        let d = resolve_dim("squeeze", dim, self.rank())?;
        Ok(self.with_layout(self.layout().squeeze(d)))
    }

    /// Inserts a size-1 dim at `dim` (`-1` appends).
    pub fn unsqueeze(&self, dim: isize) -> Result<Tensor> {
        let d = resolve_dim("unsqueeze", dim, self.rank() + 1)?;
        Ok(self.with_layout(self.layout().unsqueeze(d)))
    }

    /// Concatenates tensors along `dim`; all must share device, dtype and every other dim. The
    /// result is contiguous, except that joining 4-D parts that are all channels-last (along
    /// any dim) gives a dense channels-last result, as in PyTorch.
    pub fn cat(tensors: &[&Tensor], dim: isize) -> Result<Tensor> {
        let Some(first) = tensors.first() else {
            return Err(Error::invalid(
                "cat",
                "expected at least one tensor, got none",
            ));
        };
        let d = resolve_dim("cat", dim, first.rank())?;
        let mut out_shape = first.shape().to_vec();
        out_shape[d] = 0;
        for t in tensors {
            first.same_device(t, "cat")?;
            first.same_dtype(t, "cat")?;
            let compatible = t.rank() == first.rank()
                && t.shape()
                    .iter()
                    .zip(first.shape())
                    .enumerate()
                    .all(|(i, (a, b))| i == d || a == b);
            if !compatible {
                let mut want = first.shape().to_vec();
                want[d] = t.shape().get(d).copied().unwrap_or(0);
                return Err(Error::ShapeMismatch {
                    op: "cat",
                    expected: format!(
                        "{want:?} (all dims but {d} equal to those of {:?})",
                        first.shape()
                    ),
                    got: format!("{:?}", t.shape()),
                });
            }
            out_shape[d] = out_shape[d].checked_add(t.shape()[d]).ok_or_else(|| {
                Error::invalid("cat", "the joined dim is larger than memory can address")
            })?;
        }
        // Channels-last parts (PyTorch keeps the format all parts suggest): their NHWC views
        // joined along the same dim there, so every pixel's channels stay one run; the result
        // is channels-last.
        let channels_last = |t: &&Tensor| t.memory_format() == crate::MemoryFormat::ChannelsLast;
        if first.rank() == 4 && tensors.iter().all(channels_last) {
            let views = tensors
                .iter()
                .map(|t| t.permute(&[0, 2, 3, 1]))
                .collect::<Result<Vec<_>>>()?;
            let refs: Vec<&Tensor> = views.iter().collect();
            let nhwc_dim = [0, 3, 1, 2][d];
            return Tensor::cat(&refs, nhwc_dim)?.permute(&[0, 3, 1, 2]);
        }
        let parts: Vec<(&Storage, &Layout)> =
            tensors.iter().map(|t| (t.storage(), t.layout())).collect();
        let storage = Storage::cat(&parts, d, &out_shape)?;
        Ok(Tensor::from_storage(
            storage,
            Layout::contiguous(&out_shape),
        ))
    }
}
