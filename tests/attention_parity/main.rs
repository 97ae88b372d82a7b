//! Scaled dot-product attention: Cpu (fused and unfused) against a materialised f64 softmax
//! reference, Xpu against Cpu; masks (boolean and additive, broadcast), fully masked rows,
//! empty inputs, strided (diffusers-style transposed) views, every float dtype, head dims
//! 40..160, self- and cross-attention; causal and grouped-query attention against PyTorch's
//! `is_causal` and `enable_gqa`; argument errors.

mod causal;
#[path = "../common/mod.rs"]
mod common;
mod coop;
mod errors;
mod gqa;
mod masks;

use common::{assert_close, eps, randn, values, FLOATS};
use std::sync::Mutex;
use xpu::{DType, Device, Error, Tensor};

/// Serialises the tests that use the Xpu, so the allocator's peak in
/// `xpu_memory_stays_linear_in_sequence` sees only its own op.
static XPU_LOCK: Mutex<()> = Mutex::new(());

fn xpu_lock() -> std::sync::MutexGuard<'static, ()> {
    XPU_LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

/// `softmax(q·kᵀ·scale + mask)·v` in f64 over row-major values; `mask` is additive and already
/// broadcast to `[heads, lq, lk]` (`-inf` drops). All-masked rows give zeros (PyTorch >= 2.5).
struct Ref<'a> {
    q: &'a [f64],
    k: &'a [f64],
    v: &'a [f64],
    mask: Option<&'a [f64]>,
    heads: usize,
    lq: usize,
    lk: usize,
    d: usize,
    dv: usize,
    scale: f64,
}

impl Ref<'_> {
    fn run(&self) -> Vec<f64> {
        let (lq, lk, d, dv) = (self.lq, self.lk, self.d, self.dv);
        let mut out = vec![0.0; self.heads * lq * dv];
        for h in 0..self.heads {
            for i in 0..lq {
                let qi = &self.q[(h * lq + i) * d..][..d];
                let s: Vec<f64> = (0..lk)
                    .map(|j| {
                        let kj = &self.k[(h * lk + j) * d..][..d];
                        let dot: f64 = qi.iter().zip(kj).map(|(a, b)| a * b).sum();
                        dot * self.scale + self.mask.map_or(0.0, |m| m[(h * lq + i) * lk + j])
                    })
                    .collect();
                let max = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                if max == f64::NEG_INFINITY {
                    continue;
                }
                let e: Vec<f64> = s.iter().map(|x| (x - max).exp()).collect();
                let sum: f64 = e.iter().sum();
                let o = &mut out[(h * lq + i) * dv..][..dv];
                for (j, w) in e.iter().enumerate() {
                    let vj = &self.v[(h * lk + j) * dv..][..dv];
                    for (oc, vc) in o.iter_mut().zip(vj) {
                        *oc += w / sum * vc;
                    }
                }
            }
        }
        out
    }
}

/// Tolerance for an attention output (|v| ~ 1): f32 accumulation error plus one rounding.
fn tol(dtype: DType) -> f64 {
    if dtype == DType::F32 {
        2e-5
    } else {
        2.0 * eps(dtype)
    }
}

/// q, k, v for `[B, H, Lq, Lk, D, Dv]` in diffusers' layout: made `[B, L, H, D]` and viewed
/// `[B, H, L, D]` by a transpose on the Cpu (moved with `Tensor::to`, they keep their strides;
/// see also `qkv_on`).
fn qkv(dims: [usize; 6], dtype: DType, seed: u64) -> [Tensor; 3] {
    qkv_on(dims, dtype, seed, Device::Cpu)
}

/// `qkv` on `device`: the same values, the transposed views taken there after the move.
fn qkv_on(
    [b, h, lq, lk, d, dv]: [usize; 6],
    dtype: DType,
    seed: u64,
    device: Device,
) -> [Tensor; 3] {
    let view = |l: usize, dd: usize, s: u64| {
        let x = randn(&[b, l, h, dd], dtype, s).to(device).unwrap();
        x.transpose(1, 2).unwrap()
    };
    [
        view(lq, d, seed),
        view(lk, d, seed + 1),
        view(lk, dv, seed + 2),
    ]
}

