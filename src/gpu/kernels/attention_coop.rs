//! Which attention calls run on the tensor-core kernel (`shaders/attention_coop16.wgsl`), and
//! its once-per-process self-check.
//!
//! Why: the FMA kernel (`attention.wgsl`) runs SD 1.5's largest attention (2×8×4096², head dim
//! 40) at about 2 TFLOP/s on an H100, the whole f16 UNet step's largest item; the same flash
//! attention on 16x16x16 f16 cooperative matrices (f32 accumulation, a two-pass softmax so the
//! accumulators never need rescaling) keeps the O(Lq·Dv) memory and moves both products to the
//! tensor cores.
//!
//! Invariants: the kernel serves only f16 calls without a mask, with `0 < Lk`, even head dims up
//! to [`MAX_DIM`], and q/k/v readable two elements per 32-bit word (unit column stride, even
//! row and head strides and offsets), on an adapter with f16 cooperative matrices whose check
//! here passed (and `XPU_ATTN_COOP` is not `0`); every other call takes the FMA kernel. The
//! check compares both kernels on small problems with odd key tails, head dims 40 to 80, query
//! rows whose score maxima differ, and keys that grow along the sequence (so the one-pass
//! form's rescale runs); every form in use is the one checked.
//!
//! Subgroups: the kernel's lane softmax is written for a fixed subgroup size, 32 lanes (NVIDIA)
//! or 8 (lavapipe 26, where `benches/lavapipe_coop/` runs the tests on the CPU); [`shader`]
//! picks the form from the adapter's fixed size, the 32-lane one wherever it is not 8.
//!
//! Head dims up to 48 used to stay on the FMA kernel (H100, twenty-fifth session: 5.04 against
//! 5.40 ms at 2×8×4096×40). Since the kernel stages only the head-dim tiles its products read,
//! the tensor cores take them too (H200, twenty-eighth session, f16 2×8×4096×40: 3.57 ms
//! against the vec4 FMA kernel's 5.09 for self-attention, 0.152 against 0.166 ms for
//! cross-attention to 77 tokens).

use std::cell::Cell;
use std::sync::OnceLock;

use super::coop_check;
use super::matmul_select::coop16;
use crate::cpu::CpuStorage;
use crate::desc::AttnShape;
use crate::gpu::pipelines::ShaderId;
use crate::gpu::XpuStorage;
use crate::layout::Layout;
use crate::DType;

/// Largest q/k and v head dim of the kernel (five 16-column tiles: SD 1.5's 40 and 80, SD 2's 64).
pub(crate) const MAX_DIM: usize = 80;

thread_local! {
    /// True while this thread runs the check.
    static CHECKING: Cell<bool> = const { Cell::new(false) };
}

static VERDICT: OnceLock<Result<(), String>> = OnceLock::new();

/// True when `l`'s last dim has unit stride and its offset and other strides are even.
fn word_pairs(l: &Layout) -> bool {
    let st = l.strides();
    st.last() == Some(&1)
        && l.offset().is_multiple_of(2)
        && st[..st.len() - 1].iter().all(|s| s.is_multiple_of(2))
}

/// Whether this call's shapes and layouts fit the tensor-core kernel (no adapter check).
pub(crate) fn fits(q: &XpuStorage, layouts: [&Layout; 3], masked: bool, s: &AttnShape) -> bool {
    q.dtype == DType::F16
        && !masked
        && s.lk > 0
        && (1..=MAX_DIM).contains(&s.d)
        && (1..=MAX_DIM).contains(&s.dv)
        && s.d.is_multiple_of(2)
        && s.dv.is_multiple_of(2)
        && layouts.iter().all(|l| word_pairs(l))
}

/// Timing-only `VARIANT` bits of the kernel from `XPU_ATTN_COOP_VARIANT` (256 no K/V staging,
/// 512 no softmax arithmetic, 1024 no products: wrong results, so the check is skipped while
/// any is set); 0 unless set. `benches/gpu/run_gpu.sh attanat` times them.
pub(crate) fn timing_variant() -> u32 {
    static BITS: OnceLock<u32> = OnceLock::new();
    *BITS.get_or_init(|| {
        std::env::var("XPU_ATTN_COOP_VARIANT")
            .ok()
            .and_then(|v| v.parse::<u32>().ok())
            .map_or(0, |v| v & (256 | 512 | 1024))
    })
}

