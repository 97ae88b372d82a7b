//! Views (reshape, permute, transpose, t, narrow, broadcast_to, squeeze, unsqueeze, chunk),
//! contiguous copies, cat and creation ops agree on both devices and with the host data.

use crate::common;
use common::{randn, values};
use xpu::{DType, Device, Tensor};

#[test]
fn views_do_not_copy_and_read_back_correctly() {
    let host: Vec<f32> = (0..2 * 3 * 5).map(|i| i as f32).collect();
    for device in common::devices() {
        for dtype in DType::ALL {
            let x = Tensor::from_vec(host.clone(), &[2, 3, 5], Device::Cpu)
                .unwrap()
                .to_dtype(dtype)
                .unwrap()
                .to(device)
                .unwrap();
            let p = x.permute(&[2, 0, 1]).unwrap();
            assert_eq!(p.shape(), &[5, 2, 3]);
            assert!(!p.is_contiguous());
            let want: Vec<f64> = (0..5)
                .flat_map(|c| {
                    (0..2).flat_map(move |a| (0..3).map(move |b| (a * 15 + b * 5 + c) as f64))
                })
                .collect();
            assert_eq!(values(&p), want, "{device} {dtype} permute");
            assert_eq!(
                values(&p.contiguous().unwrap()),
                want,
                "{device} {dtype} contiguous"
            );
            let n = x.narrow(2, 1, 3).unwrap().narrow(0, 1, 1).unwrap();
            assert_eq!(
                values(&n),
                vec![16.0, 17.0, 18.0, 21.0, 22.0, 23.0, 26.0, 27.0, 28.0],
                "{device} {dtype} narrow"
            );
            let b = x
                .narrow(1, 2, 1)
                .unwrap()
                .broadcast_to(&[2, 2, 3, 5])
                .unwrap();
            assert_eq!(b.shape(), &[2, 2, 3, 5]);
            assert_eq!(values(&b)[..5], [10.0, 11.0, 12.0, 13.0, 14.0]);
            let u = x.unsqueeze(1).unwrap();
            assert_eq!(u.shape(), &[2, 1, 3, 5]);
            assert_eq!(u.squeeze(1).unwrap().shape(), &[2, 3, 5]);
            assert_eq!(x.unsqueeze(-1).unwrap().shape(), &[2, 3, 5, 1]);
            let r = x.transpose(0, 2).unwrap().reshape(&[30]).unwrap();
            assert_eq!(
                values(&r),
                values(&x.transpose(0, 2).unwrap()),
                "{device} {dtype} reshape of a view copies"
            );
            let chunks = x.chunk(3, 1).unwrap();
            assert_eq!(values(&chunks[2]), values(&x.narrow(1, 2, 1).unwrap()));
            assert_eq!(x.reshape(&[6, 5]).unwrap().t().unwrap().shape(), &[5, 6]);
        }
    }
}

#[test]
fn cat_along_every_dim_and_dtype() {
    let xpu = common::xpu();
    for dtype in DType::ALL {
        let a = randn(&[3, 5, 7], DType::F32, 1)
            .mul_scalar(10.0)
            .unwrap()
            .to_dtype(dtype)
            .unwrap();
        let b = randn(&[3, 5, 7], DType::F32, 2)
            .mul_scalar(10.0)
            .unwrap()
            .to_dtype(dtype)
            .unwrap();
        for dim in 0..3usize {
            let d = dim as isize;
            let b_part = b.narrow(d, 0, [1, 3, 5][dim]).unwrap();
            let c_part = a.transpose(0, 0).unwrap().narrow(d, 1, 1).unwrap();
            let cpu = Tensor::cat(&[&a, &b_part, &c_part], dim as isize).unwrap();
            let mut shape = [3, 5, 7];
            shape[dim] += [1, 3, 5][dim] + 1;
            assert_eq!(cpu.shape(), &shape[..]);
            // Reference: pieces read back through narrow of the result.
            assert_eq!(
                values(&cpu.narrow(dim as isize, 0, [3, 5, 7][dim]).unwrap()),
                values(&a)
            );
            assert_eq!(
                values(
                    &cpu.narrow(dim as isize, [3, 5, 7][dim], [1, 3, 5][dim])
                        .unwrap()
                ),
                values(&b_part)
            );
            if xpu {
                let (ga, gb) = (a.to(Device::Xpu).unwrap(), b.to(Device::Xpu).unwrap());
                let gpu = Tensor::cat(
                    &[
                        &ga,
                        &gb.narrow(d, 0, [1, 3, 5][dim]).unwrap(),
                        &ga.narrow(d, 1, 1).unwrap(),
                    ],
                    dim as isize,
                )
                .unwrap();
                assert_eq!(values(&gpu), values(&cpu), "xpu cat {dtype} dim {dim}");
            }
        }
    }
}

