//! Shapes, layouts and dtypes with the plain epilogue.

use super::util::{both_paths, run_case, Case, LAYS};
use crate::cpu::gemm::GemmPath;
use half::{bf16, f16};

const DIMS: [usize; 9] = [1, 3, 17, 63, 64, 65, 127, 129, 257];

fn all_dims(path: GemmPath) {
    let mut seed = 1;
    for &m in &DIMS {
        for &k in &DIMS {
            for &n in &DIMS {
                seed += 1;
                run_case::<f32>(path, Case::plain(m, k, n), seed);
            }
        }
    }
}

#[test]
fn f32_all_dims_avx512() {
    all_dims(GemmPath::Avx512);
}

#[test]
fn f32_all_dims_avx2() {
    all_dims(GemmPath::Avx2);
}

#[test]
fn f32_all_dims_fallback() {
    all_dims(GemmPath::Fallback);
}

const SUBSET: [(usize, usize, usize); 9] = [
    (1, 1, 1),
    (3, 17, 65),
    (17, 63, 129),
    (63, 64, 127),
    (65, 257, 3),
    (129, 127, 17),
    (257, 65, 64),
    (64, 129, 63),
    (127, 3, 257),
];

#[test]
fn layouts_f32() {
    for (i, &(m, k, n)) in SUBSET.iter().enumerate() {
        for la in LAYS {
            for lb in LAYS {
                let cs = Case {
                    la,
                    lb,
                    ..Case::plain(m, k, n)
                };
                both_paths::<f32>(cs, i as u64);
            }
        }
    }
}

#[test]
fn layouts_bf16() {
    for (i, &(m, k, n)) in SUBSET.iter().enumerate() {
        for la in LAYS {
            for lb in LAYS {
                let cs = Case {
                    la,
                    lb,
                    ..Case::plain(m, k, n)
                };
                both_paths::<bf16>(cs, 100 + i as u64);
            }
        }
    }
}

#[test]
fn layouts_f16() {
    for (i, &(m, k, n)) in SUBSET.iter().enumerate() {
        for la in LAYS {
            for lb in LAYS {
                let cs = Case {
                    la,
                    lb,
                    ..Case::plain(m, k, n)
                };
                both_paths::<f16>(cs, 200 + i as u64);
            }
        }
    }
}

fn half_dims<T: super::super::Runner + crate::WithDType>() {
    let mut seed = 300;
    for &m in &[1, 17, 64, 129, 257] {
        for &k in &[1, 3, 63, 64, 65, 257] {
            for &n in &[1, 17, 63, 65, 129] {
                seed += 1;
                both_paths::<T>(Case::plain(m, k, n), seed);
            }
        }
    }
}

#[test]
fn bf16_dims() {
    half_dims::<bf16>();
}

#[test]
fn f16_dims() {
    half_dims::<f16>();
}

#[test]
fn one_dim_1000() {
    for (m, k, n) in [
        (1000, 64, 17),
        (17, 1000, 65),
        (3, 65, 1000),
        (129, 1000, 33),
    ] {
        both_paths::<f32>(Case::plain(m, k, n), 7);
        both_paths::<bf16>(Case::plain(m, k, n), 8);
        both_paths::<f16>(Case::plain(m, k, n), 9);
    }
}

#[test]
fn prepacked_matches_unpacked_bitwise() {
    for path in [GemmPath::Avx512, GemmPath::Avx2, GemmPath::Fallback] {
        for (m, k, n) in [(17, 600, 65), (129, 63, 129), (1, 1000, 3)] {
            for la in [super::util::Lay::Row, super::util::Lay::Col] {
                let cs = Case {
                    la,
                    ..Case::plain(m, k, n)
                };
                let pre = Case {
                    prepacked: true,
                    ..cs
                };
                assert_eq!(run_case::<f32>(path, cs, 5), run_case::<f32>(path, pre, 5));
                assert_eq!(
                    run_case::<bf16>(path, cs, 6),
                    run_case::<bf16>(path, pre, 6)
                );
                assert_eq!(run_case::<f16>(path, cs, 7), run_case::<f16>(path, pre, 7));
            }
        }
    }
}