/// `VARIANT` bit 2048, the kernel's prefetch form (the next key block's K/V words loaded into
/// registers while the current block computes), with `XPU_ATTN_PREFETCH=1` (read once per
/// process); an experiment until a GPU measures it (`benches/gpu/run_gpu.sh prefetch`). Same
/// results; the once-per-process check runs the form in use.
pub(crate) fn prefetch_variant() -> u32 {
    static ON: OnceLock<bool> = OnceLock::new();
    if switched_on(&ON, "XPU_ATTN_PREFETCH") {
        2048
    } else {
        0
    }
}

/// Whether the experiment switch `name` is `1`, read once per process into `cell`.
fn switched_on(cell: &OnceLock<bool>, name: &str) -> bool {
    *cell.get_or_init(|| std::env::var_os(name).is_some_and(|v| v == "1"))
}

/// `VARIANT` bit 4096, the kernel's one-pass form with `XPU_ATTN_ONEPASS=1` (read once per
/// process): no statistics pass; probabilities against a row max raised lazily (only when a
/// block's scores pass it by more than 8, when the O accumulators are rescaled through
/// workgroup memory), O divided by the row sums at the end. It stages K once instead of twice
/// and computes Q Kᵀ once; an experiment until a GPU measures it. The once-per-process check
/// runs the form in use.
pub(crate) fn onepass_variant() -> u32 {
    static ON: OnceLock<bool> = OnceLock::new();
    if switched_on(&ON, "XPU_ATTN_ONEPASS") {
        4096
    } else {
        0
    }
}

/// `VARIANT` bit 8192, the kernel's lean form with `XPU_ATTN_LEAN=1` (read once per process):
/// the K/V staging keeps each invocation's word offsets and grows them by constants, checking
/// rows only in the block that crosses Lk; the scores and probabilities are key-major, so each
/// lane's softmax reads constant offsets from one base; the module is written without naga's
/// bounds clamps (`shaders/attention_coop16_lean.wgsl`). NAK counts about half the
/// instructions per key block of the default form; an experiment until a GPU times it. With
/// `XPU_ATTN_ONEPASS=1` it takes the one-pass form too; it ignores `XPU_ATTN_PREFETCH`. The
/// once-per-process check runs the form in use.
pub(crate) fn lean_variant() -> u32 {
    static ON: OnceLock<bool> = OnceLock::new();
    if switched_on(&ON, "XPU_ATTN_LEAN") {
        crate::gpu::passthrough::ATTENTION_LEAN
    } else {
        0
    }
}

/// Whether this call takes the experimental 128-row layout (`XPU_ATTN_ROWS128=1`, read once per
/// process; head dims up to 48): `shaders/attention_coop16_rows128.wgsl`, until a GPU measures
/// it (`benches/gpu/run_gpu.sh prefetch`). Same results; the once-per-process check runs the
/// layout its head dims take.
pub(crate) fn rows128(s: &AttnShape) -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    switched_on(&ON, "XPU_ATTN_ROWS128") && s.d.max(s.dv) <= 48
}

/// The kernel's shader and workgroup size (invocations) for the adapter's fixed subgroup size:
/// 8 lanes (lavapipe) takes the 8-lane form, anything else the 32-lane one (NVIDIA's; where
/// the size is not fixed or differs, the once-per-process check decides, as before the 8-lane
/// form existed): four subgroups, or eight in the 128-row layout.
pub(crate) fn shader(rows128: bool, subgroup: u32) -> (ShaderId, u32) {
    let subgroups = if rows128 { 8 } else { 4 };
    match (subgroup, rows128) {
        (8, false) => (ShaderId::AttentionCoop16Sg8, subgroups * 8),
        (8, true) => (ShaderId::AttentionCoop16Rows128Sg8, subgroups * 8),
        (_, false) => (ShaderId::AttentionCoop16, subgroups * 32),
        (_, true) => (ShaderId::AttentionCoop16Rows128, subgroups * 32),
    }
}

/// Whether the tensor-core kernel may serve calls in this process (running the check once).
pub(crate) fn enabled(q: &XpuStorage) -> bool {
    if std::env::var_os("XPU_ATTN_COOP").is_some_and(|v| v == "0") || !coop16(&q.ctx.features) {
        return false;
    }
    if timing_variant() != 0 {
        return true;
    }
    coop_check::once(&VERDICT, &CHECKING, || {
        let r = run_check(q);
        if let Err(why) = &r {
            // Once per process: the user loses the tensor cores, not correctness.
            eprintln!("xpu: {why}");
        }
        r
    })
    .is_ok()
}

