//! `gather` and `flip` on every device and dtype against plain loops over the host values:
//! every dim, odd sizes, index tensors smaller than the source, strided / offset / broadcast
//! sources and indices, empty indices, negative dims, and every error.

use crate::common;
use common::devices;
use xpu::{DType, Device, Tensor};

const ALL_DTYPES: [DType; 5] = [DType::F32, DType::F16, DType::BF16, DType::I32, DType::U8];

/// Distinct small values (exact in every dtype) as `dtype` on `device`.
fn source(shape: &[usize], dtype: DType, device: Device) -> Tensor {
    let n: usize = shape.iter().product();
    Tensor::from_vec((0..n).map(|v| (v % 251) as f32).collect(), shape, device)
        .and_then(|t| t.to_dtype(dtype))
        .unwrap()
}

fn values(t: &Tensor) -> Vec<f64> {
    common::values(&t.to(Device::Cpu).unwrap().contiguous().unwrap())
}

/// Row-major strides of `shape`.
fn strides(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        s[d] = s[d + 1] * shape[d + 1];
    }
    s
}

/// `out[i] = src[i with coordinate dim replaced by idx[i]]` over the index shape `ishape`.
fn gather_reference(
    src: &[f64],
    shape: &[usize],
    dim: usize,
    idx: &[i32],
    ishape: &[usize],
) -> Vec<f64> {
    let (ss, is) = (strides(shape), strides(ishape));
    (0..idx.len())
        .map(|i| {
            let at: usize = (0..ishape.len())
                .map(|d| {
                    let c = if d == dim {
                        idx[i] as usize
                    } else {
                        i / is[d] % ishape[d]
                    };
                    c * ss[d]
                })
                .sum();
            src[at]
        })
        .collect()
}

/// Deterministic indices in `0..size`.
fn indices(n: usize, size: usize, seed: usize) -> Vec<i32> {
    (0..n)
        .map(|i| ((i * 7 + i / 5 + seed * 3) % size) as i32)
        .collect()
}

#[test]
fn gather_matches_the_reference_along_every_dim() {
    let shape = [3, 7, 5];
    for device in devices() {
        for dtype in ALL_DTYPES {
            let x = source(&shape, dtype, device);
            let host = values(&x);
            for dim in 0..3 {
                // Same size, smaller elsewhere, larger along dim, and one empty index.
                for ishape in [[3, 7, 5], [2, 4, 3], [1, 1, 1], [3, 7, 9], [3, 0, 5]] {
                    let mut ishape = ishape;
                    if dim != 0 && ishape[0] > shape[0] {
                        ishape[0] = shape[0];
                    }
                    let fits = (0..3).all(|d| d == dim || ishape[d] <= shape[d]);
                    if !fits {
                        continue;
                    }
                    let n: usize = ishape.iter().product();
                    let idx = indices(n, shape[dim], dim + n);
                    let it = Tensor::from_vec(idx.clone(), &ishape, device).unwrap();
                    let got = x.gather(dim as isize, &it).unwrap();
                    assert_eq!(got.shape(), &ishape);
                    assert_eq!(got.dtype(), dtype);
                    assert_eq!(
                        values(&got),
                        gather_reference(&host, &shape, dim, &idx, &ishape),
                        "{device} {dtype} dim {dim} index {ishape:?}"
                    );
                }
            }
            // A negative dim counts from the end.
            let it = Tensor::from_vec(indices(21, 5, 1), &[3, 7, 1], device).unwrap();
            assert_eq!(
                values(&x.gather(-1, &it).unwrap()),
                values(&x.gather(2, &it).unwrap())
            );
        }
    }
}

