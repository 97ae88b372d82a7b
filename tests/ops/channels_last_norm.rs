//! GroupNorm (+ fused SiLU) on channels-last inputs: the output keeps the channels-last format
//! (dense NHWC), equals the NCHW path's result, and matches a plain f64 reference, over odd
//! channel/group counts, spatial sizes, batches, dtypes, affine or not, several statistics
//! blocks, non-dense channels-last views and a large offset — on every device (the Xpu reads
//! and writes dense channels-last data in place too).

use crate::common;
use common::{assert_close, devices, eps, randn, values, FLOATS};
use xpu::{DType, Device, MemoryFormat, Tensor};

const EPS: f64 = 1e-5;

/// Plain f64 reference of PyTorch's group_norm (+ SiLU) for NCHW-ordered values `x`.
fn reference(
    x: &[f64],
    shape: &[usize],
    groups: usize,
    silu: bool,
    w: Option<&[f64]>,
    b: Option<&[f64]>,
) -> Vec<f64> {
    let (channels, inner) = (shape[1], shape[2..].iter().product::<usize>());
    let len = channels / groups * inner;
    let mut out = vec![0.0; x.len()];
    for r in 0..x.len() / len.max(1) {
        let row = &x[r * len..(r + 1) * len];
        let mean = row.iter().sum::<f64>() / len as f64;
        let var = row.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / len as f64;
        for (j, &v) in row.iter().enumerate() {
            let c = (r % groups) * (channels / groups) + j / inner;
            let mut y = (v - mean) / (var + EPS).sqrt();
            y = y * w.map_or(1.0, |w| w[c]) + b.map_or(0.0, |b| b[c]);
            if silu {
                y /= 1.0 + (-y).exp();
            }
            out[r * len + j] = y;
        }
    }
    out
}

fn run(x: &Tensor, g: usize, silu: bool, w: Option<&Tensor>, b: Option<&Tensor>) -> Tensor {
    if silu {
        x.group_norm_silu(g, w, b, EPS).unwrap()
    } else {
        x.group_norm(g, w, b, EPS).unwrap()
    }
}

fn tol(dtype: DType) -> f64 {
    match dtype {
        DType::F32 => 2e-5,
        _ => 2.0 * eps(dtype),
    }
}

/// Checks one channels-last case against the NCHW path and the f64 reference.
fn check(what: &str, x_cl: &Tensor, g: usize, silu: bool, w: Option<&Tensor>, b: Option<&Tensor>) {
    assert_eq!(x_cl.memory_format(), MemoryFormat::ChannelsLast, "{what}");
    let dtype = x_cl.dtype();
    let x_nchw = x_cl.contiguous().unwrap();
    let got = run(x_cl, g, silu, w, b);
    assert_eq!(got.shape(), x_cl.shape(), "{what}");
    assert_eq!(got.dtype(), dtype, "{what}");
    assert_eq!(got.memory_format(), MemoryFormat::ChannelsLast, "{what}");
    assert!(got.is_contiguous_for(MemoryFormat::ChannelsLast), "{what}");
    let nchw = run(&x_nchw, g, silu, w, b);
    assert!(nchw.is_contiguous(), "{what}");
    let t = tol(dtype);
    let got_v = values(&got);
    // Against the NCHW kernel: the same formula, up to f32 rounding of the statistics (one
    // 16-bit rounding step apart at most).
    let same = match dtype {
        DType::F32 => 2e-6,
        _ => eps(dtype),
    };
    assert_close(
        &format!("{what} vs NCHW"),
        &got_v,
        &values(&nchw),
        same,
        same,
    );
    let want = reference(
        &values(&x_nchw),
        x_cl.shape(),
        g,
        silu,
        w.map(values).as_deref(),
        b.map(values).as_deref(),
    );
    assert_close(&format!("{what} vs f64"), &got_v, &want, t, t);
}

fn cl(x: &Tensor) -> Tensor {
    x.to_memory_format(MemoryFormat::ChannelsLast).unwrap()
}

/// `x` on `device` in its memory format, made there (`cl`) for channels-last views.
fn on(device: Device, x: &Tensor) -> Tensor {
    let moved = x.to(device).unwrap();
    if x.memory_format() == MemoryFormat::ChannelsLast {
        cl(&moved)
    } else {
        moved
    }
}

