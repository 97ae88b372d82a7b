//! `max_pool2d` and `avg_pool2d` against an f64 reference on every device and float dtype: odd
//! sizes, strides smaller and larger than the kernel, padding (max pads with -inf, average with
//! or without counting the padding), channels-last and transposed inputs made on the device,
//! rank-3 inputs, NaN propagation, and every error. PyTorch's values: tests/torch_parity.rs.

use crate::common;
use common::{assert_close, devices, eps, values, FLOATS};
use xpu::{DType, Device, MemoryFormat, Tensor};

/// Pools contiguous NCHW values `v` of `shape` in f64 (`avg` None: max).
fn reference(
    v: &[f64],
    shape: [usize; 4],
    k: (usize, usize),
    s: (usize, usize),
    p: (usize, usize),
    avg: Option<bool>,
) -> Vec<f64> {
    let [n, c, h, w] = shape;
    let oh = (h + 2 * p.0 - k.0) / s.0 + 1;
    let ow = (w + 2 * p.1 - k.1) / s.1 + 1;
    let mut out = Vec::new();
    for nc in 0..n * c {
        for oy in 0..oh {
            for ox in 0..ow {
                let (mut best, mut sum, mut count) = (f64::NEG_INFINITY, 0.0, 0usize);
                let mut nan = false;
                for dy in 0..k.0 {
                    for dx in 0..k.1 {
                        let (y, x) = (
                            (oy * s.0 + dy) as isize - p.0 as isize,
                            (ox * s.1 + dx) as isize - p.1 as isize,
                        );
                        if y < 0 || x < 0 || y >= h as isize || x >= w as isize {
                            continue;
                        }
                        let e = v[(nc * h + y as usize) * w + x as usize];
                        nan |= e.is_nan();
                        best = best.max(e);
                        sum += e;
                        count += 1;
                    }
                }
                out.push(match avg {
                    None if nan => f64::NAN,
                    None => best,
                    Some(true) => sum / (k.0 * k.1) as f64,
                    Some(false) => sum / count as f64,
                });
            }
        }
    }
    out
}

type Case = ([usize; 4], (usize, usize), (usize, usize), (usize, usize));

const CASES: [Case; 6] = [
    ([1, 1, 1, 1], (1, 1), (1, 1), (0, 0)),
    ([2, 3, 7, 9], (3, 3), (2, 2), (1, 1)),
    ([1, 5, 13, 13], (2, 2), (2, 2), (0, 0)),
    ([2, 4, 8, 8], (3, 3), (1, 1), (1, 1)),
    ([1, 2, 9, 7], (3, 2), (3, 1), (1, 1)),
    ([1, 3, 5, 6], (2, 3), (1, 2), (1, 0)),
];

#[test]
fn pooling_matches_an_f64_reference_on_every_device_dtype_and_layout() {
    for device in devices() {
        for dtype in FLOATS {
            for (case, &(shape, k, s, p)) in CASES.iter().enumerate() {
                let base = Tensor::randn(&shape, DType::F32, Device::Cpu, 40 + case as u64)
                    .and_then(|t| t.to_dtype(dtype))
                    .unwrap();
                let v = values(&base);
                let on = base.to(device).unwrap();
                // NCHW, channels-last, and an [N, C, W, H] tensor transposed back: same values.
                let inputs = [
                    ("nchw", on.clone()),
                    (
                        "channels-last",
                        on.to_memory_format(MemoryFormat::ChannelsLast).unwrap(),
                    ),
                    (
                        "transposed",
                        on.transpose(2, 3)
                            .unwrap()
                            .contiguous()
                            .unwrap()
                            .transpose(2, 3)
                            .unwrap(),
                    ),
                ];
                for (layout, x) in &inputs {
                    let what =
                        format!("{device:?} {dtype} {layout} {shape:?} k {k:?} s {s:?} p {p:?}");
                    let tol = |want: &[f64]| {
                        2.0 * eps(dtype) * want.iter().fold(1.0f64, |m, x| m.max(x.abs()))
                    };
                    let got = x.max_pool2d(k, s, p).unwrap();
                    assert_eq!(got.dtype(), dtype, "{what}");
                    assert_eq!(got.memory_format(), x.memory_format(), "{what}");
                    let want = reference(&v, shape, k, s, p, None);
                    // Max picks an input element: exact.
                    assert_close(&format!("max {what}"), &values(&got), &want, 0.0, 0.0);
                    for include in [true, false] {
                        let got = x.avg_pool2d(k, s, p, include).unwrap();
                        let want = reference(&v, shape, k, s, p, Some(include));
                        let t = tol(&want);
                        assert_close(
                            &format!("avg {include} {what}"),
                            &values(&got),
                            &want,
                            t,
                            0.0,
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn rank_3_inputs_and_nan_windows() {
    for device in devices() {
        let mut v: Vec<f32> = (0..2 * 4 * 4).map(|i| i as f32).collect();
        v[5] = f32::NAN;
        let x = Tensor::from_vec(v.clone(), &[2, 4, 4], device).unwrap();
        let got = x.max_pool2d((2, 2), (2, 2), (0, 0)).unwrap();
        assert_eq!(got.shape(), [2, 2, 2], "{device:?}");
        let g = values(&got);
        assert!(
            g[0].is_nan(),
            "{device:?}: the window holding NaN is NaN, got {g:?}"
        );
        assert_eq!(&g[1..4], &[7.0, 13.0, 15.0], "{device:?}");
        let avg = values(&x.avg_pool2d((2, 2), (2, 2), (0, 0), true).unwrap());
        assert_eq!(&avg[4..], &[18.5, 20.5, 26.5, 28.5], "{device:?}");
    }
}

#[test]
fn bad_pooling_arguments_are_errors() {
    for device in devices() {
        let x = Tensor::zeros(&[1, 2, 5, 5], DType::F32, device).unwrap();
        let text = |r: xpu::Result<Tensor>| r.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(
            text(x.max_pool2d((0, 2), (1, 1), (0, 0))).contains("positive"),
            "{device:?}"
        );
        assert!(
            text(x.max_pool2d((2, 2), (0, 1), (0, 0))).contains("positive"),
            "{device:?}"
        );
        assert!(text(x.avg_pool2d((2, 2), (1, 1), (2, 0), true)).contains("half the kernel"));
        assert!(
            x.max_pool2d((7, 1), (1, 1), (0, 0)).is_err(),
            "{device:?} window larger than input"
        );
        let huge = usize::MAX / 2;
        assert!(
            x.max_pool2d((usize::MAX, 2), (1, 1), (huge, 0)).is_err(),
            "{device:?}"
        );
        assert!(
            x.avg_pool2d((2, 2), (usize::MAX, 1), (1, 1), true).is_ok(),
            "{device:?}"
        );
        let flat = Tensor::zeros(&[5, 5], DType::F32, device).unwrap();
        assert!(
            flat.max_pool2d((2, 2), (2, 2), (0, 0)).is_err(),
            "{device:?} rank 2"
        );
        let ints = Tensor::zeros(&[1, 1, 4, 4], DType::I32, device).unwrap();
        assert!(
            ints.avg_pool2d((2, 2), (2, 2), (0, 0), true).is_err(),
            "{device:?} i32"
        );
    }
}
