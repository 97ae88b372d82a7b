//! Slice-kernel tests at each SIMD level (`Kernels::new`), including tails and edge values.

use super::*;
use crate::cpu::simd::{bf16_from_f32_rne, Kernels};
use crate::desc::kinds::{BinaryOp, UnaryOp};
use half::{bf16, f16};

const EPS: f64 = f32::EPSILON as f64;

fn check_unary(k: Kernels, op: UnaryOp, x: &[f32]) {
    let mut y = vec![7.25f32; x.len() + 3];
    k.unary_f32(op, x, &mut y);
    for (i, (&xi, &yi)) in x.iter().zip(&y).enumerate() {
        let want = ref_unary(op, f64::from(xi));
        assert!(
            close(f64::from(yi), want, EPS, tolerance(op)),
            "{:?} {op:?} x[{i}]={xi:e}: got {yi:e}, want {want:e}",
            k.level()
        );
    }
    assert!(
        y[x.len()..].iter().all(|&v| v == 7.25),
        "{op:?} wrote past the end"
    );
}

#[test]
fn unary_all_ops_all_lengths_and_edges() {
    for level in levels() {
        let k = Kernels::new(level);
        assert_eq!(k.level(), level);
        for op in all_unary() {
            let (lo, hi) = input_range(op);
            let mut rng = Lcg::new(op.code() as u64);
            for n in LENGTHS {
                check_unary(k, op, &rng.vec(n, lo, hi));
            }
            check_unary(k, op, &EDGES);
            check_unary(k, op, &rng.vec(4099, -5.0, 5.0));
        }
    }
}

/// Dense sweeps; prints the worst relative error per op (run with `--nocapture`).
#[test]
fn transcendental_accuracy_sweep() {
    use UnaryOp::*;
    let cases: [(UnaryOp, f64, f64); 10] = [
        (Exp, -87.0, 88.0),
        (Log, 1e-30, 1e30),
        (Tanh, -10.0, 10.0),
        (Sigmoid, -80.0, 80.0),
        (GeluErf, -8.0, 8.0),
        (GeluTanh, -8.0, 8.0),
        (Silu, -80.0, 80.0),
        (Sin, -100.0, 100.0),
        (Cos, -100.0, 100.0),
        (Sin, -70000.0, 70000.0),
    ];
    for level in levels() {
        let k = Kernels::new(level);
        for (op, lo, hi) in cases {
            let n = 200_001;
            let x: Vec<f32> = if op == Log {
                (0..n)
                    .map(|i| (lo * f64::powf(hi / lo, i as f64 / n as f64)) as f32)
                    .collect()
            } else {
                (0..n)
                    .map(|i| (lo + (hi - lo) * i as f64 / n as f64) as f32)
                    .collect()
            };
            let mut y = vec![0f32; n];
            k.unary_f32(op, &x, &mut y);
            let (mut worst_rel, mut worst_abs) = (0f64, 0f64);
            for (&xi, &yi) in x.iter().zip(&y) {
                let want = ref_unary(op, f64::from(xi));
                let err = (f64::from(yi) - want).abs();
                worst_abs = worst_abs.max(err);
                if want.abs() > 1e-3 {
                    worst_rel = worst_rel.max(err / want.abs());
                }
                assert!(
                    close(f64::from(yi), want, EPS, tolerance(op)),
                    "{level:?} {op:?}({xi:e}) = {yi:e}, want {want:e}"
                );
            }
            println!(
                "{level:?} {:>10} [{lo}, {hi}]: max rel err {:.2e} ({:.2} eps) where |y|>1e-3, max abs err {:.2e}",
                op.name(),
                worst_rel,
                worst_rel / EPS,
                worst_abs
            );
        }
    }
}

