//! Indexing: [`Tensor::index_select`] (PyTorch's `index_select`, the lookup behind
//! `nn.Embedding`), [`Tensor::gather`], [`Tensor::flip`], [`Tensor::repeat`] and
//! [`Tensor::stack`].
//!
//! Invariants: `index_select` takes a 1-D `i32` index tensor on the source's device (any
//! strides); every index is checked against the indexed dim before anything is computed (an
//! index out of `0..size` is an error naming it, never a read out of bounds: the indices are
//! read back to the host for the check, which on the Xpu waits for the work queued before;
//! index tensors are small in practice, a token sequence or a list of rows); the output is
//! contiguous, `self`'s shape with the indexed dim replaced by the number of indices, values
//! copied bit for bit (any dtype), the source read in place through its strides. `gather`
//! follows the same rules with an index tensor of the source's rank (the output's shape).

use crate::layout::{resolve_dim, Layout};
use crate::{DType, Device, Error, Result, Tensor};

impl Tensor {
    /// The slices of `self` along `dim` at `indices` (1-D `i32`, each in `0..size of dim`,
    /// repeats allowed; a 0-d index selects one slice, keeping the dim), in order:
    /// `torch.index_select(self, dim, indices)`. An embedding lookup is
    /// `weight.index_select(0, &token_ids)`.
    pub fn index_select(&self, dim: isize, indices: &Tensor) -> Result<Tensor> {
        let op = "index_select";
        self.same_device(indices, op)?;
        if indices.rank() == 0 {
            return self.index_select(dim, &indices.reshape(&[1])?);
        }
        if indices.dtype() != DType::I32 || indices.rank() != 1 {
            return Err(Error::ShapeMismatch {
                op,
                expected: "1-D i32 indices".into(),
                got: format!("{} indices of shape {:?}", indices.dtype(), indices.shape()),
            });
        }
        let d = resolve_dim(op, dim, self.rank())?;
        self.check_indices(op, d, indices)?;
        self.index_select_in_range(d, indices)
    }

    /// Reads the `i32` `indices` back to the host and refuses the first one outside `0..size`
    /// of `dim`, naming it, its position (row-major) and the shape.
    fn check_indices(&self, op: &'static str, dim: usize, indices: &Tensor) -> Result<()> {
        let size = self.shape()[dim];
        let idx = indices.to(Device::Cpu)?.to_vec::<i32>()?;
        match idx
            .iter()
            .enumerate()
            .find(|(_, &i)| usize::try_from(i).map_or(true, |i| i >= size))
        {
            Some((pos, &bad)) => Err(Error::invalid(
                op,
                format!(
                    "index {bad} (position {pos}) is out of range for dim {dim} of size {size} \
                     (shape {:?})",
                    self.shape()
                ),
            )),
            None => Ok(()),
        }
    }

    /// [`Tensor::index_select`] along the resolved `dim` with 1-D `i32` `indices` on `self`'s
    /// device that the caller built in range (e.g. a flip): no read-back to check them, so no
    /// wait on the Xpu. The Cpu kernel still refuses an index out of range.
    pub(crate) fn index_select_in_range(&self, dim: usize, indices: &Tensor) -> Result<Tensor> {
        let mut shape = self.shape().to_vec();
        if let Some(s) = shape.get_mut(dim) {
            *s = indices.numel();
        }
        let s = self.storage().index_select(
            self.layout(),
            dim,
            (indices.storage(), indices.layout()),
        )?;
        Ok(Tensor::from_storage(s, Layout::contiguous(&shape)))
    }

    /// `torch.gather(self, dim, index)`: `out[i][j][k] = self[index[i][j][k]][j][k]` for
    /// `dim = 0` (and likewise for other dims). `index` is `i32` on `self`'s device, of
    /// `self`'s rank, no larger than `self` along every other dim, each value in `0..size of
    /// dim` (checked: the indices are read back to the host first, as for `index_select`); the
    /// output has `index`'s shape and `self`'s dtype, values copied bit for bit. As in PyTorch,
    /// a 0-d index into a 1-D `self` gives a 0-d result.
    pub fn gather(&self, dim: isize, index: &Tensor) -> Result<Tensor> {
        let op = "gather";
        self.same_device(index, op)?;
        if index.rank() == 0 && self.rank() == 1 {
            return self.gather(dim, &index.reshape(&[1])?)?.reshape(&[]);
        }
        let d = resolve_dim(op, dim, self.rank())?;
        let fits = index.rank() == self.rank()
            && (0..self.rank()).all(|k| k == d || index.shape()[k] <= self.shape()[k]);
        if index.dtype() != DType::I32 || !fits {
            return Err(Error::ShapeMismatch {
                op,
                expected: format!(
                    "i32 indices of rank {} no larger than {:?} outside dim {d}",
                    self.rank(),
                    self.shape()
                ),
                got: format!("{} indices of shape {:?}", index.dtype(), index.shape()),
            });
        }
        self.same_device(index, op)?;
        self.check_indices(op, d, index)?;
        let (l, il) = (self.layout(), index.layout());
        let s = self.storage().gather(l, d, (index.storage(), il))?;
        Ok(Tensor::from_storage(s, Layout::contiguous(index.shape())))
    }