fn reference(q: &Tensor, k: &Tensor, v: &Tensor, mask: Option<&Tensor>, scale: f64) -> Vec<f64> {
    let r = q.rank();
    let (lq, d) = (q.shape()[r - 2], q.shape()[r - 1]);
    let (lk, dv) = (k.shape()[r - 2], v.shape()[r - 1]);
    let heads = q.shape()[..r - 2].iter().product();
    let mask = mask.map(|m| {
        let mut full = q.shape()[..r - 2].to_vec();
        full.extend([lq, lk]);
        let mv = values(&m.broadcast_to(&full).unwrap());
        if m.dtype() == DType::U8 {
            mv.iter()
                .map(|&x| if x != 0.0 { 0.0 } else { f64::NEG_INFINITY })
                .collect()
        } else {
            mv
        }
    });
    Ref {
        q: &values(q),
        k: &values(k),
        v: &values(v),
        mask: mask.as_deref(),
        heads,
        lq,
        lk,
        d,
        dv,
        scale,
    }
    .run()
}

/// Cpu fused and unfused against the f64 reference over `cases` (`[Lq, Lk, D, Dv]`), each dtype.
fn check_cpu_reference(cases: &[[usize; 4]]) {
    for &dtype in &FLOATS {
        for &[lq, lk, d, dv] in cases {
            let [q, k, v] = qkv([2, 3, lq, lk, d, dv], dtype, 11);
            let scale = 1.0 / (d as f64).sqrt();
            let want = reference(&q, &k, &v, None, scale);
            let what = format!("{dtype} lq {lq} lk {lk} d {d} dv {dv}");
            let fused = q.scaled_dot_product_attention(&k, &v, None, None).unwrap();
            assert_eq!(fused.shape(), &[2, 3, lq, dv]);
            assert_eq!(fused.dtype(), dtype);
            let t = tol(dtype);
            assert_close(&format!("fused {what}"), &values(&fused), &want, t, t);
            let unfused = q
                .scaled_dot_product_attention_unfused(&k, &v, None, None)
                .unwrap();
            assert_close(&format!("unfused {what}"), &values(&unfused), &want, t, t);
        }
    }
}

/// seq 1, 77, 257 (self and cross), every head dim the UNet uses, Dv != D, odd sizes.
const CASES: [[usize; 4]; 8] = [
    [1, 1, 40, 40],
    [77, 77, 64, 64],
    [257, 77, 40, 40],
    [257, 257, 80, 80],
    [33, 77, 160, 160],
    [65, 19, 128, 96],
    [7, 130, 5, 3],
    [1, 257, 160, 40],
];

#[test]
fn cpu_matches_materialised_reference() {
    check_cpu_reference(&CASES);
}

#[test]
fn cpu_fallback_matches_materialised_reference() {
    use xpu::cpu::{with_simd_level, SimdLevel};
    with_simd_level(SimdLevel::Fallback, || check_cpu_reference(&CASES[..6]));
}

/// The AVX2 kernels (the default on CPUs without AVX-512, forced here so AVX-512 machines test
/// them too), masks included.
#[test]
fn cpu_avx2_matches_materialised_reference() {
    use xpu::cpu::{with_simd_level, SimdLevel};
    with_simd_level(SimdLevel::Avx2, || {
        check_cpu_reference(&CASES);
        masks::check_masks(Device::Cpu);
    });
}