#[test]
fn creation_is_identical_on_every_device() {
    for device in common::devices() {
        for dtype in DType::ALL {
            let r = Tensor::randn(&[257], dtype, device, 3).unwrap();
            assert_eq!(
                values(&r),
                values(&Tensor::randn(&[257], dtype, Device::Cpu, 3).unwrap()),
                "{device} {dtype} randn"
            );
            let u = Tensor::rand(&[65], dtype, device, 3).unwrap();
            assert!(values(&u).iter().all(|&v| (0.0..=1.0).contains(&v)));
            assert_eq!(
                values(&Tensor::zeros(&[7], dtype, device).unwrap()),
                vec![0.0; 7]
            );
            assert_eq!(
                values(&Tensor::ones(&[7], dtype, device).unwrap()),
                vec![1.0; 7]
            );
            assert_eq!(
                values(&Tensor::full(3.0, &[2, 3], dtype, device).unwrap()),
                vec![3.0; 6]
            );
            assert_eq!(
                values(&Tensor::arange(0.0, 5.0, 1.0, dtype, device).unwrap()),
                vec![0.0, 1.0, 2.0, 3.0, 4.0]
            );
            // The `_like` forms take shape, dtype and device from a (non-contiguous) tensor.
            let t = r.reshape(&[1, 257]).unwrap().transpose(0, 1).unwrap();
            for (like, want) in [
                (t.zeros_like().unwrap(), 0.0),
                (t.ones_like().unwrap(), 1.0),
                (t.full_like(3.0).unwrap(), 3.0),
            ] {
                assert_eq!(
                    (like.shape(), like.dtype(), like.device()),
                    (&[257, 1][..], dtype, device)
                );
                assert_eq!(values(&like), vec![want; 257], "{device} {dtype}");
            }
        }
        assert_eq!(
            values(&Tensor::arange(1.0, 0.0, -0.25, DType::F32, device).unwrap()),
            vec![1.0, 0.75, 0.5, 0.25]
        );
        let z = Tensor::zeros(&[0, 3], DType::F16, device).unwrap();
        assert_eq!(z.numel(), 0);
        assert!(z.to_vec::<half::f16>().unwrap().is_empty());
    }
}

#[test]
fn moving_between_devices_round_trips() {
    if !common::xpu() {
        return;
    }
    for dtype in DType::ALL {
        let x = Tensor::rand(&[3, 7, 5], DType::F32, Device::Cpu, 1)
            .unwrap()
            .mul_scalar(100.0)
            .unwrap()
            .to_dtype(dtype)
            .unwrap();
        let g = x.to(Device::Xpu).unwrap();
        assert_eq!(g.device(), Device::Xpu);
        assert_eq!(g.dtype(), dtype);
        let back = g.to(Device::Cpu).unwrap();
        assert_eq!(values(&back), values(&x), "{dtype} round trip");
        let view = x.permute(&[2, 1, 0]).unwrap();
        assert_eq!(
            values(&view.to(Device::Xpu).unwrap()),
            values(&view),
            "{dtype} strided upload"
        );
    }
}

