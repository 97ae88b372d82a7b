//! The query-lane f32 kernel (`super::lanes`) against the row kernel (`super::avx512`) on the
//! same inputs, and both against the materialised-softmax path: odd query, key and value
//! sizes around the 32-query tile and 64-key block, masks with fully masked rows, transposed
//! views, f16 inputs widened to f32. Where the CPU lacks AVX-512 neither runs and the test
//! says so on stderr (the row kernels' other levels are covered in `tests/attention_parity`).

use crate::autotune::trace;
use crate::config::scoped;
use crate::cpu::simd::{Kernels, SimdLevel};
use crate::{DType, Device, Tensor};

fn randn(shape: &[usize], seed: u64) -> Tensor {
    Tensor::randn(shape, DType::F32, Device::Cpu, seed).expect("randn")
}

fn values(t: &Tensor) -> Vec<f32> {
    t.to_dtype(DType::F32)
        .and_then(|t| t.to_vec::<f32>())
        .expect("values")
}

/// Runs the fused attention with the row kernels or the query-lane kernel forced; returns the
/// output and whether the query-lane kernel ran.
fn run(q: &Tensor, k: &Tensor, v: &Tensor, mask: Option<&Tensor>, rows: bool) -> (Vec<f32>, bool) {
    let name = if rows { "fma_rows" } else { "fma_lanes" };
    let (out, ran) = trace(|| {
        scoped(
            |c| c.autotune.force("cpu_attention", name),
            || q.scaled_dot_product_attention(k, v, mask, None),
        )
    });
    let out = out.expect("attention");
    let lanes = ran.iter().any(|c| c.candidate == "fma_lanes");
    (values(&out), lanes)
}

fn assert_close(what: &str, got: &[f32], want: &[f32], tol: f32) {
    assert_eq!(got.len(), want.len(), "{what}");
    let scale = want.iter().fold(1e-6f32, |m, x| m.max(x.abs()));
    for (i, (a, b)) in got.iter().zip(want).enumerate() {
        assert!((a - b).abs() <= tol * scale, "{what}: [{i}] {a} vs {b}");
    }
}

#[test]
fn query_lane_kernel_matches_the_row_kernel_and_the_reference() {
    if Kernels::current().level() != SimdLevel::Avx512 {
        eprintln!("no AVX-512: the query-lane attention kernel never runs here");
        return;
    }
    let cases = [
        // [lq, lk, d, dv] (below 32 queries the static rule takes the row kernels; the
        // autotuner may take the query-lane kernel)
        [1, 5, 8, 8],
        [7, 13, 40, 40],
        [32, 1, 1, 1],
        [33, 65, 40, 40],
        [64, 130, 80, 7],
        [97, 77, 160, 160],
        [257, 64, 5, 3],
        [40, 9, 0, 11],
    ];
    for (i, &[lq, lk, d, dv]) in cases.iter().enumerate() {
        for dtype in [DType::F32, DType::F16] {
            for transposed in [false, true] {
                let seed = 10 * i as u64;
                let make = |l: usize, w: usize, s: u64| {
                    let t = if transposed {
                        randn(&[2, l, 3, w], s).transpose(1, 2)
                    } else {
                        Ok(randn(&[2, 3, l, w], s))
                    };
                    t.and_then(|t| t.to_dtype(dtype)).expect("input")
                };
                let (q, k, v) = (
                    make(lq, d, seed),
                    make(lk, d, seed + 1),
                    make(lk, dv, seed + 2),
                );
                // An additive mask with -inf entries and a fully masked row (row 5: zeros).
                let vals: Vec<f32> = (0..lq * lk)
                    .map(|j| {
                        let (r, c) = (j / lk, j % lk);
                        if r == 5 || (c % 3 == 1 && c > 0) {
                            f32::NEG_INFINITY
                        } else if r == 6 {
                            // Every score of the row far below 0: only the shift by the row's
                            // own maximum keeps its weights from underflowing.
                            -300.0 - c as f32
                        } else {
                            (j % 13) as f32 / 8.0 - 0.7
                        }
                    })
                    .collect();
                let mask = Tensor::from_vec(vals, &[lq, lk], Device::Cpu)
                    .and_then(|m| m.to_dtype(dtype))
                    .expect("mask");
                for mask in [None, Some(&mask)] {
                    let what = format!(
                        "{dtype} lq {lq} lk {lk} d {d} dv {dv} t {transposed} mask {}",
                        mask.is_some()
                    );
                    let (lanes, ran) = run(&q, &k, &v, mask, false);
                    assert!(ran, "{what}: the query-lane kernel did not run");
                    let (rows, ran_rows) = run(&q, &k, &v, mask, true);
                    assert!(!ran_rows, "{what}");
                    let want = q
                        .scaled_dot_product_attention_unfused(&k, &v, mask, None)
                        .map(|t| values(&t))
                        .expect("unfused");
                    let tol = if dtype == DType::F32 { 2e-5 } else { 2e-3 };
                    assert_close(&format!("lanes vs rows {what}"), &lanes, &rows, tol);
                    assert_close(&format!("lanes vs unfused {what}"), &lanes, &want, tol);
                    if mask.is_some() && lq > 5 {
                        for bh in 0..6 {
                            let row = &lanes[(bh * lq + 5) * dv..][..dv];
                            assert!(row.iter().all(|&x| x == 0.0), "{what}: masked row");
                        }
                    }
                }
            }
        }
    }
}

/// Every width of the last `P · V` register block (value widths 1..=19).
#[test]
fn query_lane_kernel_every_value_block_width() {
    if Kernels::current().level() != SimdLevel::Avx512 {
        eprintln!("no AVX-512: the query-lane attention kernel never runs here");
        return;
    }
    for dv in 1..=19 {
        let (q, k, v) = (
            randn(&[1, 2, 33, 8], 1),
            randn(&[1, 2, 20, 8], 2),
            randn(&[1, 2, 20, dv], 3),
        );
        let (lanes, ran) = run(&q, &k, &v, None, false);
        assert!(ran);
        let (rows, _) = run(&q, &k, &v, None, true);
        assert_close(&format!("dv {dv}"), &lanes, &rows, 2e-5);
    }
}
