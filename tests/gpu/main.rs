//! GPU-specific kernels: product variants, split K, the tensor-core products, shader validation,
//! and the kernel choices as autotuner families.

#[path = "../common/mod.rs"]
mod common;

mod autotune_families;
mod matmul_coop16;
mod matmul_split_k;
mod matmul_xpu_variants;
mod shaders;
