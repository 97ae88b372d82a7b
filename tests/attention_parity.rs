//! Scaled dot-product attention: Cpu (fused and unfused) against a materialised f64 softmax
//! reference, Xpu against Cpu; masks (boolean and additive, broadcast), fully masked rows,
//! empty inputs, strided (diffusers-style transposed) views, every float dtype, head dims
//! 40..160, self- and cross-attention; argument errors.

mod common;

use common::{assert_close, eps, randn, values, FLOATS};
use xpu::{DType, Device, Error, Tensor};

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
/// `[B, H, L, D]` by a transpose.
fn qkv([b, h, lq, lk, d, dv]: [usize; 6], dtype: DType, seed: u64) -> [Tensor; 3] {
    let view =
        |l: usize, dd: usize, s: u64| randn(&[b, l, h, dd], dtype, s).transpose(1, 2).unwrap();
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

/// Boolean and additive masks with broadcasting, incl. fully masked rows (zeros) and an
/// explicit scale.
fn check_masks(device: Device) {
    for &dtype in &FLOATS {
        let (b, h, lq, lk, d) = (2, 2, 37, 45, 40);
        let [q, k, v] = qkv([b, h, lq, lk, d, d], dtype, 5);
        let (q, k, v) = (
            q.to(device).unwrap(),
            k.to(device).unwrap(),
            v.to(device).unwrap(),
        );
        // Boolean [B, 1, Lq, Lk]: a causal-ish pattern plus one fully masked row.
        let keep: Vec<u8> = (0..b * lq * lk)
            .map(|i| {
                let (row, j) = ((i / lk) % lq, i % lk);
                u8::from(row != 3 && (j <= row + 4 || j % 7 == 0))
            })
            .collect();
        let bool_mask = Tensor::from_vec(keep, &[b, 1, lq, lk], device).unwrap();
        // Additive [Lk] (broadcast over batch, heads and rows), in q's dtype.
        let add = randn(&[lk], dtype, 9).to(device).unwrap();
        for (mask, scale) in [(&bool_mask, None), (&add, Some(0.3))] {
            let s = scale.unwrap_or(1.0 / (d as f64).sqrt());
            let want = reference(&q, &k, &v, Some(mask), s);
            let what = format!("{device} {dtype} mask {}", mask.dtype());
            let fused = q
                .scaled_dot_product_attention(&k, &v, Some(mask), scale)
                .unwrap();
            let got = values(&fused);
            assert_close(
                &format!("fused {what}"),
                &got,
                &want,
                tol(dtype),
                tol(dtype),
            );
            let unfused = q
                .scaled_dot_product_attention_unfused(&k, &v, Some(mask), scale)
                .unwrap();
            assert_close(
                &format!("unfused {what}"),
                &values(&unfused),
                &want,
                tol(dtype),
                tol(dtype),
            );
            if mask.dtype() == DType::U8 {
                // Row 3 of every batch item and head has every key masked out: zeros.
                for bh in 0..b * h {
                    assert!(
                        got[(bh * lq + 3) * d..][..d].iter().all(|&x| x == 0.0),
                        "{what}"
                    );
                }
            }
        }
    }
}

#[test]
fn masks_on_cpu() {
    check_masks(Device::Cpu);
}

#[test]
fn masks_on_xpu() {
    if common::xpu() {
        check_masks(Device::Xpu);
    }
}

#[test]
fn empty_inputs_do_not_panic() {
    for device in common::devices() {
        for &(lq, lk) in &[(0, 5), (4, 0), (0, 0)] {
            let q = Tensor::zeros(&[1, 2, lq, 8], DType::F32, device).unwrap();
            let k = Tensor::zeros(&[1, 2, lk, 8], DType::F32, device).unwrap();
            let v = Tensor::zeros(&[1, 2, lk, 6], DType::F32, device).unwrap();
            for fused in [true, false] {
                let out = if fused {
                    q.scaled_dot_product_attention(&k, &v, None, None)
                } else {
                    q.scaled_dot_product_attention_unfused(&k, &v, None, None)
                }
                .unwrap();
                assert_eq!(out.shape(), &[1, 2, lq, 6]);
                assert!(values(&out).iter().all(|&x| x == 0.0));
            }
        }
        // D = 0: every score is 0, so each row is the mean of v (default scale 1).
        let q = Tensor::zeros(&[1, 2, 3, 0], DType::F32, device).unwrap();
        let k = Tensor::zeros(&[1, 2, 4, 0], DType::F32, device).unwrap();
        let v = randn(&[1, 2, 4, 5], DType::F32, 3).to(device).unwrap();
        let vv = values(&v);
        let want: Vec<f64> = (0..2 * 3 * 5)
            .map(|i| {
                let (h, c) = (i / 15, i % 5);
                (0..4).map(|j| vv[(h * 4 + j) * 5 + c]).sum::<f64>() / 4.0
            })
            .collect();
        for fused in [true, false] {
            let out = if fused {
                q.scaled_dot_product_attention(&k, &v, None, None)
            } else {
                q.scaled_dot_product_attention_unfused(&k, &v, None, None)
            }
            .unwrap();
            assert_close(
                &format!("{device} D=0 fused={fused}"),
                &values(&out),
                &want,
                1e-6,
                1e-6,
            );
        }
        let q = Tensor::zeros(&[0, 2, 3, 8], DType::F16, device).unwrap();
        let out = q.scaled_dot_product_attention(&q, &q, None, None).unwrap();
        assert_eq!(out.shape(), &[0, 2, 3, 8]);
    }
}

#[test]
fn bad_arguments_are_errors() {
    let q = randn(&[1, 2, 3, 8], DType::F32, 1);
    let k = randn(&[1, 2, 5, 8], DType::F32, 2);
    let v = randn(&[1, 2, 5, 4], DType::F32, 3);
    assert!(q.scaled_dot_product_attention(&k, &v, None, None).is_ok());
    let shape_err = |r: xpu::Result<Tensor>| matches!(r, Err(Error::ShapeMismatch { .. }));
    assert!(shape_err(q.scaled_dot_product_attention(
        &randn(&[1, 2, 5, 7], DType::F32, 2),
        &v,
        None,
        None
    )));
    assert!(shape_err(q.scaled_dot_product_attention(
        &k,
        &randn(&[1, 2, 6, 4], DType::F32, 3),
        None,
        None
    )));
    assert!(shape_err(q.scaled_dot_product_attention(
        &randn(&[2, 2, 5, 8], DType::F32, 2),
        &v,
        None,
        None
    )));
    let q2 = randn(&[3, 8], DType::F32, 1);
    assert!(shape_err(
        q2.scaled_dot_product_attention(&q2, &q2, None, None)
    ));
    let bad_mask = Tensor::ones(&[4, 5], DType::U8, Device::Cpu).unwrap();
    assert!(shape_err(q.scaled_dot_product_attention(
        &k,
        &v,
        Some(&bad_mask),
        None
    )));
    let i32_mask = Tensor::ones(&[3, 5], DType::I32, Device::Cpu).unwrap();
    assert!(matches!(
        q.scaled_dot_product_attention(&k, &v, Some(&i32_mask), None),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        q.scaled_dot_product_attention(&k.to_dtype(DType::F16).unwrap(), &v, None, None),
        Err(Error::DTypeMismatch { .. })
    ));
    let qi = Tensor::ones(&[1, 2, 3, 8], DType::I32, Device::Cpu).unwrap();
    assert!(matches!(
        qi.scaled_dot_product_attention(&qi, &qi, None, None),
        Err(Error::UnsupportedDType { .. })
    ));
    assert!(matches!(
        q.scaled_dot_product_attention(&k, &v, None, Some(f64::NAN)),
        Err(Error::InvalidArgument { .. })
    ));
}
