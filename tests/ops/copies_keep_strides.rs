//! `Tensor::to` and `Tensor::to_dtype` keep the strides of dense views and the memory order
//! of the others, as PyTorch's `preserve_format` copies do. The strides are PyTorch's own, from
//! `tests/fixtures/strides.json` (made by `make_stride_fixtures.py`): every case's views are
//! replayed here and their copies' strides compared, on every device pair. Every move and cast
//! is also checked against index arithmetic on the host for its values; then ops on the kept
//! views must agree between devices, since a kept view reaches the kernels strided where a
//! contiguous copy would not.

use crate::common;
use common::stride_fixture::{self, host, usizes};
use common::{devices, values, FLOATS};
use xpu::{DType, Device, MemoryFormat, Tensor};

const DTYPES: [DType; 5] = [DType::F32, DType::F16, DType::BF16, DType::I32, DType::U8];

/// The dense views of one base tensor (`[5, 7, 65]`) and the strides a copy must keep.
fn dense_views(base: &Tensor) -> Vec<(&'static str, Tensor)> {
    vec![
        ("transpose", base.transpose(1, 2).unwrap()),
        ("permute", base.permute(&[2, 0, 1]).unwrap()),
        ("reverse", base.permute(&[2, 1, 0]).unwrap()),
        // A whole sub-tensor at an offset, transposed: dense, so kept (at offset 0).
        (
            "offset",
            base.narrow(0, 3, 1).unwrap().transpose(1, 2).unwrap(),
        ),
    ]
}

/// Views with gaps or repeats: their copies are dense.
fn sparse_views(base: &Tensor) -> Vec<(&'static str, Tensor)> {
    vec![
        (
            "narrow",
            base.narrow(2, 1, 63).unwrap().transpose(0, 2).unwrap(),
        ),
        (
            "broadcast",
            base.narrow(0, 0, 1)
                .unwrap()
                .broadcast_to(&[3, 7, 65])
                .unwrap(),
        ),
        (
            "step",
            base.narrow(1, 2, 1).unwrap().transpose(0, 2).unwrap(),
        ),
    ]
}

fn assert_same(what: &str, got: &Tensor, want: &Tensor) {
    assert_eq!(got.shape(), want.shape(), "{what}: shape");
    assert_eq!(values(got), values(want), "{what}: values");
}

#[test]
fn moves_and_casts_keep_dense_strides_and_make_the_rest_dense() {
    let devices = devices();
    for &from in &devices {
        let base = Tensor::from_vec(host(5 * 7 * 65), &[5, 7, 65], from).unwrap();
        for dtype in DTYPES {
            let base = base.to_dtype(dtype).unwrap();
            for (name, v) in dense_views(&base) {
                for &to in &devices {
                    let moved = v.to(to).unwrap();
                    let what = format!("{name} {dtype} {from}->{to}");
                    assert_eq!(moved.strides(), v.strides(), "{what}: to keeps strides");
                    assert_eq!(moved.device(), to);
                    assert_same(&what, &moved, &v);
                }
                for other in DTYPES {
                    let cast = v.to_dtype(other).unwrap();
                    let what = format!("{name} {from} {dtype}->{other}");
                    assert_eq!(
                        cast.strides(),
                        v.strides(),
                        "{what}: to_dtype keeps strides"
                    );
                    assert_eq!(cast.dtype(), other);
                    assert_same(&what, &cast.to_dtype(dtype).unwrap(), &v);
                }
            }
            for (name, v) in sparse_views(&base) {
                for &to in &devices {
                    let moved = v.to(to).unwrap();
                    let what = format!("{name} {dtype} {from}->{to}");
                    if to != from {
                        assert!(moved.layout().dense_span().is_some(), "{what}: dense");
                    }
                    assert_same(&what, &moved, &v);
                }
                let other = if dtype == DType::F32 {
                    DType::F16
                } else {
                    DType::F32
                };
                let cast = v.to_dtype(other).unwrap();
                assert!(
                    cast.layout().dense_span().is_some(),
                    "{name} {dtype}->{other}"
                );
                assert_same(&format!("{name} cast"), &cast.to_dtype(dtype).unwrap(), &v);
            }
        }
    }
}

