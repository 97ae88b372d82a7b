//! `index_select` and `stack` on every device and dtype, against a plain reference (the
//! source's own bits picked by loops), with strided and offset sources and indices made on the
//! device itself, repeated / reversed / empty index lists, negative dims, and every error.

use crate::common;
use common::devices;
use xpu::{DType, Device, Tensor};

const ALL_DTYPES: [DType; 5] = [DType::F32, DType::F16, DType::BF16, DType::I32, DType::U8];

/// Distinct values per element (exact in every dtype, u8 wraps) as `dtype` on `device`.
fn source(shape: &[usize], dtype: DType, device: Device) -> Tensor {
    let n: usize = shape.iter().product();
    let t = match dtype {
        DType::I32 => Tensor::from_vec((0..n as i32).map(|v| v * 7 - 3).collect(), shape, device),
        DType::U8 => Tensor::from_vec((0..n).map(|v| (v * 13) as u8).collect(), shape, device),
        float => Tensor::from_vec((0..n).map(|v| v as f32 - 0.5).collect(), shape, device)
            .and_then(|t| t.to_dtype(float)),
    };
    t.unwrap()
}

/// Every element's value as f64, row-major, read on the Cpu.
fn values(t: &Tensor) -> Vec<f64> {
    common::values(&t.to(Device::Cpu).unwrap().contiguous().unwrap())
}

/// `out[o, k, i] = src[o, idx[k], i]` over the contiguous values of `src` (shape `shape`).
fn reference(src: &[f64], shape: &[usize], dim: usize, idx: &[i32]) -> Vec<f64> {
    let outer: usize = shape[..dim].iter().product();
    let inner: usize = shape[dim + 1..].iter().product();
    let mut out = Vec::new();
    for o in 0..outer {
        for &k in idx {
            let start = (o * shape[dim] + k as usize) * inner;
            out.extend_from_slice(&src[start..start + inner]);
        }
    }
    out
}

/// Index tensors on `device`: contiguous, and a stepped, offset view of a longer list.
fn index_tensors(idx: &[i32], device: Device) -> Vec<Tensor> {
    let plain = Tensor::from_vec(idx.to_vec(), &[idx.len()], device).unwrap();
    // [junk, idx0, junk, idx1, ...] viewed as [n, 2] -> column 1 -> stride 2, offset 1.
    let mut woven = Vec::new();
    for &i in idx {
        woven.extend([-99, i]);
    }
    let woven = Tensor::from_vec(woven, &[idx.len(), 2], device)
        .and_then(|t| t.narrow(1, 1, 1))
        .and_then(|t| t.squeeze(1))
        .unwrap();
    assert!(idx.len() < 2 || !woven.is_contiguous());
    vec![plain, woven]
}

#[test]
fn index_select_matches_the_reference_on_every_device_and_dtype() {
    let cases: [(&[usize], isize, &[i32]); 6] = [
        (&[7], 0, &[6, 0, 0, 3]),
        (&[63, 5], 0, &[62, 1, 1, 31, 0]),
        (&[63, 5], -1, &[4, 3, 2, 1, 0]),
        (&[2, 65, 3], 1, &[64, 0, 33, 64, 7, 7, 1]),
        (&[2, 65, 3], 2, &[]),
        (&[257, 40], 0, &[256]),
    ];
    for device in devices() {
        for dtype in ALL_DTYPES {
            for &(shape, dim, idx) in &cases {
                let d = if dim < 0 {
                    shape.len() as isize + dim
                } else {
                    dim
                } as usize;
                let src = source(shape, dtype, device);
                let want = reference(&values(&src), shape, d, idx);
                // The same values through a transposed view made on the device.
                let rank = shape.len();
                let order: Vec<usize> = (0..rank).rev().collect();
                let stored: Vec<usize> = shape.iter().rev().copied().collect();
                let view = source(&stored, dtype, device).permute(&order).unwrap();
                let view_want = reference(&values(&view), shape, d, idx);
                for (what, s, want) in [("contiguous", &src, &want), ("view", &view, &view_want)] {
                    for (j, ix) in index_tensors(idx, device).iter().enumerate() {
                        let case = format!(
                            "{device:?} {dtype} {what} {shape:?} dim {dim} idx {idx:?} #{j}"
                        );
                        let got = s.index_select(dim, ix).unwrap();
                        let mut out_shape = shape.to_vec();
                        out_shape[d] = idx.len();
                        assert_eq!(got.shape(), out_shape.as_slice(), "{case}");
                        assert_eq!(got.dtype(), dtype, "{case}");
                        assert_eq!(&values(&got), want, "{case}");
                    }
                }
            }
        }
    }
}

