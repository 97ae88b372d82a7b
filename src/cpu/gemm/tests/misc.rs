//! Errors, edge sizes, activations, the public entry points and override, re-entrancy, and a
//! 2048³ product checked on a sample of outputs.

use super::util::{Lay, Owned, Rng};
use crate::cpu::gemm::layout::PackKind;
use crate::cpu::gemm::*;
use crate::desc::Activation;
use half::bf16;
use rayon::prelude::*;

#[test]
fn erf_reference_values() {
    let known = [
        (0.0, 0.0),
        (0.5, 0.520_499_877_813_046_5),
        (1.0, 0.842_700_792_949_714_9),
        (2.0, 0.995_322_265_018_952_7),
        (3.0, 0.999_977_909_503_001_4),
        (4.5, 0.999_999_999_803_383_9),
    ];
    for (x, want) in known {
        assert!((act::erf(x) - want).abs() < 1e-14, "erf({x})");
        assert!((act::erf(-x) + want).abs() < 1e-14, "erf(-{x})");
    }
}

#[test]
fn erfc_and_gelu_keep_the_tail() {
    for (x, want) in [
        (3.0, 2.209_049_699_858_543_8e-5),
        (5.0, 1.537_459_794_428_035_1e-12),
        (10.0, 2.088_487_583_762_545e-45),
        (-1.0, 1.842_700_792_949_715),
    ] {
        let got = act::erfc(x);
        assert!(
            (got - want).abs() <= 1e-13 * want,
            "erfc({x}) = {got}, want {want}"
        );
    }
    // GELU(-8√2) = -8√2 · erfc(8) / 2: relative accuracy where 1 + erf(x) would be 0.
    let x = -8.0 * std::f64::consts::SQRT_2;
    let want = x * 1.122_429_717_298_292_7e-29 / 2.0;
    let got = act::apply(Activation::Gelu, x);
    assert!(
        (got - want).abs() <= 1e-12 * want.abs(),
        "gelu({x}) = {got}, want {want}"
    );
}

/// The vector epilogues' GELU keeps relative accuracy in the negative tail (down to -12, where
/// it is ~1e-32), as the elementwise `gelu`: a fused GEGLU's gate can sit there.
#[cfg(target_arch = "x86_64")]
#[test]
fn vector_gelu_keeps_the_negative_tail() {
    use std::arch::x86_64::*;
    let xs: Vec<f32> = (0..1024)
        .map(|i| -12.0 + 11.0 * i as f32 / 1023.0)
        .collect();
    let check = |level: &str, out: &[f32]| {
        for (x, y) in xs.iter().zip(out) {
            let want = act::apply(Activation::Gelu, *x as f64);
            let rel = (*y as f64 - want).abs() / want.abs();
            assert!(
                rel < 2e-5,
                "{level} gelu({x}) = {y}, want {want} (rel {rel:.1e})"
            );
        }
    };
    let mut out = vec![0f32; xs.len()];
    if avx512::has_avx512() {
        for (x, y) in xs.chunks_exact(16).zip(out.chunks_exact_mut(16)) {
            // SAFETY: AVX-512F/DQ and FMA detected (`has_avx512`); 16 lanes in and out.
            unsafe {
                let v = avx512_ep::act_ps(Activation::Gelu, _mm512_loadu_ps(x.as_ptr()));
                _mm512_storeu_ps(y.as_mut_ptr(), v);
            }
        }
        check("avx512", &out);
    }
    if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
        for (x, y) in xs.chunks_exact(8).zip(out.chunks_exact_mut(8)) {
            // SAFETY: AVX2 and FMA detected above; 8 lanes in and out.
            unsafe {
                let v = avx2_ep::act_ps(Activation::Gelu, _mm256_loadu_ps(x.as_ptr()));
                _mm256_storeu_ps(y.as_mut_ptr(), v);
            }
        }
        check("avx2", &out);
    }
}

