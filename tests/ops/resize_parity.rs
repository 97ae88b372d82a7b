//! Nearest upsampling/interpolation, constant padding and the sinusoidal timestep embedding:
//! Cpu against plain index-arithmetic references, Xpu against Cpu.

use crate::common;
use common::{assert_close, randn, values};
use xpu::{DType, Error, Tensor};

/// Reference nearest resize of [N, C, H, W] values.
fn nearest(
    v: &[f64],
    (n, c, h, w): (usize, usize, usize, usize),
    (oh, ow): (usize, usize),
) -> Vec<f64> {
    let mut out = Vec::with_capacity(n * c * oh * ow);
    for b in 0..n * c {
        for i in 0..oh {
            for j in 0..ow {
                let (si, sj) = (i * h / oh, j * w / ow);
                out.push(v[(b * h + si) * w + sj]);
            }
        }
    }
    out
}

#[test]
fn upsample_and_interpolate_nearest() {
    for device in common::devices() {
        for dtype in [DType::F32, DType::F16, DType::BF16, DType::I32] {
            for &(h, w) in &[(1, 1), (7, 5), (13, 8)] {
                let x = randn(&[2, 3, h, w], DType::F32, 1)
                    .mul_scalar(10.0)
                    .unwrap()
                    .to_dtype(dtype)
                    .unwrap();
                let v = values(&x);
                let up = x.to(device).unwrap().upsample_nearest2d(2).unwrap();
                assert_eq!(up.shape(), &[2, 3, 2 * h, 2 * w]);
                assert_eq!(
                    values(&up),
                    nearest(&v, (2, 3, h, w), (2 * h, 2 * w)),
                    "{device} {dtype} upsample {h}x{w}"
                );
                for &(oh, ow) in &[(2 * h + 1, w), (h.max(2) - 1, 3 * w), (1, 1), (h, w)] {
                    let y = x
                        .to(device)
                        .unwrap()
                        .interpolate_nearest(&[oh, ow])
                        .unwrap();
                    assert_eq!(y.shape(), &[2, 3, oh, ow]);
                    assert_eq!(
                        values(&y),
                        nearest(&v, (2, 3, h, w), (oh, ow)),
                        "{device} {dtype} {h}x{w} -> {oh}x{ow}"
                    );
                }
            }
        }
        let x = Tensor::zeros(&[1, 2, 3], DType::F32, device).unwrap();
        assert!(matches!(
            x.upsample_nearest2d(2),
            Err(Error::InvalidArgument { .. })
        ));
        assert!(matches!(
            x.interpolate_nearest(&[4, 4]),
            Err(Error::ShapeMismatch { .. })
        ));
    }
}

#[test]
fn constant_padding() {
    for device in common::devices() {
        let x = Tensor::arange(1.0, 7.0, 1.0, DType::F32, device)
            .unwrap()
            .reshape(&[1, 2, 3])
            .unwrap();
        let p = x.pad(&[1, 2, 0, 1], -1.0).unwrap();
        assert_eq!(p.shape(), &[1, 3, 6]);
        let want = vec![
            -1.0, 1.0, 2.0, 3.0, -1.0, -1.0, //
            -1.0, 4.0, 5.0, 6.0, -1.0, -1.0, //
            -1.0, -1.0, -1.0, -1.0, -1.0, -1.0,
        ];
        assert_eq!(values(&p), want, "{device}");
        assert_eq!(values(&x.pad(&[0, 0], 5.0).unwrap()), values(&x));
        let h = x
            .to_dtype(DType::F16)
            .unwrap()
            .t()
            .unwrap()
            .pad(&[1, 1], 0.5)
            .unwrap();
        assert_eq!(h.shape(), &[1, 3, 4]);
        assert_eq!(values(&h)[..4], [0.5, 1.0, 4.0, 0.5]);
        assert!(matches!(
            x.pad(&[1], 0.0),
            Err(Error::InvalidArgument { .. })
        ));
        assert!(matches!(
            x.pad(&[1, 1, 1, 1, 1, 1, 1, 1], 0.0),
            Err(Error::InvalidArgument { .. })
        ));
    }
}

