//! The bf16 attention kernels (AMX, AVX512_BF16 dot products) against the materialised-softmax
//! reference (`scaled_dot_product_attention_unfused` in f32 on the same bf16-rounded inputs).
//!
//! Every case runs every kernel this CPU has for bf16 (AMX, AVX512_BF16 dot products, the FMA
//! kernels), each forced through the autotuner's configuration, and asserts through
//! `autotune::trace` that the forced kernel ran, so these tests do real work on every machine
//! and never pass by skipping.

use crate::autotune::trace;
use crate::config::scoped;
use crate::{DType, Device, Tensor};

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

/// Runs the fused bf16 attention on every kernel this CPU has, checks that each ran and that
/// its result matches the f32 reference (tolerance 2e-2 of max |out|, for P rounded to bf16);
/// returns the last output.
fn check(q: &Tensor, k: &Tensor, v: &Tensor, mask: Option<&Tensor>, what: &str) -> Vec<f32> {
    let (kernels, _) = super::attention_kernels(DType::BF16, q.shape()[q.rank() - 2]);
    let mut last = Vec::new();
    for kernel in kernels {
        let name = kernel.name();
        let (out, ran) = trace(|| {
            scoped(
                |c| c.autotune.force("cpu_attention", name),
                || q.scaled_dot_product_attention(k, v, mask, None).unwrap(),
            )
        });
        let ran: Vec<&str> = ran.iter().map(|c| c.candidate.as_str()).collect();
        assert_eq!(ran, [name], "{what}");
        last = check_output(q, k, v, mask, &out, &format!("{what} on {name}"));
    }
    last
}