#[test]
fn binary_kernels_all_ops() {
    use BinaryOp::*;
    for level in levels() {
        let k = Kernels::new(level);
        for op in [Add, Sub, Mul, Div, Maximum, Minimum, Pow] {
            let mut rng = Lcg::new(op.code() as u64 + 100);
            for n in LENGTHS.into_iter().chain([1000]) {
                let (lo, hi) = if op == Pow { (0.0, 4.0) } else { (-10.0, 10.0) };
                let mut a = rng.vec(n, lo, hi);
                let b = rng.vec(n, -3.0, 3.0);
                if n > 3 {
                    a[1] = f32::NAN;
                    a[2] = f32::INFINITY;
                }
                let s = 1.75f32;
                let (mut d1, mut d2, mut d3) =
                    (vec![9.0; n + 2], vec![9.0; n + 2], vec![9.0; n + 2]);
                k.binary_f32(op, &a, &b, &mut d1);
                k.binary_f32_scalar_rhs(op, &a, s, &mut d2);
                k.binary_f32_scalar_lhs(op, s, &b, &mut d3);
                let tol = if op == Pow { (1.5, 0.0) } else { (0.5, 0.0) };
                for i in 0..n {
                    let (x, y) = (f64::from(a[i]), f64::from(b[i]));
                    let sf = f64::from(s);
                    assert!(
                        close(d1[i].into(), ref_binary(op, x, y), EPS, tol),
                        "{level:?} {op:?} {x} {y} -> {}",
                        d1[i]
                    );
                    assert!(
                        close(d2[i].into(), ref_binary(op, x, sf), EPS, tol),
                        "{level:?} {op:?} {x} s -> {}",
                        d2[i]
                    );
                    assert!(
                        close(d3[i].into(), ref_binary(op, sf, y), EPS, tol),
                        "{level:?} {op:?} s {y} -> {}",
                        d3[i]
                    );
                }
                assert!(d1[n..]
                    .iter()
                    .chain(&d2[n..])
                    .chain(&d3[n..])
                    .all(|&v| v == 9.0));
            }
        }
        // NaN-propagating maximum/minimum, like torch.maximum/minimum.
        let mut d = [0f32; 3];
        k.binary_f32(
            Maximum,
            &[f32::NAN, 1.0, f32::NAN],
            &[2.0, f32::NAN, f32::NAN],
            &mut d,
        );
        assert!(d.iter().all(|v| v.is_nan()));
        k.binary_f32(
            Minimum,
            &[f32::NAN, 1.0, 3.0],
            &[2.0, f32::NAN, -1.0],
            &mut d,
        );
        assert!(d[0].is_nan() && d[1].is_nan());
        assert_eq!(d[2], -1.0);
        let mut u = [0f32; 2];
        k.unary_f32(UnaryOp::Relu, &[f32::NAN, -1.0], &mut u);
        assert!(u[0].is_nan());
        assert_eq!(u[1], 0.0);
        k.unary_f32(UnaryOp::MaxScalar(f32::NAN), &[3.0, -1.0], &mut u);
        assert!(u.iter().all(|v| v.is_nan()));
    }
}

