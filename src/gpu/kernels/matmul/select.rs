//! Kernel selection for Xpu matrix products: the kernels valid for a problem (the candidates the
//! backend's autotuner chooses among, family `gpu_matmul`) and the static rule's pick.
//!
//! Invariants: a candidate is listed only where the adapter runs it; a kernel forced through
//! `MatmulKernel` that the adapter cannot run is an error naming what is missing, never a
//! silently different kernel. Every tile kernel handles every shape (edges are exact), so the
//! choice among candidates is only a performance choice. The list depends on the problem only
//! through its dtype, B's layout, GEGLU and the shape buckets of M and N (`autotune::bucket`),
//! all in the tuning key, and on the adapter, so one tuning key always lists the same
//! candidates.
//! Cooperative matrices are chosen by what the driver *reports* (`cooperative_matrix_properties`),
//! not by the feature bit alone: NVIDIA's Vulkan driver has the feature but no 8x8 f32
//! configuration, and the 8x8 f32 kernel compiled there silently wrote zeros (seen on an H100).
//! The tensor-core kernels also serve only after their once-per-process self-check passed
//! (`coop_check`).
//! The rule takes the f16 tensor-core kernel (`Coop16`) for F16 operands when the driver reports
//! 16x16x16 F16->F32, M spans two 128 tiles, N one, and N >= 512 or K >= 1024: on an H100 the
//! vec4 FMA tiles beat it on thin products (8192x320x320: 0.100 vs 0.127 ms; 154x768x320: 0.083
//! vs 0.100 ms; 256^3) and lost from 512^3 up and on 8192x320x1280 and 8192x640x640. The 8x8
//! f32 kernel and the simple engine stay forced-only (`MatmulKernel::CoopMatrix`, `Simple`).
//! The large and medium tiles hold their workgroup tiles as vec4 (`mm_large4`, `mm_medium4`;
//! `TileConfig::Large` and `Medium` name the same kernels as their `Vec4` forms). The large tile
//! only pays for long K and enough tiles to fill a big GPU: on an H100 it halved 4096^3 against
//! the medium tile but lost at K = 320 and 640 (8192x320x1280: 0.454 vs 0.431 ms; 2048x640x640:
//! 0.258 vs 0.204 ms, 80 large tiles for 132 SMs).

use super::coop16_tiles::{Coop16Tiles, TileLimits, TILE_SHAPES};
use crate::autotune::bucket;
use crate::desc::{MatmulKernel, TileConfig};
use crate::gpu::context::XpuFeatures;
use crate::gpu::pipelines::ShaderId;
use crate::{DType, Error, Result};

/// One concrete Xpu matmul kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Engine {
    /// `matmul.wgsl` `matmul` (f32 product) then the `epilogue` pass.
    Simple,
    /// `matmul_vec4.wgsl` `mm_large4` (128x128 tiles).
    Large4,
    /// `matmul_vec4.wgsl` `mm_medium4` (64x64 tiles).
    Medium4,
    /// `matmul_tiled.wgsl` `mm_skinny` (16x128 tiles).
    Skinny,
    /// `matmul_tiled.wgsl` `mm_gemv` (workgroup reductions).
    Gemv,
    /// `matmul_subgroup.wgsl` `mm_gemv_sg` (subgroup reductions; B's columns contiguous in K).
    GemvSubgroup,
    /// `matmul_coop.wgsl` `mm_coop` (8x8 f32 cooperative matrices).
    Coop,
    /// `matmul_coop16.wgsl` `mm_coop16` (16x16 f16 cooperative matrices, f32 accumulation).
    Coop16,
    /// `matmul_coop16_tiles.wgsl` `mm_coop16t` with shape `TILE_SHAPES[i]`.
    Coop16Tiles(u8),
}

/// Geometry of a fused kernel: entry point, output tile (rows, virtual product columns), its
/// workgroup size and `VARIANT`.
pub(crate) struct Geometry {
    pub shader: ShaderId,
    pub entry: &'static str,
    pub tile_m: usize,
    pub tile_n: usize,
    pub workgroup: u32,
    pub variant: u32,
}

