//! GEMM tests against a plain f64-accumulating reference, on both kernel paths.
//!
//! Tests call the path-explicit hook (`gemm_with_path`) so they can run in parallel without
//! touching the process-wide override.

mod amx;
#[cfg(target_arch = "x86_64")]
mod amx_gather;
#[cfg(target_arch = "x86_64")]
mod amx_shape_probe;
#[cfg(target_arch = "x86_64")]
mod amx_speed;
#[cfg(target_arch = "x86_64")]
mod avx2_layout_probe;
mod epilogue;
#[cfg(target_arch = "x86_64")]
mod f32_speed;
mod misc;
#[cfg(target_arch = "x86_64")]
mod out16_speed;
mod shapes;
#[cfg(target_arch = "x86_64")]
mod speed;
pub(crate) mod util;