#[test]
fn reductions_and_softmax_rows() {
    for level in levels() {
        let k = Kernels::new(level);
        let mut rng = Lcg::new(7);
        for n in LENGTHS.into_iter().chain([1000, 4097]) {
            let x = rng.vec(n, -100.0, 100.0);
            let want: f64 = x.iter().map(|&v| f64::from(v)).sum();
            assert!((k.sum_f32(&x) - want).abs() <= 1e-9 * (1.0 + want.abs()));
            let mx = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let mn = x.iter().copied().fold(f32::INFINITY, f32::min);
            assert_eq!(k.max_f32(&x), mx);
            assert_eq!(k.min_f32(&x), mn);
            let first = |t: f32| x.iter().position(|&v| v == t);
            assert_eq!(k.argmax_f32(&x), first(mx));
            assert_eq!(k.argmin_f32(&x), first(mn));
            let mut s = vec![-1f32; n + 1];
            k.softmax_row_f32(&x, &mut s);
            let m = x
                .iter()
                .map(|&v| f64::from(v))
                .fold(f64::NEG_INFINITY, f64::max);
            let z: f64 = x.iter().map(|&v| (f64::from(v) - m).exp()).sum();
            for (i, &v) in x.iter().enumerate() {
                let want = (f64::from(v) - m).exp() / z;
                // exp(x - max) is conditioned by |x - max| (the f32 subtraction rounds).
                let ulps = 6.0 + (f64::from(v) - m).abs();
                assert!(
                    close(s[i].into(), want, EPS, (ulps, 1e-30)),
                    "{level:?} softmax {i}: {} vs {want}",
                    s[i]
                );
            }
            assert_eq!(s[n], -1.0);
            if n >= 17 {
                let mut y = x.clone();
                y[16] = f32::NAN;
                y[3] = f32::NAN;
                assert!(k.max_f32(&y).is_nan() && k.min_f32(&y).is_nan());
                assert_eq!(k.argmax_f32(&y), Some(3));
                assert_eq!(k.argmin_f32(&y), Some(3));
                let mut acc = vec![0f32; n];
                k.max_assign_f32(&mut acc, &y);
                assert!(acc[3].is_nan() && acc[16].is_nan());
                k.max_assign_f32(&mut acc, &x);
                assert!(acc[3].is_nan(), "NaN must stick in the accumulator");
            }
        }
        assert_eq!(k.argmax_f32(&[]), None);
        assert_eq!(k.max_f32(&[]), f32::NEG_INFINITY);
        let mut acc = vec![1.0f64; 20];
        k.add_assign_f64_f32(&mut acc, &[2.0; 19]);
        assert_eq!(acc[18], 3.0);
        assert_eq!(acc[19], 1.0);
    }
}

#[test]
fn half_conversions_match_half_crate() {
    let mut rng = Lcg::new(3);
    let mut x: Vec<f32> = rng.vec(3000, -70000.0, 70000.0);
    x.extend(rng.vec(1000, -1e-4, 1e-4));
    x.extend(rng.vec(257, -1e-39, 1e-39));
    x.extend(EDGES);
    // Exact ties for both formats.
    x.extend([
        1.0 + 2f32.powi(-11),
        1.0 + 3.0 * 2f32.powi(-11),
        1.0 + 2f32.powi(-8),
        1.0 + 3.0 * 2f32.powi(-8),
    ]);
    for level in levels() {
        let k = Kernels::new(level);
        for n in LENGTHS.into_iter().chain([x.len()]) {
            let src = &x[..n];
            let mut h = vec![f16::ZERO; n];
            let mut b = vec![bf16::ZERO; n];
            k.f32_to_f16(src, &mut h);
            k.f32_to_bf16(src, &mut b);
            for i in 0..n {
                let (wh, wb) = (f16::from_f32(src[i]), bf16::from_f32(src[i]));
                assert!(
                    h[i] == wh || (h[i].is_nan() && wh.is_nan()),
                    "{level:?} f16 {}",
                    src[i]
                );
                assert!(
                    b[i].to_bits() == wb.to_bits() || (b[i].is_nan() && wb.is_nan()),
                    "{level:?} bf16 {:e}",
                    src[i]
                );
                assert_eq!(bf16_from_f32_rne(src[i]).to_bits(), b[i].to_bits());
            }
            let (mut fh, mut fb) = (vec![0f32; n], vec![0f32; n]);
            k.f16_to_f32(&h, &mut fh);
            k.bf16_to_f32(&b, &mut fb);
            for i in 0..n {
                assert!(fh[i] == h[i].to_f32() || fh[i].is_nan() && h[i].is_nan());
                assert!(fb[i] == b[i].to_f32() || fb[i].is_nan() && b[i].is_nan());
            }
        }
    }
}