impl Engine {
    /// The candidate's name in the `gpu_matmul` family.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Engine::Simple => "simple",
            Engine::Large4 => "large4",
            Engine::Medium4 => "medium4",
            Engine::Skinny => "skinny",
            Engine::Gemv => "gemv",
            Engine::GemvSubgroup => "gemv_sg",
            Engine::Coop => "coop8",
            Engine::Coop16 => "coop16",
            Engine::Coop16Tiles(i) => TILE_SHAPES[usize::from(i) % TILE_SHAPES.len()].0,
        }
    }

    /// The FMA tile kernel of a tile config.
    fn tiled(t: TileConfig) -> Engine {
        match t {
            TileConfig::Large | TileConfig::LargeVec4 => Engine::Large4,
            TileConfig::Medium | TileConfig::MediumVec4 => Engine::Medium4,
            TileConfig::Skinny => Engine::Skinny,
            TileConfig::Gemv => Engine::Gemv,
        }
    }

    /// Whether the kernel can cut K into splits (`split_k`): the tensor-core kernel, the large
    /// and medium FMA tiles and the simple engine.
    pub(crate) fn splits_k(self) -> bool {
        matches!(
            self,
            Engine::Coop16
                | Engine::Coop16Tiles(_)
                | Engine::Large4
                | Engine::Medium4
                | Engine::Simple
        )
    }

    /// Whether the static rule plans splits on this kernel (the tensor-core kernel, where they
    /// were measured; the other kernels split where the autotuner finds it faster).
    pub(crate) fn plans_splits(self) -> bool {
        self == Engine::Coop16
    }

    /// Entry point and tile of a fused engine (`None` for `Simple`). `b_col_major`: B's
    /// columns are contiguous in K (picks the GEMV lane layout).
    pub(crate) fn geometry(self, b_col_major: bool) -> Option<Geometry> {
        let g = |shader, entry, tile_m, tile_n| {
            Some(Geometry {
                shader,
                entry,
                tile_m,
                tile_n,
                workgroup: 256,
                // mm_gemv's lane layout for a column-major B.
                variant: u32::from(entry == "mm_gemv" && b_col_major),
            })
        };
        match self {
            Engine::Simple => None,
            Engine::Large4 => g(ShaderId::MatmulVec4, "mm_large4", 128, 128),
            Engine::Medium4 => g(ShaderId::MatmulVec4, "mm_medium4", 64, 64),
            Engine::Skinny => g(ShaderId::MatmulTiled, "mm_skinny", 16, 128),
            Engine::GemvSubgroup => g(ShaderId::MatmulSubgroup, "mm_gemv_sg", 4, 16),
            Engine::Gemv => g(
                ShaderId::MatmulTiled,
                "mm_gemv",
                4,
                if b_col_major { 8 } else { 64 },
            ),
            Engine::Coop => g(ShaderId::MatmulCoop, "mm_coop", 32, 32),
            Engine::Coop16 => g(ShaderId::MatmulCoop16, "mm_coop16", 128, 128),
            Engine::Coop16Tiles(i) => {
                let t = TILE_SHAPES[usize::from(i) % TILE_SHAPES.len()].1;
                Some(Geometry {
                    shader: Coop16Tiles::SHADER,
                    entry: Coop16Tiles::ENTRY,
                    tile_m: t.tile_m() as usize,
                    tile_n: t.tile_n() as usize,
                    workgroup: t.workgroup(),
                    variant: t.variant(b_col_major),
                })
            }
        }
    }
}

/// The subgroup GEMV runs on adapters with SUBGROUP, for B's columns contiguous in K.
fn subgroup_gemv(features: &XpuFeatures, b_col_major: bool) -> bool {
    features.subgroup && b_col_major
}

/// The rule's FMA tile by shape (`[m, n, k]`): GEMV for a few rows, skinny tiles for up to 32
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

/// Whether the rule sends an F16 product of `[m, n, k]` to the tensor cores (see the module
/// docs).
fn tensor_core_shape([m, n, k]: [usize; 3]) -> bool {
    m >= 256 && n >= 128 && (n >= 512 || k >= 1024)
}

/// A product as the kernel choice sees it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Shape {
    /// The operands' dtype.
    pub dtype: DType,
    /// `[m, n, k]` (n: output columns).
    pub mnk: [usize; 3],
    /// B's columns are contiguous in K (a transposed weight).
    pub b_col_major: bool,
    /// A GEGLU product (B holds both column halves).
    pub geglu: bool,
}

