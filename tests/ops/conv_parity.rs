//! conv2d: Cpu against direct convolution loops in f64, Xpu against Cpu, over strides,
//! paddings, dilations, groups, odd channel and spatial sizes, bias, and every float dtype.

use crate::common;
use common::{assert_close, eps, randn, values, FLOATS};
use xpu::{Conv2dParams, DType, Error, Tensor};

#[allow(clippy::too_many_arguments)]
fn direct(
    x: &[f64],
    (n, c, h, w): (usize, usize, usize, usize),
    wt: &[f64],
    (o, kh, kw): (usize, usize, usize),
    bias: Option<&[f64]>,
    p: Conv2dParams,
) -> (Vec<f64>, usize, usize) {
    let g = p.groups;
    let (cg, og) = (c / g, o / g);
    let ho = (h + 2 * p.padding.0 - p.dilation.0 * (kh - 1) - 1) / p.stride.0 + 1;
    let wo = (w + 2 * p.padding.1 - p.dilation.1 * (kw - 1) - 1) / p.stride.1 + 1;
    let mut out = vec![0.0; n * o * ho * wo];
    for b in 0..n {
        for oc in 0..o {
            let grp = oc / og;
            for i in 0..ho {
                for j in 0..wo {
                    let mut acc = bias.map_or(0.0, |bb| bb[oc]);
                    for ci in 0..cg {
                        let ch = grp * cg + ci;
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
                    out[((b * o + oc) * ho + i) * wo + j] = acc;
                }
            }
        }
    }
    (out, ho, wo)
}

/// (input [N, C, H, W], weight (O, kh, kw), params).
type Case = (
    (usize, usize, usize, usize),
    (usize, usize, usize),
    Conv2dParams,
);

#[test]
fn conv2d_matches_direct_loops() {
    let devices = common::devices();
    let configs: &[Case] = &[
        (
            (2, 3, 7, 7),
            (5, 3, 3),
            Conv2dParams {
                padding: (1, 1),
                ..Default::default()
            },
        ),
        (
            (1, 5, 13, 7),
            (4, 3, 3),
            Conv2dParams {
                stride: (2, 2),
                padding: (1, 1),
                ..Default::default()
            },
        ),
        ((2, 4, 1, 1), (6, 1, 1), Conv2dParams::default()),
        (
            (1, 6, 9, 11),
            (6, 3, 3),
            Conv2dParams {
                padding: (1, 1),
                groups: 6,
                ..Default::default()
            },
        ),
        (
            (1, 4, 13, 13),
            (2, 3, 2),
            Conv2dParams {
                dilation: (2, 3),
                stride: (1, 2),
                padding: (2, 0),
                groups: 2,
            },
        ),
        ((2, 33, 7, 5), (3, 1, 1), Conv2dParams::default()),
    ];
    for &dtype in &FLOATS {
        for (ci, &((n, c, h, w), (o, kh, kw), p)) in configs.iter().enumerate() {
            let x = randn(&[n, c, h, w], dtype, ci as u64);
            let wt = randn(&[o, c / p.groups, kh, kw], dtype, 100 + ci as u64);
            let bias = randn(&[o], dtype, 200 + ci as u64);
            for with_bias in [false, true] {
                let bref = if with_bias { Some(&bias) } else { None };
                let bv = values(&bias);
                let (want, ho, wo) = direct(
                    &values(&x),
                    (n, c, h, w),
                    &values(&wt),
                    (o, kh, kw),
                    if with_bias { Some(&bv) } else { None },
                    p,
                );
                let k = (c / p.groups * kh * kw) as f64;
                let t = if dtype == DType::F32 {
                    1e-5
                } else {
                    4.0 * eps(dtype)
                } * k.sqrt()
                    + 1e-5;
                let what = format!("{dtype} config {ci} bias {with_bias}");
                let cpu = x.conv2d(&wt, bref, p).unwrap();
                assert_eq!(cpu.shape(), &[n, o, ho, wo], "{what}");
                assert_close(&format!("cpu {what}"), &values(&cpu), &want, t, t);
                for &device in &devices[1..] {
                    let gx = x.to(device).unwrap();
                    let gb = bias.to(device).unwrap();
                    let gpu = gx
                        .conv2d(
                            &wt.to(device).unwrap(),
                            if with_bias { Some(&gb) } else { None },
                            p,
                        )
                        .unwrap();
                    assert_close(
                        &format!("{device} {what}"),
                        &values(&gpu),
                        &values(&cpu),
                        t,
                        t,
                    );
                }
            }
        }
    }
}

#[test]
fn conv2d_on_a_strided_view_and_errors() {
    let x = randn(&[1, 3, 9, 8], DType::F32, 1).transpose(2, 3).unwrap();
    let w = randn(&[2, 3, 3, 3], DType::F32, 2);
    let y = x.conv2d(&w, None, Conv2dParams::default()).unwrap();
    let (want, _, _) = direct(
        &values(&x.contiguous().unwrap()),
        (1, 3, 8, 9),
        &values(&w),
        (2, 3, 3),
        None,
        Conv2dParams::default(),
    );
    assert_close("strided input", &values(&y), &want, 1e-5, 1e-5);
    let e = x
        .conv2d(
            &randn(&[2, 2, 3, 3], DType::F32, 3),
            None,
            Conv2dParams::default(),
        )
        .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    let e = x
        .conv2d(
            &w,
            None,
            Conv2dParams {
                groups: 2,
                ..Default::default()
            },
        )
        .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    let e = x
        .conv2d(
            &randn(&[2, 3, 30, 3], DType::F32, 3),
            None,
            Conv2dParams::default(),
        )
        .unwrap_err();
    assert!(e.to_string().contains("does not fit"), "{e}");
    let e = x
        .conv2d(
            &w,
            Some(&randn(&[3], DType::F32, 4)),
            Conv2dParams::default(),
        )
        .unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { .. }), "{e}");
    assert!(matches!(
        Tensor::zeros(&[3, 9, 8], DType::F32, xpu::Device::Cpu)
            .unwrap()
            .conv2d(&w, None, Conv2dParams::default()),
        Err(Error::ShapeMismatch { .. })
    ));
    assert!(matches!(
        x.conv2d(
            &w,
            None,
            Conv2dParams {
                stride: (0, 1),
                ..Default::default()
            }
        ),
        Err(Error::InvalidArgument { .. })
    ));
}
