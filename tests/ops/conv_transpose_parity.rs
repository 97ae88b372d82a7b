//! `conv_transpose2d` against a scatter reference in f64 (PyTorch's definition: every input
//! element adds its weighted kernel into the output at `y·s - p + ky·d`), on every device and
//! float dtype, NCHW and channels-last, with strides, paddings that crop, output padding,
//! dilation, groups and bias; and its errors. PyTorch's values: tests/torch_parity.rs.

use crate::common;
use common::{assert_close, devices, eps, values, FLOATS};
use xpu::nn::ConvTranspose2d;
use xpu::{ConvTranspose2dParams, DType, Device, MemoryFormat, Tensor};

/// (N, Cin, H, W, Cout, kernel, params).
type Case = (
    usize,
    usize,
    usize,
    usize,
    usize,
    (usize, usize),
    ConvTranspose2dParams,
);

fn params(
    stride: (usize, usize),
    padding: (usize, usize),
    output_padding: (usize, usize),
    dilation: (usize, usize),
    groups: usize,
) -> ConvTranspose2dParams {
    ConvTranspose2dParams {
        stride,
        padding,
        output_padding,
        dilation,
        groups,
    }
}

fn cases() -> Vec<Case> {
    vec![
        (
            1,
            1,
            1,
            1,
            1,
            (1, 1),
            params((1, 1), (0, 0), (0, 0), (1, 1), 1),
        ),
        (
            2,
            3,
            5,
            4,
            4,
            (3, 3),
            params((2, 2), (1, 1), (1, 1), (1, 1), 1),
        ),
        (
            1,
            4,
            3,
            5,
            6,
            (3, 2),
            params((3, 1), (2, 0), (2, 0), (1, 1), 2),
        ),
        (
            1,
            2,
            8,
            7,
            3,
            (3, 3),
            params((1, 1), (5, 5), (0, 0), (2, 2), 1),
        ),
        (
            2,
            5,
            7,
            3,
            7,
            (4, 4),
            params((2, 3), (1, 2), (1, 2), (1, 1), 1),
        ),
        // Kernel smaller than the stride (phases without taps: bias only), and a padding that
        // crops more than a stride.
        (
            1,
            3,
            4,
            3,
            2,
            (1, 2),
            params((3, 3), (0, 1), (2, 0), (1, 1), 1),
        ),
        (
            1,
            2,
            6,
            5,
            4,
            (5, 4),
            params((2, 2), (3, 2), (1, 0), (1, 1), 2),
        ),
        // Dilation with a stride (the zero-spread form).
        (
            1,
            2,
            3,
            4,
            2,
            (2, 3),
            params((2, 2), (1, 0), (1, 0), (2, 1), 1),
        ),
    ]
}

/// The f64 scatter reference over contiguous values.
fn reference(x: &[f64], w: &[f64], b: &[f64], case: &Case) -> (Vec<f64>, [usize; 4]) {
    let &(n, cin, h, wd, cout, (kh, kw), p) = case;
    let out_h =
        (h - 1) * p.stride.0 + p.dilation.0 * (kh - 1) + p.output_padding.0 + 1 - 2 * p.padding.0;
    let out_w =
        (wd - 1) * p.stride.1 + p.dilation.1 * (kw - 1) + p.output_padding.1 + 1 - 2 * p.padding.1;
    let (cin_g, cout_g) = (cin / p.groups, cout / p.groups);
    let mut out = vec![0.0; n * cout * out_h * out_w];
    for b_ in 0..n {
        for o in 0..cout {
            for i in 0..out_h * out_w {
                out[(b_ * cout + o) * out_h * out_w + i] = b[o];
            }
        }
        for c in 0..cin {
            let g = c / cin_g;
            for y in 0..h {
                for x_ in 0..wd {
                    let v = x[((b_ * cin + c) * h + y) * wd + x_];
                    for o in 0..cout_g {
                        for ky in 0..kh {
                            for kx in 0..kw {
                                let oy = (y * p.stride.0 + ky * p.dilation.0) as isize
                                    - p.padding.0 as isize;
                                let ox = (x_ * p.stride.1 + kx * p.dilation.1) as isize
                                    - p.padding.1 as isize;
                                if oy < 0 || ox < 0 || oy >= out_h as isize || ox >= out_w as isize
                                {
                                    continue;
                                }
                                let wv = w[((c * cout_g + o) * kh + ky) * kw + kx];
                                let oc = g * cout_g + o;
                                out[((b_ * cout + oc) * out_h + oy as usize) * out_w
                                    + ox as usize] += v * wv;
                            }
                        }
                    }
                }
            }
        }
    }
    (out, [n, cout, out_h, out_w])
}

