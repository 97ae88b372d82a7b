//! Channels-last memory format and the fused conv2d: `to_memory_format` round trips, conv2d on
//! NCHW and channels-last inputs (output format, values against direct f64 loops with the
//! epilogue `act(conv + bias) + residual`), the fused builder against its unfused sequence,
//! `nn::Conv2d`, and Xpu against Cpu — on odd channel counts (3, 5, 33) and spatial sizes (1, 7,
//! 13), every float dtype.

use crate::common;
use common::{assert_close, eps, randn, values, FLOATS};
use xpu::nn::Conv2d;
use xpu::{Activation, Conv2dParams, DType, Device, Error, MemoryFormat, Tensor};

/// Direct convolution in f64 with the fused epilogue; `x` NCHW values, `wt` OIHW values,
/// `res` NCHW output-shaped values.
fn direct(
    x: &[f64],
    [n, c, h, w]: [usize; 4],
    wt: &[f64],
    [o, kh, kw]: [usize; 3],
    p: Conv2dParams,
    (bias, act, res): (Option<&[f64]>, Activation, Option<&[f64]>),
) -> Vec<f64> {
    let (cg, og) = (c / p.groups, o / p.groups);
    let ho = (h + 2 * p.padding.0 - p.dilation.0 * (kh - 1) - 1) / p.stride.0 + 1;
    let wo = (w + 2 * p.padding.1 - p.dilation.1 * (kw - 1) - 1) / p.stride.1 + 1;
    let mut out = vec![0.0; n * o * ho * wo];
    for b in 0..n {
        for oc in 0..o {
            for i in 0..ho {
                for j in 0..wo {
                    let mut acc = bias.map_or(0.0, |bb| bb[oc]);
                    for ci in 0..cg {
                        let ch = oc / og * cg + ci;
                        for u in 0..kh {
                            for v in 0..kw {
                                let y = (i * p.stride.0 + u * p.dilation.0) as isize
                                    - p.padding.0 as isize;
                                let z = (j * p.stride.1 + v * p.dilation.1) as isize
                                    - p.padding.1 as isize;
                                if y >= 0 && z >= 0 && (y as usize) < h && (z as usize) < w {
                                    acc += x[((b * c + ch) * h + y as usize) * w + z as usize]
                                        * wt[((oc * cg + ci) * kh + u) * kw + v];
                                }
                            }
                        }
                    }
                    let acc = match act {
                        Activation::None => acc,
                        Activation::Silu => acc / (1.0 + (-acc).exp()),
                        Activation::Relu => acc.max(0.0),
                        other => panic!("no reference for {other:?}"),
                    };
                    let idx = ((b * o + oc) * ho + i) * wo + j;
                    out[idx] = acc + res.map_or(0.0, |r| r[idx]);
                }
            }
        }
    }
    out
}

fn cl(t: &Tensor) -> Tensor {
    t.to_memory_format(MemoryFormat::ChannelsLast).unwrap()
}

#[test]
fn memory_format_round_trips_on_every_device() {
    for device in common::devices() {
        let x = randn(&[2, 5, 7, 3], DType::F32, 1).to(device).unwrap();
        let y = cl(&x);
        assert_eq!(y.shape(), &[2, 5, 7, 3]);
        assert_eq!(y.strides(), &[105, 1, 15, 5]);
        assert_eq!(y.memory_format(), MemoryFormat::ChannelsLast);
        assert!(y.is_contiguous_for(MemoryFormat::ChannelsLast) && !y.is_contiguous());
        assert_eq!(values(&y), values(&x), "{device}: same logical values");
        let z = y.to_memory_format(MemoryFormat::Contiguous).unwrap();
        assert!(z.is_contiguous());
        assert_eq!(values(&z), values(&x));
        // Already channels-last: a view, no copy; strided views keep their suggestion.
        assert_eq!(cl(&y).strides(), y.strides());
        assert_eq!(
            y.narrow(1, 1, 3).unwrap().memory_format(),
            MemoryFormat::ChannelsLast
        );
        assert_eq!(
            values(&cl(&x.narrow(3, 1, 2).unwrap())),
            values(&x.narrow(3, 1, 2).unwrap())
        );
    }
    let e = randn(&[3, 4], DType::F32, 1).to_memory_format(MemoryFormat::ChannelsLast);
    assert!(matches!(e, Err(Error::ShapeMismatch { .. })), "{e:?}");
}

/// (input [N, C, H, W], (O, kh, kw), params).
type Case = ([usize; 4], [usize; 3], Conv2dParams);

fn pad(p: usize) -> Conv2dParams {
    Conv2dParams {
        padding: (p, p),
        ..Default::default()
    }
}

