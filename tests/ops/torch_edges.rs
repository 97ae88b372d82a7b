//! PyTorch's semantics at the edges of the operator API, on every device: attention whose
//! q, k, v (and mask) leading dims broadcast or whose operands are 2-D, 0-d indices, reductions
//! over an empty dim, and empty batches through (transposed) convolutions. Each case is checked
//! against the same computation spelled out with explicit shapes. (Found by
//! `lab/sweeps/check_random_ops.py` against PyTorch.)

use crate::common;
use common::{assert_close, devices, randn, values, FLOATS};
use xpu::{Conv2dParams, ConvTranspose2dParams, DType, Device, Tensor};

#[test]
fn attention_broadcasts_leading_dims_and_takes_2d_operands() {
    for device in devices() {
        for dtype in FLOATS {
            let t = |shape: &[usize], seed| randn(shape, dtype, seed).to(device).unwrap();
            let (q, k, v) = (t(&[1, 2, 5, 16], 1), t(&[3, 1, 7, 16], 2), t(&[7, 8], 3));
            let mask = t(&[1, 1, 1, 5, 7], 4);
            let got = q
                .scaled_dot_product_attention(&k, &v, Some(&mask), None)
                .unwrap();
            assert_eq!(got.shape(), &[3, 2, 5, 8], "{device:?} {dtype}");
            // The same with every operand made full-size and contiguous.
            let full = |x: &Tensor, last: [usize; 2]| {
                x.broadcast_to(&[3, 2, last[0], last[1]])
                    .unwrap()
                    .contiguous()
                    .unwrap()
            };
            let mask4 = mask.reshape(&[1, 1, 5, 7]).unwrap();
            let want = full(&q, [5, 16])
                .scaled_dot_product_attention(
                    &full(&k, [7, 16]),
                    &full(&v, [7, 8]),
                    Some(&mask4),
                    None,
                )
                .unwrap();
            let tol = if dtype == DType::F32 { 1e-6 } else { 1e-2 };
            let what = format!("{device:?} {dtype} broadcast");
            assert_close(&what, &values(&got), &values(&want), tol, tol);
            let unfused = q
                .scaled_dot_product_attention_unfused(&k, &v, Some(&mask), None)
                .unwrap();
            assert_close(
                &format!("{what} unfused"),
                &values(&unfused),
                &values(&want),
                tol,
                tol,
            );
            // 2-D operands: one head without a batch.
            let (q2, k2, v2) = (t(&[5, 16], 5), t(&[7, 16], 6), t(&[7, 8], 7));
            let got = q2
                .scaled_dot_product_attention(&k2, &v2, None, Some(0.3))
                .unwrap();
            assert_eq!(got.shape(), &[5, 8]);
            let want = q2
                .unsqueeze(0)
                .unwrap()
                .scaled_dot_product_attention(
                    &k2.unsqueeze(0).unwrap(),
                    &v2.unsqueeze(0).unwrap(),
                    None,
                    Some(0.3),
                )
                .unwrap();
            assert_eq!(values(&got), values(&want), "{device:?} {dtype} 2-D");
            // Leading dims that do not broadcast, and 1-D operands, are errors.
            assert!(q
                .scaled_dot_product_attention(&t(&[2, 1, 7, 16], 8), &k, None, None)
                .is_err());
            let e = t(&[16], 9)
                .scaled_dot_product_attention(&k2, &v2, None, None)
                .unwrap_err();
            assert!(e.to_string().contains("rank >= 2"), "{e}");
        }
    }
}

#[test]
fn zero_dim_indices_and_empty_reductions() {
    for device in devices() {
        let x = randn(&[3, 5], DType::F32, 1).to(device).unwrap();
        let i = Tensor::from_vec(vec![2i32], &[], Device::Cpu)
            .unwrap()
            .to(device)
            .unwrap();
        let picked = x.index_select(1, &i).unwrap();
        assert_eq!(picked.shape(), &[3, 1]);
        let xv = values(&x);
        assert_eq!(values(&picked), vec![xv[2], xv[7], xv[12]], "{device:?}");
        let row = x.narrow(0, 1, 1).unwrap().reshape(&[5]).unwrap();
        let one = row.gather(0, &i).unwrap();
        assert_eq!(one.shape(), &[] as &[usize]);
        assert_eq!(values(&one), vec![xv[7]], "{device:?}");
        // log(sum of nothing) = -inf; an empty log_softmax is empty.
        let empty = Tensor::zeros(&[0, 4], DType::F32, device).unwrap();
        let lse = empty.logsumexp(0, false).unwrap();
        assert_eq!(lse.shape(), &[4]);
        assert!(
            values(&lse).iter().all(|&v| v == f64::NEG_INFINITY),
            "{device:?}"
        );
        assert_eq!(empty.logsumexp(0, true).unwrap().shape(), &[1, 4]);
        assert_eq!(empty.log_softmax(0).unwrap().shape(), &[0, 4]);
        assert!(empty.log_softmax(2).is_err());
    }
}