#[test]
fn gather_reads_strided_sources_and_indices_in_place() {
    for device in devices() {
        // Source: a transposed, narrowed view; index: a transposed view and a broadcast row.
        let base = source(&[9, 6], DType::F32, device);
        let x = base.t().unwrap().narrow(1, 2, 6).unwrap(); // [6, 6], offset 2·1, strides [1, 6]
        let xh = values(&x);
        // Index rows 1..5 of a [5, 6] tensor (offset 6), transposed to [6, 4].
        let raw: Vec<i32> = indices(30, 6, 5);
        let it = Tensor::from_vec(raw, &[5, 6], device)
            .and_then(|t| t.narrow(0, 1, 4))
            .and_then(|t| t.t())
            .unwrap();
        for dim in 0..2 {
            let got = x.gather(dim, &it).unwrap();
            let idx: Vec<i32> = values(&it).iter().map(|&v| v as i32).collect();
            assert_eq!(
                values(&got),
                gather_reference(&xh, &[6, 6], dim as usize, &idx, &[6, 4]),
                "{device} dim {dim}"
            );
        }
        let row = Tensor::from_vec(vec![5i32, 0, 3], &[1, 3], device).unwrap();
        let wide = row.broadcast_to(&[6, 3]).unwrap();
        let got = x.gather(1, &wide).unwrap();
        let want: Vec<f64> = (0..6)
            .flat_map(|r| [5, 0, 3].map(|c| xh[r * 6 + c]))
            .collect();
        assert_eq!(values(&got), want, "{device} broadcast index");
    }
}

#[test]
fn bad_gathers_are_errors_that_say_why() {
    for device in devices() {
        let x = source(&[4, 3], DType::F32, device);
        let text = |r: xpu::Result<Tensor>| r.err().map(|e| e.to_string()).unwrap_or_default();
        let ix = |v: Vec<i32>, s: &[usize]| Tensor::from_vec(v, s, device).unwrap();
        let e = text(x.gather(0, &ix(vec![0, 4], &[1, 2])));
        assert!(
            e.contains("index 4") && e.contains("size 4"),
            "{device}: {e}"
        );
        let e = text(x.gather(1, &ix(vec![-1], &[1, 1])));
        assert!(e.contains("index -1"), "{device}: {e}");
        // Larger than the source outside dim, wrong rank, wrong dtype, dim out of range.
        assert!(text(x.gather(1, &ix(vec![0; 5], &[5, 1]))).contains("no larger"));
        assert!(x.gather(0, &ix(vec![0], &[1])).is_err(), "{device} rank");
        let f = Tensor::zeros(&[1, 1], DType::F32, device).unwrap();
        assert!(text(x.gather(0, &f)).contains("i32"), "{device}");
        assert!(x.gather(2, &ix(vec![0], &[1, 1])).is_err(), "{device} dim");
    }
    if common::xpu() {
        let x = source(&[4, 3], DType::F32, Device::Xpu);
        let ix = Tensor::from_vec(vec![0i32], &[1, 1], Device::Cpu).unwrap();
        assert!(x.gather(0, &ix).is_err(), "indices on another device");
    }
}

#[test]
fn flip_reverses_every_listed_dim() {
    let shape = [2, 5, 3];
    for device in devices() {
        for dtype in ALL_DTYPES {
            let x = source(&shape, dtype, device);
            let host = values(&x);
            let s = strides(&shape);
            for dims in [
                vec![0],
                vec![1],
                vec![-1],
                vec![0, 2],
                vec![2, 1, 0],
                vec![],
            ] {
                let rev: Vec<usize> = dims
                    .iter()
                    .map(|&d| if d < 0 { (3 + d) as usize } else { d as usize })
                    .collect();
                let want: Vec<f64> = (0..30)
                    .map(|i| {
                        (0..3)
                            .map(|d| {
                                let c = i / s[d] % shape[d];
                                let c = if rev.contains(&d) {
                                    shape[d] - 1 - c
                                } else {
                                    c
                                };
                                c * s[d]
                            })
                            .sum::<usize>()
                    })
                    .map(|at| host[at])
                    .collect();
                let got = x.flip(&dims).unwrap();
                assert!(got.is_contiguous());
                assert_eq!(values(&got), want, "{device} {dtype} flip {dims:?}");
            }
            // On a view, and the errors.
            let t = x.transpose(0, 2).unwrap();
            assert_eq!(
                values(&t.flip(&[0]).unwrap()),
                values(&t.contiguous().unwrap().flip(&[0]).unwrap())
            );
            assert!(x.flip(&[1, -2]).is_err(), "{device} repeated dim");
            assert!(x.flip(&[3]).is_err(), "{device} dim out of range");
        }
    }
}
