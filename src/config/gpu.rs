//! GPU backend settings: submission batching, and the kernel choices that tests and
//! comparisons force (each `None`/`true` by default: the backend's own rule decides).
//!
//! The kernel choices are read where an op is dispatched, on the calling thread (so
//! `config::scoped` governs the ops inside it); `batch` and `coop16_assume` are read once, when
//! the Xpu context is created.

use super::parse::{switch, Warnings};

/// GPU backend settings.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuConfig {
    /// Dispatches recorded per submitted batch, 1 to 256 (`XPU_BATCH`; default 64).
    pub batch: usize,
    /// f16 products may run on the tensor-core (cooperative matrix) kernels
    /// (`XPU_MATMUL_COOP=0` turns them off).
    pub matmul_coop: bool,
    /// f16 convolutions may run on the tensor-core kernels (`XPU_CONV_COOP=0` turns them off).
    pub conv_coop: bool,
    /// f16 attention may run on the tensor-core kernel (`XPU_ATTN_COOP=0` turns it off).
    pub attention_coop: bool,
    /// Products may use the subgroup kernels (`XPU_MATMUL_SUBGROUP=0` turns them off).
    pub matmul_subgroup: bool,
    /// Split-K: `Some(0)` never splits, `Some(n)` forces `n` splits, `None` decides by shape
    /// (`XPU_SPLIT_K`).
    pub split_k: Option<usize>,
    /// Winograd for 3×3 convolutions: `Some(true)` forces it where it applies, `Some(false)`
    /// turns it off, `None` decides by shape (`XPU_CONV_WINOGRAD`).
    pub conv_winograd: Option<bool>,
    /// The UNet's activation format on the Xpu: `Some(true)` channels-last, `Some(false)`
    /// NCHW, `None` channels-last exactly where the tensor-core convolutions serve
    /// (`XPU_UNET_CHANNELS_LAST`).
    pub unet_channels_last: Option<bool>,
    /// Take a driver that offers 8×8×8 f16 cooperative matrices to run the 16×16×16 ones too
    /// (`XPU_COOP16_ASSUME=1`; Mesa's lavapipe 26 does, so the tensor-core kernels can be tested
    /// on the CPU). The kernels' self-checks still guard every use.
    pub coop16_assume: bool,
}

/// The default dispatches per batch: the GPU starts on the first batch while the rest of a
/// step is recorded.
const DEFAULT_BATCH: usize = 64;
/// The most dispatches per batch (the number of parameter slots).
pub(crate) const MAX_BATCH: usize = 256;

impl Default for GpuConfig {
    fn default() -> GpuConfig {
        GpuConfig {
            batch: DEFAULT_BATCH,
            matmul_coop: true,
            conv_coop: true,
            attention_coop: true,
            matmul_subgroup: true,
            split_k: None,
            conv_winograd: None,
            unet_channels_last: None,
            coop16_assume: false,
        }
    }
}

impl GpuConfig {
    pub(super) fn from_lookup(
        lookup: &dyn Fn(&str) -> Option<String>,
        warn: &mut Warnings,
    ) -> GpuConfig {
        let d = GpuConfig::default();
        let count = |name: &str, warn: &mut Warnings| -> Option<usize> {
            let v = lookup(name)?;
            match v.trim().parse::<usize>() {
                Ok(n) => Some(n),
                Err(_) => {
                    warn.bad(name, &v, "a whole number");
                    None
                }
            }
        };
        GpuConfig {
            batch: count("XPU_BATCH", warn).map_or(d.batch, |n| n.clamp(1, MAX_BATCH)),
            matmul_coop: switch(lookup, "XPU_MATMUL_COOP", warn).unwrap_or(d.matmul_coop),
            conv_coop: switch(lookup, "XPU_CONV_COOP", warn).unwrap_or(d.conv_coop),
            attention_coop: switch(lookup, "XPU_ATTN_COOP", warn).unwrap_or(d.attention_coop),
            matmul_subgroup: switch(lookup, "XPU_MATMUL_SUBGROUP", warn)
                .unwrap_or(d.matmul_subgroup),
            split_k: count("XPU_SPLIT_K", warn).or(d.split_k),
            conv_winograd: switch(lookup, "XPU_CONV_WINOGRAD", warn).or(d.conv_winograd),
            unet_channels_last: switch(lookup, "XPU_UNET_CHANNELS_LAST", warn)
                .or(d.unet_channels_last),
            coop16_assume: switch(lookup, "XPU_COOP16_ASSUME", warn).unwrap_or(d.coop16_assume),
        }
    }
}
