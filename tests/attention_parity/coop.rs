//! The tensor-core attention (`shaders/attention_coop16.wgsl`) in each of its forms: the
//! default, the prefetch form (`XPU_ATTN_PREFETCH=1`), the 128-row layout (`XPU_ATTN_ROWS128=1`)
//! and the one-pass form (`XPU_ATTN_ONEPASS=1`), in every combination, and the lean form
//! (`XPU_ATTN_LEAN=1`, which takes precedence over the prefetch switch) two-pass and one-pass
//! in both layouts. Each form runs in a
//! child process (the switches are read once per process) with the kernel profiler on, so the
//! child can tell that the tensor-core kernel served its f16 calls (its self-check passed) and
//! that every output is within f16 tolerance of the f64 reference.
//!
//! On adapters without f16 cooperative matrices (lavapipe 22 in CI) the children instead check
//! that the same calls ran on the FMA kernel: the test then covers the routing, and the kernel's
//! numbers need an adapter that has one (an NVIDIA GPU, or lavapipe 26 through
//! `benches/lavapipe_coop/`). Where the subgroup size is neither fixed at 32 nor at 8 lanes,
//! either kernel may serve (the self-check decides), and only the numbers are checked.

use super::common::{self, assert_close, values};
use super::{qkv, reference, tol, xpu_lock};
use xpu::{DType, Device};

const NAME: &str = "coop::every_form_matches_the_reference";

/// `[Lq, Lk, D, Dv, ramp]`: head dims 40 (one and both 128-row layouts), 64, 80, Dv != D, key
/// tails of 1 and 13 past a block of 32, one query row, cross-attention to 77 tokens; `ramp`
/// scales key j by 1 + j/4, so each block's scores pass the last block's maxima by far more
/// than the one-pass form's lazy margin (it then rescales its accumulators in every block);
/// `ramp` 2 makes every score near 0 but the last key's, about 9 higher: the one-pass form
/// rescales once, in the last block, where the earlier keys still weigh about 3% (so a wrong
/// rescale factor shows).
/// The odd cases read q, k and v as strided views on the Xpu (diffusers' `[B, L, H, D]`
/// transposed: row stride H·D), the even ones contiguous.
const CASES: [[usize; 5]; 9] = [
    [257, 257, 40, 40, 0],
    [130, 77, 40, 40, 0],
    [65, 33, 64, 64, 0],
    [33, 45, 80, 80, 0],
    [70, 97, 64, 24, 0],
    [1, 40, 48, 48, 0],
    [100, 200, 40, 40, 1],
    [17, 150, 80, 64, 1],
    [40, 257, 40, 40, 2],
];

/// Which kernel this adapter's f16 attention should take: `Some(true)` the tensor cores,
/// `Some(false)` the FMA kernel, `None` either (the self-check decides).
fn tensor_cores() -> Option<bool> {
    let f = xpu::xpu_features().unwrap();
    let off = |var: &str| std::env::var_os(var).is_some_and(|v| v == "0");
    let coop = f.cooperative_matrix
        && f.coop_f16_16x16
        && f.subgroup
        && !off("XPU_ATTN_COOP")
        && !off("XPU_MATMUL_COOP");
    match (coop, f.fixed_subgroup_size) {
        (false, _) => Some(false),
        (true, 8 | 32) => Some(true),
        (true, _) => None,
    }
}

/// The child's work: every case on the Xpu against the f64 reference, and the kernel that ran.
fn run_cases() {
    // A first call runs the kernel's once-per-process self-check, whose own dispatches must
    // not count as the cases' below.
    let [q, k, v] = qkv([1, 1, 16, 16, 40, 40], DType::F16, 59).map(|t| t.to(Device::Xpu).unwrap());
    q.scaled_dot_product_attention(&k, &v, None, None).unwrap();
    for (ci, &[lq, lk, d, dv, ramp]) in CASES.iter().enumerate() {
        let [q, k, v] = qkv([1, 3, lq, lk, d, dv], DType::F16, 60 + ci as u64);
        let f16 = |x: Vec<f32>, shape: &[usize]| {
            let t = xpu::Tensor::from_vec(x, shape, Device::Cpu).unwrap();
            t.to_dtype(DType::F16).unwrap()
        };
        let (q, k) = match ramp {
            1 => {
                let r: Vec<f32> = (0..lk).map(|j| 1.0 + j as f32 / 4.0).collect();
                (q, k.mul(&f16(r, &[lk, 1])).unwrap())
            }
            2 => {
                // Scores: 0.01 noise, plus 4 * 14.2 / sqrt(40) ~ 9 for the last key.
                let tenth = f16(vec![0.1], &[1]);
                let mut e0 = vec![0.0; d];
                e0[0] = 4.0;
                let mut last = vec![0.0; lk * d];
                last[(lk - 1) * d] = 14.2;
                (
                    q.mul(&tenth).unwrap().add(&f16(e0, &[d])).unwrap(),
                    k.mul(&tenth).unwrap().add(&f16(last, &[lk, d])).unwrap(),
                )
            }
            _ => (q, k),
        };
        let want = reference(&q, &k, &v, None, 1.0 / (d as f64).sqrt());
        // Even cases take contiguous `[B, H, L, D]` copies; odd ones read `[B, L, H, D]`
        // storage through `[B, H, L, D]` views made on the Xpu.
        let [qx, kx, vx] = [&q, &k, &v].map(|t| {
            let x = t.contiguous().unwrap().to(Device::Xpu).unwrap();
            if ci % 2 == 1 {
                let blhd = x.transpose(1, 2).unwrap().contiguous().unwrap();
                blhd.transpose(1, 2).unwrap()
            } else {
                x
            }
        });
        assert_eq!(kx.is_contiguous(), ci % 2 == 0);
        xpu::synchronize().unwrap();
        xpu::xpu_profile().unwrap();
        let y = qx
            .scaled_dot_product_attention(&kx, &vx, None, None)
            .unwrap();
        let got = values(&y.to(Device::Cpu).unwrap());
        let rows = xpu::xpu_profile()
            .unwrap()
            .expect("the profiler runs (XPU_PROFILE=1 and timestamp queries)");
        let what = format!("case {ci}: {lq}x{lk} head dims {d}/{dv}");
        let t = tol(DType::F16);
        assert_close(&what, &got, &want, t, t);
        let coop = rows.iter().any(|r| r.kernel.contains("attention_coop16"));
        if let Some(want) = tensor_cores() {
            assert_eq!(coop, want, "{what}: kernels {rows:?}");
        }
    }
}

#[test]
fn every_form_matches_the_reference() {
    let _g = xpu_lock();
    if !common::xpu() {
        return;
    }
    if std::env::var_os("XPU_TEST_COOP_CHILD").is_some() {
        run_cases();
        return;
    }
    // Bits: 1 prefetch, 2 the 128-row layout, 4 one-pass, 8 lean.
    for form in (0..8).chain([8, 10, 12, 14]) {
        let bit = |b: usize| if form & b != 0 { "1" } else { "0" };
        common::rerun_profiled(
            NAME,
            &[
                ("XPU_TEST_COOP_CHILD", "1".as_ref()),
                ("XPU_ATTN_PREFETCH", bit(1).as_ref()),
                ("XPU_ATTN_ROWS128", bit(2).as_ref()),
                ("XPU_ATTN_ONEPASS", bit(4).as_ref()),
                ("XPU_ATTN_LEAN", bit(8).as_ref()),
            ],
        );
    }
}
