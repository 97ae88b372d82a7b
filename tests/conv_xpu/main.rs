//! The Xpu implicit-GEMM conv2d (`xpu::ops::conv_xpu::conv2d_xpu`) against the Cpu conv2d
//! (itself tested against direct loops in conv_parity.rs), computed in f32 from the same
//! (16-bit-exact) inputs with the epilogue applied by separate Cpu ops: odd channel and spatial
//! sizes, strides, paddings, dilation, groups, 1×1 / 3×3 / 5×5 kernels, NCHW and channels-last
//! inputs and outputs, every float dtype, every epilogue, every tile config; a larger case; the
//! allocator's peak (no im2col buffer); errors.
//!
//! The Xpu result is rounded once from an f32 accumulator, so it must match the f32 reference
//! to the accumulation-order difference plus one rounding of its dtype.

#[path = "../common/mod.rs"]
mod common;
mod coop;
mod errors;
mod memory;
mod winograd;

use std::sync::{Mutex, MutexGuard};

use common::{assert_close, eps, randn, values, FLOATS};
use xpu::ops::conv_xpu::{conv2d_xpu, ConvTile, ConvXpuArgs};
use xpu::{Activation, Conv2dParams, DType, Device, Tensor};

/// The Xpu tests of this file run one at a time, so the peak-memory test sees only its own
/// allocations.
static GPU: Mutex<()> = Mutex::new(());

fn gpu_lock() -> MutexGuard<'static, ()> {
    GPU.lock().unwrap_or_else(|e| e.into_inner())
}

/// Every kernel a tile config selects (`Large` and `Medium` name the kernels of their `Vec4`
/// forms).
const TILES: [ConvTile; 4] = [
    ConvTile::Auto,
    ConvTile::Narrow,
    ConvTile::LargeVec4,
    ConvTile::MediumVec4,
];

/// Input `[n, c, h, w]`, `o` output channels, a `kh × kw` kernel and the parameters.
#[derive(Clone, Copy, Debug)]
struct Case {
    n: usize,
    c: usize,
    hw: (usize, usize),
    o: usize,
    k: (usize, usize),
    p: Conv2dParams,
}

/// Which epilogue operands a run uses.
#[derive(Clone, Copy, Debug)]
struct Epi {
    bias: bool,
    residual: bool,
    act: Activation,
}

const EPIS: [Epi; 6] = [
    Epi {
        bias: false,
        residual: false,
        act: Activation::None,
    },
    Epi {
        bias: true,
        residual: false,
        act: Activation::None,
    },
    Epi {
        bias: false,
        residual: true,
        act: Activation::None,
    },
    Epi {
        bias: false,
        residual: false,
        act: Activation::Silu,
    },
    Epi {
        bias: true,
        residual: true,
        act: Activation::Silu,
    },
    Epi {
        bias: true,
        residual: false,
        act: Activation::Gelu,
    },
];

/// How one run lays out its data.
#[derive(Clone, Copy, Debug)]
struct Run {
    dtype: DType,
    nhwc_in: bool,
    nhwc_out: bool,
    epi: Epi,
    tile: ConvTile,
    /// Weight given as a `[kh, kw, C/g, O]` array viewed as `[O, C/g, kh, kw]` (output channels
    /// adjacent in memory), else contiguous.
    w_hwio: bool,
    seed: u64,
}

fn params(stride: usize, padding: usize, dilation: usize, groups: usize) -> Conv2dParams {
    Conv2dParams {
        stride: (stride, stride),
        padding: (padding, padding),
        dilation: (dilation, dilation),
        groups,
    }
}

fn out_size(c: &Case) -> (usize, usize) {
    let f =
        |i: usize, k: usize, s: usize, pd: usize, d: usize| (i + 2 * pd - d * (k - 1) - 1) / s + 1;
    (
        f(c.hw.0, c.k.0, c.p.stride.0, c.p.padding.0, c.p.dilation.0),
        f(c.hw.1, c.k.1, c.p.stride.1, c.p.padding.1, c.p.dilation.1),
    )
}

fn f32_cpu(t: &Tensor) -> Tensor {
    t.to(Device::Cpu).unwrap().to_dtype(DType::F32).unwrap()
}

fn activate(y: Tensor, act: Activation) -> Tensor {
    match act {
        Activation::None => y,
        Activation::Relu => y.relu().unwrap(),
        Activation::Gelu => y.gelu().unwrap(),
        Activation::GeluTanh => y.gelu_tanh().unwrap(),
        Activation::Silu => y.silu().unwrap(),
    }
}