#[cfg(target_arch = "x86_64")]
#[test]
fn vector_activations_match_scalar() {
    use std::arch::x86_64::*;
    if !avx512::has_avx512() {
        return;
    }
    for a in [
        Activation::Relu,
        Activation::Gelu,
        Activation::GeluTanh,
        Activation::Silu,
    ] {
        for i in 0..2000 {
            let xs: [f32; 16] = std::array::from_fn(|j| (i * 16 + j) as f32 * 0.000_7 - 12.0);
            let mut out = [0f32; 16];
            // SAFETY: avx512f detected above.
            unsafe {
                _mm512_storeu_ps(
                    out.as_mut_ptr(),
                    avx512_ep::act_ps(a, _mm512_loadu_ps(xs.as_ptr())),
                )
            };
            for (x, y) in xs.iter().zip(out) {
                let want = act::apply(a, *x as f64);
                assert!(
                    (y as f64 - want).abs() <= 3e-7 * (1.0 + x.abs() as f64),
                    "{a:?}({x}) = {y}, want {want}"
                );
            }
        }
    }
}

#[test]
fn errors_not_panics() {
    let a = vec![1f32; 6];
    let b = vec![1f32; 6];
    let mut c = vec![0f32; 4];
    let ep = Epilogue::default();
    let av = MatRef::row_major(&a, 2, 3);
    let bv = MatRef::row_major(&b, 3, 2);
    assert!(gemm_f32(av, bv, &mut c, 2, &ep).is_ok());
    assert_eq!(c, vec![3.0; 4]);
    // K mismatch, bad view bounds, small C, small ldc, bias and residual shapes, GLU beta.
    assert!(gemm_f32(av, MatRef::row_major(&b, 2, 3), &mut c, 3, &ep).is_err());
    assert!(gemm_f32(MatRef::new(&a, 1, 2, 3, 3, 1), bv, &mut c, 2, &ep).is_err());
    assert!(gemm_f32(MatRef::new(&a, 0, 2, 3, usize::MAX, 1), bv, &mut c, 2, &ep).is_err());
    assert!(gemm_f32(av, bv, &mut c[..3], 2, &ep).is_err());
    assert!(gemm_f32(av, bv, &mut c, 1, &ep).is_err());
    assert!(gemm_f32(av, bv, &mut c, 2, &Epilogue::new().with_bias(&[1.0])).is_err());
    let r = [0f32; 6];
    assert!(gemm_f32(
        av,
        bv,
        &mut c,
        2,
        &Epilogue::new().with_residual(MatRef::row_major(&r, 3, 2))
    )
    .is_err());
    assert!(gemm_geglu_f32(
        av,
        MatRef::row_major(&b, 3, 2),
        &mut c[..2],
        1,
        &Epilogue::new().with_scale(1.0, 1.0)
    )
    .is_err());
    assert!(gemm_geglu_f32(av, MatRef::row_major(&b[..3], 3, 1), &mut c, 1, &ep).is_err());
    assert!(PackedB::new_geglu(MatRef::row_major(&b[..3], 3, 1)).is_err());
    let p = PackedB::new(MatRef::row_major(&b, 2, 3)).expect("pack");
    assert!(gemm_prepacked_f32(av, &p, &mut c, 3, &ep).is_err());
    let ab = vec![bf16::ONE; 6];
    assert!(gemm_bf16(
        MatRef::row_major(&ab, 2, 3),
        MatRef::row_major(&ab, 2, 3),
        &mut c,
        3,
        &ep
    )
    .is_err());
}

