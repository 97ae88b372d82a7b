//! Reductions along a dim (with or without keepdim) and over all elements, softmax, and the
//! variance / standard deviation (two passes over f32 values: the mean, then the squared
//! deviations, so no cancellation; 16-bit inputs are widened first and the result rounded once,
//! as PyTorch computes them).

use crate::desc::kinds::{CmpOp, ReduceOp};
use crate::layout::{resolve_dim, Layout};
use crate::{DType, Error, Result, Tensor};

impl Tensor {
    /// Reduces `dim` with `op`; `keepdim` keeps it as size 1.
    pub fn reduce(&self, op: ReduceOp, dim: isize, keepdim: bool) -> Result<Tensor> {
        if let Some(v) = self.scalar_as_vector(op.name(), dim)? {
            return v.reduce(op, 0, false);
        }
        let d = resolve_dim(op.name(), dim, self.rank())?;
        let s = self.storage().reduce(self.layout(), d, op)?;
        let mut shape = self.shape().to_vec();
        if keepdim {
            shape[d] = 1;
        } else {
            shape.remove(d);
        }
        Ok(Tensor::from_storage(s, Layout::contiguous(&shape)))
    }

    fn reduce_all(&self, op: ReduceOp) -> Result<Tensor> {
        let flat = self.flatten_all()?;
        flat.reduce(op, 0, false)
    }

    /// Sum along `dim`.
    pub fn sum(&self, dim: isize, keepdim: bool) -> Result<Tensor> {
        self.reduce(ReduceOp::Sum, dim, keepdim)
    }

    /// Mean along `dim` (floats only).
    pub fn mean(&self, dim: isize, keepdim: bool) -> Result<Tensor> {
        self.reduce(ReduceOp::Mean, dim, keepdim)
    }

    /// Maximum along `dim` (NaN propagates).
    pub fn max(&self, dim: isize, keepdim: bool) -> Result<Tensor> {
        self.reduce(ReduceOp::Max, dim, keepdim)
    }

    /// Minimum along `dim` (NaN propagates).
    pub fn min(&self, dim: isize, keepdim: bool) -> Result<Tensor> {
        self.reduce(ReduceOp::Min, dim, keepdim)
    }

    /// Index (I32) of the first maximum along `dim`.
    pub fn argmax(&self, dim: isize, keepdim: bool) -> Result<Tensor> {
        self.reduce(ReduceOp::ArgMax, dim, keepdim)
    }

    /// Index (I32) of the first minimum along `dim`.
    pub fn argmin(&self, dim: isize, keepdim: bool) -> Result<Tensor> {
        self.reduce(ReduceOp::ArgMin, dim, keepdim)
    }

    /// Sum of all elements (a 0-dim tensor).
    pub fn sum_all(&self) -> Result<Tensor> {
        self.reduce_all(ReduceOp::Sum)
    }

    /// Mean of all elements.
    pub fn mean_all(&self) -> Result<Tensor> {
        self.reduce_all(ReduceOp::Mean)
    }

    /// Maximum of all elements.
    pub fn max_all(&self) -> Result<Tensor> {
        self.reduce_all(ReduceOp::Max)
    }

    /// Minimum of all elements.
    pub fn min_all(&self) -> Result<Tensor> {
        self.reduce_all(ReduceOp::Min)
    }

    /// Flat index (I32) of the first maximum.
    pub fn argmax_all(&self) -> Result<Tensor> {
        self.reduce_all(ReduceOp::ArgMax)
    }

    /// Variance along `dim` with Bessel's `correction` (`torch.var(x, dim, correction=...,
    /// keepdim=...)`; `1` is the unbiased estimate, `0` the population variance): the sum of
    /// squared deviations from the mean over `max(0, n - correction)` (so `inf` or NaN where
    /// that is 0, as in PyTorch). Float dtypes only; the result has `self`'s dtype.
    pub fn var(&self, dim: isize, correction: f64, keepdim: bool) -> Result<Tensor> {
        if let Some(v) = self.scalar_as_vector("var", dim)? {
            return v.var(0, correction, false);
        }
        self.var_f32("var", dim, correction, keepdim)?
            .to_dtype(self.dtype())
    }

    /// Standard deviation along `dim`: the square root of [`Tensor::var`]'s f32 value, rounded
    /// once to `self`'s dtype (`torch.std`).
    pub fn std(&self, dim: isize, correction: f64, keepdim: bool) -> Result<Tensor> {
        if let Some(v) = self.scalar_as_vector("std", dim)? {
            return v.std(0, correction, false);
        }
        self.var_f32("std", dim, correction, keepdim)?
            .sqrt()?
            .to_dtype(self.dtype())
    }

    /// `torch.all(x, dim, keepdim)`: `U8` 1 where every element along `dim` is nonzero (NaN
    /// counts as nonzero, as in PyTorch), else 0; an empty dim gives 1. Any dtype.
    pub fn all(&self, dim: isize, keepdim: bool) -> Result<Tensor> {
        if let Some(v) = self.scalar_as_vector("all", dim)? {
            return v.all(0, false);
        }
        self.truth("all", dim, keepdim, ReduceOp::Min, 1.0)
    }

