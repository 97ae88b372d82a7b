//! Contiguous copies and casts of transposing views (`t`, NCHW ↔ NHWC, `permute`s that move the
//! last axis): on the Xpu these run as 32×32 tiles through workgroup memory where both
//! transposed extents are at least 16 (`copy_transpose` in `gpu/kernels/elementwise/elementwise.wgsl`) and as
//! the element-wise gather elsewhere. Every result is checked against index arithmetic on the
//! host, on every device, over extents on both sides of the tile edges and of the 16 floor,
//! odd extents (which 16-bit outputs leave to the gather), offsets, broadcast batch dims and
//! every dtype pair the copy casts between. A cast (`to_dtype`) keeps a whole permute's strides
//! and gives a view with gaps its source's memory order (PyTorch's `preserve_format`), so casts
//! read in storage order and never transpose: the tiles are reached through `contiguous`.

use crate::common;
use common::values;
use xpu::{DType, Device, Tensor};

/// Small integers, exact in every dtype (u8 included).
fn host(n: usize) -> Vec<f32> {
    (0..n).map(|i| ((i * 7) % 251) as f32).collect()
}

/// The values of `base` (row-major host values of `shape`) read through `perm`.
fn permuted(base: &[f64], shape: &[usize], perm: &[usize]) -> Vec<f64> {
    let rank = shape.len();
    let mut strides = vec![1; rank];
    for d in (0..rank.saturating_sub(1)).rev() {
        strides[d] = strides[d + 1] * shape[d + 1];
    }
    let out_shape: Vec<usize> = perm.iter().map(|&d| shape[d]).collect();
    let n: usize = out_shape.iter().product();
    (0..n)
        .map(|mut i| {
            let mut off = 0;
            for k in (0..rank).rev() {
                off += (i % out_shape[k]) * strides[perm[k]];
                i /= out_shape[k];
            }
            base[off]
        })
        .collect()
}

const DTYPES: [DType; 5] = [DType::F32, DType::F16, DType::BF16, DType::I32, DType::U8];

#[test]
fn batched_transposes_match_index_arithmetic() {
    let sizes = [1, 7, 15, 16, 17, 32, 33, 63, 64, 65, 100];
    for device in common::devices() {
        for (i, &r) in sizes.iter().enumerate() {
            for &c in &sizes[i % 3..] {
                let shape = [2, r, c];
                let x = Tensor::from_vec(host(2 * r * c), &shape, device).unwrap();
                for dtype in DTYPES {
                    let x = x.to_dtype(dtype).unwrap();
                    let base = values(&x);
                    let got = x.transpose(1, 2).unwrap().contiguous().unwrap();
                    assert_eq!(got.shape(), &[2, c, r]);
                    assert_eq!(
                        values(&got),
                        permuted(&base, &shape, &[0, 2, 1]),
                        "{device} {dtype} [2, {r}, {c}].transpose(1, 2)"
                    );
                }
            }
        }
    }
}

#[test]
fn channels_last_round_trips_match_index_arithmetic() {
    for device in common::devices() {
        for &(n, c, h, w) in &[
            (1, 3, 5, 7),
            (2, 16, 4, 4),
            (1, 33, 7, 9),
            (2, 64, 16, 16),
            (1, 320, 13, 20),
            (3, 18, 1, 17),
        ] {
            let shape = [n, c, h, w];
            let x = Tensor::from_vec(host(n * c * h * w), &shape, device).unwrap();
            for dtype in DTYPES {
                let x = x.to_dtype(dtype).unwrap();
                let base = values(&x);
                let nhwc = x.permute(&[0, 2, 3, 1]).unwrap().contiguous().unwrap();
                let want = permuted(&base, &shape, &[0, 2, 3, 1]);
                assert_eq!(values(&nhwc), want, "{device} {dtype} {shape:?} to NHWC");
                // And back: NHWC storage viewed as NCHW, made contiguous.
                let back = nhwc.permute(&[0, 3, 1, 2]).unwrap().contiguous().unwrap();
                assert_eq!(
                    values(&back),
                    base,
                    "{device} {dtype} {shape:?} back to NCHW"
                );
            }
        }
    }
}

