//! Reductions along a dim (with or without keepdim) and over all elements, and softmax.

use crate::layout::{resolve_dim, Layout};
use crate::ops::kinds::ReduceOp;
use crate::{Result, Tensor};

impl Tensor {
    /// Reduces `dim` with `op`; `keepdim` keeps it as size 1.
    pub fn reduce(&self, op: ReduceOp, dim: isize, keepdim: bool) -> Result<Tensor> {
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

    /// Softmax along `dim`, computed stably (max subtracted) in f32.
    pub fn softmax(&self, dim: isize) -> Result<Tensor> {
        let d = resolve_dim("softmax", dim, self.rank())?;
        let (s, layout) = self.storage().softmax(self.layout(), d)?;
        Ok(Tensor::from_storage(s, layout))
    }
}
