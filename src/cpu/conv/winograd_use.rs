//! Whether packed convolution weights may take the Winograd path, and for what use.

/// Whether a weight packing may transform a 3×3 stride-1 layer for Winograd, and for what use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum WinogradUse {
    /// Never: the implicit GEMM's panels.
    Off,
    /// Weights packed for one call: F(2,3), the cheaper filter transform.
    PerCall,
    /// A layer's weights, packed once and reused: the variant that runs fastest.
    Layer,
}

/// 0: no override; 1: Winograd on; 2: off (see [`set_winograd_override`]).
static WINOGRAD_OVERRIDE: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// Turns the Winograd path for 3×3 stride-1 convolutions on or off for every weight packed
/// from now on (process-wide; layers already built keep their panels), or with `None` returns
/// to the default: on, unless `XPU_CPU_WINOGRAD=0`.
pub fn set_winograd_override(on: Option<bool>) {
    let v = match on {
        None => 0,
        Some(true) => 1,
        Some(false) => 2,
    };
    WINOGRAD_OVERRIDE.store(v, std::sync::atomic::Ordering::Relaxed);
}

/// Whether weights packed now may take the Winograd path: the override, else false under
/// `config::CpuConfig::winograd` (default true).
pub(crate) fn winograd_enabled() -> bool {
    match WINOGRAD_OVERRIDE.load(std::sync::atomic::Ordering::Relaxed) {
        1 => return true,
        2 => return false,
        _ => {}
    }
    crate::config::with(|c| c.cpu.winograd)
}
