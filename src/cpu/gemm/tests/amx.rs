//! The AMX bf16 path: edge sizes, transposed/strided operands, every epilogue, GLU, prepacked B,
//! against the f64 reference and against the widen (f32 FMA) path.
//!
//! Every case asserts which kernel actually ran over the AMX layout: AMX where this process may
//! use it, otherwise (said once on stderr) the `vdpbf16ps` or portable kernel over the same
//! panels, so these tests check real work on every machine and never pass by skipping.

use super::util::{run_case, with_bf16_kind, Case, Ep, Lay, LAYS};
use crate::cpu::gemm::amx_pack::LAST;
use crate::cpu::gemm::layout::PackKind;
use crate::cpu::gemm::{amx_unavailable_reason, Bf16Method, GemmPath};
use crate::desc::Activation;
use half::bf16;
use std::sync::Once;

const DIMS: [usize; 12] = [1, 3, 17, 31, 32, 33, 63, 64, 65, 127, 129, 257];

const ACTS: [Activation; 5] = [
    Activation::None,
    Activation::Relu,
    Activation::Gelu,
    Activation::GeluTanh,
    Activation::Silu,
];

/// The kernel an AMX-layout GEMM on the SIMD path must dispatch to on this machine.
fn expected() -> Bf16Method {
    static SAY: Once = Once::new();
    match amx_unavailable_reason() {
        None => Bf16Method::Amx,
        Some(why) => {
            #[cfg(target_arch = "x86_64")]
            let dot = crate::cpu::gemm::avx512::has_avx512_bf16();
            #[cfg(not(target_arch = "x86_64"))]
            let dot = false;
            let m = if dot {
                Bf16Method::DotProduct
            } else {
                Bf16Method::Portable
            };
            SAY.call_once(|| {
                eprintln!("AMX unavailable ({why}): AMX-layout tests check the {m} kernel instead")
            });
            m
        }
    }
}

/// Runs `cs` with B in the AMX layout on `path`, checks it against the f64 reference and that
/// the expected kernel ran; returns C.
fn amx_case(path: GemmPath, cs: Case, seed: u64) -> Vec<f32> {
    with_bf16_kind(Some(PackKind::Amx), || {
        LAST.with(|c| c.set(None));
        let c = run_case::<bf16>(path, cs, seed);
        let want = match path {
            GemmPath::Avx512 => expected(),
            GemmPath::Avx2 | GemmPath::Fallback => Bf16Method::Portable,
        };
        assert_eq!(LAST.with(|c| c.get()), Some(want), "{cs:?} on {path:?}");
        c
    })
}

/// Same case with bf16 widened to f32 (FMA kernel), also checked against the reference.
fn widen_case(cs: Case, seed: u64) -> Vec<f32> {
    with_bf16_kind(Some(PackKind::F32), || {
        run_case::<bf16>(GemmPath::Avx512, cs, seed)
    })
}

/// AMX and widen results agree to f32 summation-order error (bf16 products are exact in f32).
fn assert_near(cs: Case, x: &[f32], y: &[f32]) {
    let scale = (cs.k.max(1) as f32).sqrt() * 4e-6;
    for (i, (a, b)) in x.iter().zip(y).enumerate() {
        let tol = scale * (1.0 + a.abs().max(b.abs())) * (cs.k.max(1) as f32).sqrt();
        assert!(
            (a - b).abs() <= tol || (a.is_nan() && b.is_nan()),
            "{cs:?}: C[{i}] amx {a} vs widen {b}"
        );
    }
}

#[test]
fn amx_edge_dims_vs_reference_and_widen() {
    let mut seed = 10_000;
    for (i, &m) in DIMS.iter().enumerate() {
        for (j, &n) in DIMS.iter().enumerate() {
            // Every (M, N) pair with two K values that walk DIMS, and every K for diagonal pairs.
            let ks: Vec<usize> = if i == j {
                DIMS.to_vec()
            } else {
                vec![DIMS[(i * 5 + j * 7) % 12], DIMS[(i * 7 + j * 3 + 4) % 12]]
            };
            for k in ks {
                seed += 1;
                let cs = Case::plain(m, k, n);
                let amx = amx_case(GemmPath::Avx512, cs, seed);
                let widen = widen_case(cs, seed);
                assert_near(cs, &amx, &widen);
            }
        }
    }
}

#[test]
fn amx_k0_and_multi_block_k() {
    // K = 0 (C = beta * C + bias), K spanning several AMX K blocks and an odd K tail.
    for (i, (m, k, n)) in [(5, 0, 7), (40, 1000, 70), (33, 1537, 40), (130, 611, 97)]
        .into_iter()
        .enumerate()
    {
        for ep in [Ep::Plain, Ep::All(Activation::Gelu)] {
            let cs = Case {
                ep,
                ..Case::plain(m, k, n)
            };
            amx_case(GemmPath::Avx512, cs, 11_000 + i as u64);
            amx_case(GemmPath::Fallback, cs, 11_000 + i as u64);
        }
    }
}

