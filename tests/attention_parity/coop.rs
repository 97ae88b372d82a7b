//! The tensor-core attention (`attention_coop16.wgsl`): in a child process with the kernel
//! profiler on (it is created with the Xpu context, so the child starts with `XPU_PROFILE=1`),
//! f16 cases against the f64 reference, each checked for the kernel that served it: the
//! tensor-core kernel where the adapter has f16 cooperative matrices (its self-check passed;
//! the static rules, the autotuner off), the FMA kernel elsewhere, or with the autotuner's
//! `gpu_attention` candidate `fma` forced.
//!
//! On adapters without f16 cooperative matrices (lavapipe 22 in CI) the test covers the
//! routing, and the kernel's numbers need an adapter that has one (an NVIDIA GPU, or Mesa's
//! lavapipe 26 with `XPU_COOP16_ASSUME=1`). Where the subgroup size is neither fixed at 32 nor
//! at 8 lanes, either kernel may serve (the self-check decides), and only the numbers are
//! checked.

use super::common::{self, assert_close, values};
use super::{qkv, reference, tol, xpu_lock};
use xpu::{DType, Device};

const NAME: &str = "coop::tensor_core_attention_matches_the_reference";

/// `[Lq, Lk, D, Dv, ramp]`: head dims 40 (one and several workgroups of 64 query rows), 64, 80,
/// Dv != D, key tails of 1 and 13 past a block of 32, one query row, cross-attention to 77
/// tokens; `ramp` 1 scales key j by 1 + j/4, so each block's scores pass the earlier blocks'
/// maxima by far (the online row statistics change in every block); `ramp` 2 makes every score
/// near 0 but the last key's, about 9 higher (the last block raises every row's maximum, where
/// the earlier keys still weigh about 3%).
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

/// Which kernel this adapter's f16 attention should take by the static rule: `Some(true)` the
/// tensor cores, `Some(false)` the FMA kernel, `None` either (the self-check decides).
fn tensor_cores() -> Option<bool> {
    let f = xpu::xpu_features().unwrap();
    let coop = common::coop16::tensor_cores();
    match (coop, f.fixed_subgroup_size) {
        (false, _) => Some(false),
        (true, 8 | 32) => Some(true),
        (true, _) => None,
    }
}

/// Every case on the Xpu against the f64 reference, and the kernel that ran (`expect`: the
/// tensor cores or not, `None` either).
fn run_cases(expect: Option<bool>) {
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
        if let Some(want) = expect {
            assert_eq!(coop, want, "{what}: kernels {rows:?}");
        }
    }
}

#[test]
fn tensor_core_attention_matches_the_reference() {
    let _g = xpu_lock();
    if !common::xpu() || !common::coop16::in_profiled_child(NAME) {
        return;
    }
    use common::coop16::{fma_only, static_rules};
    static_rules(|| run_cases(tensor_cores()));
    // The FMA kernel serves every call where it is forced.
    fma_only(|| run_cases(Some(false)));
}
