//! Product descriptors: which kernel computes a product and its tile shapes.

/// Which Xpu kernel computes a product. `Auto` chooses by shape, dtype and adapter; the others
/// force a path (tests use them to cover every kernel on any adapter). A forced path the
/// adapter or the problem cannot run is an error, never a silently different kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum MatmulKernel {
    /// Choose automatically.
    #[default]
    Auto,
    /// The simple 64×64 tiled kernel with an unfused epilogue.
    Simple,
    /// A cooperative-tile kernel with the given tile configuration.
    Tiled(TileConfig),
    /// Hardware cooperative matrices (needs `EXPERIMENTAL_COOPERATIVE_MATRIX`).
    CoopMatrix,
}

/// Tile shapes of the cooperative-tile WGSL kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TileConfig {
    /// Large square tiles for big products.
    Large,
    /// Medium tiles for mid-sized or narrow products.
    Medium,
    /// Tall-skinny: few rows of output (small M).
    Skinny,
    /// Matrix-vector style for M of a few rows (subgroup reductions where available).
    Gemv,
    /// The `Large` tile (128×128, 8×8 per invocation) with its workgroup tiles held as vec4:
    /// one vector load per 4 rows or columns instead of one load per element.
    LargeVec4,
    /// The `Medium` tile (64×64, 4×4 per invocation) with vec4 workgroup tiles.
    MediumVec4,
}
