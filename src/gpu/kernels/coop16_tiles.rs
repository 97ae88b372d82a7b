//! `XPU_COOP16_TILES`: the tensor-core product with its tile shape chosen at run time
//! (`shaders/matmul_coop16_tiles.wgsl`, entry `mm_coop16t`), an experiment for timing many tile
//! shapes in one GPU run (`benches/gpu/run_gpu.sh tiles`).
//!
//! Why: mm_coop16 has one hand-written shape (128x128 output tiles, K steps of 32, eight
//! subgroups of 32x64), and on the H200 it reached 8.6% of cuBLAS at 4096^3 with even its
//! staging-free timing variant at 0.92 ms (about 150 TFLOP/s): the shape itself, not only the
//! staging, bounds it. Bigger subgroup tiles load fewer fragments per product, smaller
//! workgroups leave room for two per SM, longer K steps halve the barriers; which of these the
//! driver rewards is a question for a GPU, and each costs a rewrite of the hand-written kernel
//! to ask. Here they are pipeline constants, so a run times each by setting one variable.
//!
//! Format: `WMxWN:TMxTN:BK[:2]`: a WM x WN grid of subgroups (32 lanes each, so 32 WM WN
//! invocations), each owning TM x TN 16x16 accumulator tiles, K steps of BK (16, 32 or 64), and
//! `:2` for two tile pairs in workgroup memory (one barrier per K step). `4x2:2x4:32` is
//! mm_coop16's own shape. It applies to the F16 products (not GEGLU, which stays on mm_coop16)
//! that `Auto` or a forced `CoopMatrix` sends to the tensor cores, and to the tensor-core
//! convolutions; where set it takes precedence over `XPU_COOP16_DOUBLE`.
//!
//! Invariants: a malformed value, or a shape the adapter cannot run (too many invocations, too
//! much workgroup memory, staging words that do not divide evenly among the invocations, more
//! than 16 gathered rows per invocation for a convolution), is an `Error` at the product or
//! convolution that would use it, never a silently different kernel; every valid
//! shape computes every output exactly as mm_coop16 does up to f32 summation order (tests run
//! several on lavapipe 26, `tests/matmul_coop16_tiles.rs`), and the once-per-process
//! cooperative-matrix self-check runs through it when it is set.

use crate::gpu::context::Context;
use crate::gpu::pipelines::{PipelineKey, ShaderId};
use crate::{DType, Error, Result};

/// One tile shape of `mm_coop16t` (see the module docs for the fields' meaning).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Coop16Tiles {
    /// Subgroups along M and along N.
    pub wm: u32,
    pub wn: u32,
    /// 16x16 accumulator tiles per subgroup along M and along N.
    pub tm: u32,
    pub tn: u32,
    /// The K step.
    pub bk: u32,
    /// Tile pairs in workgroup memory (1 or 2).
    pub nbuf: u32,
}

/// The most staged words one invocation carries per operand (the shader's `MAX_WORDS`).
const MAX_WORDS: u32 = 32;

impl Coop16Tiles {
    /// Parses `WMxWN:TMxTN:BK[:2]`, or says what was expected.
    pub(crate) fn parse(text: &str) -> std::result::Result<Self, String> {
        let bad = || format!("expected WMxWN:TMxTN:BK[:2] (e.g. 4x2:2x4:32), got {text:?}");
        let parts: Vec<&str> = text.trim().split(':').collect();
        if !(3..=4).contains(&parts.len()) {
            return Err(bad());
        }
        let pair = |s: &str| -> Option<(u32, u32)> {
            let (a, b) = s.split_once('x')?;
            Some((a.parse().ok()?, b.parse().ok()?))
        };
        let (wm, wn) = pair(parts[0]).ok_or_else(bad)?;
        let (tm, tn) = pair(parts[1]).ok_or_else(bad)?;
        let bk = parts[2].parse().map_err(|_| bad())?;
        let nbuf = match parts.get(3) {
            None => 1,
            Some(s) => s.parse().map_err(|_| bad())?,
        };
        let t = Coop16Tiles {
            wm,
            wn,
            tm,
            tn,
            bk,
            nbuf,
        };
        t.shape_error()
            .map_or(Ok(t), |why| Err(format!("{text:?}: {why}")))
    }