#[test]
fn group_norm_channels_last_sweep() {
    for device in devices() {
        sweep(device);
    }
}

fn sweep(device: Device) {
    let mut seed = 100;
    for &dtype in &FLOATS {
        for (channels, groups) in [(6usize, 3usize), (33, 11), (6, 1), (33, 33)] {
            for (h, w) in [(1usize, 1usize), (7, 1), (1, 7), (13, 13), (7, 13)] {
                for batch in [1usize, 2] {
                    let shape = [batch, channels, h, w];
                    seed += 1;
                    // Channels-last data with a mean far from zero (exercises the two-pass stats).
                    let x = on(
                        device,
                        &cl(&randn(&shape, dtype, seed).add_scalar(3.0).unwrap()),
                    );
                    if x.memory_format() != MemoryFormat::ChannelsLast {
                        // [N, C, 1, 1]-like shapes: size-1 dims decide as in PyTorch, and
                        // to_memory_format gives them channels-last strides.
                        panic!("{shape:?}: to_memory_format did not give channels-last");
                    }
                    let wt = on(device, &randn(&[channels], dtype, seed + 1000));
                    let bs = on(device, &randn(&[channels], dtype, seed + 2000));
                    for silu in [false, true] {
                        for affine in [false, true] {
                            let what = format!(
                                "{device:?} {dtype} {shape:?} g{groups} silu {silu} {affine}"
                            );
                            let (wo, bo) = if affine {
                                (Some(&wt), Some(&bs))
                            } else {
                                (None, None)
                            };
                            check(&what, &x, groups, silu, wo, bo);
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn group_norm_channels_last_many_blocks() {
    // Several statistics blocks per batch item (a partial last one), run in parallel.
    for device in devices() {
        for (shape, groups) in [([2usize, 64, 48, 48], 32usize), ([1, 6, 100, 100], 3)] {
            for &dtype in &FLOATS {
                let x = cl(&randn(&shape, dtype, 7)
                    .mul_scalar(2.0)
                    .unwrap()
                    .add_scalar(-5.0)
                    .unwrap());
                let w = randn(&[shape[1]], dtype, 8);
                let b = randn(&[shape[1]], dtype, 9);
                check(
                    &format!("{device:?} {dtype} {shape:?}"),
                    &on(device, &x),
                    groups,
                    true,
                    Some(&on(device, &w)),
                    Some(&on(device, &b)),
                );
            }
        }
    }
}

#[test]
fn group_norm_channels_last_views() {
    for device in devices() {
        for &dtype in &FLOATS {
            // A channel slice of a channels-last tensor: channels-last but not dense (one copy).
            let x = on(device, &cl(&randn(&[2, 9, 5, 3], dtype, 11)))
                .narrow(1, 2, 6)
                .unwrap();
            assert!(!x.is_contiguous_for(MemoryFormat::ChannelsLast));
            let w = on(device, &randn(&[6], dtype, 12));
            let what = format!("{device:?} {dtype}");
            check(&format!("{what} narrowed"), &x, 3, true, Some(&w), None);
            // A dense channels-last view at an offset inside a bigger storage.
            let big = on(device, &randn(&[3, 5, 4, 33], dtype, 13));
            let x = big.narrow(0, 1, 2).unwrap().permute(&[0, 3, 1, 2]).unwrap();
            assert!(x.is_contiguous_for(MemoryFormat::ChannelsLast));
            check(
                &format!("{what} offset"),
                &x,
                11,
                false,
                None,
                Some(&w.pad(&[0, 27], 0.5).unwrap()),
            );
        }
    }
}

#[test]
fn group_norm_channels_last_on_xpu_keeps_format() {
    if !common::xpu() {
        return;
    }
    let x = cl(&randn(&[2, 6, 7, 5], DType::F32, 21));
    let w = randn(&[6], DType::F32, 22);
    let cpu = run(&x, 3, true, Some(&w), None);
    let to = |t: &Tensor| t.to(Device::Xpu).unwrap();
    let gx = cl(&to(&x));
    assert_eq!(gx.memory_format(), MemoryFormat::ChannelsLast);
    let gpu = run(&gx, 3, true, Some(&to(&w)), None);
    assert_eq!(gpu.memory_format(), MemoryFormat::ChannelsLast);
    let t = tol(DType::F32);
    assert_close("xpu channels-last", &values(&gpu), &values(&cpu), t, t);
}