/// Runs one case on the Xpu and compares it with the f32 Cpu reference, both under the static
/// rules: `Auto` is the rule's path, whose error [`tolerance`] models, and the reference is
/// the Cpu rule's (the autotuner's picks are checked against the Cpu in
/// `tests/gpu/autotune_families.rs`).
fn check(case: &Case, r: Run) {
    common::coop16::static_rules(|| check_rules(case, r))
}

fn check_rules(case: &Case, r: Run) {
    let Case { n, c, hw, o, k, p } = *case;
    let (ho, wo) = out_size(case);
    let dt = r.dtype;
    // Channels-last tensors: NHWC arrays viewed as [N, C, H, W] (the view is made on each
    // device).
    let make = |shape: [usize; 4], nhwc: bool, seed: u64| {
        let [a, b, c, d] = shape;
        let base = if nhwc {
            randn(&[a, c, d, b], dt, seed)
        } else {
            randn(&shape, dt, seed)
        };
        let view = |t: Tensor| {
            if nhwc {
                t.permute(&[0, 3, 1, 2]).unwrap()
            } else {
                t
            }
        };
        (view(base.clone()), view(base.to(Device::Xpu).unwrap()))
    };
    let (x_cpu, x) = make([n, c, hw.0, hw.1], r.nhwc_in, r.seed);
    // The residual is read through its strides: give it the output's format.
    let (res_cpu, res) = make([n, o, ho, wo], r.nhwc_out, r.seed + 3);
    let w_cpu = if r.w_hwio {
        randn(&[k.0, k.1, c / p.groups, o], dt, r.seed + 1)
            .permute(&[3, 2, 0, 1])
            .unwrap()
    } else {
        randn(&[o, c / p.groups, k.0, k.1], dt, r.seed + 1)
    };
    let b_cpu = randn(&[o], dt, r.seed + 2);
    let mut want = f32_cpu(&x_cpu)
        .conv2d(
            &f32_cpu(&w_cpu),
            r.epi.bias.then(|| f32_cpu(&b_cpu)).as_ref(),
            p,
        )
        .unwrap();
    want = activate(want, r.epi.act);
    if r.epi.residual {
        want = want.add(&f32_cpu(&res_cpu)).unwrap();
    }
    let w = if r.w_hwio {
        w_cpu
            .permute(&[2, 3, 1, 0])
            .unwrap()
            .to(Device::Xpu)
            .unwrap()
            .permute(&[3, 2, 0, 1])
            .unwrap()
    } else {
        w_cpu.to(Device::Xpu).unwrap()
    };
    let b = b_cpu.to(Device::Xpu).unwrap();
    let args = ConvXpuArgs {
        bias: r.epi.bias.then_some(&b),
        residual: r.epi.residual.then_some(&res),
        activation: r.epi.act,
        channels_last_out: r.nhwc_out,
        tile: r.tile,
        winograd_filters: None,
    };
    let what = format!("{case:?} {r:?}");
    let got = conv2d_xpu(&x, &w, p, &args).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(got.shape(), &[n, o, ho, wo], "{what}");
    assert_eq!(got.dtype(), dt, "{what}");
    let strides = if r.nhwc_out {
        [ho * wo * o, 1, wo * o, o]
    } else {
        [o * ho * wo, ho * wo, wo, 1]
    };
    assert_eq!(got.strides(), &strides, "{what}");
    let (acc, rtol) = tolerance(case, r.tile, dt);
    assert_close(&what, &values(&got), &values(&want), acc, rtol);
}

/// Absolute and relative tolerance of a case against the f32 reference (inputs and weights
/// are standard normal, so outputs are of the order of `sqrt(K)`).
fn tolerance(case: &Case, tile: ConvTile, dt: DType) -> (f64, f64) {
    let p = case.p;
    let kk = ((case.c / p.groups) * case.k.0 * case.k.1) as f64;
    let acc = 2e-6 * kk.sqrt() + 1e-6;
    let rtol = if dt == DType::F32 { acc } else { eps(dt) };
    let may_be_winograd = tile == ConvTile::Winograd
        || (tile == ConvTile::Auto
            && case.k == (3, 3)
            && p.stride == (1, 1)
            && p.dilation == (1, 1)
            && p.groups == 1);
    if !may_be_winograd {
        return (acc, rtol);
    }
    // Winograd rounds its transformed operands to the dtype (16 bits: relative eps each) and
    // sums points whose magnitude exceeds the output's: an absolute error of a few eps of the
    // output's scale.
    (acc + 4.0 * eps(dt) * kk.sqrt(), rtol)
}

