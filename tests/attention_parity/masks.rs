//! Boolean and additive attention masks with broadcasting, fully masked rows and an explicit
//! scale, on each device, fused and unfused, against the materialised reference.

use super::common::{self, assert_close, randn, values, FLOATS};
use super::{qkv_on, reference, tol, xpu_lock};
use xpu::{DType, Device, Tensor};

/// Boolean and additive masks with broadcasting, incl. fully masked rows (zeros) and an
/// explicit scale.
pub(crate) fn check_masks(device: Device) {
    for &dtype in &FLOATS {
        let (b, h, lq, lk, d) = (2, 2, 37, 45, 40);
        // Diffusers' transposed views, taken on the device.
        let [q, k, v] = qkv_on([b, h, lq, lk, d, d], dtype, 5, device);
        assert!(!q.is_contiguous(), "{device}: q is a strided view");
        // Boolean [B, 1, Lq, Lk]: a causal-ish pattern plus one fully masked row.
        let keep: Vec<u8> = (0..b * lq * lk)
            .map(|i| {
                let (row, j) = ((i / lk) % lq, i % lk);
                u8::from(row != 3 && (j <= row + 4 || j % 7 == 0))
            })
            .collect();
        let bool_mask = Tensor::from_vec(keep, &[b, 1, lq, lk], device).unwrap();
        // Additive [Lk] (broadcast over batch, heads and rows), in q's dtype.
        let add = randn(&[lk], dtype, 9).to(device).unwrap();
        // Additive with -inf, full [B, H, Lq, Lk] as a transposed view of [B, H, Lk, Lq];
        // row 5 is all -inf (zeros out).
        let vals: Vec<f32> = (0..b * h * lk * lq)
            .map(|i| {
                let (j, row) = ((i / lq) % lk, i % lq);
                if row == 5 || j % 5 == 0 {
                    f32::NEG_INFINITY
                } else {
                    ((i * 37) % 11) as f32 / 10.0 - 0.5
                }
            })
            .collect();
        let inf_mask = Tensor::from_vec(vals, &[b, h, lk, lq], device)
            .unwrap()
            .to_dtype(dtype)
            .unwrap()
            .transpose(-1, -2)
            .unwrap();
        for (mask, scale) in [(&bool_mask, None), (&add, Some(0.3)), (&inf_mask, None)] {
            let s = scale.unwrap_or(1.0 / (d as f64).sqrt());
            let want = reference(&q, &k, &v, Some(mask), s);
            let what = format!("{device} {dtype} mask {}", mask.dtype());
            let fused = q
                .scaled_dot_product_attention(&k, &v, Some(mask), scale)
                .unwrap();
            let got = values(&fused);
            assert_close(
                &format!("fused {what}"),
                &got,
                &want,
                tol(dtype),
                tol(dtype),
            );
            let unfused = q
                .scaled_dot_product_attention_unfused(&k, &v, Some(mask), scale)
                .unwrap();
            assert_close(
                &format!("unfused {what}"),
                &values(&unfused),
                &want,
                tol(dtype),
                tol(dtype),
            );
            if mask.dtype() == DType::U8 {
                // Row 3 of every batch item and head has every key masked out: zeros.
                for bh in 0..b * h {
                    assert!(
                        got[(bh * lq + 3) * d..][..d].iter().all(|&x| x == 0.0),
                        "{what}"
                    );
                }
            }
        }
    }
}

#[test]
fn masks_on_cpu() {
    check_masks(Device::Cpu);
}

#[test]
fn masks_on_xpu() {
    let _g = xpu_lock();
    if common::xpu() {
        check_masks(Device::Xpu);
    }
}
