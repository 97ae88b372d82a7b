//! The tensor-core product with its tile shape as pipeline constants (`matmul_coop16_tiles.wgsl`,
//! entry `mm_coop16t`): a fixed set of shapes that the autotuner measures beside `mm_coop16`
//! (family `gpu_matmul`, candidates [`TILE_SHAPES`]).
//!
//! Why: `mm_coop16` has one hand-written shape (128x128 output tiles, K steps of 32, eight
//! subgroups of 32x64, one tile pair in workgroup memory). Bigger subgroup tiles load fewer
//! fragments per product, smaller workgroups leave room for two per multiprocessor, longer K
//! steps and two tile pairs halve the barriers; which of these a driver rewards differs from
//! GPU to GPU, so each competes on the device that runs it.
//!
//! A shape `WMxWN:TMxTN:BK[:2]` is a WM x WN grid of subgroup slots (32 invocations each), each
//! owning TM x TN 16x16 accumulator tiles, K steps of BK (16, 32 or 64), and `:2` for two tile
//! pairs in workgroup memory (one barrier per K step). `4x2:2x4:32` is `mm_coop16`'s own shape.
//!
//! Convolutions take the same shapes through the gather (family `gpu_conv2d`, where `coop16`
//! serves them), those whose invocations each gather at most 16 input rows per K step.
//!
//! Invariants: every listed shape is valid by construction (tested: the staged words split
//! evenly among the invocations, at most 32 per operand); a shape is listed for a product only
//! where the adapter holds its workgroup and its workgroup memory ([`TileLimits`]), for f16
//! operands where `mm_coop16` itself is listed (reported 16x16x16 f16 matrices whose
//! self-check passed), and never for GEGLU products (those stay on `mm_coop16`). Every shape
//! computes what `mm_coop16` does up to f32 summation order, split K included.

use crate::gpu::pipelines::ShaderId;

/// One tile shape of `mm_coop16t` (see the module docs for the fields' meaning).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Coop16Tiles {
    /// Subgroup slots along M and along N.
    pub wm: u32,
    pub wn: u32,
    /// 16x16 accumulator tiles per slot along M and along N.
    pub tm: u32,
    pub tn: u32,
    /// The K step.
    pub bk: u32,
    /// Tile pairs in workgroup memory (1 or 2).
    pub nbuf: u32,
}

/// The most staged words one invocation carries per operand (the shader's `MAX_WORDS`).
const MAX_WORDS: u32 = 32;

/// A shape of the candidate table.
const fn shape(wm: u32, wn: u32, tm: u32, tn: u32, bk: u32, nbuf: u32) -> Coop16Tiles {
    Coop16Tiles {
        wm,
        wn,
        tm,
        tn,
        bk,
        nbuf,
    }
}

/// The `gpu_matmul` candidates of this kernel, by name: `mm_coop16`'s shape with two tile pairs
/// and with K steps of 64, the 128x128 tile on 4 slots of 4x4 tiles and on 16 slots of 2x2,
/// a 256x128 tile, and a 64x64 tile for problems with few output tiles.
pub(crate) const TILE_SHAPES: [(&str, Coop16Tiles); 6] = [
    ("coop16t_4x2_2x4_32_2", shape(4, 2, 2, 4, 32, 2)),
    ("coop16t_4x2_2x4_64", shape(4, 2, 2, 4, 64, 1)),
    ("coop16t_2x2_4x4_32_2", shape(2, 2, 4, 4, 32, 2)),
    ("coop16t_4x4_2x2_32_2", shape(4, 4, 2, 2, 32, 2)),
    ("coop16t_4x2_4x4_32", shape(4, 2, 4, 4, 32, 1)),
    ("coop16t_2x2_2x2_64_2", shape(2, 2, 2, 2, 64, 2)),
];

/// `VARIANT` bit of the convolution gather.
const GATHER: u32 = 1 << 22;

/// The most gathered rows one invocation holds (the shader's `MAX_ROWS`).
const MAX_ROWS: u32 = 16;

/// What the adapter allows a compute workgroup.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TileLimits {
    /// `max_compute_invocations_per_workgroup`.
    pub invocations: u32,
    /// `max_compute_workgroup_storage_size` in bytes.
    pub workgroup_bytes: u32,
}

impl Coop16Tiles {
    /// Why the shape itself is invalid (adapter limits aside), if it is.
    pub(crate) fn shape_error(&self) -> Option<String> {
        let t = self;
        if !(1..=8).contains(&t.wm) || !(1..=8).contains(&t.wn) {
            return Some(format!("subgroup grid {}x{}: each side 1..=8", t.wm, t.wn));
        }
        if !(1..=4).contains(&t.tm) || !(1..=4).contains(&t.tn) {
            return Some(format!("subgroup tiles {}x{}: each side 1..=4", t.tm, t.tn));
        }
        if ![16, 32, 64].contains(&t.bk) {
            return Some(format!("K step {}: 16, 32 or 64", t.bk));
        }
        if !(1..=2).contains(&t.nbuf) {
            return Some(format!("{} tile pairs: 1 or 2", t.nbuf));
        }
        let wg = self.workgroup();
        for (name, rows) in [("A", self.tile_m()), ("B", self.tile_n())] {
            let words = rows * t.bk / 2;
            if !words.is_multiple_of(wg) || words / wg > MAX_WORDS {
                return Some(format!(
                    "{name}'s {words} staged words per K step do not split into at most \
                     {MAX_WORDS} per invocation among {wg}"
                ));
            }
        }
        None
    }