#[test]
fn zero_sizes_and_k0() {
    let ep = Epilogue::default();
    let mut c = vec![5f32; 12];
    // M = 0 or N = 0: nothing written.
    assert!(gemm_f32(
        MatRef::row_major(&[], 0, 3),
        MatRef::row_major(&[0.0; 6], 3, 2),
        &mut c,
        2,
        &ep
    )
    .is_ok());
    assert!(gemm_f32(
        MatRef::row_major(&[0.0; 6], 2, 3),
        MatRef::row_major(&[], 3, 0),
        &mut c,
        0,
        &ep
    )
    .is_ok());
    assert_eq!(c, vec![5.0; 12]);
    // K = 0: C = beta * C + bias, then activation.
    let bias = [1.0, -2.0, 3.0];
    for path in [GemmPath::Avx512, GemmPath::Avx2, GemmPath::Fallback] {
        let mut c = vec![2f32; 12];
        let ep = Epilogue::new()
            .with_scale(3.0, 0.5)
            .with_bias(&bias)
            .with_activation(Activation::Relu);
        gemm_with_path::<f32>(
            path,
            MatRef::row_major(&[], 4, 0),
            BSrc::Raw(MatRef::row_major(&[], 0, 3), false),
            &mut c,
            3,
            &ep,
        )
        .expect("k0");
        assert_eq!(c, [2.0, 0.0, 4.0].repeat(4), "{path:?}");
    }
}

/// Serialises the tests that set the process-wide path override.
static OVERRIDE_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[test]
fn public_entry_points_and_override() {
    let mut rng = Rng::new(42);
    let a = Owned::<f32>::random(70, 90, Lay::Row, &mut rng);
    let b = Owned::<f32>::random(90, 50, Lay::Col, &mut rng);
    let mut c1 = vec![0f32; 70 * 50];
    let mut c2 = c1.clone();
    gemm_f32(a.view(), b.view(), &mut c1, 50, &Epilogue::default()).expect("gemm");
    let _guard = OVERRIDE_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    set_gemm_override(Some(GemmPath::Fallback));
    assert_eq!(gemm_path(crate::DType::F32), GemmPath::Fallback);
    gemm_f32(a.view(), b.view(), &mut c2, 50, &Epilogue::default()).expect("gemm");
    set_gemm_override(None);
    for (x, y) in c1.iter().zip(&c2) {
        assert!((x - y).abs() < 1e-4, "{x} vs {y}");
    }
    #[cfg(target_arch = "x86_64")]
    if std::env::var("XPU_CPU_SIMD").is_err() {
        let auto = if avx512::has_avx512() {
            GemmPath::Avx512
        } else if avx2::has_avx2() {
            GemmPath::Avx2
        } else {
            GemmPath::Fallback
        };
        assert_eq!(gemm_path(crate::DType::F32), auto);
    }
}

/// Forcing AVX2 runs the AVX2 kernel wherever the CPU has it (every x86-64 CI machine), also on
/// AVX-512 machines, so its tests never silently run another kernel.
#[cfg(target_arch = "x86_64")]
#[test]
fn avx2_override_selects_the_avx2_kernel() {
    assert!(
        avx2::has_avx2(),
        "this x86-64 machine lacks AVX2/FMA/F16C: the AVX2 kernel tests would test the fallback"
    );
    let _guard = OVERRIDE_LOCK.lock().unwrap_or_else(|e| e.into_inner());
    set_gemm_override(Some(GemmPath::Avx2));
    let paths = [DType::F32, DType::F16, DType::BF16].map(gemm_path);
    set_gemm_override(None);
    assert_eq!(paths, [GemmPath::Avx2; 3]);
}

#[test]
fn reentrant_from_rayon_workers() {
    // Batched use: callers loop over batches in parallel; nested GEMMs must not collide on
    // the per-thread scratch.
    let mut rng = Rng::new(9);
    let a = Owned::<f32>::random(300, 200, Lay::Row, &mut rng);
    let b = Owned::<f32>::random(200, 150, Lay::Row, &mut rng);
    let mut want = vec![0f32; 300 * 150];
    gemm_f32(a.view(), b.view(), &mut want, 150, &Epilogue::default()).expect("gemm");
    let outs: Vec<Vec<f32>> = (0..8)
        .into_par_iter()
        .map(|_| {
            let mut c = vec![0f32; 300 * 150];
            gemm_f32(a.view(), b.view(), &mut c, 150, &Epilogue::default()).expect("gemm");
            c
        })
        .collect();
    for c in outs {
        assert_eq!(c, want);
    }
}