/// Multiples of 1/16 in [-span/16, span/16] (exact in f16). Queries take a wide span so the
/// rows' score maxima differ by several units: a kernel that mixed up rows' softmax statistics
/// would then be far off (with spans of 8 everywhere, one that used another row's max passed).
fn values(len: usize, seed: usize, span: usize) -> Vec<half::f16> {
    (0..len)
        .map(|i| {
            let x = (i * 11 + seed * 5) % (2 * span + 1);
            half::f16::from_f32((x as f32 - span as f32) / 16.0)
        })
        .collect()
}

fn run_check(like: &XpuStorage) -> Result<(), String> {
    let check = || -> crate::Result<Result<(), String>> {
        let ctx = &like.ctx;
        // The last case's keys grow along the sequence (key j times 1 + j/4, still exact in
        // f16), so every block's scores pass the last block's maxima by far more than the
        // one-pass form's lazy margin: its accumulator rescale runs in every block.
        for (heads, lq, lk, d, dv, ramp) in [
            (2, 70, 45, 40, 40, false),
            (1, 65, 97, 64, 24, false),
            (1, 33, 40, 80, 80, false),
            (1, 20, 100, 40, 40, true),
        ] {
            let upload = |rows: usize, cols: usize, seed: usize, span: usize| {
                XpuStorage::upload(
                    ctx,
                    &CpuStorage::F16(values(heads * rows * cols, seed, span)),
                )
            };
            let mut keys = values(heads * lk * d, 2, 8);
            if ramp {
                for (i, x) in keys.iter_mut().enumerate() {
                    let j = (i / d) % lk;
                    *x = half::f16::from_f32(x.to_f32() * (1.0 + j as f32 / 4.0));
                }
            }
            let (q, k, v) = (
                upload(lq, d, 1, 61)?,
                XpuStorage::upload(ctx, &CpuStorage::F16(keys))?,
                upload(lk, dv, 3, 8)?,
            );
            let (ql, kl, vl) = (
                Layout::contiguous(&[heads, lq, d]),
                Layout::contiguous(&[heads, lk, d]),
                Layout::contiguous(&[heads, lk, dv]),
            );
            let shape = AttnShape {
                lead: vec![heads],
                lq,
                lk,
                d,
                dv,
                scale: 1.0 / (d as f32).sqrt(),
            };
            let run = |coop| -> crate::Result<Vec<f32>> {
                let ol = Layout::contiguous(&shape.out_shape());
                let out = q.attention_on(&ql, (&k, &kl), (&v, &vl), None, &shape, coop, &ol)?;
                match &out.download(&Layout::contiguous(&[heads * lq * dv]))? {
                    CpuStorage::F32(x) => Ok(x.clone()),
                    _ => Err(crate::Error::Gpu("attention output is not f32".into())),
                }
            };
            let (coop, fma) = (run(true)?, run(false)?);
            let worst = coop_check::max_abs_diff(&coop, &fma);
            if worst > 1e-2 {
                return Ok(Err(format!(
                    "tensor-core attention disagreed with the FMA kernel in xpu's self-check \
                     ({heads}x{lq}x{lk}, head dims {d}/{dv}: max difference {worst:e}); the FMA \
                     kernel is used instead"
                )));
            }
        }
        Ok(Ok(()))
    };
    match check() {
        Ok(v) => v,
        Err(e) => Err(format!(
            "tensor-core attention failed in xpu's self-check: {e}; the FMA kernel is used"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lavapipe's 8 lanes take the 8-lane forms; every other size (NVIDIA's 32, a size that is
    /// not fixed, 64) the 32-lane ones, with four or eight subgroups of invocations.
    #[test]
    fn forms_follow_the_fixed_subgroup_size() {
        assert_eq!(shader(false, 8), (ShaderId::AttentionCoop16Sg8, 32));
        assert_eq!(shader(true, 8), (ShaderId::AttentionCoop16Rows128Sg8, 64));
        for size in [32, 0, 64] {
            assert_eq!(shader(false, size), (ShaderId::AttentionCoop16, 128));
            assert_eq!(shader(true, size), (ShaderId::AttentionCoop16Rows128, 256));
        }
    }
}