#[test]
fn amx_layouts_transposed_and_strided() {
    let shapes = [
        (17, 63, 129),
        (33, 65, 31),
        (64, 257, 33),
        (129, 31, 65),
        (1, 129, 3),
    ];
    for (i, &(m, k, n)) in shapes.iter().enumerate() {
        for la in LAYS {
            for lb in LAYS {
                for prepacked in [false, true] {
                    let cs = Case {
                        la,
                        lb,
                        prepacked,
                        ..Case::plain(m, k, n)
                    };
                    let amx = amx_case(GemmPath::Avx512, cs, 12_000 + i as u64);
                    assert_near(cs, &amx, &widen_case(cs, 12_000 + i as u64));
                }
            }
        }
    }
}

#[test]
fn amx_every_epilogue() {
    let mut eps = vec![
        Ep::AlphaBeta,
        Ep::Bias,
        Ep::Residual(false),
        Ep::Residual(true),
    ];
    eps.extend(ACTS.map(Ep::Act));
    eps.extend(ACTS.map(Ep::All));
    // M tails on both sides of 16 (the half-tile path), K across blocks, N tails.
    // (64, 1100, 64): full 32×32 tiles over several K blocks (partial sums kept in AMX form).
    let shapes = [
        (17, 600, 65),
        (129, 3, 33),
        (14, 257, 32),
        (65, 1000, 17),
        (1, 1, 1),
        (64, 1100, 64),
    ];
    for (i, &(m, k, n)) in shapes.iter().enumerate() {
        for (j, &ep) in eps.iter().enumerate() {
            for prepacked in [false, true] {
                let cs = Case {
                    ep,
                    prepacked,
                    ..Case::plain(m, k, n)
                };
                let seed = 13_000 + (i * 100 + j) as u64;
                let amx = amx_case(GemmPath::Avx512, cs, seed);
                assert_near(cs, &amx, &widen_case(cs, seed));
                amx_case(GemmPath::Fallback, cs, seed);
            }
        }
    }
}

#[test]
fn amx_geglu() {
    let shapes = [
        (1, 1, 1),
        (17, 65, 16),
        (63, 129, 17),
        (129, 600, 40),
        (33, 3, 33),
    ];
    for (i, &(m, k, n)) in shapes.iter().enumerate() {
        for (j, act) in ACTS.into_iter().enumerate() {
            for prepacked in [false, true] {
                for ep in [Ep::Plain, Ep::All(act)] {
                    let lb = if j % 2 == 0 { Lay::Row } else { Lay::Col };
                    let cs = Case {
                        ep,
                        prepacked,
                        glu: true,
                        lb,
                        ..Case::plain(m, k, n)
                    };
                    let seed = 14_000 + (i * 100 + j) as u64;
                    let amx = amx_case(GemmPath::Avx512, cs, seed);
                    assert_near(cs, &amx, &widen_case(cs, seed));
                    amx_case(GemmPath::Fallback, cs, seed);
                }
            }
        }
    }
}

#[test]
fn amx_prepacked_matches_unpacked_bitwise() {
    for path in [GemmPath::Avx512, GemmPath::Fallback] {
        for (m, k, n) in [(17, 600, 65), (129, 63, 129), (1, 1000, 3), (300, 320, 257)] {
            for la in [Lay::Row, Lay::Col] {
                let cs = Case {
                    la,
                    ..Case::plain(m, k, n)
                };
                let pre = Case {
                    prepacked: true,
                    ..cs
                };
                assert_eq!(amx_case(path, cs, 15), amx_case(path, pre, 15), "{cs:?}");
            }
        }
    }
}

#[test]
fn amx_large_threaded() {
    // Big enough to split over the thread pool, several K blocks, edges in every dimension.
    let cs = Case {
        ep: Ep::All(Activation::Silu),
        ..Case::plain(333, 1100, 290)
    };
    let amx = amx_case(GemmPath::Avx512, cs, 16);
    assert_near(cs, &amx, &widen_case(cs, 16));
}

#[test]
fn amx_large_b_split_over_n() {
    // B of 9 MB (more than `driver::B_STREAM_BYTES`) with few rows: planned by
    // `plan_streams` (N tasks as well as M tasks), edges in every dimension.
    let cs = Case {
        ep: Ep::All(Activation::Silu),
        ..Case::plain(70, 1500, 3001)
    };
    let amx = amx_case(GemmPath::Avx512, cs, 17);
    assert_near(cs, &amx, &widen_case(cs, 17));
}