fn big_sampled<T: Runner + crate::WithDType>(path: GemmPath) {
    let n = 2048;
    let mut rng = Rng::new(77);
    let a = Owned::<T>::random(n, n, Lay::Row, &mut rng);
    let b = Owned::<T>::random(n, n, Lay::Col, &mut rng);
    let mut c = vec![0f32; n * n];
    gemm_with_path(
        path,
        a.view(),
        BSrc::Raw(b.view(), false),
        &mut c,
        n,
        &Epilogue::default(),
    )
    .expect("gemm");
    for s in 0..256 {
        let (i, j) = ((s * 7919) % n, (s * 104_729 + 13) % n);
        let (mut want, mut scale) = (0f64, 0f64);
        for p in 0..n {
            want += a.at(i, p) * b.at(p, j);
            scale += (a.at(i, p) * b.at(p, j)).abs();
        }
        let tol = 1e-5 * (n as f64).sqrt() * scale;
        assert!(
            (c[i * n + j] as f64 - want).abs() <= tol,
            "C[{i},{j}] = {}, want {want}",
            c[i * n + j]
        );
    }
}

#[test]
fn big_2048_f32() {
    big_sampled::<f32>(GemmPath::Avx512);
}

#[test]
fn big_2048_bf16_widened() {
    super::util::with_bf16_kind(Some(PackKind::F32), || {
        big_sampled::<bf16>(GemmPath::Avx512)
    });
}

#[test]
fn big_2048_bf16_dot() {
    super::util::with_bf16_kind(Some(PackKind::Bf16), || {
        big_sampled::<bf16>(GemmPath::Avx512)
    });
}

/// Per-call products pack B panel by panel as tasks first need them (`panels::LazyPanels`,
/// several threads, staggered starts), or whole and up front below the thread-pool threshold:
/// the result must be bit-identical to the same product
/// over a B packed beforehand (same layout, same kernel, same order of sums), for shapes with
/// several K blocks, many tasks and sub-blocks, an N edge, transposed and strided B, GLU, on
/// every path and both bf16 layouts.
#[test]
fn b_packed_on_first_use_matches_prepacked_bits() {
    fn case<T: Runner + crate::WithDType>(
        path: GemmPath,
        (m, k, n): (usize, usize, usize),
        lay: Lay,
        glu: bool,
    ) {
        let mut rng = Rng::new((m * 31 + k * 7 + n) as u64);
        let a = Owned::<T>::random(m, k, Lay::Row, &mut rng);
        let b = Owned::<T>::random(k, if glu { 2 * n } else { n }, lay, &mut rng);
        let packed = if glu {
            PackedB::new_geglu(b.view())
        } else {
            PackedB::new(b.view())
        };
        let packed = packed.expect("pack");
        let ep = Epilogue::default();
        let (mut lazy, mut pre) = (vec![0f32; m * n], vec![0f32; m * n]);
        gemm_with_path(path, a.view(), BSrc::Raw(b.view(), glu), &mut lazy, n, &ep).expect("lazy");
        gemm_with_path(path, a.view(), BSrc::Packed(&packed), &mut pre, n, &ep).expect("pre");
        let same = lazy
            .iter()
            .zip(&pre)
            .all(|(x, y)| x.to_bits() == y.to_bits());
        assert!(
            same,
            "{path:?} {} {m}x{k}x{n} {lay:?} glu={glu}",
            std::any::type_name::<T>()
        );
    }
    // The last two run on one thread (below PAR_MIN_FLOPS): B is packed whole, up front.
    let shapes = [
        (300, 1100, 610),
        (65, 257, 1000),
        (1000, 64, 97),
        (7, 33, 65),
        (1, 1000, 3),
    ];
    for path in [GemmPath::Avx512, GemmPath::Avx2, GemmPath::Fallback] {
        for &shape in &shapes {
            for lay in [Lay::Row, Lay::Col, Lay::Strided] {
                case::<f32>(path, shape, lay, false);
                case::<half::f16>(path, shape, lay, false);
                for kind in [PackKind::F32, PackKind::Bf16] {
                    super::util::with_bf16_kind(Some(kind), || {
                        case::<bf16>(path, shape, lay, false)
                    });
                }
            }
            case::<f32>(path, shape, Lay::Row, true);
        }
    }
}