    /// Invocations per workgroup (32 per subgroup slot).
    pub(crate) fn workgroup(&self) -> u32 {
        32 * self.wm * self.wn
    }

    /// Output rows per workgroup.
    pub(crate) fn tile_m(&self) -> u32 {
        16 * self.wm * self.tm
    }

    /// Output columns per workgroup.
    pub(crate) fn tile_n(&self) -> u32 {
        16 * self.wn * self.tn
    }

    /// Bytes of workgroup memory the module declares (`b_by_k`: B staged [column][k]).
    pub(crate) fn workgroup_bytes(&self, b_by_k: bool) -> u32 {
        let a = self.tile_m() * (self.bk + 8);
        let b = if b_by_k {
            self.tile_n() * (self.bk + 8)
        } else {
            self.bk * (self.tile_n() + 8)
        };
        2 * self.nbuf * (a + b) + 4 * 256 * (self.wm * self.wn).min(8)
    }

    /// The shader's `VARIANT` (its header gives the bits); `b_by_k`: B's rows are contiguous
    /// in k (staged [column][k]).
    pub(crate) fn variant(&self, b_by_k: bool) -> u32 {
        let log_bk = self.bk.trailing_zeros() - 4;
        self.wm
            | self.wn << 4
            | self.tm << 8
            | self.tn << 12
            | log_bk << 16
            | (self.nbuf - 1) << 20
            | u32::from(b_by_k) << 21
    }

    /// Whether the shape is valid and the adapter holds its workgroup for either B layout.
    pub(crate) fn fits(&self, limits: &TileLimits) -> bool {
        self.shape_error().is_none()
            && self.workgroup() <= limits.invocations
            && [false, true]
                .iter()
                .all(|&b_by_k| self.workgroup_bytes(b_by_k) <= limits.workgroup_bytes)
    }

    /// Whether a convolution can take the shape: each invocation gathers at most
    /// [`MAX_ROWS`] rows of the input per K step.
    pub(crate) fn gathers(&self) -> bool {
        self.tile_m() * self.bk / 2 / self.workgroup() <= MAX_ROWS
    }

    /// The `VARIANT` of a convolution on the shape: the gather, the weight `[O][kh][kw][C]`
    /// staged [column][k].
    pub(crate) fn conv_variant(&self) -> u32 {
        self.variant(true) | GATHER
    }

    /// The module of every shape.
    pub(crate) const SHADER: ShaderId = ShaderId::MatmulCoop16Tiles;
    /// Its entry point.
    pub(crate) const ENTRY: &'static str = "mm_coop16t";
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_candidate_shape_is_valid_and_named_after_itself() {
        for (name, t) in TILE_SHAPES {
            assert_eq!(t.shape_error(), None, "{name}");
            let mut want = format!("coop16t_{}x{}_{}x{}_{}", t.wm, t.wn, t.tm, t.tn, t.bk);
            if t.nbuf == 2 {
                want.push_str("_2");
            }
            assert_eq!(name, want);
            // NVIDIA's 48 KiB of workgroup memory and 1024 invocations hold every shape.
            let nvidia = TileLimits {
                invocations: 1024,
                workgroup_bytes: 48 * 1024,
            };
            assert!(
                t.fits(&nvidia),
                "{name}: {} bytes",
                t.workgroup_bytes(false)
            );
        }
    }

    #[test]
    fn mm_coop16s_own_shape_has_its_tile_and_bits() {
        let t = shape(4, 2, 2, 4, 32, 1);
        assert_eq!((t.tile_m(), t.tile_n(), t.workgroup()), (128, 128, 256));
        assert_eq!(t.variant(false), 4 | 2 << 4 | 2 << 8 | 4 << 12 | 1 << 16);
        let d = shape(4, 2, 2, 4, 32, 2);
        assert_eq!(d.variant(true) >> 20, 3);
        // 2 x (128 x 40 + 32 x 136) f16 + 8 KiB of f32.
        assert_eq!(d.workgroup_bytes(false), 2 * 2 * (5120 + 4352) + 8192);
    }

    #[test]
    fn impossible_shapes_say_why_and_limits_refuse_what_does_not_fit() {
        for (t, says) in [
            (shape(0, 2, 2, 4, 32, 1), "subgroup grid"),
            (shape(9, 1, 1, 1, 16, 1), "subgroup grid"),
            (shape(2, 2, 5, 1, 32, 1), "subgroup tiles"),
            (shape(4, 2, 2, 4, 48, 1), "K step"),
            (shape(4, 2, 2, 4, 32, 3), "tile pairs"),
            // 16 x 16 / 2 = 128 words of A among 256 invocations.
            (shape(1, 8, 1, 1, 16, 1), "staged words"),
            // 256 x 64 / 2 = 8192 words of A: 64 per invocation.
            (shape(4, 1, 4, 1, 64, 1), "staged words"),
        ] {
            let e = t.shape_error().unwrap_or_default();
            assert!(e.contains(says), "{t:?}: {e:?}");
        }
        let big = shape(4, 2, 4, 4, 64, 2);
        let small = TileLimits {
            invocations: 1024,
            workgroup_bytes: 48 * 1024,
        };
        assert!(!big.fits(&small));
        let wide = shape(4, 8, 1, 1, 32, 1);
        let few = TileLimits {
            invocations: 256,
            workgroup_bytes: 1 << 20,
        };
        assert!(!wide.fits(&few));
    }
}