#[test]
fn index_select_reads_sources_that_start_inside_their_storage() {
    for device in devices() {
        for dtype in ALL_DTYPES {
            let full = source(&[9, 11], dtype, device);
            let part = full.narrow(0, 3, 5).unwrap().narrow(1, 2, 7).unwrap();
            let ix = Tensor::from_vec(vec![6, 0, 2], &[3], device).unwrap();
            let got = part.index_select(1, &ix).unwrap();
            let want = reference(&values(&part), &[5, 7], 1, &[6, 0, 2]);
            assert_eq!(values(&got), want, "{device:?} {dtype}");
        }
    }
}

#[test]
fn an_embedding_lookup_is_index_select_on_dim_0() {
    for device in devices() {
        let weight = Tensor::randn(&[257, 40], DType::F16, device, 5).unwrap();
        let ids: Vec<i32> = (0..77).map(|i| i * 37 % 257).collect();
        let ix = Tensor::from_vec(ids.clone(), &[77], device).unwrap();
        let emb = weight.index_select(0, &ix).unwrap();
        assert_eq!(emb.shape(), [77, 40]);
        for (row, &id) in ids.iter().enumerate().step_by(19) {
            let got = values(&emb.narrow(0, row, 1).unwrap());
            let want = values(&weight.narrow(0, id as usize, 1).unwrap());
            assert_eq!(got, want, "{device:?} row {row}");
        }
    }
}

#[test]
fn bad_indices_are_errors_that_name_them() {
    for device in devices() {
        let x = source(&[4, 3], DType::F32, device);
        let text = |r: xpu::Result<Tensor>| r.err().map(|e| e.to_string()).unwrap_or_default();
        let ix = |v: Vec<i32>| Tensor::from_vec(v.clone(), &[v.len()], device).unwrap();
        let e = text(x.index_select(0, &ix(vec![0, 4])));
        assert!(
            e.contains("index 4") && e.contains("size 4"),
            "{device:?}: {e}"
        );
        let e = text(x.index_select(1, &ix(vec![-1])));
        assert!(e.contains("index -1"), "{device:?}: {e}");
        let f = Tensor::zeros(&[2], DType::F32, device).unwrap();
        assert!(
            text(x.index_select(0, &f)).contains("1-D i32"),
            "{device:?}"
        );
        let two_d = Tensor::zeros(&[1, 2], DType::I32, device).unwrap();
        assert!(x.index_select(0, &two_d).is_err(), "{device:?}");
        assert!(
            x.index_select(2, &ix(vec![0])).is_err(),
            "{device:?} dim out of range"
        );
    }
    if common::xpu() {
        let x = source(&[4, 3], DType::F32, Device::Xpu);
        let ix = Tensor::from_vec(vec![0i32], &[1], Device::Cpu).unwrap();
        assert!(x.index_select(0, &ix).is_err(), "indices on another device");
    }
}

#[test]
fn stack_joins_along_a_new_dim() {
    for device in devices() {
        for dtype in ALL_DTYPES {
            let a = source(&[3, 5], dtype, device);
            let b = a
                .t()
                .unwrap()
                .contiguous()
                .unwrap()
                .reshape(&[3, 5])
                .unwrap();
            for dim in [0isize, 1, 2, -1, -3] {
                let got = Tensor::stack(&[&a, &b, &a], dim).unwrap();
                let d = if dim < 0 { 3 + dim } else { dim } as usize;
                let mut shape = vec![3, 5];
                shape.insert(d, 3);
                assert_eq!(
                    got.shape(),
                    shape.as_slice(),
                    "{device:?} {dtype} dim {dim}"
                );
                // Slice j along the new dim is input j.
                for (j, t) in [&a, &b, &a].iter().enumerate() {
                    let slice = got
                        .narrow(d as isize, j, 1)
                        .unwrap()
                        .squeeze(d as isize)
                        .unwrap();
                    assert_eq!(
                        values(&slice),
                        values(t),
                        "{device:?} {dtype} dim {dim} #{j}"
                    );
                }
            }
            let c = source(&[5, 3], dtype, device);
            assert!(
                Tensor::stack(&[&a, &c], 0).is_err(),
                "{device:?} shapes differ"
            );
            assert!(
                Tensor::stack(&[&a], 3).is_err(),
                "{device:?} dim out of range"
            );
        }
        assert!(Tensor::stack(&[], 0).is_err());
    }
}

#[test]
fn large_selections_split_over_threads_pick_the_right_rows() {
    // 3000 rows of 64: above the Cpu's threading threshold, so rows are copied in chunks.
    for device in devices() {
        let src = source(&[2, 500, 64], DType::F32, device);
        let idx: Vec<i32> = (0..1500).map(|i| i * 7 % 500).collect();
        let ix = Tensor::from_vec(idx.clone(), &[idx.len()], device).unwrap();
        let got = src.index_select(1, &ix).unwrap();
        let want = reference(&values(&src), &[2, 500, 64], 1, &idx);
        assert_eq!(values(&got), want, "{device:?}");
    }
}