#[test]
fn conv_transpose2d_matches_a_scatter_reference() {
    for device in devices() {
        for dtype in FLOATS {
            for (i, case) in cases().iter().enumerate() {
                let &(n, cin, h, w, cout, (kh, kw), p) = case;
                let make = |shape: &[usize], seed: u64| {
                    Tensor::randn(shape, DType::F32, Device::Cpu, seed)
                        .and_then(|t| t.to_dtype(dtype))
                        .unwrap()
                };
                let x = make(&[n, cin, h, w], 10 + i as u64);
                let wt = make(&[cin, cout / p.groups, kh, kw], 20 + i as u64);
                let b = make(&[cout], 30 + i as u64);
                let (want, shape) = reference(&values(&x), &values(&wt), &values(&b), case);
                let (xd, wd, bd) = (
                    x.to(device).unwrap(),
                    wt.to(device).unwrap(),
                    b.to(device).unwrap(),
                );
                let scale = want.iter().fold(1.0f64, |m, v| m.max(v.abs()));
                let taps = (cin / p.groups * kh * kw) as f64;
                let tol = 4.0 * eps(dtype) * scale * taps.sqrt();
                // NCHW, channels-last, and a view with H and W swapped in memory (contiguous
                // output, like PyTorch for a non-dense input).
                let swapped = xd.transpose(2, 3).unwrap().contiguous().unwrap();
                let inputs = [
                    (xd.clone(), MemoryFormat::Contiguous),
                    (
                        xd.to_memory_format(MemoryFormat::ChannelsLast).unwrap(),
                        MemoryFormat::ChannelsLast,
                    ),
                    (swapped.transpose(2, 3).unwrap(), MemoryFormat::Contiguous),
                ];
                for (k, (input, format)) in inputs.iter().enumerate() {
                    let what = format!("{device:?} {dtype} input {k} case {i}");
                    let got = input.conv_transpose2d(&wd, Some(&bd), p).unwrap();
                    assert_eq!(got.shape(), shape, "{what}");
                    // (A 1-channel or 1-pixel tensor is both formats at once.)
                    if shape[1] > 1 && shape[2] * shape[3] > 1 {
                        assert_eq!(got.memory_format(), *format, "{what}");
                        assert!(got.is_contiguous_for(*format), "{what}");
                    }
                    assert_close(&what, &values(&got), &want, tol, 0.0);
                }
            }
        }
    }
}

#[test]
fn bad_transposed_convolutions_are_errors() {
    for device in devices() {
        let x = Tensor::zeros(&[1, 4, 3, 3], DType::F32, device).unwrap();
        let w = Tensor::zeros(&[4, 2, 3, 3], DType::F32, device).unwrap();
        let text = |p: ConvTranspose2dParams, w: &Tensor| {
            x.conv_transpose2d(w, None, p)
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        };
        let e = text(params((2, 2), (0, 0), (2, 0), (1, 1), 1), &w);
        assert!(e.contains("output_padding"), "{device:?}: {e}");
        let e = text(params((0, 1), (0, 0), (0, 0), (1, 1), 1), &w);
        assert!(e.contains("positive"), "{device:?}: {e}");
        assert!(
            !text(params((1, 1), (0, 0), (0, 0), (1, 1), 3), &w).is_empty(),
            "{device:?} groups"
        );
        let w5 = Tensor::zeros(&[5, 2, 3, 3], DType::F32, device).unwrap();
        assert!(
            !text(ConvTranspose2dParams::default(), &w5).is_empty(),
            "{device:?} Cin"
        );
        let e = text(params((1, 1), (3, 3), (0, 0), (1, 1), 1), &w);
        assert!(e.contains("at least 1x1"), "{device:?}: {e}");
        let huge = usize::MAX / 3;
        let e = text(params((huge, 1), (0, 0), (0, 0), (1, 1), 1), &w);
        assert!(e.contains("out of range"), "{device:?}: {e}");
        let e = text(params((1, 1), (huge, 0), (0, 0), (huge, 1), 1), &w);
        assert!(!e.is_empty(), "{device:?}: {e}");
        let empty = Tensor::zeros(&[1, 4, 0, 3], DType::F32, device).unwrap();
        let e = empty.conv_transpose2d(&w, None, ConvTranspose2dParams::default());
        assert!(e.is_err(), "{device:?} empty input");
        let x2 = Tensor::zeros(&[1, 4, 3, 3], DType::F32, device).unwrap();
        let b = Tensor::zeros(&[3], DType::F32, device).unwrap();
        let e = x2
            .conv_transpose2d(&w, Some(&b), params((2, 2), (0, 0), (0, 0), (1, 1), 1))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(e.contains("bias of shape [2]"), "{device:?}: {e}");
        let flat = Tensor::zeros(&[4, 3, 3], DType::F32, device).unwrap();
        assert!(flat
            .conv_transpose2d(&w, None, ConvTranspose2dParams::default())
            .is_err());
    }
}