/// Xpu fused attention against Cpu fused attention: seq 1, 7, 65, 77, 130, 257, self and cross,
/// head dims 2..160, Dv != D, diffusers' transposed views, each dtype.
#[test]
fn xpu_matches_cpu() {
    let _g = xpu_lock();
    if !common::xpu() {
        return;
    }
    // (f16 cases with even head dims up to 80 take the tensor-core kernel where the adapter
    // has one: several 64-row query tiles, odd key tails, Dv != D.)
    let cases: [[usize; 4]; 10] = [
        [1, 1, 40, 40],
        [77, 77, 64, 64],
        [257, 77, 40, 40],
        [257, 257, 80, 80],
        [33, 77, 160, 160],
        [65, 19, 128, 96],
        [40, 50, 5, 3],
        [65, 257, 64, 24],
        [7, 63, 2, 2],
        [130, 33, 48, 16],
    ];
    for &dtype in &FLOATS {
        for &[lq, lk, d, dv] in &cases {
            let [q, k, v] = qkv([1, 2, lq, lk, d, dv], dtype, 21);
            let want = values(&q.scaled_dot_product_attention(&k, &v, None, None).unwrap());
            let (qx, kx, vx) = (
                q.to(Device::Xpu).unwrap(),
                k.to(Device::Xpu).unwrap(),
                v.to(Device::Xpu).unwrap(),
            );
            // Read in place: the same transposed views on the Xpu.
            let [q2, k2, v2] = [&qx, &kx, &vx].map(|t| {
                let s = t.shape().to_vec();
                t.reshape(&[s[0], s[1], s[2], s[3]])
                    .unwrap()
                    .transpose(1, 2)
                    .unwrap()
                    .contiguous()
                    .unwrap()
                    .transpose(1, 2)
                    .unwrap()
            });
            let got = q2
                .scaled_dot_product_attention(&k2, &v2, None, None)
                .unwrap();
            assert_eq!(got.shape(), &[1, 2, lq, dv]);
            assert_eq!(got.dtype(), dtype);
            let t = tol(dtype);
            let what = format!("xpu {dtype} lq {lq} lk {lk} d {d} dv {dv}");
            assert_close(&what, &values(&got), &want, t, t);
        }
    }
}

/// Ranks other than 4: `[N, L, D]`, and rank 5 with head dims that cannot be merged (a
/// permuted view), on every device; plus Dv above the Xpu kernel's register budget (unfused
/// fallback there) and D above the head-dim chunk.
#[test]
fn other_ranks_and_large_head_dims() {
    let _g = xpu_lock();
    for device in common::devices() {
        let cases: [(Vec<usize>, usize, usize, usize); 4] = [
            (vec![6], 17, 24, 24),
            (vec![2, 3, 2], 9, 16, 8),
            (vec![2], 13, 200, 24),
            (vec![2], 13, 16, 176),
        ];
        for (lead, l, d, dv) in cases {
            let mk = |cols: usize, seed: u64, dev: Device| {
                // Lead dims reversed in memory, then permuted back: non-mergeable strides.
                let mut shape: Vec<usize> = lead.iter().rev().copied().collect();
                shape.extend([l, cols]);
                let t = randn(&shape, DType::F32, seed).to(dev).unwrap();
                let r = lead.len();
                let mut perm: Vec<usize> = (0..r).rev().collect();
                perm.extend([r, r + 1]);
                t.permute(&perm).unwrap()
            };
            let (q, k, v) = (
                mk(d, 1, Device::Cpu),
                mk(d, 2, Device::Cpu),
                mk(dv, 3, Device::Cpu),
            );
            let want = reference(&q, &k, &v, None, 1.0 / (d as f64).sqrt());
            let (qd, kd, vd) = (mk(d, 1, device), mk(d, 2, device), mk(dv, 3, device));
            let got = qd
                .scaled_dot_product_attention(&kd, &vd, None, None)
                .unwrap();
            let mut shape = lead.clone();
            shape.extend([l, dv]);
            assert_eq!(got.shape(), &shape[..]);
            let what = format!("{device} lead {lead:?} l {l} d {d} dv {dv}");
            assert_close(&what, &values(&got), &want, 2e-5, 2e-5);
        }
    }
}

/// The fused Xpu kernel's peak allocator memory over a 4096-token self-attention stays
/// O(seq * head_dim) (the output), far below the 4096^2 score matrix the unfused path needs.
#[test]
fn xpu_memory_stays_linear_in_sequence() {
    let _g = xpu_lock();
    if !common::xpu() {
        return;
    }
    let (l, d) = (4096, 40);
    let [q, k, v] =
        [1, 2, 3].map(|s| Tensor::randn(&[1, 1, l, d], DType::F32, Device::Xpu, s).unwrap());
    xpu::synchronize().unwrap();
    xpu::reset_peak_memory_stats().unwrap();
    let before = xpu::memory_stats(Device::Xpu).unwrap().allocated;
    let out = q.scaled_dot_product_attention(&k, &v, None, None).unwrap();
    xpu::synchronize().unwrap();
    let peak = xpu::memory_stats(Device::Xpu).unwrap().peak_allocated - before;
    let linear = (l * d * 4) as u64; // one f32 [seq, head_dim] tensor
    let scores = (l * l * 4) as u64;
    eprintln!("fused attention {l}x{l}x{d}: allocator peak {peak} B (scores would be {scores} B)");
    assert!(
        peak <= 4 * linear,
        "peak {peak} B above 4 x {linear} B (seq x head_dim f32)"
    );
    assert!(peak * 16 < scores, "peak {peak} B vs {scores} B of scores");
    // And the result is right: compare a few rows with the Cpu.
    let rows = [0, 1, 2047, 4095];
    let want = values(
        &q.to(Device::Cpu)
            .unwrap()
            .scaled_dot_product_attention(
                &k.to(Device::Cpu).unwrap(),
                &v.to(Device::Cpu).unwrap(),
                None,
                None,
            )
            .unwrap(),
    );
    let got = values(&out);
    for r in rows {
        assert_close(
            &format!("row {r}"),
            &got[r * d..(r + 1) * d],
            &want[r * d..(r + 1) * d],
            2e-5,
            2e-5,
        );
    }
}