#[test]
fn copies_take_pytorchs_strides() {
    let fixture = stride_fixture::load();
    let cases = fixture["cases"].as_array().unwrap();
    assert!(cases.len() >= 20, "fixture has {} cases", cases.len());
    let devices = devices();
    for case in cases {
        let name = case["name"].as_str().unwrap();
        for &from in &devices {
            let view = stride_fixture::made(case, from);
            let what = format!("{name} on {from}");
            assert_eq!(view.shape(), usizes(&case["shape"]), "{what}: shape");
            assert_eq!(
                view.strides(),
                usizes(&case["view_strides"]),
                "{what}: view"
            );
            let offset = case["view_offset"].as_u64().unwrap() as usize;
            assert_eq!(view.layout().offset(), offset, "{what}: offset");
            let want = usizes(&case["copy_strides"]);
            let cast = view.to_dtype(DType::F16).unwrap();
            assert_eq!(cast.strides(), want, "{what}: to_dtype");
            assert_same(&what, &cast.to_dtype(DType::F32).unwrap(), &view);
            for &to in devices.iter().filter(|&&d| d != from) {
                let moved = view.to(to).unwrap();
                assert_eq!(moved.strides(), want, "{what}: to {to}");
                assert_same(&format!("{what} to {to}"), &moved, &view);
            }
        }
    }
}

#[test]
fn channels_last_survives_moves_and_casts() {
    let devices = devices();
    for &from in &devices {
        for shape in [[2, 3, 5, 7], [1, 33, 1, 13], [2, 1, 7, 7]] {
            let n: usize = shape.iter().product();
            let x = Tensor::from_vec(host(n), &shape, from).unwrap();
            let cl = x.to_memory_format(MemoryFormat::ChannelsLast).unwrap();
            for &to in &devices {
                for dtype in FLOATS {
                    let y = cl.to(to).unwrap().to_dtype(dtype).unwrap();
                    let what = format!("{shape:?} {from}->{to} {dtype}");
                    assert_eq!(y.memory_format(), MemoryFormat::ChannelsLast, "{what}");
                    assert!(y.is_contiguous_for(MemoryFormat::ChannelsLast), "{what}");
                    assert_same(&what, &y, &x);
                }
            }
        }
    }
}

#[test]
fn ops_on_kept_views_agree_between_devices() {
    if !common::xpu() {
        return;
    }
    for dtype in FLOATS {
        // Operands made on the Cpu as views and moved: they arrive strided.
        let a = Tensor::randn(&[65, 33], DType::F32, Device::Cpu, 3).unwrap();
        let b = Tensor::randn(&[63, 65], DType::F32, Device::Cpu, 4).unwrap();
        let (a, b) = (a.t().unwrap(), b.t().unwrap());
        let a = a.to_dtype(dtype).unwrap();
        let b = b.to_dtype(dtype).unwrap();
        let (ax, bx) = (a.to(Device::Xpu).unwrap(), b.to(Device::Xpu).unwrap());
        assert!(!ax.is_contiguous() && !bx.is_contiguous(), "{dtype}");
        let tol = common::matmul_tol(dtype, 65);
        let want = values(&a.matmul(&b).unwrap());
        let got = values(&ax.matmul(&bx).unwrap());
        common::assert_close(&format!("matmul {dtype}"), &got, &want, tol, tol);
        // Element-wise, a reduction and a softmax over the kept strides.
        let e = 4.0 * common::eps(dtype);
        let pairs = [
            (a.gelu().unwrap(), ax.gelu().unwrap()),
            (a.add(&a).unwrap(), ax.add(&ax).unwrap()),
            (a.sum(1, true).unwrap(), ax.sum(1, true).unwrap()),
            (a.softmax(-1).unwrap(), ax.softmax(-1).unwrap()),
        ];
        for (i, (cpu, gpu)) in pairs.iter().enumerate() {
            let (c, g) = (values(cpu), values(gpu));
            common::assert_close(&format!("op {i} {dtype}"), &g, &c, 8.0 * e, e);
        }
    }
}
