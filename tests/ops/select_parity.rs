//! Comparisons (`cmp`, `eq` … `ge`, `cmp_scalar`), `where_cond` and `masked_fill`.
//!
//! The Cpu is checked against a plain reference (f64 comparisons of the exact values; selection
//! of the operands' own bits), and the Xpu against the Cpu bit for bit (both ops are exact), for
//! every dtype, odd sizes, broadcasting (scalar, row, column, leading dims), non-contiguous
//! views, empty shapes, and the values where semantics bite: NaN (unordered, `ne` true),
//! `-0 == +0`, infinities, NaN payloads and `-0.0` copied unchanged by `where_cond`.

use crate::common;
use common::devices;
use xpu::{CmpOp, DType, Device, Tensor};

const ALL_DTYPES: [DType; 5] = [DType::F32, DType::F16, DType::BF16, DType::I32, DType::U8];

/// xorshift64 for picking values.
struct Draw(u64);

impl Draw {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// Float values that make ties and special cases frequent (each exact in f16 and bf16); the
/// NaN carries a payload so that bit-exact copies are visible.
fn float_pool() -> [f32; 10] {
    [
        0.0,
        -0.0,
        1.0,
        -1.0,
        0.5,
        2.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::from_bits(0x7fc0_1230),
        3.0,
    ]
}

/// A tensor of `shape` and `dtype` on `device` with drawn values; with `view`, a non-contiguous
/// view made on the device (the transpose of a tensor stored with the shape reversed).
fn make(shape: &[usize], dtype: DType, seed: u64, view: bool, device: Device) -> Tensor {
    let mut d = Draw(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let stored: Vec<usize> = if view {
        shape.iter().rev().copied().collect()
    } else {
        shape.to_vec()
    };
    let n: usize = stored.iter().product();
    let t = match dtype {
        DType::I32 => {
            let v: Vec<i32> = (0..n).map(|_| d.below(5) as i32 - 2).collect();
            Tensor::from_vec(v, &stored, Device::Cpu)
        }
        DType::U8 => {
            let v: Vec<u8> = (0..n).map(|_| d.below(4) as u8).collect();
            Tensor::from_vec(v, &stored, Device::Cpu)
        }
        float => {
            let pool = float_pool();
            let v: Vec<f32> = (0..n).map(|_| pool[d.below(pool.len())]).collect();
            Tensor::from_vec(v, &stored, Device::Cpu).and_then(|t| t.to_dtype(float))
        }
    }
    .and_then(|t| t.to(device))
    .unwrap();
    if view && shape.len() > 1 {
        let order: Vec<usize> = (0..shape.len()).rev().collect();
        let v = t.permute(&order).unwrap();
        assert!(!v.is_contiguous());
        v
    } else {
        t
    }
}

/// Every element's bits (any dtype, any device), after materialising `shape`'s broadcast.
fn bits(t: &Tensor, shape: &[usize]) -> Vec<u32> {
    let t = t
        .to(Device::Cpu)
        .and_then(|t| t.broadcast_to(shape))
        .and_then(|t| t.contiguous())
        .unwrap();
    match t.dtype() {
        DType::F32 => t
            .to_vec::<f32>()
            .unwrap()
            .iter()
            .map(|v| v.to_bits())
            .collect(),
        DType::F16 => t
            .to_vec::<half::f16>()
            .unwrap()
            .iter()
            .map(|v| u32::from(v.to_bits()))
            .collect(),
        DType::BF16 => t
            .to_vec::<half::bf16>()
            .unwrap()
            .iter()
            .map(|v| u32::from(v.to_bits()))
            .collect(),
        DType::I32 => t
            .to_vec::<i32>()
            .unwrap()
            .iter()
            .map(|&v| v as u32)
            .collect(),
        DType::U8 => t
            .to_vec::<u8>()
            .unwrap()
            .iter()
            .map(|&v| u32::from(v))
            .collect(),
    }
}

/// The reference of `where_cond`: `on_true` bits where the mask bits are nonzero, else
/// `on_false` bits.
fn picked(mask: &[u32], on_true: &[u32], on_false: &[u32]) -> Vec<u32> {
    mask.iter()
        .zip(on_true.iter().zip(on_false))
        .map(|(&m, (&t, &f))| if m != 0 { t } else { f })
        .collect()
}

/// Values as f64 after materialising `shape`'s broadcast (exact for every dtype).
fn wide(t: &Tensor, shape: &[usize]) -> Vec<f64> {
    common::values(&t.broadcast_to(shape).unwrap().contiguous().unwrap())
}

/// (lhs shape, rhs shape, lhs as a view, rhs as a view): odd sizes, broadcasts, views, empty.
const PAIRS: [(&[usize], &[usize], bool, bool); 8] = [
    (&[1], &[1], false, false),
    (&[7], &[7], false, false),
    (&[63, 65], &[63, 65], true, false),
    (&[257], &[1], false, false),
    (&[7, 1], &[1, 65], false, false),
    (&[2, 3, 5], &[5], true, false),
    (&[5, 2, 3], &[5, 2, 3], true, true),
    (&[0, 3], &[3], false, false),
];

fn out_shape(a: &[usize], b: &[usize]) -> Vec<usize> {
    let r = a.len().max(b.len());
    (0..r)
        .map(|i| {
            let da = if i + a.len() >= r {
                a[i + a.len() - r]
            } else {
                1
            };
            let db = if i + b.len() >= r {
                b[i + b.len() - r]
            } else {
                1
            };
            if da == 1 {
                db
            } else {
                da
            }
        })
        .collect()
}

#[test]
fn comparisons_match_the_reference_on_every_device_and_dtype() {
    for device in devices() {
        for dtype in ALL_DTYPES {
            for (case, &(sa, sb, va, vb)) in PAIRS.iter().enumerate() {
                let (seed_a, seed_b) = (2 * case as u64 + 1, 2 * case as u64 + 2);
                let a = make(sa, dtype, seed_a, va, device);
                let b = make(sb, dtype, seed_b, vb, device);
                let shape = out_shape(sa, sb);
                // The reference reads the same values built on the Cpu.
                let x = wide(&make(sa, dtype, seed_a, va, Device::Cpu), &shape);
                let y = wide(&make(sb, dtype, seed_b, vb, Device::Cpu), &shape);
                let (da, db) = (&a, &b);
                for op in CmpOp::ALL {
                    let what = format!("{device:?} {dtype} {} {sa:?} vs {sb:?}", op.name());
                    let got = da.cmp(db, op).unwrap();
                    assert_eq!(got.dtype(), DType::U8, "{what}");
                    assert_eq!(got.shape(), shape.as_slice(), "{what}");
                    let want: Vec<u32> = x
                        .iter()
                        .zip(&y)
                        .map(|(&p, &q)| u32::from(op.apply(p, q)))
                        .collect();
                    assert_eq!(bits(&got, &shape), want, "{what}");
                }
            }
        }
    }
}

#[test]
fn named_comparisons_are_cmp_and_nan_is_unordered() {
    let nan = f32::NAN;
    let a = Tensor::from_vec(vec![nan, 1.0, -0.0, f32::INFINITY], &[4], Device::Cpu).unwrap();
    let b = Tensor::from_vec(vec![nan, nan, 0.0, f32::INFINITY], &[4], Device::Cpu).unwrap();
    for device in devices() {
        let (a, b) = (a.to(device).unwrap(), b.to(device).unwrap());
        let get = |t: xpu::Result<Tensor>| t.unwrap().to_vec::<u8>().unwrap();
        assert_eq!(get(a.eq(&b)), [0, 0, 1, 1], "{device:?} eq");
        assert_eq!(get(a.ne(&b)), [1, 1, 0, 0], "{device:?} ne");
        assert_eq!(get(a.lt(&b)), [0, 0, 0, 0], "{device:?} lt");
        assert_eq!(get(a.le(&b)), [0, 0, 1, 1], "{device:?} le");
        assert_eq!(get(a.gt(&b)), [0, 0, 0, 0], "{device:?} gt");
        assert_eq!(get(a.ge(&b)), [0, 0, 1, 1], "{device:?} ge");
        // The scalar is converted to the tensor's dtype first: f16's 0.1 equals itself.
        let h = Tensor::full(0.1, &[3], DType::F16, device).unwrap();
        assert_eq!(
            get(h.cmp_scalar(CmpOp::Eq, 0.1)),
            [1, 1, 1],
            "{device:?} f16 scalar"
        );
        assert_eq!(
            get(a.cmp_scalar(CmpOp::Gt, 0.5)),
            [0, 1, 0, 1],
            "{device:?} gt_scalar"
        );
    }
}

/// Mask shape, on_true shape, on_false shape, and which operand is a view (0, 1, 2; 3: none).
type Triple = (&'static [usize], &'static [usize], &'static [usize], usize);

const TRIPLES: [Triple; 7] = [
    (&[1], &[1], &[1], 3),
    (&[7], &[7], &[7], 3),
    (&[65, 63], &[65, 63], &[65, 63], 0),
    (&[257], &[1], &[257], 2),
    (&[7, 1], &[1, 65], &[7, 65], 3),
    (&[3, 5], &[2, 3, 5], &[5], 1),
    (&[4, 0], &[4, 1], &[0], 3),
];

#[test]
fn where_cond_copies_the_picked_bits_on_every_device_and_dtype() {
    for device in devices() {
        for dtype in ALL_DTYPES {
            for (case, &(sm, st, sf, view)) in TRIPLES.iter().enumerate() {
                let seed = 10 * case as u64;
                let m = make(sm, DType::U8, seed + 1, view == 0, device);
                let t = make(st, dtype, seed + 2, view == 1, device);
                let f = make(sf, dtype, seed + 3, view == 2, device);
                let shape = out_shape(&out_shape(sm, st), sf);
                let what = format!("{device:?} {dtype} mask {sm:?} true {st:?} false {sf:?}");
                let got = m.where_cond(&t, &f).unwrap();
                assert_eq!(got.dtype(), dtype, "{what}");
                assert_eq!(got.shape(), shape.as_slice(), "{what}");
                // The reference reads the same values built on the Cpu.
                let mb = bits(
                    &make(sm, DType::U8, seed + 1, view == 0, Device::Cpu),
                    &shape,
                );
                let tb = bits(&make(st, dtype, seed + 2, view == 1, Device::Cpu), &shape);
                let fb = bits(&make(sf, dtype, seed + 3, view == 2, Device::Cpu), &shape);
                let want = picked(&mb, &tb, &fb);
                assert_eq!(bits(&got, &shape), want, "{what}");
            }
        }
    }
}

#[test]
fn masked_fill_replaces_where_the_mask_is_set() {
    for device in devices() {
        for dtype in ALL_DTYPES {
            let x = make(&[5, 7], dtype, 41, true, device);
            // A column mask broadcast along the rows.
            let mask = Tensor::from_vec(vec![1u8, 0, 0, 2, 0], &[5, 1], device).unwrap();
            let got = x.masked_fill(&mask, 2.0).unwrap();
            let xv = wide(&make(&[5, 7], dtype, 41, true, Device::Cpu), &[5, 7]);
            let gv = wide(&got.to(Device::Cpu).unwrap(), &[5, 7]);
            for r in 0..5 {
                for c in 0..7 {
                    let i = r * 7 + c;
                    let want = if [0, 3].contains(&r) { 2.0 } else { xv[i] };
                    let same = gv[i] == want || (gv[i].is_nan() && want.is_nan());
                    assert!(same, "{device:?} {dtype} ({r}, {c}): {} vs {want}", gv[i]);
                }
            }
            // As PyTorch's out-of-place masked_fill, x and the mask broadcast together.
            let wide_mask = Tensor::zeros(&[2, 5, 7], DType::U8, device).unwrap();
            let widened = x.masked_fill(&wide_mask, 0.0).unwrap();
            assert_eq!(widened.shape(), &[2, 5, 7], "{device:?} {dtype}");
            let wv = wide(&widened.to(Device::Cpu).unwrap(), &[2, 5, 7]);
            let same = |a: f64, b: f64| a == b || (a.is_nan() && b.is_nan());
            assert!(
                wv.iter().enumerate().all(|(i, &v)| same(v, xv[i % 35])),
                "{device:?} {dtype}"
            );
            let bad_mask = Tensor::zeros(&[3, 7], DType::U8, device).unwrap();
            assert!(x.masked_fill(&bad_mask, 0.0).is_err(), "{device:?} {dtype}");
        }
    }
}

#[test]
fn bad_operands_are_errors() {
    for device in devices() {
        let f = Tensor::zeros(&[3], DType::F32, device).unwrap();
        let h = Tensor::zeros(&[3], DType::F16, device).unwrap();
        let m = Tensor::zeros(&[3], DType::U8, device).unwrap();
        let text = |r: xpu::Result<Tensor>| r.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(text(f.lt(&h)).contains("lt"), "{device:?} dtype mismatch");
        let four = Tensor::zeros(&[4], DType::F32, device).unwrap();
        assert!(
            f.eq(&four).is_err(),
            "{device:?} shapes that do not broadcast"
        );
        let e = text(f.where_cond(&f, &f));
        assert!(e.contains("mask must be u8"), "{device:?}: {e}");
        assert!(
            m.where_cond(&f, &h).is_err(),
            "{device:?} values of two dtypes"
        );
        assert!(
            m.where_cond(&f, &four).is_err(),
            "{device:?} values that do not broadcast"
        );
    }
    if common::xpu() {
        let cpu = Tensor::zeros(&[3], DType::F32, Device::Cpu).unwrap();
        let gpu = cpu.to(Device::Xpu).unwrap();
        let mask = Tensor::zeros(&[3], DType::U8, Device::Cpu).unwrap();
        assert!(cpu.gt(&gpu).is_err());
        assert!(mask.where_cond(&cpu, &gpu).is_err());
        assert!(mask.where_cond(&gpu, &gpu).is_err());
    }
}

#[test]
fn views_with_storage_offsets_are_read_in_place() {
    // Narrowed operands start inside their storage: the kernels must add every offset.
    let narrow = |t: Tensor, start: usize, len: usize| t.narrow(0, start, len).unwrap();
    for device in devices() {
        for dtype in ALL_DTYPES {
            // Narrowed on the device itself (moving a view copies it to a fresh storage); the
            // reference reads the same values built on the Cpu.
            let operands = |device| {
                (
                    narrow(make(&[70, 9], dtype, 51, false, device), 3, 65),
                    narrow(make(&[70, 9], dtype, 52, true, device), 1, 65),
                    narrow(make(&[68, 9], DType::U8, 53, false, device), 2, 65),
                )
            };
            let (a, b, m) = operands(Device::Cpu);
            let (da, db, dm) = &operands(device);
            let shape = [65, 9];
            let what = format!("{device:?} {dtype}");
            let got = da.cmp(db, CmpOp::Le).unwrap();
            let (x, y) = (wide(&a, &shape), wide(&b, &shape));
            let want: Vec<u32> = x.iter().zip(&y).map(|(p, q)| u32::from(p <= q)).collect();
            assert_eq!(bits(&got, &shape), want, "{what} le");
            let got = dm.where_cond(da, db).unwrap();
            let (mb, ab, bb) = (bits(&m, &shape), bits(&a, &shape), bits(&b, &shape));
            let want = picked(&mb, &ab, &bb);
            assert_eq!(bits(&got, &shape), want, "{what} where_cond");
        }
    }
}

#[test]
fn integer_data_compares_with_the_scalar_itself() {
    // PyTorch promotes an integer tensor compared with a Python float: `x < 0.5` is `x <= 0`,
    // and values outside the dtype's range are not wrapped or saturated first.
    let scalars = [
        -1e10,
        -2.5,
        -1.0,
        -0.5,
        0.0,
        0.5,
        1.0,
        2.5,
        254.5,
        255.0,
        255.5,
        300.0,
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
    ];
    let i32s: Vec<i32> = vec![i32::MIN, -3, -1, 0, 1, 2, 3, 254, 255, 256, i32::MAX];
    let u8s: Vec<u8> = vec![0, 1, 2, 3, 128, 254, 255];
    for device in devices() {
        let cases = [
            (
                Tensor::from_vec(i32s.clone(), &[i32s.len()], device).unwrap(),
                i32s.iter().map(|&v| f64::from(v)).collect::<Vec<_>>(),
            ),
            (
                Tensor::from_vec(u8s.clone(), &[u8s.len()], device).unwrap(),
                u8s.iter().map(|&v| f64::from(v)).collect(),
            ),
        ];
        for (x, xs) in &cases {
            for &v in &scalars {
                for op in CmpOp::ALL {
                    let got = x.cmp_scalar(op, v).unwrap().to_vec::<u8>().unwrap();
                    let want: Vec<u8> = xs.iter().map(|&p| u8::from(op.apply(p, v))).collect();
                    assert_eq!(got, want, "{device:?} {} {} {v}", x.dtype(), op.name());
                }
            }
        }
    }
}

#[test]
fn tril_and_triu_keep_their_triangle_on_every_device_and_dtype() {
    let shapes: [&[usize]; 4] = [&[1, 1], &[7, 5], &[3, 65, 63], &[2, 0, 4]];
    for device in devices() {
        for dtype in ALL_DTYPES {
            for (case, &shape) in shapes.iter().enumerate() {
                let view = case == 2;
                let seed = 70 + case as u64;
                let x = make(shape, dtype, seed, view, device);
                let xb = bits(&make(shape, dtype, seed, view, Device::Cpu), shape);
                let (rows, cols) = (shape[shape.len() - 2], shape[shape.len() - 1]);
                for diagonal in [-70i64, -2, 0, 1, 3, 70] {
                    let what = format!("{device:?} {dtype} {shape:?} diagonal {diagonal}");
                    let lower = bits(&x.tril(diagonal).unwrap(), shape);
                    let upper = bits(&x.triu(diagonal).unwrap(), shape);
                    for (k, &v) in xb.iter().enumerate() {
                        let (i, j) = ((k / cols) % rows.max(1), k % cols);
                        let d = j as i64 - i as i64;
                        assert_eq!(
                            lower[k],
                            if d <= diagonal { v } else { 0 },
                            "tril {what} [{i}, {j}]"
                        );
                        assert_eq!(
                            upper[k],
                            if d >= diagonal { v } else { 0 },
                            "triu {what} [{i}, {j}]"
                        );
                    }
                }
            }
            let vector = make(&[5], dtype, 1, false, device);
            assert!(
                vector.tril(0).is_err() && vector.triu(0).is_err(),
                "{device:?} {dtype}"
            );
        }
    }
}

#[test]
fn large_selections_split_over_threads_stay_aligned() {
    // 300 x 301 elements: above the Cpu's threading threshold, so chunks start mid-tensor.
    for device in devices() {
        for dtype in [DType::F32, DType::BF16, DType::U8] {
            let shape = [300, 301];
            let (m, t, f) = (
                make(&shape, DType::U8, 81, false, device),
                make(&shape, dtype, 82, false, device),
                make(&shape, dtype, 83, true, device),
            );
            let got = m.where_cond(&t, &f).unwrap();
            let mb = bits(&make(&shape, DType::U8, 81, false, Device::Cpu), &shape);
            let tb = bits(&make(&shape, dtype, 82, false, Device::Cpu), &shape);
            let fb = bits(&make(&shape, dtype, 83, true, Device::Cpu), &shape);
            let want = picked(&mb, &tb, &fb);
            assert_eq!(bits(&got, &shape), want, "{device:?} {dtype}");
            let lt = t.lt(&f).unwrap();
            let (x, y) = (
                wide(&t.to(Device::Cpu).unwrap(), &shape),
                wide(&f.to(Device::Cpu).unwrap(), &shape),
            );
            let want: Vec<u32> = x.iter().zip(&y).map(|(p, q)| u32::from(p < q)).collect();
            assert_eq!(bits(&lt, &shape), want, "{device:?} {dtype} lt");
        }
    }
}
