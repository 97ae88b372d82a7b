//! Op descriptors: what an op is, with no device and no tensor. The Tensor API fills them in,
//! the backend dispatch passes them on, and the CPU and GPU kernels read them.
//!
//! Invariant: this module imports nothing of the library but the error type, dtypes and
//! layouts, so every layer above may use it.

pub mod activation;
pub mod attention;
pub(crate) mod checks;
pub mod conv;
pub mod kinds;
pub mod matmul;
pub mod norm;
pub mod pool;

pub use activation::Activation;
pub(crate) use attention::AttnShape;
pub(crate) use conv::ConvGeom;
pub use conv::{Conv2dParams, ConvTile};
pub use matmul::{MatmulKernel, TileConfig};
pub(crate) use norm::NormSpec;