#[test]
fn overrides_select_levels() {
    use crate::cpu::simd::{set_simd_override, simd_level, with_simd_level};
    assert_eq!(
        with_simd_level(SimdLevel::Fallback, simd_level),
        SimdLevel::Fallback
    );
    let hw = hardware_simd_level();
    assert_eq!(with_simd_level(SimdLevel::Avx512, simd_level), hw);
    // The global override exists; the thread-local one wins over it.
    set_simd_override(None);
    assert_eq!(
        with_simd_level(SimdLevel::Fallback, || Kernels::current().level()),
        SimdLevel::Fallback
    );
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx512f") && std::is_x86_feature_detected!("avx512bw") {
        assert_eq!(
            hw,
            SimdLevel::Avx512,
            "this machine has AVX-512; the fast path must be tested"
        );
    }
    // Every x86-64 machine CI runs on has AVX2: the AVX2 level must be selectable there (also
    // on AVX-512 machines), so its kernels are tested wherever the suite runs.
    #[cfg(target_arch = "x86_64")]
    {
        assert!(
            std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma"),
            "this x86-64 machine lacks AVX2/FMA: the AVX2 kernels would go untested"
        );
        assert_eq!(
            with_simd_level(SimdLevel::Avx2, simd_level),
            SimdLevel::Avx2
        );
    }
}

/// The fused group-norm passes write the slice kernels' bits (AVX-512), or nothing (other
/// levels, whose callers then run the slice kernels): odd channel counts, several rows, NaN,
/// infinities and large values.
#[test]
fn fused_norm_passes_match_the_slice_kernels() {
    for level in levels() {
        let k = Kernels::new(level);
        for c in [1usize, 7, 8, 15, 16, 17, 33, 320] {
            let rows = 5;
            let x: Vec<f32> = (0..rows * c)
                .map(|i| match i % 29 {
                    3 => f32::NAN,
                    5 => f32::INFINITY,
                    7 => -3.0e30,
                    _ => ((i * 7919) % 1000) as f32 / 37.0 - 13.0,
                })
                .collect();
            let chan = |m: f32| -> Vec<f32> { (0..c).map(|j| j as f32 * m - 1.5).collect() };
            let (mean, scale, shift) = (chan(0.25), chan(-0.03), chan(0.7));
            for silu in [false, true] {
                let mut fused = vec![7.0f32; rows * c + 3];
                let ran = k.channel_affine_f32(&x, (&mean, &scale, &shift), silu, &mut fused);
                assert_eq!(ran, level == SimdLevel::Avx512, "{level:?}");
                if !ran {
                    assert!(fused.iter().all(|&v| v == 7.0));
                    continue;
                }
                assert!(
                    fused[rows * c..].iter().all(|&v| v == 7.0),
                    "wrote past the rows"
                );
                for (r, (xr, fr)) in x.chunks(c).zip(fused.chunks(c)).enumerate() {
                    let (mut a, mut b, mut y) = (vec![0f32; c], vec![0f32; c], vec![0f32; c]);
                    k.binary_f32(BinaryOp::Sub, xr, &mean, &mut a);
                    k.binary_f32(BinaryOp::Mul, &a, &scale, &mut b);
                    k.binary_f32(BinaryOp::Add, &b, &shift, &mut y);
                    if silu {
                        k.unary_f32(UnaryOp::Silu, &y, &mut a);
                        y = a;
                    }
                    for (j, (f, w)) in fr.iter().zip(&y).enumerate() {
                        assert_eq!(
                            f.to_bits(),
                            w.to_bits(),
                            "c {c} row {r} col {j} silu {silu}"
                        );
                    }
                }
            }
            let mut fused = vec![0.5f64; c];
            let ran = k.add_sq_dev_f64_f32(&mut fused, &x, &mean);
            assert_eq!(ran, level == SimdLevel::Avx512);
            if ran {
                let mut want = vec![0.5f64; c];
                for xr in x.chunks(c) {
                    let (mut d, mut sq) = (vec![0f32; c], vec![0f32; c]);
                    k.binary_f32(BinaryOp::Sub, xr, &mean, &mut d);
                    k.binary_f32(BinaryOp::Mul, &d, &d, &mut sq);
                    k.add_assign_f64_f32(&mut want, &sq);
                }
                let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&fused), bits(&want), "c {c}");
            }
        }
    }
}
