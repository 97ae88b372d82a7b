//! Kernel selection for Xpu matrix products: which engine and tile config runs a problem.
//!
//! Invariants: `Auto` never picks a path the adapter lacks; a forced path the adapter cannot run
//! is an error naming what is missing, never a silently different kernel. Every tile config
//! handles every shape (edges are exact), so forcing one is only a performance choice.
//! Cooperative matrices are chosen by what the driver *reports* (`cooperative_matrix_properties`),
//! not by the feature bit alone: NVIDIA's Vulkan driver has the feature but no 8x8 f32
//! configuration, and the 8x8 f32 kernel compiled there silently wrote zeros (seen on an H100).
//! `Auto` takes the f16 tensor-core kernel (`Coop16`) for F16 operands when the driver reports
//! 16x16x16 F16->F32, M spans two 128 tiles, N one, and N >= 512 or K >= 1024: on an H100 the
//! vec4 FMA tiles beat it on thin products (8192x320x320: 0.100 vs 0.127 ms; 154x768x320: 0.083
//! vs 0.100 ms; 256^3) and lost from 512^3 up and on 8192x320x1280 and 8192x640x640. The 8x8
//! f32 kernel stays forced-only. The tensor-core kernel and the subgroup GEMV are also
//! conditional on the configuration (`config::GpuConfig::matmul_coop`, `matmul_subgroup`), read
//! where the product is dispatched.
//! The large and medium tiles hold their workgroup tiles as vec4 (`mm_large4`, `mm_medium4`;
//! `TileConfig::Large` and `Medium` name the same kernels as their `Vec4` forms). The large tile
//! only pays for long K and enough tiles to fill a big GPU: on an H100 it halved 4096^3 against
//! the medium tile but lost at K = 320 and 640 (8192x320x1280: 0.454 vs 0.431 ms; 2048x640x640:
//! 0.258 vs 0.204 ms, 80 large tiles for 132 SMs).

use crate::desc::{MatmulKernel, TileConfig};
use crate::gpu::context::XpuFeatures;
use crate::gpu::pipelines::ShaderId;
use crate::{DType, Error, Result};

/// One concrete Xpu matmul kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Engine {
    /// `matmul.wgsl` `matmul` (f32 product) then the `epilogue` pass.
    Simple,
    /// A `matmul_tiled.wgsl` entry point.
    Tiled(TileConfig),
    /// `matmul_coop.wgsl` `mm_coop` (8x8 f32 cooperative matrices).
    Coop,
    /// `matmul_coop16.wgsl` `mm_coop16` (16x16 f16 cooperative matrices, f32 accumulation).
    Coop16,
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
            Engine::Tiled(TileConfig::Large | TileConfig::LargeVec4) => {
                g(ShaderId::MatmulVec4, "mm_large4", 128, 128)
            }
            Engine::Tiled(TileConfig::Medium | TileConfig::MediumVec4) => {
                g(ShaderId::MatmulVec4, "mm_medium4", 64, 64)
            }
            Engine::Tiled(TileConfig::Skinny) => g(ShaderId::MatmulTiled, "mm_skinny", 16, 128),
            Engine::Tiled(TileConfig::Gemv) if b_col_major && subgroup => {
                g(ShaderId::MatmulSubgroup, "mm_gemv_sg", 4, 16)
            }
            Engine::Tiled(TileConfig::Gemv) => g(
                ShaderId::MatmulTiled,
                "mm_gemv",
                4,
                if b_col_major { 8 } else { 64 },
            ),
            Engine::Coop => g(ShaderId::MatmulCoop, "mm_coop", 32, 32),
            Engine::Coop16 => g(ShaderId::MatmulCoop16, "mm_coop16", 128, 128),
        }
    }
}

/// Whether the subgroup GEMV may run on an adapter with `features`: it needs SUBGROUP, and
/// `config::GpuConfig::matmul_subgroup` may turn it off (tests use that to cover the workgroup
/// reduction).
pub(crate) fn subgroup_gemv(features: &XpuFeatures) -> bool {
    features.subgroup && crate::config::with(|c| c.gpu.matmul_subgroup)
}