fn cases() -> Vec<Case> {
    let s2 = |p: usize| Conv2dParams {
        stride: (2, 2),
        ..pad(p)
    };
    vec![
        ([2, 3, 7, 7], [5, 3, 3], pad(1)),
        ([1, 5, 13, 7], [33, 3, 3], s2(1)),
        ([2, 33, 7, 13], [5, 1, 1], pad(0)),
        ([1, 33, 13, 13], [3, 1, 1], s2(0)),
        ([2, 5, 1, 1], [3, 3, 3], pad(1)),
        ([1, 3, 1, 7], [5, 1, 1], pad(0)),
        (
            [1, 6, 7, 5],
            [9, 3, 3],
            Conv2dParams {
                groups: 3,
                ..pad(1)
            },
        ),
        (
            [1, 4, 13, 7],
            [2, 3, 2],
            Conv2dParams {
                dilation: (2, 1),
                stride: (1, 2),
                padding: (2, 0),
                groups: 2,
            },
        ),
    ]
}

/// Cpu against direct loops and Xpu against Cpu, for each dtype, input format and epilogue.
#[test]
fn fused_conv_matches_direct_loops_in_both_formats() {
    let devices = common::devices();
    let epilogues = [
        (false, Activation::None, false),
        (true, Activation::None, false),
        (true, Activation::Silu, false),
        (false, Activation::None, true),
        (true, Activation::Silu, true),
    ];
    for &dtype in &FLOATS {
        for (ci, &(shape, [o, kh, kw], p)) in cases().iter().enumerate() {
            let x = randn(&shape, dtype, ci as u64);
            let wt = randn(&[o, shape[1] / p.groups, kh, kw], dtype, 100 + ci as u64);
            let bias = randn(&[o], dtype, 200 + ci as u64);
            let y0 = x.conv2d(&wt, None, p).unwrap();
            let res = randn(y0.shape(), dtype, 300 + ci as u64);
            let k = (shape[1] / p.groups * kh * kw) as f64;
            let tol = if dtype == DType::F32 {
                1e-5
            } else {
                4.0 * eps(dtype)
            } * k.sqrt()
                + 1e-5;
            for (ei, &(with_bias, act, with_res)) in epilogues.iter().enumerate() {
                let (bv, rv) = (values(&bias), values(&res));
                let want = direct(
                    &values(&x),
                    shape,
                    &values(&wt),
                    [o, kh, kw],
                    p,
                    (
                        with_bias.then_some(&bv[..]),
                        act,
                        with_res.then_some(&rv[..]),
                    ),
                );
                for fmt in [MemoryFormat::Contiguous, MemoryFormat::ChannelsLast] {
                    let what = format!("{dtype} case {ci} epilogue {ei} {fmt:?}");
                    let run = |device: Device| {
                        let xd = x.to(device).unwrap().to_memory_format(fmt).unwrap();
                        let (wd, bd) = (wt.to(device).unwrap(), bias.to(device).unwrap());
                        // The residual in the other format, to cover mixed layouts.
                        let other = match fmt {
                            MemoryFormat::Contiguous => MemoryFormat::ChannelsLast,
                            MemoryFormat::ChannelsLast => MemoryFormat::Contiguous,
                        };
                        let rd = res.to(device).unwrap().to_memory_format(other).unwrap();
                        let mut b = xd.conv2d_fused(&wd, p).activation(act);
                        if with_bias {
                            b = b.bias(&bd);
                        }
                        if with_res {
                            b = b.residual(&rd);
                        }
                        let y = b.run().unwrap();
                        assert_eq!(y.shape(), y0.shape(), "{what}");
                        let want_fmt = if xd.memory_format() == MemoryFormat::ChannelsLast {
                            MemoryFormat::ChannelsLast
                        } else {
                            MemoryFormat::Contiguous
                        };
                        assert!(y.is_contiguous_for(want_fmt), "{what}: {:?}", y.strides());
                        (values(&y), values(&b.run_unfused().unwrap()))
                    };
                    let (cpu, cpu_unfused) = run(Device::Cpu);
                    assert_close(&format!("cpu {what}"), &cpu, &want, tol, tol);
                    assert_close(
                        &format!("cpu unfused {what}"),
                        &cpu_unfused,
                        &want,
                        tol,
                        tol,
                    );
                    for &device in &devices[1..] {
                        let (got, unfused) = run(device);
                        assert_close(&format!("{device} {what}"), &got, &cpu, tol, tol);
                        assert_close(
                            &format!("{device} unfused {what}"),
                            &unfused,
                            &cpu,
                            tol,
                            tol,
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn weight_in_channels_last_gives_channels_last_output() {
    let x = randn(&[1, 3, 7, 7], DType::F32, 1);
    let w = cl(&randn(&[5, 3, 3, 3], DType::F32, 2));
    let y = x.conv2d(&w, None, pad(1)).unwrap();
    assert_eq!(y.memory_format(), MemoryFormat::ChannelsLast);
    let want = x.conv2d(&w.contiguous().unwrap(), None, pad(1)).unwrap();
    assert_close("weight format", &values(&y), &values(&want), 1e-5, 1e-5);
}

#[test]
fn conv2d_layer_forward_to_and_errors() {
    let devices = common::devices();
    let w = randn(&[5, 3, 3, 3], DType::F32, 1);
    let b = randn(&[5], DType::F32, 2);
    let layer = Conv2d::new(w.clone(), Some(b.clone()), pad(1)).unwrap();
    assert_eq!((layer.in_channels(), layer.out_channels()), (3, 5));
    assert_eq!(layer.kernel_size(), (3, 3));
    assert_eq!(layer.params(), pad(1));
    assert!(format!("{layer:?}").contains("Conv2d(in=3, out=5"));
    let x = randn(&[2, 3, 13, 7], DType::F32, 3);
    let r = randn(&[2, 5, 13, 7], DType::F32, 4);
    let want = x
        .conv2d_fused(&w, pad(1))
        .bias(&b)
        .activation(Activation::Silu)
        .residual(&r);
    let want = values(&want.run_unfused().unwrap());
    assert!(layer.is_prepacked(), "Cpu layers prepack their weights");
    for device in devices {
        let l = layer.to(device).unwrap();
        assert_eq!(l.is_prepacked(), device == Device::Cpu);
        let (xd, rd) = (cl(&x.to(device).unwrap()), r.to(device).unwrap());
        let y = l.forward_fused(&xd, Some(&rd), Activation::Silu).unwrap();
        assert_eq!(y.memory_format(), MemoryFormat::ChannelsLast, "{device}");
        assert_close(&format!("{device} layer"), &values(&y), &want, 1e-4, 1e-4);
        let plain = values(&l.forward(&xd).unwrap());
        let plain_want = values(&x.conv2d(&w, Some(&b), pad(1)).unwrap());
        assert_close(
            &format!("{device} forward"),
            &plain,
            &plain_want,
            1e-4,
            1e-4,
        );
        let h = l.to_dtype(DType::BF16).unwrap();
        assert_eq!(h.weight().dtype(), DType::BF16);
        let yb = h.forward(&xd.to_dtype(DType::BF16).unwrap()).unwrap();
        assert_close(
            &format!("{device} bf16 layer"),
            &values(&yb),
            &plain_want,
            0.1,
            0.05,
        );
    }
    let bad = |w: Tensor, b: Option<Tensor>, p: Conv2dParams| Conv2d::new(w, b, p).unwrap_err();
    assert!(matches!(
        bad(randn(&[5, 3, 3], DType::F32, 1), None, pad(0)),
        Error::ShapeMismatch { .. }
    ));
    assert!(matches!(
        bad(w.clone(), Some(randn(&[4], DType::F32, 1)), pad(0)),
        Error::ShapeMismatch { .. }
    ));
    let g2 = Conv2dParams {
        groups: 2,
        ..pad(0)
    };
    assert!(matches!(
        bad(w.clone(), None, g2),
        Error::InvalidArgument { .. }
    ));
    let e = bad(w.clone(), Some(b.to_dtype(DType::F16).unwrap()), pad(0));
    assert!(matches!(e, Error::DTypeMismatch { .. }), "{e}");
    let e = layer
        .forward(&randn(&[2, 4, 7, 7], DType::F32, 1))
        .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    let e = layer
        .forward(&randn(&[2, 3, 7, 7], DType::F16, 1))
        .unwrap_err();
    assert!(matches!(e, Error::DTypeMismatch { .. }), "{e}");
    let e = x
        .conv2d_fused(&w, pad(1))
        .residual(&randn(&[2, 5, 7, 7], DType::F32, 1))
        .run();
    assert!(matches!(e, Err(Error::ShapeMismatch { .. })), "{e:?}");
}

/// The ops around a UNet conv read channels-last inputs in place: values must equal the NCHW
/// computation (their output format is whatever the op produces; today a row-major copy).
#[test]
fn ops_around_conv_are_correct_on_channels_last_inputs() {
    for device in common::devices() {
        let x = randn(&[2, 6, 5, 3], DType::F32, 1).to(device).unwrap();
        let y = randn(&[2, 6, 5, 3], DType::F32, 2).to(device).unwrap();
        let (xc, yc) = (cl(&x), cl(&y));
        let pairs: Vec<(&str, Tensor, Tensor)> = vec![
            ("silu", xc.silu().unwrap(), x.silu().unwrap()),
            ("add", xc.add(&yc).unwrap(), x.add(&y).unwrap()),
            ("add mixed", xc.add(&y).unwrap(), x.add(&y).unwrap()),
            (
                "mul_scalar",
                xc.mul_scalar(0.5).unwrap(),
                x.mul_scalar(0.5).unwrap(),
            ),
            (
                "group_norm",
                xc.group_norm(3, None, None, 1e-5).unwrap(),
                x.group_norm(3, None, None, 1e-5).unwrap(),
            ),
            (
                "upsample",
                xc.upsample_nearest2d(2).unwrap(),
                x.upsample_nearest2d(2).unwrap(),
            ),
        ];
        for (what, got, want) in pairs {
            assert_eq!(got.shape(), want.shape(), "{device} {what}");
            assert_close(
                &format!("{device} {what}"),
                &values(&got),
                &values(&want),
                1e-5,
                1e-5,
            );
        }
    }
}

/// No batch items give an empty output (as in PyTorch); no input channels give the bias (the
/// empty sum; PyTorch 2.x returns a `[N, 0, Ho, Wo]` tensor here instead).
#[test]
fn empty_convolutions() {
    let b = randn(&[3], DType::F32, 1);
    let x = Tensor::zeros(&[1, 0, 5, 5], DType::F32, Device::Cpu).unwrap();
    let w = Tensor::zeros(&[3, 0, 3, 3], DType::F32, Device::Cpu).unwrap();
    let y = x.conv2d(&w, Some(&b), pad(1)).unwrap();
    assert_eq!(y.shape(), &[1, 3, 5, 5]);
    let want: Vec<f64> = values(&b).iter().flat_map(|&v| [v; 25]).collect();
    assert_close("C = 0", &values(&y), &want, 0.0, 0.0);
    let x = Tensor::zeros(&[0, 2, 5, 5], DType::F32, Device::Cpu).unwrap();
    let w = randn(&[3, 2, 3, 3], DType::F32, 2);
    assert_eq!(
        x.conv2d(&w, Some(&b), pad(1)).unwrap().shape(),
        &[0, 3, 5, 5]
    );
}

/// Residuals that broadcast over pixels (a per-image `[N, O, 1, 1]` bias like a UNet's time
/// embedding, `[1, O, 1, 1]`, `[N, 1, H, W]`): the fused conv equals its unfused sequence on
/// every device, for NCHW and channels-last inputs, f32 and 16-bit.
#[test]
fn broadcast_residuals_match_unfused() {
    let devices = common::devices();
    let p = pad(1);
    for &dtype in &FLOATS {
        let x = randn(&[3, 5, 7, 6], dtype, 1);
        let w = randn(&[9, 5, 3, 3], dtype, 2);
        let b = randn(&[9], dtype, 3);
        let tol = if dtype == DType::F32 {
            1e-5
        } else {
            4.0 * eps(dtype)
        } * 45f64.sqrt()
            + 1e-5;
        for rshape in [[3, 9, 1, 1], [1, 9, 1, 1], [3, 1, 7, 6]] {
            let r = randn(&rshape, dtype, 4);
            for fmt in [MemoryFormat::Contiguous, MemoryFormat::ChannelsLast] {
                let xf = x.to_memory_format(fmt).unwrap();
                let op = xf.conv2d_fused(&w, p).bias(&b).residual(&r);
                let want = values(&op.run_unfused().unwrap());
                for &device in &devices {
                    // The format taken on the device.
                    let (xd, wd, bd, rd) = (
                        x.to(device).unwrap().to_memory_format(fmt).unwrap(),
                        w.to(device).unwrap(),
                        b.to(device).unwrap(),
                        r.to(device).unwrap(),
                    );
                    let got = xd
                        .conv2d_fused(&wd, p)
                        .bias(&bd)
                        .residual(&rd)
                        .run()
                        .unwrap();
                    let layer = Conv2d::new(wd.clone(), Some(bd.clone()), p).unwrap();
                    let via_layer = layer
                        .forward_fused(&xd, Some(&rd), Activation::None)
                        .unwrap();
                    let what = format!("{device} {dtype} residual {rshape:?} {fmt:?}");
                    assert_close(&what, &values(&got), &want, tol, tol);
                    assert_close(
                        &format!("{what} layer"),
                        &values(&via_layer),
                        &want,
                        tol,
                        tol,
                    );
                }
            }
        }
    }
}
