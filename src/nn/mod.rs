//! Neural-network layers built on the Tensor API. Each layer works on both devices and picks the
//! fastest path for its device (prepacked weights on Cpu, fused epilogues on Xpu).

mod conv;
mod linear;

pub use conv::Conv2d;
pub use linear::Linear;
