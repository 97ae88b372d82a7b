//! The vec4 tile configs (`LargeVec4`, `MediumVec4`) run the same FMAs in the same order as
//! their scalar forms (`Large`, `Medium`): same bits, for every dtype, layout, epilogue and
//! weight layout, on shapes with full and partial tiles, groups and strides. (Their results
//! against the Cpu reference are checked with the other tiles in `main.rs`.)

use super::common::{self, randn};
use super::{gpu_lock, params};
use xpu::ops::conv_xpu::{conv2d_xpu, ConvTile, ConvXpuArgs};
use xpu::{Activation, Conv2dParams, DType, Device, Tensor};

/// Output bits of one convolution of `x` by `w` (bias `b`, residual `res`) with `tile`.
fn bits(
    (x, w, b, res): (&Tensor, &Tensor, &Tensor, &Tensor),
    p: Conv2dParams,
    tile: ConvTile,
    nhwc_out: bool,
    act: Activation,
) -> Vec<u32> {
    let args = ConvXpuArgs {
        bias: Some(b),
        residual: Some(res),
        activation: act,
        channels_last_out: nhwc_out,
        tile,
        winograd_filters: None,
    };
    let y = conv2d_xpu(x, w, p, &args).unwrap();
    let y = y.to_dtype(DType::F32).unwrap();
    y.to_vec::<f32>()
        .unwrap()
        .iter()
        .map(|v| v.to_bits())
        .collect()
}

#[test]
fn vec4_tiles_give_the_scalar_tiles_bits() {
    if !common::xpu() {
        return;
    }
    let _g = gpu_lock();
    // (n, c, h, w, o, k, params): 130 pixels by 140 channels spans full and partial tiles of
    // both sizes; the grouped and strided cases take other index paths.
    let cases = [
        (2, 20, 13, 10, 140, 3, params(1, 1, 1, 1)),
        (1, 33, 12, 11, 66, 3, params(2, 1, 1, 3)),
        (1, 9, 17, 17, 130, 1, params(1, 0, 1, 1)),
    ];
    let mut seed = 500;
    for (i, &(n, c, h, w, o, k, p)) in cases.iter().enumerate() {
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            for nhwc in [false, true] {
                seed += 10;
                let x = randn(&[n, c, h, w], dtype, seed).to(Device::Xpu).unwrap();
                let x = if nhwc {
                    x.to_memory_format(xpu::MemoryFormat::ChannelsLast).unwrap()
                } else {
                    x
                };
                let wt = randn(&[o, c / p.groups, k, k], dtype, seed + 1);
                let wt = wt.to(Device::Xpu).unwrap();
                let b = randn(&[o], dtype, seed + 2).to(Device::Xpu).unwrap();
                let probe = conv2d_xpu(&x, &wt, p, &ConvXpuArgs::default()).unwrap();
                let res = randn(probe.shape(), dtype, seed + 3)
                    .to(Device::Xpu)
                    .unwrap();
                let act = [Activation::None, Activation::Silu, Activation::Gelu][i];
                for (scalar, vec4) in [
                    (ConvTile::Large, ConvTile::LargeVec4),
                    (ConvTile::Medium, ConvTile::MediumVec4),
                ] {
                    let run = |t| bits((&x, &wt, &b, &res), p, t, nhwc, act);
                    assert_eq!(
                        run(scalar),
                        run(vec4),
                        "case {i} {dtype} nhwc {nhwc}: {vec4:?} differs from {scalar:?}"
                    );
                }
            }
        }
    }
}
