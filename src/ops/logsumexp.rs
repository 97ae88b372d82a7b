//! [`Tensor::logsumexp`] and [`Tensor::log_softmax`], composed from reductions and elementwise
//! ops (the same kernels on both devices).
//!
//! Semantics (PyTorch's): `logsumexp(x) = log(Σ exp(x))` computed as `m + log(Σ exp(x - m))`
//! with `m` the row max, so large inputs do not overflow: a row of `-inf` gives `-inf`, a
//! `+inf` entry `+inf`, NaN propagates. `log_softmax(x) = (x - m) - log(Σ exp(x - m))`, PyTorch's
//! own formula, infinities included (a row of `-inf`, or one holding `+inf`, is NaN).
//!
//! Invariants: in logsumexp an infinite row max is replaced by 0 before the shift (`x - m` would
//! be NaN for `x = m = ±inf`), which keeps it exact in those cases; f16/bf16 inputs are computed
//! in f32 and rounded once at the end; float dtypes only. Checked against PyTorch by
//! `tests/torch_parity.rs` (fixtures with `±inf` rows).

use crate::desc::kinds::CmpOp;
use crate::{DType, Error, Result, Tensor};

impl Tensor {
    /// `log(Σ exp(x))` along `dim` (numerically stable; see the module docs for infinities).
    pub fn logsumexp(&self, dim: isize, keepdim: bool) -> Result<Tensor> {
        if let Some(v) = self.scalar_as_vector("logsumexp", dim)? {
            return v.logsumexp(0, false);
        }
        let lse = self.logsumexp_f32(dim)?;
        let lse = if keepdim { lse } else { lse.squeeze(dim)? };
        lse.to_dtype(self.dtype())
    }

    /// `(x - m) - log(Σ exp(x - m))` along `dim` with `m` the row max: the log of
    /// [`Tensor::softmax`] without its underflow, exactly PyTorch's formula (so a row holding
    /// `+inf`, or only `-inf`, is NaN as there). The result is contiguous, as PyTorch's.
    pub fn log_softmax(&self, dim: isize) -> Result<Tensor> {
        if let Some(v) = self.scalar_as_vector("log_softmax", dim)? {
            return v.log_softmax(0)?.reshape(&[]);
        }
        // Row-major from here, so the result is contiguous as PyTorch's.
        let x = self.float_f32("log_softmax")?.contiguous()?;
        if x.numel() == 0 {
            // Nothing to normalise (an empty dim, or empty rows): the empty result.
            crate::layout::resolve_dim("log_softmax", dim, x.rank())?;
            return x.to_dtype(self.dtype());
        }
        let shifted = x.sub(&x.max(dim, true)?)?;
        let lse = shifted.exp()?.sum(dim, true)?.log()?;
        shifted.sub(&lse)?.to_dtype(self.dtype())
    }

    /// `self` in f32, or the error for a non-float dtype.
    fn float_f32(&self, op: &'static str) -> Result<Tensor> {
        if !self.dtype().is_float() {
            return Err(Error::UnsupportedDType {
                op,
                dtype: self.dtype(),
                device: self.device(),
                hint: ": logsumexp and log_softmax need f32, f16 or bf16".into(),
            });
        }
        self.to_dtype(DType::F32)
    }

    /// logsumexp in f32 with the reduced dim kept (size 1); `-inf` (the log of an empty sum)
    /// where the dim is empty, as PyTorch.
    fn logsumexp_f32(&self, dim: isize) -> Result<Tensor> {
        let x = self.float_f32("logsumexp")?;
        let d = crate::layout::resolve_dim("logsumexp", dim, x.rank())?;
        if x.shape()[d] == 0 {
            let mut shape = x.shape().to_vec();
            shape[d] = 1;
            return Tensor::full(f64::NEG_INFINITY, &shape, DType::F32, x.device());
        }
        let m = x.max(dim, true)?;
        // |m| < inf keeps m; ±inf (and NaN, which propagates anyway) shift by 0.
        let finite = m.abs()?.cmp_scalar(CmpOp::Lt, f64::INFINITY)?;
        let m = finite.where_cond(&m, &m.zeros_like()?)?;
        x.sub(&m)?.exp()?.sum(dim, true)?.log()?.add(&m)
    }
}