    /// `torch.any(x, dim, keepdim)`: `U8` 1 where some element along `dim` is nonzero, else 0;
    /// an empty dim gives 0. Any dtype.
    pub fn any(&self, dim: isize, keepdim: bool) -> Result<Tensor> {
        if let Some(v) = self.scalar_as_vector("any", dim)? {
            return v.any(0, false);
        }
        self.truth("any", dim, keepdim, ReduceOp::Max, 0.0)
    }

    /// `all` / `any`: the nonzero mask as i32, reduced with `reduce`.
    /// A 0-d tensor as a 1-element vector when `dim` is 0 or -1 (PyTorch reduces a 0-d
    /// tensor along its "one" dim and gives a 0-d result, keepdim or not), `None` for other
    /// ranks, an error for other dims.
    pub(crate) fn scalar_as_vector(&self, op: &'static str, dim: isize) -> Result<Option<Tensor>> {
        if self.rank() != 0 {
            return Ok(None);
        }
        resolve_dim(op, dim, 1)?;
        self.reshape(&[1]).map(Some)
    }

    fn truth(
        &self,
        op: &'static str,
        dim: isize,
        keepdim: bool,
        reduce: ReduceOp,
        empty: f64,
    ) -> Result<Tensor> {
        let d = resolve_dim(op, dim, self.rank())?;
        if self.shape()[d] == 0 {
            let mut shape = self.shape().to_vec();
            if keepdim {
                shape[d] = 1;
            } else {
                shape.remove(d);
            }
            return Tensor::full(empty, &shape, DType::U8, self.device());
        }
        self.cmp_scalar(CmpOp::Ne, 0.0)?
            .to_dtype(DType::I32)?
            .reduce(reduce, d as isize, keepdim)?
            .to_dtype(DType::U8)
    }

    /// Refuses a non-float `self` for `op` (the hint follows "takes f32, f16 or bf16").
    fn float_only(&self, op: &'static str, more: &str) -> Result<()> {
        if self.dtype().is_float() {
            return Ok(());
        }
        Err(Error::UnsupportedDType {
            op,
            dtype: self.dtype(),
            device: self.device(),
            hint: format!("; {op} takes f32, f16 or bf16{more}"),
        })
    }

    /// The variance in f32 (see [`Tensor::var`]).
    fn var_f32(
        &self,
        op: &'static str,
        dim: isize,
        correction: f64,
        keepdim: bool,
    ) -> Result<Tensor> {
        let d = resolve_dim(op, dim, self.rank())?;
        self.float_only(op, "")?;
        if !correction.is_finite() {
            return Err(Error::invalid(
                op,
                format!("a finite correction, got {correction}"),
            ));
        }
        let x = self.to_dtype(DType::F32)?;
        let deviations = x.sub(&x.mean(d as isize, true)?)?;
        let dof = (self.shape()[d] as f64 - correction).max(0.0);
        // A true division (as PyTorch's), not a product with 1/dof.
        let dof = Tensor::full(dof, &[], DType::F32, self.device())?;
        deviations.square()?.sum(d as isize, keepdim)?.div(&dof)
    }

    /// Inclusive prefix sums along `dim` (`torch.cumsum`), in `self`'s float dtype: 16-bit
    /// inputs are summed in f32 and each prefix rounded once. Integer tensors are refused
    /// (PyTorch promotes them to int64, which xpu does not have). On the Xpu a long row is
    /// scanned 256 elements at a time by one workgroup, so prefixes are summed in a different
    /// order than on the Cpu (which sums in order, in f64).
    pub fn cumsum(&self, dim: isize) -> Result<Tensor> {
        let op = "cumsum";
        if let Some(v) = self.scalar_as_vector(op, dim)? {
            return v.cumsum(0)?.reshape(&[]);
        }
        let d = resolve_dim(op, dim, self.rank())?;
        self.float_only(op, " (cast integers with to_dtype first)")?;
        let x = self.to_dtype(DType::F32)?;
        let s = x.storage().cumsum_f32(x.layout(), d)?;
        Tensor::from_storage(s, Layout::contiguous(self.shape())).to_dtype(self.dtype())
    }

    /// Softmax along `dim`, computed stably (max subtracted) in f32. The result is
    /// contiguous whatever the input's layout, as PyTorch's.
    pub fn softmax(&self, dim: isize) -> Result<Tensor> {
        if let Some(v) = self.scalar_as_vector("softmax", dim)? {
            return v.softmax(0)?.reshape(&[]);
        }
        let d = resolve_dim("softmax", dim, self.rank())?;
        let s = self.storage().softmax(self.layout(), d)?;
        Ok(Tensor::from_storage(s, Layout::contiguous(self.shape())))
    }
}
