//! Kernel selection for Xpu matrix products: which engine and tile config runs a problem.
//!
//! Invariants: `Auto` never picks a path the adapter lacks and never picks the cooperative-matrix
//! path (it cannot be executed on the machines the project is tested on, so it runs only when
//! forced); a forced path the adapter cannot run is an error naming the missing feature, never
//! a silently different kernel. Every tile config handles every shape (edges are exact), so
//! forcing one is only a performance choice.

use crate::ops::fused::{MatmulKernel, TileConfig};
use crate::xpu::context::XpuFeatures;
use crate::xpu::pipelines::ShaderId;
use crate::{DType, Error, Result};

/// One concrete Xpu matmul kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Engine {
    /// `matmul.wgsl` `matmul` (f32 product) then the `epilogue` pass.
    Simple,
    /// A `matmul_tiled.wgsl` entry point.
    Tiled(TileConfig),
    /// `matmul_coop.wgsl` `mm_coop`.
    Coop,
}

/// Geometry of a fused kernel: entry point, output tile (rows, virtual product columns).
pub(crate) struct Geometry {
    pub shader: ShaderId,
    pub entry: &'static str,
    pub tile_m: usize,
    pub tile_n: usize,
}

impl Engine {
    /// Entry point and tile of a fused engine (`None` for `Simple`). `b_col_major`: B's
    /// columns are contiguous in K (picks the GEMV lane layout, and the subgroup GEMV when
    /// `subgroup`).
    pub(crate) fn geometry(self, b_col_major: bool, subgroup: bool) -> Option<Geometry> {
        let g = |shader, entry, tile_m, tile_n| {
            Some(Geometry {
                shader,
                entry,
                tile_m,
                tile_n,
            })
        };
        match self {
            Engine::Simple => None,
            Engine::Tiled(TileConfig::Large) => g(ShaderId::MatmulTiled, "mm_large", 128, 128),
            Engine::Tiled(TileConfig::Medium) => g(ShaderId::MatmulTiled, "mm_medium", 64, 64),
            Engine::Tiled(TileConfig::Skinny) => g(ShaderId::MatmulTiled, "mm_skinny", 16, 128),
            Engine::Tiled(TileConfig::Gemv) if b_col_major && subgroup => {
                g(ShaderId::MatmulSubgroup, "mm_gemv_sg", 4, 64)
            }
            Engine::Tiled(TileConfig::Gemv) => g(
                ShaderId::MatmulTiled,
                "mm_gemv",
                4,
                if b_col_major { 8 } else { 64 },
            ),
            Engine::Coop => g(ShaderId::MatmulCoop, "mm_coop", 32, 32),
        }
    }
}

/// Whether the subgroup GEMV may run on an adapter with `features`: it needs SUBGROUP, and
/// `XPU_MATMUL_SUBGROUP=0` turns it off (tests use that to cover the workgroup reduction).
pub(crate) fn subgroup_gemv(features: &XpuFeatures) -> bool {
    features.subgroup && std::env::var_os("XPU_MATMUL_SUBGROUP").is_none_or(|v| v != "0")
}

/// The automatic choice by shape: GEMV for a few rows, skinny tiles for up to 32 rows, large
/// tiles once both sides span at least four of them, medium tiles otherwise.
pub(crate) fn auto(m: usize, n: usize) -> TileConfig {
    if m <= 4 {
        TileConfig::Gemv
    } else if m <= 32 {
        TileConfig::Skinny
    } else if m >= 512 && n >= 512 {
        TileConfig::Large
    } else {
        TileConfig::Medium
    }
}

/// The engine for `kernel` on an adapter with `features`, or why it cannot run there.
pub(crate) fn choose(
    op: &'static str,
    kernel: MatmulKernel,
    features: &XpuFeatures,
    m: usize,
    n: usize,
) -> Result<Engine> {
    match kernel {
        MatmulKernel::Auto => Ok(Engine::Tiled(auto(m, n))),
        MatmulKernel::Simple => Ok(Engine::Simple),
        MatmulKernel::Tiled(t) => Ok(Engine::Tiled(t)),
        MatmulKernel::CoopMatrix => {
            if features.cooperative_matrix && features.subgroup {
                Ok(Engine::Coop)
            } else {
                Err(Error::invalid(
                    op,
                    "MatmulKernel::CoopMatrix needs an adapter with the features \
                     EXPERIMENTAL_COOPERATIVE_MATRIX and SUBGROUP; this adapter lacks \
                     them (see xpu::devices()); use MatmulKernel::Auto or a Tiled config",
                ))
            }
        }
    }
}

/// The matmul path each float dtype uses on an adapter with `features` (for `xpu::devices()`).
pub(crate) fn paths(features: wgpu::Features) -> Vec<(DType, String)> {
    let mut extra = String::new();
    if features.contains(wgpu::Features::SUBGROUP) {
        extra.push_str("; gemv with subgroup reduction for K-contiguous B");
    }
    if features.contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX)
        && features.contains(wgpu::Features::SUBGROUP)
    {
        extra.push_str("; coop-matrix 8x8 f32 when forced");
    }
    [
        (DType::F32, "f32"),
        (DType::F16, "f16 unpacked to f32"),
        (DType::BF16, "bf16 widened to f32"),
    ]
    .into_iter()
    .map(|(d, how)| {
        let path = format!(
            "tiled gemv/skinny/medium/large, {how}, f32 accumulation, fused epilogue{extra}"
        );
        (d, path)
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_picks_by_shape() {
        assert_eq!(auto(1, 4096), TileConfig::Gemv);
        assert_eq!(auto(17, 4096), TileConfig::Skinny);
        assert_eq!(auto(100, 100), TileConfig::Medium);
        assert_eq!(auto(1024, 1024), TileConfig::Large);
        assert_eq!(auto(1024, 64), TileConfig::Medium);
    }

    #[test]
    fn coop_needs_the_feature() {
        let none = XpuFeatures::default();
        let e = choose("matmul", MatmulKernel::CoopMatrix, &none, 64, 64).unwrap_err();
        assert!(
            e.to_string().contains("EXPERIMENTAL_COOPERATIVE_MATRIX"),
            "{e}"
        );
        let mut f = none;
        f.cooperative_matrix = true;
        f.subgroup = true;
        assert_eq!(
            choose("matmul", MatmulKernel::CoopMatrix, &f, 64, 64).unwrap(),
            Engine::Coop
        );
    }
}