#[test]
fn odd_sizes_every_dtype_layout_and_epilogue() {
    if !common::xpu() {
        return;
    }
    let _g = gpu_lock();
    let mut seed = 0;
    for (ci, &c) in [3, 5, 33].iter().enumerate() {
        for (si, &s) in [1, 7, 13].iter().enumerate() {
            let case = Case {
                n: 1 + (ci + si) % 2,
                c,
                hw: (s, s),
                o: [5, 33, 3][(ci + si) % 3],
                k: (3, 3),
                p: params(1, 1, 1, 1),
            };
            for &dtype in &FLOATS {
                for nhwc in [false, true] {
                    for &epi in &EPIS[..5] {
                        seed += 10;
                        let run = Run {
                            dtype,
                            nhwc_in: nhwc,
                            nhwc_out: nhwc,
                            epi,
                            tile: ConvTile::Auto,
                            w_hwio: false,
                            seed,
                        };
                        check(&case, run);
                    }
                }
            }
        }
    }
}

/// The cases of `f16_even_channels_on_every_path` with the tensor-core convolution and three
/// splits of K forced (the autotuner's `gpu_conv2d` candidate `coop16` and `gpu_split_k`
/// candidate `3`): where the adapter has the tensor-core kernel each tile's K range runs as
/// three f32 partial products that the epilogue pass sums.
#[test]
fn f16_even_channels_split_k() {
    if !common::xpu() {
        return;
    }
    let _g = gpu_lock();
    xpu::config::scoped(
        |c| {
            c.autotune.force("gpu_conv2d", "coop16");
            c.autotune.force("gpu_split_k", "3");
        },
        f16_even_channels_cases,
    );
}

/// f16 with even input and output channels: the shapes the tensor-core path takes where the
/// adapter has one (NCHW and channels-last inputs and outputs, weights repacked or not, every
/// epilogue, strides, padding, dilation, 1x1 and 3x3, several row and column tiles); elsewhere
/// the same cases on the FMA kernels.
#[test]
fn f16_even_channels_on_every_path() {
    if !common::xpu() {
        return;
    }
    let _g = gpu_lock();
    f16_even_channels_cases();
}

fn f16_even_channels_cases() {
    let case = |n, c, hw, o, k, p| Case { n, c, hw, o, k, p };
    let cases = [
        case(2, 16, (13, 13), 130, (3, 3), params(1, 1, 1, 1)),
        case(1, 2, (7, 9), 2, (3, 3), params(1, 1, 1, 1)),
        case(2, 64, (9, 9), 32, (1, 1), params(1, 0, 1, 1)),
        case(1, 34, (17, 17), 66, (3, 3), params(2, 1, 1, 1)),
        case(1, 8, (11, 11), 16, (3, 3), params(1, 2, 2, 1)),
        case(1, 4, (1, 1), 8, (3, 3), params(1, 1, 1, 1)),
        case(3, 32, (16, 16), 256, (3, 3), params(1, 1, 1, 1)),
    ];
    let mut seed = 5000;
    for (i, c) in cases.iter().enumerate() {
        for (j, &(nhwc_in, nhwc_out, w_hwio)) in [
            (true, true, false),
            (false, false, false),
            (true, false, true),
            (false, true, true),
        ]
        .iter()
        .enumerate()
        {
            seed += 10;
            let run = Run {
                dtype: DType::F16,
                nhwc_in,
                nhwc_out,
                epi: EPIS[(i + j) % EPIS.len()],
                tile: ConvTile::Auto,
                w_hwio,
                seed,
            };
            check(c, run);
        }
    }
    // The layer keeps a tensor-core weight channels-last and reads it in place.
    let x = randn(&[2, 32, 12, 12], DType::F16, 7);
    let w = randn(&[48, 32, 3, 3], DType::F16, 8);
    let b = randn(&[48], DType::F16, 9);
    let want = common::coop16::static_rules(|| {
        f32_cpu(&x).conv2d(&f32_cpu(&w), Some(&f32_cpu(&b)), params(1, 1, 1, 1))
    })
    .unwrap();
    let layer = xpu::nn::Conv2d::new(w, Some(b), params(1, 1, 1, 1))
        .unwrap()
        .to(Device::Xpu)
        .unwrap();
    let x = x.to(Device::Xpu).unwrap();
    for xin in [
        x.clone(),
        x.to_memory_format(xpu::MemoryFormat::ChannelsLast).unwrap(),
    ] {
        let got = common::coop16::static_rules(|| layer.forward(&xin)).unwrap();
        let acc = 2e-6 * (288f64).sqrt() + 1e-6;
        assert_close("layer", &values(&got), &values(&want), acc, eps(DType::F16));
    }
}