fn check_output(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    out: &Tensor,
    what: &str,
) -> Vec<f32> {
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
    let (got, want) = (f32s(out), f32s(&want));
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
fn bf16_matches_reference_over_shapes() {
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
fn bf16_large_scores_rescale() {
    // Spread scores: row maxima move across key blocks, exercising the output rescale.
    let q = input(1, 2, 65, 64, 3.0, false, 7);
    let (k, v) = (
        input(1, 2, 257, 64, 3.0, false, 8),
        input(1, 2, 257, 64, 1.0, false, 9),
    );
    check(&q, &k, &v, None, "large scores");
}

#[test]
fn bf16_transposed_views() {
    let q = input(2, 3, 33, 40, 1.0, true, 21);
    let (k, v) = (
        input(2, 3, 77, 40, 1.0, true, 22),
        input(2, 3, 77, 40, 1.0, true, 23),
    );
    assert!(!q.is_contiguous());
    check(&q, &k, &v, None, "transposed [B, L, H, D] views");
}

#[test]
fn bf16_bool_mask_and_fully_masked_row() {
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
fn bf16_additive_mask() {
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
fn bf16_result_independent_of_threads() {
    let q = input(1, 3, 257, 40, 1.0, false, 51);
    let (k, v) = (
        input(1, 3, 257, 40, 1.0, false, 52),
        input(1, 3, 257, 40, 1.0, false, 53),
    );
    let many = check(&q, &k, &v, None, "default threads");
    for threads in [1, 2] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .unwrap();
        let got = pool.install(|| check(&q, &k, &v, None, &format!("{threads} threads")));
        assert_eq!(many, got, "{threads} threads");
    }
}

#[test]
fn bf16_scores_rising_across_key_blocks() {
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

#[test]
fn bf16_head_dims_key_and_query_lengths() {
    // Odd head dims (a half pair of Q·Kᵀ), odd key counts (a half key pair of P·V), partial,
    // whole and several key blocks, partial query tiles.
    let mut n = 0u64;
    for d in [1usize, 3, 33, 40, 64, 80, 160] {
        for lk in [1usize, 7, 63, 64, 65, 77, 257] {
            for lq in [1usize, 7, 65] {
                let h = 1 + (n % 2) as usize;
                let q = input(1, h, lq, d, 1.0, false, 1000 + 3 * n);
                let k = input(1, h, lk, d, 1.0, false, 1001 + 3 * n);
                let v = input(1, h, lk, d, 1.0, false, 1002 + 3 * n);
                check(&q, &k, &v, None, &format!("h{h} lq{lq} lk{lk} d{d}"));
                n += 1;
            }
        }
    }
}

#[test]
fn bf16_value_widths() {
    // Value columns of the P·V passes: a lone half vector (8), whole vectors plus a half (24,
    // 40, 56), four and a half (72), passes split 3 + 2 (80), 4 + 3 + 3 (160), odd widths.
    for (i, dv) in [1usize, 3, 8, 16, 24, 33, 40, 56, 64, 72, 80, 112, 160]
        .into_iter()
        .enumerate()
    {
        for lk in [77usize, 130] {
            let seed = 2000 + 10 * i as u64 + lk as u64;
            let q = input(2, 1, 13, 40, 1.0, false, seed);
            let k = input(2, 1, lk, 40, 1.0, false, seed + 1);
            let v = input(2, 1, lk, dv, 1.0, false, seed + 2);
            check(&q, &k, &v, None, &format!("dv{dv} lk{lk}"));
        }
    }
}

#[test]
fn bf16_transposed_views_odd_sizes() {
    for (d, lq, lk) in [(33usize, 7usize, 65usize), (80, 65, 7), (3, 1, 257)] {
        let q = input(2, 3, lq, d, 1.0, true, 71);
        let (k, v) = (
            input(2, 3, lk, d, 1.0, true, 72),
            input(2, 3, lk, d, 1.0, true, 73),
        );
        assert!(!k.is_contiguous() && !v.is_contiguous());
        check(&q, &k, &v, None, &format!("transposed d{d} lq{lq} lk{lk}"));
    }
}

#[test]
fn bf16_masks_on_odd_key_counts() {
    for (lq, lk) in [(7usize, 65usize), (65, 7), (13, 1)] {
        let (b, h, d) = (2, 2, 40);
        let seed = 100 * lk as u64;
        let q = input(b, h, lq, d, 1.0, false, seed);
        let (k, v) = (
            input(b, h, lk, d, 1.0, false, seed + 1),
            input(b, h, lk, d, 1.0, false, seed + 2),
        );
        // Boolean [Lq, Lk]: row 3 fully masked, the last key kept on even rows only.
        let m: Vec<u8> = (0..lq * lk)
            .map(|i| {
                let (r, j) = (i / lk, i % lk);
                u8::from(r != 3 && (j + 1 < lk || r % 2 == 0) && (i * 5 + r) % 4 != 0)
            })
            .collect();
        let mask = Tensor::from_vec(m, &[lq, lk], Device::Cpu).unwrap();
        let out = check(&q, &k, &v, Some(&mask), &format!("bool lq{lq} lk{lk}"));
        // Additive per-head [B, H, Lq, Lk]: row 1 of every head all -inf.
        let m: Vec<f32> = (0..b * h * lq * lk)
            .map(|i| match ((i / lk) % lq, i % 7) {
                (1, _) | (_, 0) => f32::NEG_INFINITY,
                (_, j) => (j as f32 - 3.0) * 1.3,
            })
            .collect();
        let amask = Tensor::from_vec(m, &[b, h, lq, lk], Device::Cpu)
            .unwrap()
            .to_dtype(DType::BF16)
            .unwrap();
        let aout = check(&q, &k, &v, Some(&amask), &format!("additive lq{lq} lk{lk}"));
        for bh in 0..b * h {
            let zero = |o: &[f32], r: usize| o[(bh * lq + r) * d..][..d].iter().all(|&x| x == 0.0);
            assert!(zero(&aout, 1), "lq{lq} lk{lk}: -inf row must be zeros");
            if lq > 3 {
                assert!(zero(&out, 3), "lq{lq} lk{lk}: masked row must be zeros");
            }
        }
    }
}