#[test]
fn copy_makes_independent_contiguous_storage() {
    for device in common::devices() {
        for dtype in DType::ALL {
            let x = Tensor::arange(0.0, 24.0, 1.0, dtype, device)
                .unwrap()
                .reshape(&[2, 3, 4])
                .unwrap();
            for v in [
                x.clone(),
                x.narrow(2, 1, 3).unwrap(),
                x.narrow(0, 1, 1).unwrap(),
                x.permute(&[2, 1, 0]).unwrap(),
            ] {
                let c = v.copy().unwrap();
                assert!(c.is_contiguous());
                assert_eq!(values(&c), values(&v), "{device} {dtype} copy");
            }
        }
    }
}

#[test]
fn transposed_gathers_match_index_arithmetic() {
    // Batched transposes whose sizes are not multiples of the CPU's 16×16 register tiles or
    // 32-row bands, and one large enough for several 64-row blocks, in every dtype (4-, 2- and
    // 1-byte elements take different CPU paths).
    let dtypes = [DType::F32, DType::F16, DType::BF16, DType::I32, DType::U8];
    for &(b, r, c) in &[
        (1, 33, 40),
        (3, 70, 45),
        (2, 1, 64),
        (5, 31, 33),
        (2, 300, 129),
    ] {
        let host: Vec<f32> = (0..b * r * c).map(|i| (i % 1000) as f32).collect();
        for device in common::devices() {
            for dtype in dtypes {
                let x = Tensor::from_vec(host.clone(), &[b, r, c], device)
                    .unwrap()
                    .to_dtype(dtype)
                    .unwrap();
                let src = values(&x);
                let at = |z: usize, i: usize, j: usize| src[(z * r + i) * c + j];
                let t = x.transpose(1, 2).unwrap().contiguous().unwrap();
                let want: Vec<f64> = (0..b)
                    .flat_map(|z| (0..c).flat_map(move |j| (0..r).map(move |i| (z, i, j))))
                    .map(|(z, i, j)| at(z, i, j))
                    .collect();
                assert_eq!(values(&t), want, "{device} {dtype} {b}x{r}x{c}");
                let p = x.permute(&[2, 0, 1]).unwrap().contiguous().unwrap();
                let want: Vec<f64> = (0..c)
                    .flat_map(|j| (0..b).flat_map(move |z| (0..r).map(move |i| (z, i, j))))
                    .map(|(z, i, j)| at(z, i, j))
                    .collect();
                assert_eq!(values(&p), want, "{device} {dtype} permute {b}x{r}x{c}");
            }
        }
    }
}

/// Tensors with a 0-sized dim are contiguous whatever their strides (as in PyTorch), and every
/// view op on them returns an empty tensor of the right shape (reshape of a `[3, 0]` tensor
/// used to recurse until the stack overflowed).
#[test]
fn empty_tensors_reshape_and_view_on_every_device() {
    for device in common::devices() {
        for dtype in DType::ALL {
            for shape in [&[3, 0][..], &[0, 3], &[2, 0, 5], &[0], &[4, 1, 0]] {
                let x = Tensor::zeros(shape, dtype, device).unwrap();
                assert!(x.is_contiguous(), "{device} {dtype} {shape:?}");
                let flat = x.flatten_all().unwrap();
                assert_eq!(flat.shape(), &[0]);
                assert_eq!(x.reshape(&[0, 7]).unwrap().shape(), &[0, 7]);
                let t = x.transpose(0, -1).unwrap();
                assert!(t.is_contiguous(), "{device} {dtype} {shape:?} transposed");
                assert_eq!(t.reshape(&[5, 0]).unwrap().shape(), &[5, 0]);
                assert_eq!(t.contiguous().unwrap().numel(), 0);
                assert!(values(&t.reshape(&[0]).unwrap()).is_empty());
                assert!(
                    x.reshape(&[1]).is_err(),
                    "{shape:?} to [1] must be an error"
                );
            }
        }
    }
}