/// The automatic choice by shape (`[m, n, k]`): GEMV for a few rows, skinny tiles for up to 32
/// rows, large tiles when both sides span at least four of them, the output at least 128 of
/// them and K at least 1024, medium tiles otherwise.
pub(crate) fn auto([m, n, k]: [usize; 3]) -> TileConfig {
    if m <= 4 {
        TileConfig::Gemv
    } else if m <= 32 {
        TileConfig::Skinny
    } else if m >= 512 && n >= 512 && k >= 1024 && m.saturating_mul(n) >= 128 * 128 * 128 {
        TileConfig::LargeVec4
    } else {
        TileConfig::MediumVec4
    }
}

/// Whether `Auto` sends an F16 product of `[m, n, k]` to the tensor cores (see the module docs).
fn tensor_core_shape([m, n, k]: [usize; 3]) -> bool {
    m >= 256 && n >= 128 && (n >= 512 || k >= 1024)
}

/// The engine for `kernel` on an adapter with `features`, for operands of `dtype` and a product
/// of `[m, n, k]`, or why it cannot run there.
pub(crate) fn choose(
    op: &'static str,
    kernel: MatmulKernel,
    features: &XpuFeatures,
    dtype: DType,
    mnk: [usize; 3],
) -> Result<Engine> {
    match kernel {
        MatmulKernel::Auto
            if dtype == DType::F16 && coop16(features) && tensor_core_shape(mnk) =>
        {
            Ok(Engine::Coop16)
        }
        MatmulKernel::Auto => Ok(Engine::Tiled(auto(mnk))),
        MatmulKernel::Simple => Ok(Engine::Simple),
        MatmulKernel::Tiled(t) => Ok(Engine::Tiled(t)),
        MatmulKernel::CoopMatrix if dtype == DType::F16 && coop16(features) => Ok(Engine::Coop16),
        MatmulKernel::CoopMatrix if features.coop_f32_8x8 && features.subgroup => Ok(Engine::Coop),
        MatmulKernel::CoopMatrix => Err(Error::invalid(
            op,
            format!(
                "MatmulKernel::CoopMatrix needs an adapter with EXPERIMENTAL_COOPERATIVE_MATRIX and \
                 SUBGROUP whose driver reports 8x8x8 f32 cooperative matrices (any float dtype) or \
                 16x16x16 f16->f32 ones with SHADER_F16 (f16 operands); this adapter has \
                 cooperative_matrix={}, subgroup={}, 8x8 f32={}, 16x16 f16={} for {dtype} \
                 operands (see xpu::devices()); use MatmulKernel::Auto or a Tiled config",
                features.cooperative_matrix,
                features.subgroup,
                features.coop_f32_8x8,
                features.coop_f16_16x16
            ),
        )),
    }
}

/// Whether the f16 tensor-core kernel can run (and `config::GpuConfig::matmul_coop` does not
/// turn it off).
pub(crate) fn coop16(features: &XpuFeatures) -> bool {
    features.coop_f16_16x16 && features.subgroup && crate::config::with(|c| c.gpu.matmul_coop)
}