#[test]
fn amx_default_selection() {
    let method = crate::cpu::gemm::bf16_method();
    eprintln!("CPU bf16 GEMM method in this process: {method}");
    let env = |k: &str| std::env::var(k).ok().map(|v| v.trim().to_ascii_lowercase());
    if env("XPU_CPU_SIMD").as_deref() == Some("fallback") {
        // The forced portable path: no AVX-512, no AMX, even for a B packed in the AMX layout.
        assert_eq!(method, Bf16Method::Portable);
        let cs = Case {
            prepacked: true,
            ..Case::plain(40, 70, 50)
        };
        with_bf16_kind(Some(PackKind::Amx), || {
            LAST.with(|c| c.set(None));
            super::util::run_case::<bf16>(crate::cpu::gemm::gemm_path(crate::DType::BF16), cs, 3);
            assert_eq!(LAST.with(|c| c.get()), Some(Bf16Method::Portable));
        });
    }
    let forced = env("XPU_CPU_BF16").is_some() || env("XPU_CPU_SIMD").is_some();
    if !forced {
        let want = if amx_unavailable_reason().is_none() {
            Bf16Method::Amx
        } else {
            assert_ne!(method, Bf16Method::Amx);
            method
        };
        assert_eq!(method, want);
    }
    #[cfg(target_arch = "x86_64")]
    if amx_unavailable_reason().is_none() {
        // The peak loop runs and counts 4 tdpbf16ps per round.
        // SAFETY: AMX was granted.
        let flops = unsafe { crate::cpu::gemm::amx::peak_iters(10) };
        assert_eq!(flops, (10 * 4 * 16 * 16 * 32 * 2) as f64);
    }
}

/// `alpha == 1` with `beta != 0` on full tiles over several K blocks: the first block blends C
/// through the epilogue, later blocks accumulate from C in AMX form.
#[test]
fn amx_alpha_one_beta_multi_block() {
    use super::util::{Owned, Rng};
    use crate::cpu::gemm::{gemm_with_path, BSrc, Epilogue};
    let (m, k, n) = (64, 1100, 96);
    let mut rng = Rng::new(21);
    let a = Owned::<bf16>::random(m, k, Lay::Row, &mut rng);
    let b = Owned::<bf16>::random(k, n, Lay::Col, &mut rng);
    let cin: Vec<f32> = (0..m * n).map(|_| rng.next()).collect();
    let bias: Vec<f32> = (0..n).map(|_| rng.next()).collect();
    let res = Owned::<f32>::random(m, n, Lay::Row, &mut rng);
    for with_tail in [false, true] {
        let ep = Epilogue::new().with_scale(1.0, 0.5);
        let ep = if with_tail {
            ep.with_bias(&bias)
                .with_activation(Activation::Silu)
                .with_residual(res.view())
        } else {
            ep
        };
        let mut c = cin.clone();
        with_bf16_kind(Some(PackKind::Amx), || {
            LAST.with(|l| l.set(None));
            gemm_with_path(
                GemmPath::Avx512,
                a.view(),
                BSrc::Raw(b.view(), false),
                &mut c,
                n,
                &ep,
            )
            .expect("gemm");
            assert_eq!(LAST.with(|l| l.get()), Some(expected()));
        });
        for i in 0..m {
            for j in 0..n {
                let (mut s, mut sa) = (0f64, 0f64);
                for p in 0..k {
                    s += a.at(i, p) * b.at(p, j);
                    sa += (a.at(i, p) * b.at(p, j)).abs();
                }
                let mut want = s + 0.5 * cin[i * n + j] as f64;
                if with_tail {
                    want = super::super::act::apply(Activation::Silu, want + bias[j] as f64)
                        + res.at(i, j);
                }
                let got = c[i * n + j] as f64;
                assert!(
                    (got - want).abs() <= 1e-5 * (sa + 2.0),
                    "tail {with_tail}: C[{i},{j}] = {got}, want {want}"
                );
            }
        }
    }
}

/// K up to 768 (384 pairs) is one AMX K block; longer K is cut into balanced blocks of at most
/// 256 pairs.
#[test]
fn amx_k_blocks() {
    use crate::cpu::gemm::amx_pack::layout;
    for (k, blocks, kcu) in [
        (32, 1, 16),
        (768, 1, 384),
        (770, 2, 208),
        (1000, 2, 256),
        (2880, 6, 240),
    ] {
        let l = layout(k, 64, false);
        assert_eq!((l.nblk, l.kcu), (blocks, kcu), "K = {k}");
    }
    assert_eq!(layout(2880, 64, true).nblk, 1, "GLU keeps K whole");
}
