//! What the autotuner needs to know about the GPU: the device part of its keys, and candidate
//! results read back as f32 values for the agreement check.
//!
//! Invariant: the device text changes whenever something that changes kernel speed or the
//! kernels on offer does: the adapter, its backend, its driver and driver version, and whether
//! 8x8x8 cooperative matrices are taken as 16x16x16 ones (`config::GpuConfig::coop16_assume`,
//! read once with the context). It is made once per process, with the context.

use std::sync::OnceLock;

use super::XpuStorage;
use crate::{Layout, Result};

/// The autotuner's device text for the Xpu adapter in use, e.g.
/// `gpu NVIDIA H200 Vulkan NVIDIA 570.124.06` (creates the context on first use).
pub(crate) fn device_id() -> Result<String> {
    static ID: OnceLock<String> = OnceLock::new();
    if let Some(id) = ID.get() {
        return Ok(id.clone());
    }
    let ctx = super::ctx()?;
    let s = ctx.summary();
    let assumed = if ctx.features.coop_f16_16x16 && !reports_coop16(&s.cooperative_matrix_configs) {
        " coop16-assumed"
    } else {
        ""
    };
    let id = format!("gpu {} {} {}{assumed}", s.name, s.backend, s.driver);
    Ok(ID.get_or_init(|| id).clone())
}

/// Whether the driver itself reports 16x16x16 f16 cooperative matrices with f32 accumulation.
fn reports_coop16(configs: &[String]) -> bool {
    configs.iter().any(|c| c == "16x16x16 F16->F32")
}

/// All elements of `s` as f32 values, in storage order (from f32, f16 or bf16 storage).
pub(crate) fn values_f32(s: &XpuStorage) -> Result<Vec<f32>> {
    crate::gpu::kernels::self_check::download_f32(s, &Layout::contiguous(&[s.len]))
}
