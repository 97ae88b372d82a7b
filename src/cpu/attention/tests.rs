//! The bf16 attention's AMX path against the materialised-softmax reference
//! (`scaled_dot_product_attention_unfused` in f32 on the same bf16-rounded inputs).
//!
//! Every case asserts which kernel ran: the AMX kernel where this process may use it (AMX
//! granted, `bf16_method() == Amx`, AVX512-BF16, `XPU_CPU_ATTN` not `fma`), otherwise (said
//! once on stderr) the FMA kernel, whose result is checked the same way, so these tests do real
//! work on every machine and never pass by skipping.

use super::LAST_AMX;
use crate::{DType, Device, Tensor};
use std::sync::Once;

/// Whether bf16 attention must run on AMX in this process.
fn expect_amx() -> bool {
    #[cfg(target_arch = "x86_64")]
    let on = super::amx_enabled() && super::amx::usable(super::Kernels::current());
    #[cfg(not(target_arch = "x86_64"))]
    let on = false;
    static SAY: Once = Once::new();
    if !on {
        SAY.call_once(|| {
            let why = crate::cpu::gemm::amx_unavailable_reason().unwrap_or("disabled");
            eprintln!("AMX attention unavailable ({why}): checking the FMA kernel instead");
        });
    }
    on
}

fn f32s(t: &Tensor) -> Vec<f32> {
    t.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap()
}

/// bf16 `[b, h, l, d]` normal values times `mul`; `transposed` makes it a `[b, l, h, d]` view.
fn input(b: usize, h: usize, l: usize, d: usize, mul: f64, transposed: bool, seed: u64) -> Tensor {
    let shape = if transposed {
        [b, l, h, d]
    } else {
        [b, h, l, d]
    };
    let t = Tensor::randn(&shape, DType::F32, Device::Cpu, seed)
        .unwrap()
        .affine(mul, 0.0)
        .unwrap()
        .to_dtype(DType::BF16)
        .unwrap();
    if transposed {
        t.transpose(1, 2).unwrap()
    } else {
        t
    }
}

/// Runs the fused bf16 attention, checks the kernel that ran and the result against the f32
/// reference (tolerance 2e-2 of max |out|, for P rounded to bf16); returns the output.
fn check(q: &Tensor, k: &Tensor, v: &Tensor, mask: Option<&Tensor>, what: &str) -> Vec<f32> {
    LAST_AMX.with(|c| c.set(None));
    let out = q.scaled_dot_product_attention(k, v, mask, None).unwrap();
    assert_eq!(LAST_AMX.with(|c| c.get()), Some(expect_amx()), "{what}");
    assert_eq!(out.dtype(), DType::BF16);
    let f = |t: &Tensor| t.to_dtype(DType::F32).unwrap();
    let fmask = mask.map(|m| {
        if m.dtype() == DType::U8 {
            m.clone()
        } else {
            f(m)
        }
    });
    let want = f(q)
        .scaled_dot_product_attention_unfused(&f(k), &f(v), fmask.as_ref(), None)
        .unwrap();
    assert_eq!(out.shape(), want.shape(), "{what}");
    let (got, want) = (f32s(&out), f32s(&want));
    let peak = want.iter().fold(0f32, |a, &x| a.max(x.abs()));
    let tol = 2e-2 * peak.max(1e-3);
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!(
            (g - w).abs() <= tol,
            "{what}: [{i}] got {g}, want {w} (tol {tol})"
        );
    }
    got
}

#[test]
fn amx_matches_reference_over_shapes() {
    const DS: [usize; 5] = [40, 64, 80, 160, 7];
    let mut n = 0;
    for (bi, &lq) in [1usize, 7, 33, 257].iter().enumerate() {
        for &lk in &[1usize, 13, 77, 257] {
            let (b, h, d) = (1 + bi % 2, 1 + n % 3, DS[n % DS.len()]);
            let dv = if n == 5 { 80 } else { d };
            let seed = 10 * n as u64;
            let q = input(b, h, lq, d, 1.0, false, seed);
            let k = input(b, h, lk, d, 1.0, false, seed + 1);
            let v = input(b, h, lk, dv, 1.0, false, seed + 2);
            check(
                &q,
                &k,
                &v,
                None,
                &format!("b{b} h{h} lq{lq} lk{lk} d{d} dv{dv}"),
            );
            n += 1;
        }
    }
    for d in [40, 64, 80, 160, 7] {
        let q = input(2, 2, 33, d, 1.0, false, 1);
        let (k, v) = (
            input(2, 2, 77, d, 1.0, false, 2),
            input(2, 2, 77, 40, 1.0, false, 3),
        );
        check(&q, &k, &v, None, &format!("d{d} dv40"));
    }
}

#[test]
fn amx_large_scores_rescale() {
    // Spread scores: row maxima move across key blocks, exercising the output rescale.
    let q = input(1, 2, 65, 64, 3.0, false, 7);
    let (k, v) = (
        input(1, 2, 257, 64, 3.0, false, 8),
        input(1, 2, 257, 64, 1.0, false, 9),
    );
    check(&q, &k, &v, None, "large scores");
}

