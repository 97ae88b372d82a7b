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

/// Whether weights packed now may take the Winograd path (`config::CpuConfig::winograd`,
/// default true; layers already built keep their panels).
pub(crate) fn winograd_enabled() -> bool {
    crate::config::with(|c| c.cpu.winograd)
}
