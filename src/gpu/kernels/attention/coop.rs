//! Which attention calls run on the tensor-core kernel (`attention_coop16.wgsl`), and its
//! once-per-process self-check.
//!
//! Why: the FMA kernel runs SD 1.5's largest attention (2×8×4096², head dim 40) at about
//! 2 TFLOP/s on an H100, the whole f16 UNet step's largest item; the same flash attention on
//! 16x16x16 f16 cooperative matrices (f32 accumulation, a two-pass softmax so the accumulators
//! never need rescaling) keeps the O(Lq·Dv) memory and moves both products to the tensor cores.
//! On an H200 it took 3.57 ms for f16 2×8×4096×40 self-attention against the vec4 FMA kernel's
//! 5.09, and 0.152 against 0.166 ms for cross-attention to 77 tokens.
//!
//! Invariants: the kernel serves only f16 calls without a mask, with `0 < Lk`, even head dims up
//! to [`MAX_DIM`], and q/k/v readable two elements per 32-bit word (unit column stride, even
//! row and head strides and offsets), on an adapter with f16 cooperative matrices whose check
//! here passed; where both kernels can serve a call, the caller (the backend's autotuner,
//! family `gpu_attention`) chooses. The check compares both kernels on small
//! problems with odd key tails, head dims 40 to 80, query rows whose score maxima differ, and
//! keys that grow along the sequence.
//!
//! Subgroups: the kernel's lane softmax is written for a fixed subgroup size, 32 lanes (NVIDIA)
//! or 8 (lavapipe, a CPU's Vulkan driver); [`shader`] picks the form from the adapter's fixed
//! size, the 32-lane one wherever it is not 8.

use std::cell::Cell;
use std::sync::OnceLock;

use crate::desc::AttnShape;
use crate::gpu::kernels::matmul::select::coop16;
use crate::gpu::kernels::self_check::{max_abs_diff, once};
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

/// The kernel's shader and workgroup size (invocations) for the adapter's fixed subgroup size:
/// 8 lanes (lavapipe) takes the 8-lane form, anything else the 32-lane one (NVIDIA's; where
/// the size is not fixed or differs, the once-per-process check decides): four subgroups.
pub(crate) fn shader(subgroup: u32) -> (ShaderId, u32) {
    match subgroup {
        8 => (ShaderId::AttentionCoop16Sg8, 4 * 8),
        _ => (ShaderId::AttentionCoop16, 4 * 32),
    }
}

/// Whether the tensor-core kernel may serve calls: the adapter has f16 cooperative matrices
/// and the once-per-process check (run on first use) passed.
pub(crate) fn enabled(q: &XpuStorage) -> bool {
    if !coop16(&q.ctx.features) {
        return false;
    }
    once(&VERDICT, &CHECKING, || {
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
        // f16), so every block's scores pass the earlier blocks' maxima by far: the online row
        // statistics change in every block.
        for (heads, lq, lk, d, dv, ramp) in [
            (2, 70, 45, 40, 40, false),
            (1, 65, 97, 64, 24, false),
            (1, 33, 40, 80, 80, false),
            (1, 20, 100, 40, 40, true),
        ] {
            let upload_f16 = |v: &[half::f16]| {
                XpuStorage::upload(ctx, DType::F16, v.len(), bytemuck::cast_slice(v))
            };
            let upload = |rows: usize, cols: usize, seed: usize, span: usize| {
                upload_f16(&values(heads * rows * cols, seed, span))
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
                upload_f16(&keys)?,
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
                if out.dtype != DType::F32 {
                    return Err(crate::Error::Gpu("attention output is not f32".into()));
                }
                let bytes = out.download(&Layout::contiguous(&[heads * lq * dv]))?;
                Ok(bytemuck::pod_collect_to_vec::<u8, f32>(&bytes))
            };
            let (coop, fma) = (run(true)?, run(false)?);
            let worst = max_abs_diff(&coop, &fma);
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

    /// Lavapipe's 8 lanes take the 8-lane form; every other size (NVIDIA's 32, a size that is
    /// not fixed, 64) the 32-lane one, with four subgroups of invocations.
    #[test]
    fn forms_follow_the_fixed_subgroup_size() {
        assert_eq!(shader(8), (ShaderId::AttentionCoop16Sg8, 32));
        for size in [32, 0, 64] {
            assert_eq!(shader(size), (ShaderId::AttentionCoop16, 128));
        }
    }
}