/// The matmul path each float dtype uses on an adapter with `features` (for `xpu::devices()`).
pub(crate) fn paths(features: &XpuFeatures) -> Vec<(DType, String)> {
    let mut extra = String::new();
    if features.subgroup {
        extra.push_str("; gemv with subgroup reduction for K-contiguous B");
    }
    if features.coop_f32_8x8 && features.subgroup {
        extra.push_str("; coop-matrix 8x8 f32 when forced");
    }
    [
        (DType::F32, "f32"),
        (DType::F16, "f16 unpacked to f32"),
        (DType::BF16, "bf16 widened to f32"),
    ]
    .into_iter()
    .map(|(d, how)| {
        let tensor_cores = if d == DType::F16 && features.coop_f16_16x16 && features.subgroup {
            "coop-matrix 16x16 f16 (f32 accumulation) when M >= 256, N >= 128 and N >= 512 or \
             K >= 1024, else "
        } else {
            ""
        };
        let path = format!(
            "{tensor_cores}tiled gemv/skinny/medium/large (vec4 tiles), {how}, f32 accumulation, \
             fused epilogue{extra}"
        );
        (d, path)
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The large and medium configs `auto` takes.
    fn large_medium() -> (TileConfig, TileConfig) {
        (TileConfig::LargeVec4, TileConfig::MediumVec4)
    }

    #[test]
    fn large_and_medium_are_the_vec4_kernels() {
        let entry = |t| Engine::Tiled(t).geometry(false, false).map(|g| g.entry);
        assert_eq!(entry(TileConfig::Large), Some("mm_large4"));
        assert_eq!(entry(TileConfig::LargeVec4), Some("mm_large4"));
        assert_eq!(entry(TileConfig::Medium), Some("mm_medium4"));
        assert_eq!(entry(TileConfig::MediumVec4), Some("mm_medium4"));
    }

    #[test]
    fn auto_picks_by_shape() {
        let (large, medium) = large_medium();
        assert_eq!(auto([1, 4096, 64]), TileConfig::Gemv);
        assert_eq!(auto([17, 4096, 64]), TileConfig::Skinny);
        assert_eq!(auto([100, 100, 100]), medium);
        assert_eq!(auto([2048, 2048, 2048]), large);
        assert_eq!(auto([4096, 4096, 4096]), large);
        // Short K or too few large tiles: the medium tile.
        assert_eq!(auto([8192, 1280, 320]), medium);
        assert_eq!(auto([2048, 640, 640]), medium);
        assert_eq!(auto([1024, 1024, 4096]), medium);
        assert_eq!(auto([1024, 64, 4096]), medium);
    }

    #[test]
    fn coop_needs_a_reported_configuration() {
        let none = XpuFeatures::default();
        let e = choose(
            "matmul",
            MatmulKernel::CoopMatrix,
            &none,
            DType::F32,
            [64, 64, 64],
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("EXPERIMENTAL_COOPERATIVE_MATRIX"),
            "{e}"
        );
        // The feature bit alone (NVIDIA: no 8x8 f32 configuration) is not enough.
        let mut f = none;
        f.cooperative_matrix = true;
        f.subgroup = true;
        let sq = |n| [n, n, n];
        assert!(choose("matmul", MatmulKernel::CoopMatrix, &f, DType::F32, sq(64)).is_err());
        f.coop_f32_8x8 = true;
        assert_eq!(
            choose("matmul", MatmulKernel::CoopMatrix, &f, DType::F32, sq(64)).unwrap(),
            Engine::Coop
        );
        assert_eq!(
            choose("matmul", MatmulKernel::Auto, &f, DType::F32, sq(2048)).unwrap(),
            Engine::Tiled(large_medium().0)
        );
    }

    #[test]
    fn f16_takes_tensor_cores_where_reported() {
        let mut f = XpuFeatures {
            cooperative_matrix: true,
            subgroup: true,
            coop_f16_16x16: true,
            ..XpuFeatures::default()
        };
        let pick = |f: &XpuFeatures, k, d, m, n, kk| choose("matmul", k, f, d, [m, n, kk]);
        let (large, medium) = large_medium();
        for (m, n, k) in [
            (1024, 1024, 1024),
            (512, 512, 512),
            (8192, 1280, 320),
            (8192, 320, 1280),
        ] {
            let e = pick(&f, MatmulKernel::Auto, DType::F16, m, n, k).unwrap();
            assert_eq!(e, Engine::Coop16, "{m}x{n}x{k}");
        }
        // Thin products stay on the vec4 FMA tiles (faster there on an H100).
        for (m, n, k) in [
            (64, 1024, 1024),
            (8192, 320, 320),
            (154, 320, 768),
            (256, 256, 256),
        ] {
            let e = pick(&f, MatmulKernel::Auto, DType::F16, m, n, k).unwrap();
            assert_eq!(e, Engine::Tiled(medium), "{m}x{n}x{k}");
        }
        assert_eq!(
            pick(&f, MatmulKernel::Auto, DType::F32, 2048, 2048, 2048).unwrap(),
            Engine::Tiled(large)
        );
        assert_eq!(
            pick(&f, MatmulKernel::CoopMatrix, DType::F16, 7, 7, 7).unwrap(),
            Engine::Coop16
        );
        // f32/bf16 operands would lose precision in f16 tiles: refused without 8x8 f32.
        assert!(pick(&f, MatmulKernel::CoopMatrix, DType::BF16, 64, 64, 64).is_err());
        f.coop_f16_16x16 = false;
        assert!(pick(&f, MatmulKernel::CoopMatrix, DType::F16, 64, 64, 64).is_err());
    }
}