/// `FusedQkv` against three separate `Linear` layers (Cpu prepacked and Xpu, each dtype), its
/// outputs as zero-copy views fed straight into attention, and its argument checks.
#[test]
fn fused_qkv_matches_separate_linears() {
    use xpu::nn::{FusedQkv, Linear};
    let _g = xpu_lock();
    let (b, l, c, heads) = (2, 19, 40, 5);
    for device in common::devices() {
        for &dtype in &FLOATS {
            let w = |s| {
                randn(&[c, c], dtype, s)
                    .mul_scalar(0.2)
                    .unwrap()
                    .to(device)
                    .unwrap()
            };
            let (wq, wk, wv) = (w(1), w(2), w(3));
            let bk = randn(&[c], dtype, 4).to(device).unwrap();
            let x = randn(&[b, l, c], dtype, 5).to(device).unwrap();
            let fused = FusedQkv::new(&wq, &wk, &wv, None, Some(&bk), None, heads).unwrap();
            let (q, k, v) = fused.forward(&x).unwrap();
            let t = if dtype == DType::F32 {
                1e-5
            } else {
                4.0 * eps(dtype)
            };
            for (name, got, lin) in [
                ("q", &q, Linear::new(wq.clone(), None).unwrap()),
                ("k", &k, Linear::new(wk.clone(), Some(bk.clone())).unwrap()),
                ("v", &v, Linear::new(wv.clone(), None).unwrap()),
            ] {
                assert_eq!(got.shape(), &[b, heads, l, c / heads]);
                assert!(
                    !got.is_contiguous(),
                    "{name} should be a view of the one product"
                );
                let want = lin
                    .forward(&x)
                    .unwrap()
                    .reshape(&[b, l, heads, c / heads])
                    .unwrap()
                    .transpose(1, 2)
                    .unwrap();
                let what = format!("{device} {dtype} FusedQkv {name}");
                assert_close(&what, &values(got), &values(&want), t, t);
            }
            let o = q.scaled_dot_product_attention(&k, &v, None, None).unwrap();
            let want = [&q, &k, &v].map(|t| t.contiguous().unwrap());
            let o2 = want[0]
                .scaled_dot_product_attention(&want[1], &want[2], None, None)
                .unwrap();
            assert_eq!(
                values(&o),
                values(&o2),
                "{device} {dtype} attention on views"
            );
            let moved = fused.to(Device::Cpu).unwrap().to_dtype(DType::F32).unwrap();
            let (q32, _, _) = moved
                .forward(&x.to(Device::Cpu).unwrap().to_dtype(DType::F32).unwrap())
                .unwrap();
            assert_eq!(q32.shape(), &[b, heads, l, c / heads]);
        }
    }
    let w = randn(&[8, 6], DType::F32, 1);
    assert!(matches!(
        FusedQkv::new(&w, &w, &w, None, None, None, 3),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        FusedQkv::new(&w, &randn(&[8, 5], DType::F32, 1), &w, None, None, None, 2),
        Err(Error::ShapeMismatch { .. })
    ));
    let f = FusedQkv::new(&w, &w, &w, None, None, None, 2).unwrap();
    assert!(matches!(
        f.forward(&randn(&[3, 6], DType::F32, 2)),
        Err(Error::ShapeMismatch { .. })
    ));
}
