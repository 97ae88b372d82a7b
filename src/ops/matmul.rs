//! Matrix products: 2-D, and batched with NumPy-broadcast batch dims. 1-D operands are not
//! promoted (use `unsqueeze`); the inner dims must agree.

use crate::layout::{broadcast_shapes, Layout};
use crate::{Error, Result, Tensor};

impl Tensor {
    /// `self @ rhs` for `[..., M, K] @ [..., K, N] -> [..., M, N]`; batch dims broadcast.
    /// Transposed or otherwise strided operands are read in place.
    pub fn matmul(&self, rhs: &Tensor) -> Result<Tensor> {
        self.same_device(rhs, "matmul")?;
        self.same_dtype(rhs, "matmul")?;
        if self.rank() < 2 || rhs.rank() < 2 {
            return Err(Error::ShapeMismatch {
                op: "matmul",
                expected: "operands of rank >= 2".into(),
                got: format!("{:?} and {:?}", self.shape(), rhs.shape()),
            });
        }
        let (ra, rb) = (self.rank(), rhs.rank());
        let (m, k) = (self.shape()[ra - 2], self.shape()[ra - 1]);
        let (k2, n) = (rhs.shape()[rb - 2], rhs.shape()[rb - 1]);
        if k != k2 {
            return Err(Error::ShapeMismatch {
                op: "matmul",
                expected: format!("rhs with {k} rows to match lhs {:?}", self.shape()),
                got: format!("{:?}", rhs.shape()),
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