#[test]
fn convolutions_take_empty_batches_and_refuse_empty_images() {
    for device in devices() {
        let w = randn(&[4, 3, 3, 3], DType::F32, 1).to(device).unwrap();
        let p = Conv2dParams {
            stride: (2, 1),
            padding: (1, 1),
            ..Conv2dParams::default()
        };
        let none = Tensor::zeros(&[0, 3, 9, 7], DType::F32, device).unwrap();
        assert_eq!(none.conv2d(&w, None, p).unwrap().shape(), &[0, 4, 5, 7]);
        let flat = Tensor::zeros(&[1, 3, 0, 7], DType::F32, device).unwrap();
        let e = flat.conv2d(&w, None, p).unwrap_err().to_string();
        assert!(e.contains("height and width"), "{device:?}: {e}");
        // Transposed: weight [Cin, Cout/groups, kh, kw].
        let wt = randn(&[3, 2, 3, 3], DType::F32, 2).to(device).unwrap();
        let tp = ConvTranspose2dParams {
            stride: (2, 2),
            padding: (1, 0),
            output_padding: (1, 0),
            dilation: (1, 1),
            groups: 1,
        };
        let got = none.conv_transpose2d(&wt, None, tp).unwrap();
        let want = Tensor::zeros(&[1, 3, 9, 7], DType::F32, device)
            .unwrap()
            .conv_transpose2d(&wt, None, tp)
            .unwrap();
        let mut shape = want.shape().to_vec();
        shape[0] = 0;
        assert_eq!(got.shape(), &shape[..], "{device:?}");
        assert!(flat.conv_transpose2d(&wt, None, tp).is_err(), "{device:?}");
    }
}

#[test]
fn zero_dim_tensors_take_dim_0_or_minus_1() {
    for device in devices() {
        let x = Tensor::from_vec(vec![2.5f32], &[], Device::Cpu)
            .unwrap()
            .to(device)
            .unwrap();
        let scalar = |t: xpu::Result<Tensor>, want: f64, what: &str| {
            let t = t.unwrap();
            assert_eq!(t.shape(), &[] as &[usize], "{device:?} {what}");
            let got = values(&t)[0];
            let same = got == want || (got.is_nan() && want.is_nan());
            assert!(same, "{device:?} {what}: {got} != {want}");
        };
        scalar(x.sum(0, false), 2.5, "sum");
        scalar(x.sum(-1, true), 2.5, "sum keepdim");
        scalar(x.mean(0, false), 2.5, "mean");
        scalar(x.max(-1, false), 2.5, "max");
        scalar(x.argmax(0, true), 0.0, "argmax");
        scalar(x.softmax(0), 1.0, "softmax");
        scalar(x.log_softmax(-1), 0.0, "log_softmax");
        scalar(x.logsumexp(0, false), 2.5, "logsumexp");
        scalar(x.cumsum(0), 2.5, "cumsum");
        scalar(x.var(0, 0.0, false), 0.0, "var");
        scalar(x.std(0, 1.0, false), f64::NAN, "std with correction 1");
        scalar(x.all(0, false), 1.0, "all");
        scalar(x.flip(&[-1]), 2.5, "flip");
        for bad in [1, -2] {
            assert!(x.sum(bad, false).is_err(), "{device:?} sum({bad})");
            assert!(x.softmax(bad).is_err(), "{device:?} softmax({bad})");
        }
        assert!(
            x.flip(&[0, -1]).is_err(),
            "{device:?} flip of a repeated dim"
        );
        scalar(x.squeeze(-1), 2.5, "squeeze");
        scalar(x.transpose(0, -1), 2.5, "transpose");
        assert!(
            x.squeeze(1).is_err() && x.transpose(0, 1).is_err(),
            "{device:?}"
        );
    }
}