#[test]
fn casting_copies_of_transposes_match_the_host() {
    let pairs = [
        (DType::F32, DType::F16),
        (DType::F32, DType::BF16),
        (DType::F16, DType::F32),
        (DType::BF16, DType::F32),
        (DType::F16, DType::BF16),
        (DType::I32, DType::F32),
        (DType::F32, DType::I32),
        (DType::U8, DType::I32),
        (DType::I32, DType::U8),
    ];
    for device in common::devices() {
        for &(r, c) in &[(40, 64), (64, 36), (33, 48), (100, 17)] {
            let x = Tensor::from_vec(host(r * c), &[r, c], device).unwrap();
            for (from, to) in pairs {
                // A whole transpose is dense: the cast keeps its strides and reads its span.
                let t = x.to_dtype(from).unwrap().t().unwrap();
                let got = t.to_dtype(to).unwrap();
                assert_eq!((got.dtype(), got.strides()), (to, t.strides()));
                let want = permuted(&values(&x), &[r, c], &[1, 0]);
                assert_eq!(values(&got), want, "{device} {from}->{to} [{r}, {c}].t()");
                // A transposed slice has gaps: the cast makes it dense in its memory order.
                let slice = x.narrow(1, 1, c - 1).unwrap();
                let got = x
                    .to_dtype(from)
                    .unwrap()
                    .narrow(1, 1, c - 1)
                    .unwrap()
                    .t()
                    .unwrap()
                    .to_dtype(to)
                    .unwrap();
                // PyTorch's order for a copy with gaps: the source's memory order, so the cast
                // reads and writes in storage order and transposes nothing.
                assert_eq!((got.dtype(), got.strides()), (to, &[1, c - 1][..]));
                let want = permuted(&values(&slice), &[r, c - 1], &[1, 0]);
                assert_eq!(values(&got), want, "{device} {from}->{to} slice.t()");
            }
        }
    }
}

#[test]
fn offsets_broadcasts_and_inner_permutes_match_index_arithmetic() {
    for device in common::devices() {
        let shape = [3, 40, 5, 34];
        let x = Tensor::from_vec(host(3 * 40 * 5 * 34), &shape, device).unwrap();
        for dtype in DTYPES {
            let x = x.to_dtype(dtype).unwrap();
            let base = values(&x);
            // The last axis moved to the front, the contiguous dim between batch dims.
            for perm in [[3, 0, 2, 1], [0, 3, 2, 1], [2, 3, 0, 1], [1, 0, 3, 2]] {
                let got = x.permute(&perm).unwrap().contiguous().unwrap();
                assert_eq!(
                    values(&got),
                    permuted(&base, &shape, &perm),
                    "{device} {dtype} permute {perm:?}"
                );
            }
            // A narrowed (offset) source: rows 3..37 of the second dim.
            let narrow = x.narrow(1, 3, 34).unwrap();
            let nbase = values(&narrow);
            let got = narrow.permute(&[0, 3, 2, 1]).unwrap().contiguous().unwrap();
            assert_eq!(
                values(&got),
                permuted(&nbase, &[3, 34, 5, 34], &[0, 3, 2, 1]),
                "{device} {dtype} narrowed"
            );
        }
        // A broadcast batch dim (stride 0) in front of a transpose.
        let m = Tensor::from_vec(host(48 * 20), &[48, 20], device).unwrap();
        let b = m
            .t()
            .unwrap()
            .unsqueeze(0)
            .unwrap()
            .broadcast_to(&[3, 20, 48])
            .unwrap();
        let want: Vec<f64> = permuted(&values(&m), &[48, 20], &[1, 0]).repeat(3);
        assert_eq!(values(&b.contiguous().unwrap()), want, "{device} broadcast");
    }
}

#[test]
fn xpu_transposed_copies_equal_cpu_ones_on_a_large_view() {
    if !common::xpu() {
        return;
    }
    // Several tiles in each direction plus ragged edges, with float casts.
    let cpu = Tensor::randn(&[2, 77, 129, 66], DType::F32, Device::Cpu, 9).unwrap();
    let gpu = cpu.to(Device::Xpu).unwrap();
    for perm in [[0, 3, 1, 2], [0, 2, 3, 1], [0, 3, 2, 1], [3, 1, 2, 0]] {
        for dtype in [DType::F32, DType::F16, DType::BF16] {
            // Whole permutes keep their strides through the cast, a slice of the last dim
            // (gaps) becomes dense in its memory order; `contiguous` then runs the tiles.
            for width in [66, 65] {
                let view = |t: &Tensor| t.narrow(3, 0, width).unwrap().permute(&perm).unwrap();
                let want = view(&cpu).to_dtype(dtype).unwrap().contiguous().unwrap();
                let got = view(&gpu).to_dtype(dtype).unwrap();
                if dtype != DType::F32 {
                    let keeps = got.strides() == view(&gpu).strides();
                    assert_eq!(keeps, width == 66, "permute {perm:?} {width}");
                    assert!(got.layout().dense_span().is_some(), "{perm:?} {width}");
                }
                let got = got.contiguous().unwrap();
                assert_eq!(values(&got), values(&want), "permute {perm:?} to {dtype}");
            }
        }
    }
}