/// The kernels that can run a product of `shape` asked for as `kernel` on an adapter with
/// `features`, and the index of the rule's pick; `coop_ok` is the tensor-core self-check's
/// verdict (asked only where a cooperative kernel would be listed).
///
/// `MatmulKernel::Auto` lists the candidates worth measuring: the medium tiles always; the
/// large tiles where M and N reach 128; the skinny tiles up to 64 rows; the GEMVs up to 16 rows
/// (the subgroup one where the adapter has subgroups and B's columns are contiguous in K); the
/// f16 tensor-core kernel above 16 rows where the driver reports it and its self-check passed,
/// and there, except for GEGLU products, the tile shapes of `mm_coop16t` that fit `limits`
/// (M and N bucketed, so nearby sizes list the same kernels). A forced `Tiled` config lists its
/// kernel (`Gemv`: both GEMVs where the subgroup one runs, the rule taking it); `Simple` the
/// simple engine; `CoopMatrix` the f16 tensor-core kernel for F16 operands, else the 8x8 f32
/// one, or an error where the adapter lacks them or their self-check failed.
pub(crate) fn candidates(
    op: &'static str,
    kernel: MatmulKernel,
    features: &XpuFeatures,
    limits: &TileLimits,
    shape: Shape,
    coop_ok: &dyn Fn() -> std::result::Result<(), String>,
) -> Result<(Vec<Engine>, usize)> {
    let Shape {
        dtype,
        mnk,
        b_col_major,
        geglu,
    } = shape;
    let gemv = |list: &mut Vec<Engine>| {
        list.push(Engine::Gemv);
        if subgroup_gemv(features, b_col_major) {
            list.push(Engine::GemvSubgroup);
        }
    };
    let rule_of = |list: &[Engine], e: Engine| list.iter().position(|&x| x == e).unwrap_or(0);
    match kernel {
        MatmulKernel::Auto => {
            let [bm, bn] = [bucket(mnk[0]), bucket(mnk[1])];
            let mut list = Vec::new();
            let tensor_cores = dtype == DType::F16 && coop16(features) && bm > 16;
            if tensor_cores && coop_ok().is_ok() {
                list.push(Engine::Coop16);
                if !geglu {
                    let fitting = TILE_SHAPES.iter().enumerate();
                    let fitting = fitting.filter(|(_, (_, t))| t.fits(limits));
                    list.extend(fitting.map(|(i, _)| Engine::Coop16Tiles(i as u8)));
                }
            }
            if bm >= 128 && bn >= 128 {
                list.push(Engine::Large4);
            }
            list.push(Engine::Medium4);
            if bm <= 64 {
                list.push(Engine::Skinny);
            }
            if bm <= 16 {
                gemv(&mut list);
            }
            let rule = if list.contains(&Engine::Coop16) && tensor_core_shape(mnk) {
                Engine::Coop16
            } else {
                match Engine::tiled(auto(mnk)) {
                    Engine::Gemv if subgroup_gemv(features, b_col_major) => Engine::GemvSubgroup,
                    e => e,
                }
            };
            if !list.contains(&rule) {
                list.push(rule);
            }
            let r = rule_of(&list, rule);
            Ok((list, r))
        }
        MatmulKernel::Simple => Ok((vec![Engine::Simple], 0)),
        MatmulKernel::Tiled(TileConfig::Gemv) => {
            let mut list = Vec::new();
            gemv(&mut list);
            let rule = list.len() - 1;
            Ok((list, rule))
        }
        MatmulKernel::Tiled(t) => Ok((vec![Engine::tiled(t)], 0)),
        MatmulKernel::CoopMatrix => {
            let engine = if dtype == DType::F16 && coop16(features) {
                Engine::Coop16
            } else if features.coop_f32_8x8 && features.subgroup {
                Engine::Coop
            } else {
                return Err(Error::invalid(
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
                ));
            };
            coop_ok().map_err(|why| Error::invalid(op, why))?;
            Ok((vec![engine], 0))
        }
    }
}

