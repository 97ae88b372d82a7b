//! Tensor ops by family. Each family checks shapes, dtypes and devices, applies broadcasting
//! and dim rules, then forwards to `Storage`, which picks the device kernel.

pub use crate::desc::kinds;

pub(crate) mod attention;
mod attention_gqa;
pub mod conv;
mod conv_cpu;
pub mod conv_transpose;
pub mod conv_xpu;
mod elementwise;
mod ffn;
pub mod fused;
mod index;
mod logsumexp;
mod matmul;
mod norm;
mod pool;
mod reduce;
mod reduce_dims;
mod resize;
mod resize_linear;
mod select;
mod triangle;