    /// `torch.flip(self, dims)`: the elements in reverse order along each of `dims` (negative
    /// dims count from the end; a repeated dim is an error, as in PyTorch). A copy laid out as
    /// PyTorch's `empty_like(self)`: a dense view's strides kept (a channels-last tensor stays
    /// channels-last), other views dense in their memory order.
    pub fn flip(&self, dims: &[isize]) -> Result<Tensor> {
        let op = "flip";
        if let [dim] = dims {
            // A 0-d tensor flips along its "one" dim (0 or -1) to itself, as in PyTorch.
            if let Some(v) = self.scalar_as_vector(op, *dim)? {
                return v.reshape(&[])?.contiguous();
            }
        }
        let mut flipped = vec![false; self.rank()];
        for &dim in dims {
            let d = resolve_dim(op, dim, self.rank())?;
            if std::mem::replace(&mut flipped[d], true) {
                return Err(Error::invalid(
                    op,
                    format!("dim {d} appears more than once in {dims:?}"),
                ));
            }
        }
        // Flipped in memory order: the dims permuted outermost first, each reversed dim
        // gathered row-major, then the result viewed with the kept strides.
        let (dense_strides, outer_first) = self.layout().dense_strides_like();
        let kept = match self.layout().dense_span() {
            Some(_) => self.strides().to_vec(),
            None => dense_strides,
        };
        let mut out = self.permute(&outer_first)?;
        let mut copied = false;
        for (i, &d) in outer_first.iter().enumerate() {
            let n = self.shape()[d];
            if flipped[d] && n > 1 {
                let last = n as f64 - 1.0;
                let reversed = Tensor::arange(last, -1.0, -1.0, DType::I32, self.device())?;
                out = out.index_select_in_range(i, &reversed)?;
                copied = true;
            }
        }
        // Both leave a fresh row-major storage at offset 0.
        let out = if copied { out } else { out.copy()? };
        Ok(out.with_layout(Layout::from_parts(self.shape().to_vec(), kept, 0)))
    }

    /// `torch.repeat`: the tensor tiled `reps[i]` times along dim `i` (`reps` may be longer
    /// than the rank: the shape is then padded with leading 1s). A contiguous copy of shape
    /// `reps[i] * shape[i]`; `reps` shorter than the rank is an error, as in PyTorch.
    pub fn repeat(&self, reps: &[usize]) -> Result<Tensor> {
        let op = "repeat";
        if reps.len() < self.rank() {
            return Err(Error::invalid(
                op,
                format!(
                    "at least {} repetitions (one per dim of {:?}), got {reps:?}",
                    self.rank(),
                    self.shape()
                ),
            ));
        }
        let lead = reps.len() - self.rank();
        let shape: Vec<usize> = (0..reps.len())
            .map(|i| if i < lead { 1 } else { self.shape()[i - lead] })
            .collect();
        // [s0, s1, ...] viewed as [1, s0, 1, s1, ...], broadcast to [r0, s0, r1, s1, ...].
        let mut interleaved = Vec::with_capacity(2 * shape.len());
        let mut wide = Vec::with_capacity(2 * shape.len());
        let mut out = Vec::with_capacity(shape.len());
        for (&r, &s) in reps.iter().zip(&shape) {
            interleaved.extend([1, s]);
            wide.extend([r, s]);
            out.push(r.checked_mul(s).ok_or_else(|| {
                Error::invalid(op, format!("{r} repetitions of a dim of {s} overflow"))
            })?);
        }
        crate::layout::alloc_bytes(op, crate::layout::numel(&out), self.dtype())?;
        self.reshape(&interleaved)?
            .broadcast_to(&wide)?
            .contiguous()?
            .reshape(&out)
    }

    /// Joins tensors of one shape along a new dim `dim` (`torch.stack`): the result has rank
    /// one more than the inputs, `dim` counted in it (negative from the end).
    pub fn stack(tensors: &[&Tensor], dim: isize) -> Result<Tensor> {
        let op = "stack";
        let Some(first) = tensors.first() else {
            return Err(Error::invalid(op, "expected at least one tensor, got none"));
        };
        for t in tensors {
            if t.shape() != first.shape() {
                return Err(Error::ShapeMismatch {
                    op,
                    expected: format!("every tensor of shape {:?}", first.shape()),
                    got: format!("{:?}", t.shape()),
                });
            }
        }
        let d = resolve_dim(op, dim, first.rank() + 1)?;
        if d < first.rank() {
            // PyTorch's way: joined along `dim`, then that dim split in two by a view, so the
            // result keeps the format `cat` gives (a stack of channels-last tensors stays
            // channels-last in each part).
            let mut shape = first.shape().to_vec();
            shape.insert(d, tensors.len());
            return Tensor::cat(tensors, d as isize)?.reshape(&shape);
        }
        let parts = tensors
            .iter()
            .map(|t| t.unsqueeze(d as isize))
            .collect::<Result<Vec<_>>>()?;
        let refs: Vec<&Tensor> = parts.iter().collect();
        Tensor::cat(&refs, d as isize)
    }
}