    /// Why the shape itself is invalid (adapter limits aside), if it is.
    fn shape_error(&self) -> Option<String> {
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

    /// The shader's `VARIANT` (its header gives the bits).
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

    /// The pipeline of this shape for `dt_in` -> `dt_out` products.
    pub(crate) fn key(&self, dt_in: DType, dt_out: DType, b_by_k: bool) -> PipelineKey {
        PipelineKey {
            shader: ShaderId::MatmulCoop16Tiles,
            entry: "mm_coop16t",
            dt_in,
            dt_out,
            workgroup: self.workgroup(),
            variant: self.variant(b_by_k),
        }
    }

    /// Why the adapter cannot run the shape, if it cannot.
    pub(crate) fn limit_error(
        &self,
        b_by_k: bool,
        max_invocations: u32,
        workgroup_bytes: u32,
    ) -> Option<String> {
        if self.workgroup() > max_invocations {
            return Some(format!(
                "{} invocations per workgroup, the adapter allows {max_invocations}",
                self.workgroup()
            ));
        }
        let need = self.workgroup_bytes(b_by_k);
        (need > workgroup_bytes).then(|| {
            format!("{need} bytes of workgroup memory, the adapter allows {workgroup_bytes}")
        })
    }
}

/// The shape `XPU_COOP16_TILES` asks for (read once per process): `Ok(None)` when unset, an
/// error naming the variable when malformed.
pub(crate) fn forced(op: &'static str) -> Result<Option<Coop16Tiles>> {
    static FORCED: std::sync::OnceLock<std::result::Result<Option<Coop16Tiles>, String>> =
        std::sync::OnceLock::new();
    FORCED
        .get_or_init(|| match std::env::var("XPU_COOP16_TILES") {
            Ok(v) if !v.trim().is_empty() => Coop16Tiles::parse(&v).map(Some),
            _ => Ok(None),
        })
        .clone()
        .map_err(|why| Error::invalid(op, format!("XPU_COOP16_TILES: {why}")))
}

/// `VARIANT` bit of the convolution gather in `mm_coop16t`.
const GATHER: u32 = 1 << 22;

/// The most gathered rows one invocation holds (the shader's `MAX_ROWS`).
const MAX_ROWS: u32 = 16;

/// The forced shape where it fits the adapter (`b_by_k`: B staged [column][k]), `Ok(None)` when
/// unset, else an error naming the variable.
fn fitting(ctx: &Context, op: &'static str, b_by_k: bool) -> Result<Option<Coop16Tiles>> {
    let Some(t) = forced(op)? else {
        return Ok(None);
    };
    let limits = &ctx.limits;
    let (invocations, bytes) = (
        limits.max_compute_invocations_per_workgroup,
        limits.max_compute_workgroup_storage_size,
    );
    match t.limit_error(b_by_k, invocations, bytes) {
        Some(why) => Err(Error::invalid(op, format!("XPU_COOP16_TILES: {why}"))),
        None => Ok(Some(t)),
    }
}

/// Checks `XPU_COOP16_TILES` against the adapter for either B layout (before the
/// once-per-process self-checks, whose products and convolutions run through it: an invalid
/// shape is then the caller's error, not a failed check that quietly leaves the tensor cores).
pub(crate) fn validate(ctx: &Context, op: &'static str) -> Result<()> {
    for b_by_k in [false, true] {
        fitting(ctx, op, b_by_k)?;
    }
    Ok(())
}

/// The output tile of `t` as `[columns, rows]`.
fn tile(t: &Coop16Tiles) -> [usize; 2] {
    [t.tile_n() as usize, t.tile_m() as usize]
}

/// The pipeline and output tile (`[columns, rows]`) of `XPU_COOP16_TILES` for an F16
/// tensor-core product on `ctx` (`b_by_k`: B's rows are contiguous in k), or `Ok(None)` where
/// mm_coop16 serves it (unset, or a GEGLU product); an invalid shape is an error.
pub(crate) fn plan(
    ctx: &Context,
    op: &'static str,
    (dt_in, dt_out): (DType, DType),
    geglu: bool,
    b_by_k: bool,
) -> Result<Option<(PipelineKey, [usize; 2])>> {
    if geglu {
        return Ok(None);
    }
    Ok(fitting(ctx, op, b_by_k)?.map(|t| (t.key(dt_in, dt_out, b_by_k), tile(&t))))
}

/// The pipeline (F16 in, `dt_out` out) and output tile (`[columns, rows]`) of
/// `XPU_COOP16_TILES` for a channels-last convolution on the tensor cores (the gather; the
/// weight is B by k), or `Ok(None)` when unset; a shape the adapter cannot hold, or whose
/// invocations would each gather more than 16 rows, is an error.
pub(crate) fn conv_plan(
    ctx: &Context,
    op: &'static str,
    dt_out: DType,
) -> Result<Option<(PipelineKey, [usize; 2])>> {
    let Some(t) = fitting(ctx, op, true)? else {
        return Ok(None);
    };
    let rows = t.tile_m() * t.bk / 2 / t.workgroup();
    if rows > MAX_ROWS {
        return Err(Error::invalid(
            op,
            format!(
                "XPU_COOP16_TILES: the convolution gather would hold {rows} rows per \
                 invocation with this shape, at most {MAX_ROWS}"
            ),
        ));
    }
    let key = t.key(DType::F16, dt_out, true);
    let key = PipelineKey {
        variant: key.variant | GATHER,
        ..key
    };
    Ok(Some((key, tile(&t))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mm_coop16s_own_shape_parses_and_fits() {
        let t = Coop16Tiles::parse("4x2:2x4:32").unwrap();
        assert_eq!((t.tile_m(), t.tile_n(), t.workgroup()), (128, 128, 256));
        assert_eq!(t.variant(false), 4 | 2 << 4 | 2 << 8 | 4 << 12 | 1 << 16);
        assert!(t.limit_error(false, 1024, 48 * 1024).is_none());
        let d = Coop16Tiles::parse("4x2:2x4:32:2").unwrap();
        assert_eq!(d.variant(true) >> 20, 3);
        // 2 x (128 x 40 + 32 x 136) f16 + 8 KiB of f32.
        assert_eq!(d.workgroup_bytes(false), 2 * 2 * (5120 + 4352) + 8192);
        // 16 slots pass their tiles through the epilogue's memory eight at a time.
        let s16 = Coop16Tiles::parse("4x4:2x2:32:2").unwrap();
        assert_eq!(
            s16.workgroup_bytes(false),
            2 * 2 * (128 * 40 + 32 * 136) + 8192
        );
    }

    #[test]
    fn malformed_and_impossible_shapes_say_why() {
        for (text, says) in [
            ("", "expected"),
            ("4x2:2x4", "expected"),
            ("4x2:2x4:32:2:1", "expected"),
            ("4:2x4:32", "expected"),
            ("4x2:2xq:32", "expected"),
            ("0x2:2x4:32", "subgroup grid"),
            ("9x1:1x1:16", "subgroup grid"),
            ("2x2:5x1:32", "subgroup tiles"),
            ("2x2:1x5:32", "subgroup tiles"),
            ("4x2:2x4:48", "K step"),
            ("4x2:2x4:32:3", "tile pairs"),
            // 16 x 16 / 2 = 128 words of A among 256 invocations.
            ("1x8:1x1:16", "staged words"),
            // 256 x 64 / 2 = 8192 words of A: 64 per invocation.
            ("4x1:4x1:64", "staged words"),
        ] {
            let e = Coop16Tiles::parse(text).unwrap_err();
            assert!(e.contains(says), "{text}: {e}");
        }
        let big = Coop16Tiles::parse("4x2:4x4:64:2").unwrap();
        let e = big.limit_error(false, 1024, 48 * 1024).unwrap();
        assert!(e.contains("workgroup memory"), "{e}");
        let wide = Coop16Tiles::parse("4x8:1x1:32").unwrap();
        assert!(wide.limit_error(false, 1024, 1 << 20).is_none());
        assert!(wide
            .limit_error(false, 256, 1 << 20)
            .unwrap()
            .contains("invocations"));
    }
}
