//! GPU backend settings: submission batching, the UNet's activation format, and whether 8x8x8
//! cooperative matrices are taken as 16x16x16 ones. (The GPU's kernel choices are the
//! autotuner's: families `gpu_matmul`, `gpu_split_k`, `gpu_conv2d` and `gpu_attention`, forced
//! through `AutotuneConfig::force`.)
//!
//! `unet_channels_last` is read where the UNet runs, on the calling thread (so
//! `config::scoped` governs it); `batch` and `coop16_assume` are read once, when the Xpu
//! context is created.

use super::parse::{switch, Warnings};

/// GPU backend settings.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuConfig {
    /// Dispatches recorded per submitted batch, 1 to 256 (`XPU_BATCH`; default 64).
    pub batch: usize,
    /// The UNet's activation format on the Xpu: `Some(true)` channels-last, `Some(false)`
    /// NCHW, `None` channels-last exactly where the tensor-core convolutions can serve
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
            unet_channels_last: switch(lookup, "XPU_UNET_CHANNELS_LAST", warn)
                .or(d.unet_channels_last),
            coop16_assume: switch(lookup, "XPU_COOP16_ASSUME", warn).unwrap_or(d.coop16_assume),
        }
    }
}
