//! Channels-last inputs keep their format through nearest upsampling, nearest interpolation,
//! padding and channel concatenation (as in PyTorch), with exactly the values of the NCHW path;
//! concatenations that are not channel-wise of channels-last parts stay contiguous.

use crate::common;
use common::{randn, values, FLOATS};
use xpu::{DType, Device, MemoryFormat, Tensor};

fn cl(x: &Tensor) -> Tensor {
    x.to_memory_format(MemoryFormat::ChannelsLast).unwrap()
}

/// `got` is dense channels-last and has exactly the values of `want`.
fn same_cl(what: &str, got: &Tensor, want: &Tensor) {
    assert_eq!(got.shape(), want.shape(), "{what}");
    assert_eq!(got.memory_format(), MemoryFormat::ChannelsLast, "{what}");
    assert!(got.is_contiguous_for(MemoryFormat::ChannelsLast), "{what}");
    assert_eq!(values(got), values(want), "{what}");
}

#[test]
fn upsample_interpolate_pad_keep_channels_last() {
    for &dtype in &FLOATS {
        for (c, h, w) in [(3usize, 1usize, 1usize), (6, 7, 5), (33, 4, 13)] {
            let x = randn(&[2, c, h, w], dtype, 3);
            let xc = cl(&x);
            let what = format!("{dtype} [2, {c}, {h}, {w}]");
            let up = xc.upsample_nearest2d(2).unwrap();
            same_cl(
                &format!("{what} up x2"),
                &up,
                &x.upsample_nearest2d(2).unwrap(),
            );
            let up3 = xc.upsample_nearest2d(3).unwrap();
            same_cl(
                &format!("{what} up x3"),
                &up3,
                &x.upsample_nearest2d(3).unwrap(),
            );
            for size in [[2 * h, 2 * w], [h + 3, 2 * w + 1], [h, w]] {
                let y = xc.interpolate_nearest(&size).unwrap();
                let want = x.interpolate_nearest(&size).unwrap();
                same_cl(&format!("{what} interpolate {size:?}"), &y, &want);
            }
            for pads in [vec![0usize, 1, 0, 1], vec![2, 0], vec![1, 2, 0, 3, 1, 1]] {
                let y = xc.pad(&pads, 0.5).unwrap();
                same_cl(
                    &format!("{what} pad {pads:?}"),
                    &y,
                    &x.pad(&pads, 0.5).unwrap(),
                );
            }
        }
    }
}

#[test]
fn channel_cat_keeps_channels_last() {
    for &dtype in &FLOATS {
        for (h, w) in [(1usize, 1usize), (5, 7), (16, 3)] {
            let a = randn(&[2, 6, h, w], dtype, 1);
            let b = randn(&[2, 33, h, w], dtype, 2);
            let c = randn(&[2, 2, h, w], dtype, 3);
            let want = Tensor::cat(&[&a, &b, &c], 1).unwrap();
            assert!(want.is_contiguous());
            let got = Tensor::cat(&[&cl(&a), &cl(&b), &cl(&c)], 1).unwrap();
            same_cl(&format!("{dtype} {h}x{w} cat"), &got, &want);
            // Mixed formats: contiguous, same values.
            let mixed = Tensor::cat(&[&cl(&a), &b], 1).unwrap();
            assert!(mixed.is_contiguous());
            assert_eq!(values(&mixed), values(&Tensor::cat(&[&a, &b], 1).unwrap()));
            // Channels-last parts joined along any other dim stay channels-last (PyTorch).
            for dim in [0, 2, 3] {
                let got = Tensor::cat(&[&cl(&a), &cl(&a), &cl(&a)], dim).unwrap();
                let want = Tensor::cat(&[&a, &a, &a], dim).unwrap();
                same_cl(&format!("{dtype} {h}x{w} cat on {dim}"), &got, &want);
            }
        }
    }
    // A large cat (parallel row copies).
    let a = randn(&[2, 320, 32, 32], DType::F32, 4);
    let b = randn(&[2, 640, 32, 32], DType::F32, 5);
    let got = Tensor::cat(&[&cl(&a), &cl(&b)], 1).unwrap();
    same_cl("large cat", &got, &Tensor::cat(&[&a, &b], 1).unwrap());
}

#[test]
fn channels_last_ops_on_xpu() {
    if !common::xpu() {
        return;
    }
    let x = randn(&[2, 6, 5, 3], DType::F32, 9);
    let g = cl(&x.to(Device::Xpu).unwrap());
    let up = g.upsample_nearest2d(2).unwrap();
    same_cl("xpu up", &up, &x.upsample_nearest2d(2).unwrap());
    let cat = Tensor::cat(&[&g, &g], 1).unwrap();
    same_cl("xpu cat", &cat, &Tensor::cat(&[&x, &x], 1).unwrap());
}
