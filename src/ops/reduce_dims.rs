//! Reductions over several dims at once, as PyTorch's `x.sum(dim=(2, 3))`,
//! `x.mean(dim=(-2, -1), keepdim=True)`, `torch.amax(x, dim=(0, 2))` or
//! `torch.var(x, dim=(1, 2, 3))` (a group norm's statistics by hand).
//!
//! Invariants: dims are resolved as PyTorch resolves them (negative from the end; a dim named
//! twice is an error; an empty list reduces every dim, as `x.sum(dim=[])` does, except for
//! `all_dims` / `any_dims`, where as in PyTorch it reduces none; a 0-d tensor takes dim 0 or
//! -1). The reduced dims are moved last and merged into one (a view wherever
//! strides allow it: a contiguous tensor's trailing dims, a channels-last tensor's H and W;
//! otherwise a copy), which the one-dim reduction then reduces: each result element is one
//! reduction over all its elements, never a chain of partial results, so a mean divides one
//! sum once and a variance subtracts one mean. The result is contiguous, as PyTorch's.

use crate::desc::kinds::CmpOp;
use crate::layout::resolve_dim;
use crate::{Error, Result, Tensor};

impl Tensor {
    /// Sum over `dims` (`torch.sum(x, dim=dims, keepdim=...)`; an empty `dims` sums every
    /// dim). The dtype rules are [`Tensor::sum`]'s.
    pub fn sum_dims(&self, dims: &[isize], keepdim: bool) -> Result<Tensor> {
        self.over_dims("sum", dims, keepdim, |t| t.sum(-1, false))
    }

    /// Mean over `dims` (`torch.mean(x, dim=dims, keepdim=...)`): one sum over all the
    /// reduced elements divided by their count.
    pub fn mean_dims(&self, dims: &[isize], keepdim: bool) -> Result<Tensor> {
        self.over_dims("mean", dims, keepdim, |t| t.mean(-1, false))
    }

    /// Maximum over `dims` (`torch.amax(x, dim=dims, keepdim=...)`).
    pub fn max_dims(&self, dims: &[isize], keepdim: bool) -> Result<Tensor> {
        self.over_dims("max", dims, keepdim, |t| t.max(-1, false))
    }

    /// Minimum over `dims` (`torch.amin(x, dim=dims, keepdim=...)`).
    pub fn min_dims(&self, dims: &[isize], keepdim: bool) -> Result<Tensor> {
        self.over_dims("min", dims, keepdim, |t| t.min(-1, false))
    }

    /// Variance over `dims` with Bessel's `correction` (`torch.var(x, dim=dims,
    /// correction=...)`): the squared deviations from the one mean of all reduced elements,
    /// summed over `max(0, n - correction)`, `n` their count.
    pub fn var_dims(&self, dims: &[isize], correction: f64, keepdim: bool) -> Result<Tensor> {
        self.over_dims("var", dims, keepdim, |t| t.var(-1, correction, false))
    }

    /// Standard deviation over `dims` (`torch.std(x, dim=dims, correction=...)`): the square
    /// root of [`Tensor::var_dims`].
    pub fn std_dims(&self, dims: &[isize], correction: f64, keepdim: bool) -> Result<Tensor> {
        self.over_dims("std", dims, keepdim, |t| t.std(-1, correction, false))
    }

    /// `log(Σ exp(x))` over `dims`, stably (`torch.logsumexp(x, dim=dims)`).
    pub fn logsumexp_dims(&self, dims: &[isize], keepdim: bool) -> Result<Tensor> {
        self.over_dims("logsumexp", dims, keepdim, |t| t.logsumexp(-1, false))
    }

    /// `U8` 1 where every element over `dims` is nonzero (`torch.all(x, dim=dims)`). Unlike
    /// the other reductions, and as in PyTorch, an empty `dims` reduces nothing: each element's
    /// own truth (NaN counts as nonzero).
    pub fn all_dims(&self, dims: &[isize], keepdim: bool) -> Result<Tensor> {
        if dims.is_empty() {
            return self.cmp_scalar(CmpOp::Ne, 0.0);
        }
        self.over_dims("all", dims, keepdim, |t| t.all(-1, false))
    }

    /// `U8` 1 where some element over `dims` is nonzero (`torch.any(x, dim=dims)`); an empty
    /// `dims` reduces nothing, as for [`Tensor::all_dims`].
    pub fn any_dims(&self, dims: &[isize], keepdim: bool) -> Result<Tensor> {
        if dims.is_empty() {
            return self.cmp_scalar(CmpOp::Ne, 0.0);
        }
        self.over_dims("any", dims, keepdim, |t| t.any(-1, false))
    }

    /// Moves the reduced dims last, merges them, and reduces that one dim with `reduce_last`
    /// (which drops it); then reinserts size-1 dims for `keepdim`.
    fn over_dims(
        &self,
        op: &'static str,
        dims: &[isize],
        keepdim: bool,
        reduce_last: impl FnOnce(&Tensor) -> Result<Tensor>,
    ) -> Result<Tensor> {
        let rank = self.rank();
        let reduced = reduced_dims(op, dims, rank)?;
        if rank == 0 {
            return reduce_last(&self.reshape(&[1])?);
        }
        let kept: Vec<usize> = (0..rank).filter(|&d| !reduced[d]).collect();
        let gone: Vec<usize> = (0..rank).filter(|&d| reduced[d]).collect();
        let mut merged_shape: Vec<usize> = kept.iter().map(|&d| self.shape()[d]).collect();
        // The reduced dims' product is at most the element count, which fits.
        merged_shape.push(gone.iter().map(|&d| self.shape()[d]).product());
        let order: Vec<usize> = kept.iter().chain(&gone).copied().collect();
        let merged = self.permute(&order)?.reshape(&merged_shape)?;
        let out = reduce_last(&merged)?;
        if !keepdim {
            return Ok(out);
        }
        let shape: Vec<usize> = (0..rank)
            .map(|d| if reduced[d] { 1 } else { self.shape()[d] })
            .collect();
        out.reshape(&shape)
    }
}

/// Which dims of a rank-`rank` tensor `dims` names (all of them for an empty list), or the
/// error for a dim out of range or named twice.
fn reduced_dims(op: &'static str, dims: &[isize], rank: usize) -> Result<Vec<bool>> {
    let slots = rank.max(1);
    if dims.is_empty() {
        return Ok(vec![true; slots]);
    }
    let mut reduced = vec![false; slots];
    for &dim in dims {
        let d = resolve_dim(op, dim, slots)?;
        if std::mem::replace(&mut reduced[d], true) {
            return Err(Error::invalid(
                op,
                format!("dim {d} appears more than once in the dims {dims:?}"),
            ));
        }
    }
    Ok(reduced)
}

#[cfg(test)]
mod tests {
    use super::reduced_dims;

    #[test]
    fn dims_resolve_as_in_pytorch() {
        assert_eq!(reduced_dims("sum", &[], 3).ok(), Some(vec![true; 3]));
        assert_eq!(
            reduced_dims("sum", &[-1, 0], 3).ok(),
            Some(vec![true, false, true])
        );
        assert!(reduced_dims("sum", &[1, -2], 3).is_err());
        assert!(reduced_dims("sum", &[3], 3).is_err());
        assert!(reduced_dims("sum", &[-4], 3).is_err());
        // A 0-d tensor has one dim to name, as 0 or -1, once.
        assert_eq!(reduced_dims("sum", &[-1], 0).ok(), Some(vec![true]));
        assert!(reduced_dims("sum", &[0, -1], 0).is_err());
    }
}