/// A B packed into storage kept from a dropped pack (`AlignedBuf::recycled`) gives the same
/// products, bit for bit, as a per-call product over the same B: every packer writes every
/// element it is read back at. The dropped pack held NaN everywhere, so a padding lane or row
/// left unwritten would show; f32 layout with an N edge, bf16 pair layout with an odd K.
#[test]
fn packs_in_recycled_storage_match_per_call_bits() {
    fn case<T: Runner + crate::WithDType>((m, k, n): (usize, usize, usize)) {
        let nans = vec![T::from_f64(f64::NAN); k * n];
        let mut rng = Rng::new(5);
        let a = Owned::<T>::random(m, k, Lay::Row, &mut rng);
        let b = Owned::<T>::random(k, n, Lay::Row, &mut rng);
        let ep = Epilogue::default();
        let mut per_call = vec![0f32; m * n];
        gemm_with_path(
            GemmPath::Avx512,
            a.view(),
            BSrc::Raw(b.view(), false),
            &mut per_call,
            n,
            &ep,
        )
        .expect("per call");
        // Other tests may take the kept storage first, or keep storage that fits this pack
        // better (the partial sums of 16-bit products go through the same spares): start each
        // try from no spares and retry until this pack reused the junk's.
        let mut reused = false;
        for _ in 0..50 {
            crate::cpu::gemm::clear_spare();
            let junk = PackedB::new(MatRef::new(&nans, 0, k, n, n, 1)).expect("junk");
            let kept = junk.buf.slice::<u32>(1).as_ptr();
            drop(junk);
            let packed = PackedB::new(b.view()).expect("pack");
            if packed.buf.slice::<u32>(1).as_ptr() != kept {
                continue;
            }
            reused = true;
            let mut pre = vec![0f32; m * n];
            gemm_with_path(
                GemmPath::Avx512,
                a.view(),
                BSrc::Packed(&packed),
                &mut pre,
                n,
                &ep,
            )
            .expect("prepacked");
            let same = pre
                .iter()
                .zip(&per_call)
                .all(|(x, y)| x.to_bits() == y.to_bits());
            assert!(same, "{} {m}x{k}x{n}", std::any::type_name::<T>());
            break;
        }
        assert!(reused, "the pack never reused the dropped storage");
    }
    case::<f32>((37, 1025, 700));
    super::util::with_bf16_kind(Some(PackKind::Bf16), || case::<bf16>((37, 1025, 700)));
}

/// Products inside `sequential` stay on the calling thread and give the same bits as the
/// split ones (tasks split M and N, never K); the flag is restored on the way out, also when
/// calls nest.
#[test]
fn sequential_products_match_split_ones() {
    let (m, k, n) = (300, 257, 129);
    let mut rng = Rng::new(17);
    let a = Owned::<f32>::random(m, k, Lay::Row, &mut rng);
    let b = Owned::<f32>::random(k, n, Lay::Row, &mut rng);
    let ep = Epilogue::new();
    let mut split = vec![0f32; m * n];
    gemm_f32(a.view(), b.view(), &mut split, n, &ep).expect("split product");
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(2)
        .build()
        .expect("pool");
    let mut seq = vec![0f32; m * n];
    let index_in_products = pool.install(|| {
        sequential(|| {
            let outer = rayon::current_thread_index();
            sequential(|| gemm_f32(a.view(), b.view(), &mut seq, n, &ep)).expect("product");
            // Still inside the outer scope after the inner one ended.
            let mut again = vec![0f32; m * n];
            gemm_f32(a.view(), b.view(), &mut again, n, &ep).expect("product");
            assert_eq!(again, seq);
            outer
        })
    });
    assert!(index_in_products.is_some());
    assert_eq!(seq, split);
}
