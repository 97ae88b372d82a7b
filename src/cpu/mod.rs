//! The CPU backend: [`CpuStorage`] (typed host vectors) and the kernels behind it.
//!
//! Invariants:
//! - Storages are flat vectors; shapes live in [`crate::layout::Layout`]s passed alongside. Every
//!   operation validates its layouts against the storage length and returns a
//!   [`crate::Error`] instead of panicking; outputs are new contiguous row-major storages.
//! - Floats compute in `f32` (16-bit dtypes are widened exactly and rounded once, to nearest
//!   even, on store); `i32` uses wrapping integer semantics; reductions accumulate in `f64`.
//! - SIMD: AVX-512 kernels when the CPU has them, portable Rust otherwise, selected at run time
//!   ([`simd::simd_level`], [`simd::set_simd_override`], [`simd::with_simd_level`], env
//!   `XPU_CPU_SIMD=fallback`). Work above ~64K elements is split across rayon threads; results
//!   do not depend on the thread count.

pub(crate) mod alloc;
mod attention;
pub(crate) mod conv;
mod convert;
mod elem;
mod elementwise;
pub(crate) mod fused;
pub mod gemm;
pub(crate) mod hugepage;
mod index;
pub mod matmul;
mod norm;
mod parallel;
pub(crate) mod pool;
pub(crate) mod pool2d;
pub(crate) mod prepack;
mod reduce;
mod scan;
mod select;
pub mod simd;
mod softmax;
mod storage;
mod strided;
#[cfg(test)]
mod tests;
pub(crate) mod transpose;
pub(crate) mod tuning;

pub(crate) use attention::attention_kernels;
pub use matmul::matmul_f32_strided;
pub use simd::{set_simd_override, simd_level, with_simd_level, SimdLevel};
pub use storage::CpuStorage;
pub(crate) use storage::{ensure_host_bytes, ensure_host_memory};
