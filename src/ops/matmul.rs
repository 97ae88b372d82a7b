//! Matrix products: 2-D, and batched with NumPy-broadcast batch dims; the inner dims must agree.
//! 1-D operands follow `torch.matmul`: a vector on the left is a one-row matrix, on the right a
//! one-column matrix, and the added dim is removed from the result (two vectors give a 0-D dot
//! product). The promotion is a view of the operand and a reshape of the contiguous result.

use crate::layout::{broadcast_shapes, Layout};
use crate::{Error, Result, Tensor};

impl Tensor {
    /// `self @ rhs` for `[..., M, K] @ [..., K, N] -> [..., M, N]`; batch dims broadcast.
    /// Transposed or otherwise strided operands are read in place. As in `torch.matmul`, a 1-D
    /// `self` `[K]` acts as `[1, K]` and a 1-D `rhs` `[K]` as `[K, 1]`, the added dim dropped
    /// from the result (`[K] @ [K]` is a 0-D tensor).
    pub fn matmul(&self, rhs: &Tensor) -> Result<Tensor> {
        self.same_device(rhs, "matmul")?;
        self.same_dtype(rhs, "matmul")?;
        if self.rank() == 0 || rhs.rank() == 0 {
            return Err(Error::ShapeMismatch {
                op: "matmul",
                expected: "operands of rank >= 1".into(),
                got: format!("{:?} and {:?}", self.shape(), rhs.shape()),
            });
        }
        if self.rank() == 1 || rhs.rank() == 1 {
            let k = self.shape()[self.rank() - 1];
            let k2 = rhs.shape()[rhs.rank().saturating_sub(2)];
            if k != k2 {
                return Err(Error::ShapeMismatch {
                    op: "matmul",
                    expected: format!(
                        "rhs with {k} rows (or length {k}) to match lhs {:?}",
                        self.shape()
                    ),
                    got: format!("{:?}", rhs.shape()),
                });
            }
            let lhs = if self.rank() == 1 {
                self.unsqueeze(0)?
            } else {
                self.clone()
            };
            let rhs_m = if rhs.rank() == 1 {
                rhs.unsqueeze(1)?
            } else {
                rhs.clone()
            };
            let out = lhs.matmul(&rhs_m)?;
            let mut shape = out.shape().to_vec();
            let r = shape.len();
            if rhs.rank() == 1 {
                shape.remove(r - 1);
            }
            if self.rank() == 1 {
                shape.remove(r - 2);
            }
            return out.reshape(&shape);
        }
        let (ra, rb) = (self.rank(), rhs.rank());
        let (m, k) = (self.shape()[ra - 2], self.shape()[ra - 1]);
        let (k2, n) = (rhs.shape()[rb - 2], rhs.shape()[rb - 1]);
        if k != k2 {
            return Err(Error::ShapeMismatch {
                op: "matmul",
                expected: format!(
                    "rhs [..., K, N] with K = {k} rows: the inner dims must agree (lhs {:?} is [..., M, K])",
                    self.shape()
                ),
                got: format!("rhs {:?} with {k2} rows", rhs.shape()),
            });
        }
        let batch = broadcast_shapes("matmul", &self.shape()[..ra - 2], &rhs.shape()[..rb - 2])?;
        let mut a_shape = batch.clone();
        a_shape.extend([m, k]);
        let mut b_shape = batch.clone();
        b_shape.extend([k, n]);
        let l = self.layout().broadcast_to(&a_shape)?;
        let r = rhs.layout().broadcast_to(&b_shape)?;
        let s = self.storage().matmul(&l, rhs.storage(), &r)?;
        let mut out = batch;
        out.extend([m, n]);
        Ok(Tensor::from_storage(s, Layout::contiguous(&out)))
    }
}