#[test]
fn amx_transposed_views() {
    let q = input(2, 3, 33, 40, 1.0, true, 21);
    let (k, v) = (
        input(2, 3, 77, 40, 1.0, true, 22),
        input(2, 3, 77, 40, 1.0, true, 23),
    );
    assert!(!q.is_contiguous());
    check(&q, &k, &v, None, "transposed [B, L, H, D] views");
}

#[test]
fn amx_bool_mask_and_fully_masked_row() {
    let (lq, lk) = (33, 77);
    let q = input(2, 2, lq, 40, 1.0, false, 31);
    let (k, v) = (
        input(2, 2, lk, 40, 1.0, false, 32),
        input(2, 2, lk, 40, 1.0, false, 33),
    );
    // [Lq, Lk] broadcast over batch and heads; row 5 fully masked, others keep ~2/3 of keys.
    let m: Vec<u8> = (0..lq * lk)
        .map(|i| u8::from(i / lk != 5 && (i * 7 + i / lk) % 3 != 0))
        .collect();
    let mask = Tensor::from_vec(m, &[lq, lk], Device::Cpu).unwrap();
    let out = check(&q, &k, &v, Some(&mask), "bool mask");
    for bh in 0..4 {
        let row = &out[(bh * lq + 5) * 40..][..40];
        assert!(
            row.iter().all(|&x| x == 0.0),
            "fully masked row must be zeros"
        );
    }
}

#[test]
fn amx_additive_mask() {
    let (lq, lk) = (7, 257);
    let q = input(2, 3, lq, 64, 1.0, false, 41);
    let (k, v) = (
        input(2, 3, lk, 64, 1.0, false, 42),
        input(2, 3, lk, 64, 1.0, false, 43),
    );
    // [B, 1, Lq, Lk] bf16 additive mask with some -inf.
    let m: Vec<f32> = (0..2 * lq * lk)
        .map(|i| match i % 11 {
            0 => f32::NEG_INFINITY,
            j => (j as f32 - 5.0) * 0.7,
        })
        .collect();
    let mask = Tensor::from_vec(m, &[2, 1, lq, lk], Device::Cpu)
        .unwrap()
        .to_dtype(DType::BF16)
        .unwrap();
    check(&q, &k, &v, Some(&mask), "additive mask");
}

#[test]
fn amx_result_independent_of_threads() {
    let q = input(1, 3, 257, 40, 1.0, false, 51);
    let (k, v) = (
        input(1, 3, 257, 40, 1.0, false, 52),
        input(1, 3, 257, 40, 1.0, false, 53),
    );
    let many = check(&q, &k, &v, None, "default threads");
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    let one = pool.install(|| check(&q, &k, &v, None, "one thread"));
    assert_eq!(many, one);
}

#[test]
fn amx_scores_rising_across_key_blocks() {
    // Keys grow along the sequence, so each row's scores rise from one 128-key block to the
    // next: slowly in head 0 (the reference max is kept), steeply in head 1 (rows are redone
    // against a new max and rescaled); rows of negative queries fall instead.
    let (lq, lk, d) = (33, 3 * 128 + 5, 40);
    let wave = |i: usize| ((i as f32) * 0.737).sin();
    let q: Vec<f32> = (0..2 * lq * d)
        .map(|i| if (i / d) % 5 == 3 { -0.5 } else { 0.5 } + 0.3 * wave(i))
        .collect();
    let k: Vec<f32> = (0..2 * lk * d)
        .map(|i| {
            let (h, j) = (i / (lk * d), (i / d) % lk);
            let slope = if h == 0 { 0.5 } else { 3.0 };
            slope * j as f32 / 128.0 + 0.3 * wave(7 * i + 1)
        })
        .collect();
    let v: Vec<f32> = (0..2 * lk * d).map(|i| wave(3 * i + 2)).collect();
    let t = |x: Vec<f32>, l: usize| {
        Tensor::from_vec(x, &[1, 2, l, d], Device::Cpu)
            .unwrap()
            .to_dtype(DType::BF16)
            .unwrap()
    };
    let (q, k, v) = (t(q, lq), t(k, lk), t(v, lk));
    check(&q, &k, &v, None, "rising scores");
    // The same through the masked path: an additive ramp on top of plain keys.
    let m: Vec<f32> = (0..lq * lk)
        .map(|i| {
            let (r, j) = (i / lk, i % lk);
            if (r + j) % 13 == 0 {
                f32::NEG_INFINITY
            } else {
                (r % 4) as f32 * 4.0 * (j / 128) as f32
            }
        })
        .collect();
    let mask = Tensor::from_vec(m, &[lq, lk], Device::Cpu)
        .unwrap()
        .to_dtype(DType::BF16)
        .unwrap();
    let (k, v) = (
        input(1, 2, lk, d, 1.0, false, 61),
        input(1, 2, lk, d, 1.0, false, 62),
    );
    check(&q, &k, &v, Some(&mask), "rising mask");
}
