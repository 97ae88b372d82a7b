//! The operator families: matrix products, 3×3 convolutions and attention at SD 1.5's shapes,
//! in f32 and bf16, each as xpu's call beside candle's.

use xpu::nn::Conv2d;
use xpu::{Conv2dParams, DType};

use crate::{emit, f32_reference, median_ms, pair, AnyResult, Row};

const DTYPES: [(DType, &str); 2] = [(DType::F32, "f32"), (DType::BF16, "bf16")];

/// `[m, k] @ [k, n]`: squares and the UNet's projection shapes.
pub fn matmul(runs: usize, json: bool) -> AnyResult<()> {
    let shapes = [
        (512, 512, 512),
        (1024, 1024, 1024),
        (2048, 2048, 2048),
        (8192, 320, 1280),
        (8192, 1280, 320),
        (2048, 640, 640),
        (154, 768, 320),
    ];
    for (dt, name) in DTYPES {
        for (m, k, n) in shapes {
            let (a, ca) = pair(&[m, k], 1, 1.0, dt)?;
            let (b, cb) = pair(&[k, n], 2, 1.0, dt)?;
            let ours = median_ms(runs, || Ok(a.matmul(&b)?))?;
            let theirs = median_ms(runs, || Ok(ca.matmul(&cb)?));
            let flops = Some(2.0 * (m * k * n) as f64);
            let shape = format!("{m}x{k}x{n}");
            let reference = f32_reference(dt, &[&a, &b], |t| t[0].matmul(&t[1]))?;
            let row = Row::new("matmul", shape, name, flops, ours, theirs, reference);
            emit(row, json)?;
        }
    }
    Ok(())
}

/// 3×3, stride 1, padding 1 convolutions of NCHW inputs (candle's layout): xpu's one-off
/// `Tensor::conv2d` (packs the weight per call) and its prepacked `nn::Conv2d` layer.
pub fn conv(runs: usize, json: bool) -> AnyResult<()> {
    let shapes = [(2, 320, 64), (2, 640, 32), (2, 1280, 16)];
    let p = Conv2dParams {
        padding: (1, 1),
        ..Default::default()
    };
    for (dt, name) in DTYPES {
        for (n, c, hw) in shapes {
            let (x, cx) = pair(&[n, c, hw, hw], 3, 1.0, dt)?;
            let (w, cw) = pair(&[c, c, 3, 3], 4, 1.0 / (9.0 * c as f32).sqrt(), dt)?;
            let flops = Some(2.0 * (n * c * hw * hw * c * 9) as f64);
            // candle is timed once; both xpu variants are compared with that run.
            let theirs = median_ms(runs, || Ok(cx.conv2d(&cw, 1, 1, 1, 1)?));
            let layer = Conv2d::new(w.clone(), None, p)?;
            let variants: [(&str, &dyn Fn() -> xpu::Result<xpu::Tensor>); 2] = [
                ("conv2d one-off", &|| x.conv2d(&w, None, p)),
                ("conv2d layer", &|| layer.forward(&x)),
            ];
            for (op, f) in variants {
                let ours = median_ms(runs, || Ok(f()?))?;
                let theirs = match &theirs {
                    Ok((ms, y)) => Ok((*ms, y.clone())),
                    Err(e) => Err(e.to_string().into()),
                };
                let shape = format!("{n}x{c}x{hw}x{hw}, {c}->{c}");
                let reference = f32_reference(dt, &[&x, &w], |t| t[0].conv2d(&t[1], None, p))?;
                let row = Row::new(op, shape, name, flops, ours, theirs, reference);
                emit(row, json)?;
            }
        }
    }
    Ok(())
}

/// `softmax(q·kᵀ/√d)·v` for `[B, H, L, D]` heads: xpu's fused kernel; candle has no fused CPU
/// attention, so its row is the sequence its own SD UNet runs (matmul, softmax, matmul).
pub fn attention(runs: usize, json: bool) -> AnyResult<()> {
    let cases = [
        ("self", 4096, 4096),
        ("cross", 4096, 77),
        ("self", 1024, 1024),
    ];
    let (b, h, d) = (2, 8, 40);
    let scale = 1.0 / (d as f64).sqrt();
    for (dt, name) in DTYPES {
        for (kind, lq, lk) in cases {
            let (q, cq) = pair(&[b, h, lq, d], 5, 1.0, dt)?;
            let (k, ck) = pair(&[b, h, lk, d], 6, 1.0, dt)?;
            let (v, cv) = pair(&[b, h, lk, d], 7, 1.0, dt)?;
            let ours = median_ms(runs, || {
                Ok(q.scaled_dot_product_attention(&k, &v, None, Some(scale))?)
            })?;
            let theirs = median_ms(runs, || {
                let s = (cq.matmul(&ck.t()?)? * scale)?;
                Ok(candle_nn::ops::softmax_last_dim(&s)?.matmul(&cv)?)
            });
            let flops = Some(4.0 * (b * h * lq * lk * d) as f64);
            let shape = format!("{b}x{h}x{lq}x{d}, {lk} keys");
            let op = format!("attention {kind}");
            let reference = f32_reference(dt, &[&q, &k, &v], |t| {
                t[0].scaled_dot_product_attention(&t[1], &t[2], None, Some(scale))
            })?;
            let row = Row::new(op, shape, name, flops, ours, theirs, reference);
            emit(row, json)?;
        }
    }
    Ok(())
}