#[test]
fn timestep_embedding_matches_the_formula() {
    let steps = [0.0f32, 1.0, 10.0, 261.0, 999.0];
    for device in common::devices() {
        let t = Tensor::from_vec(steps.to_vec(), &[steps.len()], device).unwrap();
        for &(dim, flip, shift) in &[(320, true, 0.0), (8, false, 1.0), (7, true, 1.0)] {
            let e = t.timestep_embedding(dim, flip, shift, DType::F32).unwrap();
            assert_eq!(e.shape(), &[steps.len(), dim]);
            let half = dim / 2;
            let mut want = Vec::new();
            for &s in &steps {
                let args: Vec<f64> = (0..half)
                    .map(|k| s as f64 * (-(10000f64.ln()) * k as f64 / (half as f64 - shift)).exp())
                    .collect();
                let (sin, cos): (Vec<f64>, Vec<f64>) =
                    args.iter().map(|a| (a.sin(), a.cos())).unzip();
                let (first, second) = if flip { (cos, sin) } else { (sin, cos) };
                want.extend(first);
                want.extend(second);
                if dim % 2 == 1 {
                    want.push(0.0);
                }
            }
            // f32 arguments up to ~1000 carry ~6e-5 absolute rounding.
            assert_close(
                &format!("{device} temb dim {dim}"),
                &values(&e),
                &want,
                3e-4,
                0.0,
            );
        }
        assert!(t.timestep_embedding(1, true, 0.0, DType::F32).is_err());
        assert!(t.timestep_embedding(2, true, 1.0, DType::F32).is_err());
    }
}

/// Reference bilinear resize (PyTorch's source-index rule, in f64).
fn bilinear(
    v: &[f64],
    (n, c, h, w): (usize, usize, usize, usize),
    (oh, ow): (usize, usize),
    align: bool,
) -> Vec<f64> {
    let axis = |input: usize, output: usize, dst: usize| -> (usize, usize, f64) {
        let src = if align {
            if output > 1 {
                dst as f64 * (input as f64 - 1.0) / (output as f64 - 1.0)
            } else {
                0.0
            }
        } else {
            ((dst as f64 + 0.5) * input as f64 / output as f64 - 0.5).max(0.0)
        };
        let i0 = (src as usize).min(input - 1);
        (i0, (i0 + 1).min(input - 1), src - i0 as f64)
    };
    let mut out = Vec::with_capacity(n * c * oh * ow);
    for p in 0..n * c {
        let at = |y: usize, x: usize| v[(p * h + y) * w + x];
        for y in 0..oh {
            let (y0, y1, ly) = axis(h, oh, y);
            for x in 0..ow {
                let (x0, x1, lx) = axis(w, ow, x);
                let top = at(y0, x0) * (1.0 - lx) + at(y0, x1) * lx;
                let bottom = at(y1, x0) * (1.0 - lx) + at(y1, x1) * lx;
                out.push(top * (1.0 - ly) + bottom * ly);
            }
        }
    }
    out
}

#[test]
fn bilinear_interpolation_matches_the_reference_on_every_device() {
    let dims = (2, 3, 9, 5);
    let x = randn(&[2, 3, 9, 5], DType::F32, 21);
    let host = values(&x);
    for device in common::devices() {
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            let xd = x.to_dtype(dtype).unwrap().to(device).unwrap();
            let hd = values(&xd);
            for size in [(18, 10), (4, 2), (1, 1), (9, 5), (13, 1)] {
                for align in [false, true] {
                    let got = xd.interpolate_bilinear([size.0, size.1], align).unwrap();
                    assert_eq!(got.shape(), &[2, 3, size.0, size.1]);
                    assert_eq!(got.dtype(), dtype);
                    let want = bilinear(&hd, dims, size, align);
                    let tol = 2.0 * common::eps(dtype).max(1e-6);
                    let what = format!("{device} {dtype} {size:?} align {align}");
                    assert_close(&what, &values(&got), &want, tol, tol);
                }
            }
        }
        assert_eq!(host.len(), 2 * 3 * 9 * 5);
        let xd = x.to(device).unwrap();
        assert!(xd.interpolate_bilinear([0, 4], false).is_err());
        assert!(xd
            .narrow(0, 0, 1)
            .unwrap()
            .squeeze(0)
            .unwrap()
            .interpolate_bilinear([2, 2], false)
            .is_err());
        let ints = xd.to_dtype(DType::I32).unwrap();
        assert!(matches!(
            ints.interpolate_bilinear([2, 2], false),
            Err(Error::UnsupportedDType { .. })
        ));
    }
}