/// Whether the adapter has the f16 tensor-core kernel (16x16x16 f16 cooperative matrices with
/// f32 accumulation, and subgroups).
pub(crate) fn coop16(features: &XpuFeatures) -> bool {
    features.coop_f16_16x16 && features.subgroup
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
            "coop-matrix 16x16 f16 (f32 accumulation; the rule's pick when M >= 256, N >= 128 \
             and N >= 512 or K >= 1024) or "
        } else {
            ""
        };
        let path = format!(
            "{tensor_cores}tiled gemv/skinny/medium/large (vec4 tiles), {how}, f32 accumulation, \
             fused epilogue{extra}; the autotuner picks per problem (family gpu_matmul)"
        );
        (d, path)
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(dtype: DType, m: usize, n: usize, k: usize) -> Shape {
        Shape {
            dtype,
            mnk: [m, n, k],
            b_col_major: false,
            geglu: false,
        }
    }

    /// NVIDIA's limits: 1024 invocations, 48 KiB of workgroup memory.
    const LIMITS: TileLimits = TileLimits {
        invocations: 1024,
        workgroup_bytes: 48 * 1024,
    };

    fn passed() -> std::result::Result<(), String> {
        Ok(())
    }

    /// The rule's pick for `kernel` and `s`.
    fn rule(kernel: MatmulKernel, f: &XpuFeatures, s: Shape) -> Result<Engine> {
        let (list, r) = candidates("matmul", kernel, f, &LIMITS, s, &passed)?;
        Ok(list[r])
    }

    #[test]
    fn large_and_medium_are_the_vec4_kernels() {
        let entry = |t| Engine::tiled(t).geometry(false).map(|g| g.entry);
        assert_eq!(entry(TileConfig::Large), Some("mm_large4"));
        assert_eq!(entry(TileConfig::LargeVec4), Some("mm_large4"));
        assert_eq!(entry(TileConfig::Medium), Some("mm_medium4"));
        assert_eq!(entry(TileConfig::MediumVec4), Some("mm_medium4"));
    }

    #[test]
    fn auto_picks_by_shape() {
        let (large, medium) = (TileConfig::LargeVec4, TileConfig::MediumVec4);
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

    /// Auto lists the kernels worth measuring by the buckets of M and N, always with the rule's.
    #[test]
    fn auto_lists_candidates_by_shape_bucket() {
        let f = XpuFeatures {
            subgroup: true,
            ..XpuFeatures::default()
        };
        let names = |s: Shape| {
            let (list, r) =
                candidates("matmul", MatmulKernel::Auto, &f, &LIMITS, s, &passed).unwrap();
            (list.iter().map(|e| e.name()).collect::<Vec<_>>(), r)
        };
        let mut gemv = shape(DType::F32, 3, 100, 64);
        assert_eq!(names(gemv), (vec!["medium4", "skinny", "gemv"], 2));
        gemv.b_col_major = true;
        assert_eq!(
            names(gemv),
            (vec!["medium4", "skinny", "gemv", "gemv_sg"], 3)
        );
        assert_eq!(
            names(shape(DType::F32, 20, 100, 64)),
            (vec!["medium4", "skinny"], 1)
        );
        assert_eq!(
            names(shape(DType::F32, 2048, 2048, 2048)),
            (vec!["large4", "medium4"], 0)
        );
        assert_eq!(names(shape(DType::F32, 200, 60, 64)), (vec!["medium4"], 0));
        // Sizes of one bucket list the same kernels.
        for m in 97..=128 {
            assert_eq!(
                names(shape(DType::F16, m, 300, 64)).0,
                ["large4", "medium4"]
            );
        }
    }

    #[test]
    fn coop_needs_a_reported_configuration() {
        let none = XpuFeatures::default();
        let e = rule(
            MatmulKernel::CoopMatrix,
            &none,
            shape(DType::F32, 64, 64, 64),
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
        let sq = |n| shape(DType::F32, n, n, n);
        assert!(rule(MatmulKernel::CoopMatrix, &f, sq(64)).is_err());
        f.coop_f32_8x8 = true;
        assert_eq!(
            rule(MatmulKernel::CoopMatrix, &f, sq(64)).unwrap(),
            Engine::Coop
        );
        // The 8x8 f32 kernel is forced-only.
        assert_eq!(
            rule(MatmulKernel::Auto, &f, sq(2048)).unwrap(),
            Engine::Large4
        );
        // A failed self-check makes a forced cooperative kernel an error naming it.
        let failed = || Err("self-check failed".to_string());
        let e = candidates(
            "matmul",
            MatmulKernel::CoopMatrix,
            &f,
            &LIMITS,
            sq(64),
            &failed,
        )
        .unwrap_err();
        assert!(e.to_string().contains("self-check failed"), "{e}");
    }

    #[test]
    fn f16_takes_tensor_cores_where_reported() {
        let mut f = XpuFeatures {
            cooperative_matrix: true,
            subgroup: true,
            coop_f16_16x16: true,
            ..XpuFeatures::default()
        };
        let pick = |f: &XpuFeatures, k, d, m, n, kk| rule(k, f, shape(d, m, n, kk));
        for (m, n, k) in [
            (1024, 1024, 1024),
            (512, 512, 512),
            (8192, 1280, 320),
            (8192, 320, 1280),
        ] {
            let e = pick(&f, MatmulKernel::Auto, DType::F16, m, n, k).unwrap();
            assert_eq!(e, Engine::Coop16, "{m}x{n}x{k}");
        }
        // Thin products stay on the vec4 FMA tiles (faster there on an H100), with the
        // tensor-core kernel still a candidate.
        for (m, n, k) in [
            (64, 1024, 1024),
            (8192, 320, 320),
            (154, 320, 768),
            (256, 256, 256),
        ] {
            let s = shape(DType::F16, m, n, k);
            let (list, r) =
                candidates("matmul", MatmulKernel::Auto, &f, &LIMITS, s, &passed).unwrap();
            assert_eq!(list[r], Engine::Medium4, "{m}x{n}x{k}");
            assert!(list.contains(&Engine::Coop16), "{m}x{n}x{k}");
        }
        // A failed self-check keeps the tensor-core kernel off the list.
        let failed = || Err("self-check failed".to_string());
        let s = shape(DType::F16, 1024, 1024, 1024);
        let (list, r) = candidates("matmul", MatmulKernel::Auto, &f, &LIMITS, s, &failed).unwrap();
        assert!(!list.contains(&Engine::Coop16));
        assert_eq!(list[r], Engine::Medium4);
        assert_eq!(
            pick(&f, MatmulKernel::Auto, DType::F32, 2048, 2048, 2048).unwrap(),
            Engine::Large4
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

    #[test]
    fn tile_shapes_join_the_tensor_core_kernel_where_they_fit() {
        let f = XpuFeatures {
            cooperative_matrix: true,
            subgroup: true,
            coop_f16_16x16: true,
            ..XpuFeatures::default()
        };
        let tiles = |list: &[Engine]| {
            list.iter()
                .filter(|e| matches!(e, Engine::Coop16Tiles(_)))
                .count()
        };
        let s = shape(DType::F16, 1024, 1024, 1024);
        let (list, r) = candidates("matmul", MatmulKernel::Auto, &f, &LIMITS, s, &passed).unwrap();
        assert_eq!(tiles(&list), TILE_SHAPES.len(), "{list:?}");
        assert_eq!(list[r], Engine::Coop16, "the rule stays mm_coop16");
        for e in &list {
            let g = e.geometry(false).unwrap();
            assert!(g.workgroup >= 128 && g.tile_m >= 64, "{e:?}");
            assert!(
                TILE_SHAPES.iter().any(|t| t.0 == e.name()) || !matches!(e, Engine::Coop16Tiles(_))
            );
            assert!(e.splits_k() || !matches!(e, Engine::Coop16Tiles(_)));
        }
        // GEGLU stays on mm_coop16; small workgroup memory leaves out the shapes beyond it;
        // f32 operands and a failed self-check list none.
        let geglu = Shape { geglu: true, ..s };
        let (list, _) =
            candidates("matmul", MatmulKernel::Auto, &f, &LIMITS, geglu, &passed).unwrap();
        assert_eq!(tiles(&list), 0);
        assert!(list.contains(&Engine::Coop16));
        let small = TileLimits {
            invocations: 256,
            workgroup_bytes: 32 * 1024,
        };
        let (list, _) = candidates("matmul", MatmulKernel::Auto, &f, &small, s, &passed).unwrap();
        let want = TILE_SHAPES.iter().filter(|(_, t)| t.fits(&small)).count();
        assert!(want < TILE_SHAPES.len());
        assert_eq!(tiles(&list), want);
        let f32s = shape(DType::F32, 1024, 1024, 1024);
        let (list, _) =
            candidates("matmul", MatmulKernel::Auto, &f, &LIMITS, f32s, &passed).unwrap();
        assert_eq!(tiles(&list), 0);
        let failed = || Err("self-check failed".to_string());
        let (list, _) = candidates("matmul", MatmulKernel::Auto, &f, &LIMITS, s, &failed).unwrap();
        assert_eq!(tiles(&list), 0);
        // A forced tensor-core product is mm_coop16 alone.
        let (list, _) =
            candidates("matmul", MatmulKernel::CoopMatrix, &f, &LIMITS, s, &passed).unwrap();
        assert_eq!(list, vec![Engine::Coop16]);
    }
}