#[test]
fn strides_paddings_dilation_groups_kernels_tiles() {
    if !common::xpu() {
        return;
    }
    let _g = gpu_lock();
    let case = |n, c, hw, o, k, p| Case { n, c, hw, o, k, p };
    let cases = [
        // 1x1, stride 1, even pixel count and channels: 16-bit pairs on both layouts.
        case(2, 5, (8, 6), 6, (1, 1), params(1, 0, 1, 1)),
        case(1, 33, (7, 7), 20, (1, 1), params(2, 0, 1, 1)),
        case(2, 3, (13, 13), 8, (3, 3), params(2, 1, 1, 1)),
        case(1, 6, (10, 12), 4, (3, 3), params(2, 1, 1, 2)),
        case(1, 5, (13, 7), 7, (5, 5), params(1, 2, 1, 1)),
        case(1, 4, (12, 12), 6, (5, 5), params(2, 2, 1, 1)),
        case(1, 5, (13, 13), 5, (3, 3), params(1, 2, 2, 1)),
        case(2, 6, (9, 8), 6, (3, 3), params(1, 1, 1, 6)),
        case(1, 33, (7, 5), 66, (3, 3), params(1, 1, 1, 33)),
        case(1, 8, (6, 6), 4, (3, 3), params(1, 0, 2, 2)),
        case(1, 3, (1, 1), 5, (1, 1), params(1, 0, 1, 1)),
        case(
            1,
            4,
            (5, 9),
            34,
            (3, 2),
            Conv2dParams {
                stride: (1, 2),
                padding: (2, 0),
                dilation: (2, 3),
                groups: 2,
            },
        ),
        case(2, 17, (6, 6), 140, (3, 3), params(1, 1, 1, 1)),
    ];
    check_every_dtype_and_layout(&cases, 1000, |ci, di, li| {
        TILES[(ci + 2 * di + li) % TILES.len()]
    });
}

/// Checks each case in every float dtype and every pairing of NCHW / channels-last input and
/// output, rotating the epilogues and weight layouts; `tile(case, dtype, layout)` (indices)
/// picks the kernel config.
fn check_every_dtype_and_layout(
    cases: &[Case],
    first_seed: u64,
    tile: impl Fn(usize, usize, usize) -> ConvTile,
) {
    let layouts = [(false, false), (true, true), (false, true), (true, false)];
    let mut seed = first_seed;
    for (ci, case) in cases.iter().enumerate() {
        for (di, &dtype) in FLOATS.iter().enumerate() {
            for (li, &(nhwc_in, nhwc_out)) in layouts.iter().enumerate() {
                seed += 10;
                let run = Run {
                    dtype,
                    nhwc_in,
                    nhwc_out,
                    epi: EPIS[(ci + di + li) % EPIS.len()],
                    tile: tile(ci, di, li),
                    w_hwio: (ci + li) % 3 == 1,
                    seed,
                };
                check(case, run);
            }
        }
    }
}

#[test]
fn larger_case_every_tile() {
    if !common::xpu() {
        return;
    }
    let _g = gpu_lock();
    let case = Case {
        n: 1,
        c: 64,
        hw: (32, 32),
        o: 64,
        k: (3, 3),
        p: params(1, 1, 1, 1),
    };
    let epi = EPIS[4];
    let runs = [
        (DType::F32, false, ConvTile::Auto),
        (DType::F16, true, ConvTile::Large),
        (DType::BF16, false, ConvTile::Narrow),
    ];
    for (i, (dtype, nhwc, tile)) in runs.into_iter().enumerate() {
        let run = Run {
            dtype,
            nhwc_in: nhwc,
            nhwc_out: nhwc,
            epi,
            tile,
            w_hwio: i == 1,
            seed: 7 + i as u64,
        };
        check(&case, run);
    }
}