#[test]
fn conv_transpose2d_layer_matches_the_reference_and_moves() {
    for device in devices() {
        for dtype in FLOATS {
            for (i, case) in cases().iter().enumerate() {
                let &(n, cin, h, w, cout, (kh, kw), p) = case;
                let make = |shape: &[usize], seed: u64| {
                    Tensor::randn(shape, DType::F32, Device::Cpu, seed)
                        .and_then(|t| t.to_dtype(dtype))
                        .unwrap()
                };
                let x = make(&[n, cin, h, w], 40 + i as u64);
                let wt = make(&[cin, cout / p.groups, kh, kw], 50 + i as u64);
                let b = make(&[cout], 60 + i as u64);
                let (want, shape) = reference(&values(&x), &values(&wt), &values(&b), case);
                let layer =
                    ConvTranspose2d::new(wt.to(device).unwrap(), Some(b.to(device).unwrap()), p)
                        .unwrap();
                assert_eq!(
                    (layer.in_channels(), layer.out_channels()),
                    (cin, cout),
                    "case {i}"
                );
                assert_eq!(layer.kernel_size(), (kh, kw));
                assert_eq!(layer.params(), p);
                let scale = want.iter().fold(1.0f64, |m, v| m.max(v.abs()));
                let taps = (cin / p.groups * kh * kw) as f64;
                let tol = 4.0 * eps(dtype) * scale * taps.sqrt();
                let xd = x.to(device).unwrap();
                let functional =
                    xd.conv_transpose2d(&wt.to(device).unwrap(), Some(&b.to(device).unwrap()), p);
                for (k, input) in [
                    xd.clone(),
                    xd.to_memory_format(MemoryFormat::ChannelsLast).unwrap(),
                ]
                .iter()
                .enumerate()
                {
                    let what = format!("layer {device:?} {dtype} input {k} case {i}");
                    let got = layer.forward(input).unwrap();
                    assert_eq!(got.shape(), shape, "{what}");
                    assert_eq!(got.memory_format(), input.memory_format(), "{what}");
                    assert_close(&what, &values(&got), &want, tol, 0.0);
                }
                // Beside the functional op (same convolution, packed once instead of per call).
                let f = functional.unwrap();
                assert_close(
                    "layer vs functional",
                    &values(&layer.forward(&xd).unwrap()),
                    &values(&f),
                    tol,
                    0.0,
                );
                // Moved to the Cpu and converted to f32, it still computes the same.
                let moved = layer.to(Device::Cpu).unwrap().to_dtype(DType::F32).unwrap();
                assert_eq!(moved.device(), Device::Cpu);
                let x32 = x.to_dtype(DType::F32).unwrap();
                let got = moved.forward(&x32).unwrap();
                assert_close("moved layer", &values(&got), &want, tol, 0.0);
            }
        }
    }
}

#[test]
fn bad_transposed_convolution_layers_are_errors() {
    for device in devices() {
        let w = Tensor::zeros(&[4, 2, 3, 3], DType::F32, device).unwrap();
        let p = ConvTranspose2dParams::default();
        let layer = ConvTranspose2d::new(w.clone(), None, p).unwrap();
        // Wrong input channels, rank, dtype.
        let x5 = Tensor::zeros(&[1, 5, 3, 3], DType::F32, device).unwrap();
        let e = layer.forward(&x5).unwrap_err().to_string();
        assert!(e.contains("4 channels"), "{device:?}: {e}");
        let flat = Tensor::zeros(&[4, 3, 3], DType::F32, device).unwrap();
        assert!(layer.forward(&flat).is_err(), "{device:?} rank");
        let x16 = Tensor::zeros(&[1, 4, 3, 3], DType::F16, device).unwrap();
        assert!(layer.forward(&x16).is_err(), "{device:?} dtype");
        // Bad construction: bias shape, parameters, integer weights.
        let b3 = Tensor::zeros(&[3], DType::F32, device).unwrap();
        let e = ConvTranspose2d::new(w.clone(), Some(b3), p)
            .unwrap_err()
            .to_string();
        assert!(e.contains("bias of shape [2]"), "{device:?}: {e}");
        let e = ConvTranspose2d::new(w.clone(), None, params((2, 2), (0, 0), (2, 0), (1, 1), 1))
            .unwrap_err()
            .to_string();
        assert!(e.contains("output_padding"), "{device:?}: {e}");
        let wi = Tensor::zeros(&[4, 2, 3, 3], DType::I32, device).unwrap();
        assert!(ConvTranspose2d::new(wi, None, p).is_err(), "{device:?} i32");
        let w3 = Tensor::zeros(&[4, 2, 3], DType::F32, device).unwrap();
        assert!(
            ConvTranspose2d::new(w3, None, p).is_err(),
            "{device:?} rank-3 weight"
        );
    }
}
