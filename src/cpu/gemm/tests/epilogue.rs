//! Every epilogue (alpha/beta, bias, activations, residual, GLU) on every dtype and path,
//! including K large enough to need several K blocks.

use super::util::{both_paths, Case, Ep, Lay};
use crate::cpu::gemm::Runner;
use crate::desc::Activation;
use crate::WithDType;
use half::{bf16, f16};

const ACTS: [Activation; 5] = [
    Activation::None,
    Activation::Relu,
    Activation::Gelu,
    Activation::GeluTanh,
    Activation::Silu,
];

const SHAPES: [(usize, usize, usize); 5] = [
    (17, 600, 65),
    (129, 3, 33),
    (14, 257, 32),
    (65, 1000, 17),
    (1, 1, 1),
];

fn epilogues<T: Runner + WithDType>(seed: u64) {
    let mut eps = vec![
        Ep::AlphaBeta,
        Ep::Bias,
        Ep::Residual(false),
        Ep::Residual(true),
    ];
    eps.extend(ACTS.map(Ep::Act));
    eps.extend(ACTS.map(Ep::All));
    for (i, &(m, k, n)) in SHAPES.iter().enumerate() {
        for (j, &ep) in eps.iter().enumerate() {
            for prepacked in [false, true] {
                let cs = Case {
                    ep,
                    prepacked,
                    ..Case::plain(m, k, n)
                };
                both_paths::<T>(cs, seed + (i * 100 + j) as u64);
            }
        }
    }
}

#[test]
fn epilogues_f32() {
    epilogues::<f32>(1000);
}

#[test]
fn epilogues_bf16() {
    epilogues::<bf16>(2000);
}

#[test]
fn epilogues_f16() {
    epilogues::<f16>(3000);
}

fn glu<T: Runner + WithDType>(seed: u64) {
    let shapes = [
        (1, 1, 1),
        (17, 65, 16),
        (63, 129, 17),
        (129, 600, 40),
        (15, 3, 33),
        (30, 1000, 7),
    ];
    for (i, &(m, k, n)) in shapes.iter().enumerate() {
        for (j, act) in ACTS.into_iter().enumerate() {
            for prepacked in [false, true] {
                for ep in [Ep::Plain, Ep::Act(act), Ep::All(act)] {
                    let lb = if j % 2 == 0 { Lay::Row } else { Lay::Col };
                    let cs = Case {
                        ep,
                        prepacked,
                        glu: true,
                        lb,
                        ..Case::plain(m, k, n)
                    };
                    both_paths::<T>(cs, seed + (i * 100 + j) as u64);
                }
            }
        }
    }
}

#[test]
fn geglu_f32() {
    glu::<f32>(4000);
}

#[test]
fn geglu_bf16() {
    glu::<bf16>(5000);
}

#[test]
fn geglu_f16() {
    glu::<f16>(6000);
}
