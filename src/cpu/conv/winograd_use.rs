//! For what use convolution weights are packed, which decides the static rule's Winograd
//! variant.

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
