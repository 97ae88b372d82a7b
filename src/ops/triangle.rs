//! [`Tensor::tril`] and [`Tensor::triu`]: the lower / upper triangle of the last two dims
//! (PyTorch's `torch.tril` / `torch.triu`, e.g. for causal attention masks).
//!
//! Invariants: element `[..., i, j]` is kept when `j - i <= diagonal` (tril) or
//! `j - i >= diagonal` (triu) and is zero otherwise; kept values are copied bit for bit (any
//! dtype); the output is contiguous. Built from `arange`, an exact integer comparison and
//! `where_cond`, so both devices run it with the same kernels.

use crate::desc::kinds::CmpOp;
use crate::{DType, Error, Result, Tensor};

impl Tensor {
    /// The lower triangle of the last two dims: `[..., i, j]` kept where `j - i <= diagonal`,
    /// zero elsewhere (`diagonal` 0: the main diagonal and below; negative: below it).
    pub fn tril(&self, diagonal: i64) -> Result<Tensor> {
        self.triangle("tril", CmpOp::Le, diagonal)
    }

    /// The upper triangle of the last two dims: `[..., i, j]` kept where `j - i >= diagonal`,
    /// zero elsewhere (`diagonal` 1 gives the strict upper triangle a causal mask fills).
    pub fn triu(&self, diagonal: i64) -> Result<Tensor> {
        self.triangle("triu", CmpOp::Ge, diagonal)
    }

    fn triangle(&self, op: &'static str, keep: CmpOp, diagonal: i64) -> Result<Tensor> {
        let r = self.rank();
        if r < 2 {
            return Err(Error::shape(op, "a tensor of rank >= 2", self.shape()));
        }
        let (rows, cols) = (self.shape()[r - 2], self.shape()[r - 1]);
        let limit = i32::MAX as usize;
        if rows > limit || cols > limit {
            return Err(Error::invalid(
                op,
                format!("{rows}x{cols} matrices exceed the i32 index range"),
            ));
        }
        let device = self.device();
        let i = Tensor::arange(0.0, rows as f64, 1.0, DType::I32, device)?.reshape(&[rows, 1])?;
        let j = Tensor::arange(0.0, cols as f64, 1.0, DType::I32, device)?.reshape(&[1, cols])?;
        // j - i stays inside i32 for sizes inside it (|j - i| < 2^31).
        let mask = j.sub(&i)?.cmp_scalar(keep, diagonal as f64)?;
        let zero = Tensor::zeros(&[], self.dtype(), device)?;
        mask.select_elements(op, self, &zero, true)
    }
}
