//! Winograd through the public API: `nn::Conv2d` layers that take that path (3×3, stride 1,
//! ≥ 16 channels each way; F(4,3) at these channel counts) and per-call `conv2d` on inputs
//! large enough to use it (F(2,3)),
//! against the unfused im2col sequence on the Cpu and Xpu against Cpu: odd channel counts (16,
//! 17, 33) and spatial sizes (1, 3, 7×5, 13), paddings 0, 1, 2 and (2, 0), both memory formats,
//! every float dtype, the whole epilogue with full and broadcast residuals.

use crate::common;
use common::{assert_close, eps, randn, values, FLOATS};
use xpu::nn::Conv2d;
use xpu::{Activation, Conv2dParams, DType, Device, MemoryFormat};

/// The Winograd override is process-wide: tests that build layers take turns.
static LAYERS: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn layers_lock() -> std::sync::MutexGuard<'static, ()> {
    LAYERS.lock().unwrap_or_else(|e| e.into_inner())
}

fn pad(ph: usize, pw: usize) -> Conv2dParams {
    Conv2dParams {
        padding: (ph, pw),
        ..Default::default()
    }
}

fn tol(dtype: DType, c: usize) -> f64 {
    let base = if dtype == DType::F32 {
        1e-5
    } else {
        4.0 * eps(dtype)
    };
    base * ((9 * c) as f64).sqrt() + 1e-5
}

/// `(input [N, C, H, W], outputs, params)`.
fn cases() -> Vec<([usize; 4], usize, Conv2dParams)> {
    vec![
        ([2, 16, 1, 1], 16, pad(1, 1)),
        ([1, 17, 3, 3], 33, pad(0, 0)),
        ([2, 33, 7, 5], 17, pad(1, 1)),
        ([1, 16, 13, 13], 20, pad(2, 2)),
        ([3, 18, 6, 9], 16, pad(2, 0)),
    ]
}

#[test]
fn winograd_layers_match_the_unfused_sequence_on_every_device() {
    let _turn = layers_lock();
    let devices = common::devices();
    for &dtype in &FLOATS {
        for (ci, (shape, o, p)) in cases().into_iter().enumerate() {
            let (n, c) = (shape[0], shape[1]);
            let x = randn(&shape, dtype, ci as u64);
            let w = randn(&[o, c, 3, 3], dtype, 10 + ci as u64);
            let b = randn(&[o], dtype, 20 + ci as u64);
            let out = x.conv2d(&w, None, p).unwrap().shape().to_vec();
            let residuals = [
                randn(&out, dtype, 30 + ci as u64),
                randn(&[n, o, 1, 1], dtype, 40 + ci as u64),
                randn(&[1, o, 1, 1], dtype, 50 + ci as u64),
            ];
            let layer = Conv2d::new(w.clone(), Some(b.clone()), p).unwrap();
            let amx_bf16 = dtype == DType::BF16
                && xpu::cpu::gemm::bf16_method() == xpu::cpu::gemm::Bf16Method::Amx;
            assert!(
                amx_bf16 || layer.uses_winograd(),
                "{dtype} case {ci}: not Winograd"
            );
            for (ri, r) in residuals.iter().enumerate() {
                for act in [Activation::None, Activation::Silu] {
                    for fmt in [MemoryFormat::Contiguous, MemoryFormat::ChannelsLast] {
                        let xf = x.to_memory_format(fmt).unwrap();
                        let want = xf
                            .conv2d_fused(&w, p)
                            .bias(&b)
                            .activation(act)
                            .residual(r)
                            .run_unfused()
                            .unwrap();
                        let want = values(&want);
                        let what = format!("{dtype} case {ci} residual {ri} {act:?} {fmt:?}");
                        let mut cpu = Vec::new();
                        for &device in &devices {
                            let l = layer.to(device).unwrap();
                            // The format taken on the device.
                            let xd = x.to(device).unwrap().to_memory_format(fmt).unwrap();
                            let rd = r.to(device).unwrap();
                            let got = values(&l.forward_fused(&xd, Some(&rd), act).unwrap());
                            let t = tol(dtype, c);
                            assert_close(&format!("{device} {what}"), &got, &want, t, t);
                            if device == Device::Cpu {
                                cpu = got;
                            } else {
                                assert_close(&format!("{device} vs cpu {what}"), &got, &cpu, t, t);
                            }
                        }
                    }
                }
            }
        }
    }
}

/// A per-call convolution over at least 256 output pixels (1024 with bf16 operands)
/// transforms its filters for the call (F(2,3)); from 4096 pixels on it takes the variant a
/// layer would (F(4,3) for f32).
#[test]
fn per_call_winograd_matches_the_unfused_sequence() {
    for &dtype in &FLOATS {
        for (h, w_) in [(19, 17), (33, 35), (65, 67)] {
            let x = randn(&[1, 17, h, w_], dtype, 1);
            let w = randn(&[19, 17, 3, 3], dtype, 2);
            let b = randn(&[19], dtype, 3);
            for fmt in [MemoryFormat::Contiguous, MemoryFormat::ChannelsLast] {
                let xf = x.to_memory_format(fmt).unwrap();
                let op = xf
                    .conv2d_fused(&w, pad(1, 1))
                    .bias(&b)
                    .activation(Activation::Silu);
                let got = op.run().unwrap();
                assert_eq!(got.shape(), &[1, 19, h, w_]);
                let want = values(&op.run_unfused().unwrap());
                let t = tol(dtype, 17);
                let what = format!("{dtype} {fmt:?} {h}x{w_}");
                assert_close(&what, &values(&got), &want, t, t);
            }
        }
    }
}

/// Wide channels (448·448 pairs and more) take the layer's variant (F(4,3) for f32) per call
/// from 1024 output pixels: within the f32 tolerance of the im2col sequence.
#[test]
fn wide_per_call_winograd_matches_the_unfused_sequence() {
    let x = randn(&[1, 448, 32, 33], DType::F32, 11);
    let w = randn(&[456, 448, 3, 3], DType::F32, 12)
        .affine(0.05, 0.0)
        .unwrap();
    let b = randn(&[456], DType::F32, 13);
    let xf = x.to_memory_format(MemoryFormat::ChannelsLast).unwrap();
    let op = xf.conv2d_fused(&w, pad(1, 1)).bias(&b);
    let got = op.run().unwrap();
    assert_eq!(got.shape(), &[1, 456, 32, 33]);
    let want = values(&op.run_unfused().unwrap());
    let t = tol(DType::F32, 448);
    assert_close("448 -> 456 channels", &values(&got), &want, t, t);
}

/// Runs `body` with the Cpu convolution kernel `kernel` forced (where it is valid).
fn forced<R>(kernel: &str, body: impl FnOnce() -> R) -> R {
    xpu::config::scoped(|c| c.autotune.force("cpu_conv2d", kernel), body)
}

/// Layers that cannot use Winograd (stride 2, fewer than 16 channels) say so; one that can
/// does unless the process runs with `XPU_AUTOTUNE_FORCE` set.
#[test]
fn other_layers_do_not_use_winograd() {
    let _turn = layers_lock();
    let w = randn(&[16, 16, 3, 3], DType::F32, 1);
    let strided = Conv2dParams {
        stride: (2, 2),
        ..pad(1, 1)
    };
    assert!(!Conv2d::new(w.clone(), None, strided)
        .unwrap()
        .uses_winograd());
    let few = randn(&[16, 4, 3, 3], DType::F32, 2);
    assert!(!Conv2d::new(few, None, pad(1, 1)).unwrap().uses_winograd());
    let on_xpu_or_cpu = Conv2d::new(w, None, pad(1, 1)).unwrap();
    assert!(on_xpu_or_cpu.uses_winograd() || std::env::var("XPU_AUTOTUNE_FORCE").is_ok());
}

/// A forced kernel decides how layers built under it are packed and how calls under it run;
/// a layer built for one kernel and called under another is packed again for it (and keeps
/// those packs); every kernel agrees.
#[test]
fn forced_kernels_pack_and_run_layers() {
    let _turn = layers_lock();
    let x = randn(&[1, 16, 9, 8], DType::F32, 5).to_memory_format(MemoryFormat::ChannelsLast);
    let x = x.unwrap();
    let w = randn(&[24, 16, 3, 3], DType::F32, 6);
    let build = |k| forced(k, || Conv2d::new(w.clone(), None, pad(1, 1)).unwrap());
    let (gemm, f2, f4) = (
        build("implicit_gemm"),
        build("winograd_f2"),
        build("winograd_f4"),
    );
    assert!(!gemm.uses_winograd() && f2.uses_winograd() && f4.uses_winograd());
    let run = |k, layer: &Conv2d| {
        let (out, ran) = xpu::autotune::trace(|| forced(k, || layer.forward(&x).unwrap()));
        assert_eq!(ran.len(), 1, "{k}");
        assert_eq!(ran[0].candidate, k);
        values(&out)
    };
    let want = run("implicit_gemm", &gemm);
    assert_close("f2", &run("winograd_f2", &f2), &want, 1e-4, 1e-4);
    assert_close("f4", &run("winograd_f4", &f4), &want, 1e-4, 1e-4);
    // The implicit-GEMM layer called under F(4,3): packed again, and it stays so.
    assert_close("repacked", &run("winograd_f4", &gemm), &want, 1e-4, 1e-4);
    assert!(gemm.uses_winograd());
    assert_close("back", &run("implicit_gemm", &gemm), &want, 1e-4, 1e-4);
    assert!(!gemm.uses_winograd());
    // Per-call convolutions (no layer) under each kernel they may take (F(4,3) only where the
    // rule takes it, which a call this small does not: forcing it runs the rule's kernel).
    for k in ["implicit_gemm", "winograd_f2"] {
        let (out, ran) =
            xpu::autotune::trace(|| forced(k, || x.conv2d(&w, None, pad(1, 1)).unwrap()));
        assert_eq!(ran[0].candidate, k);
        assert_close(k, &values(&out), &want, 1e-4, 1e-4);
    }
    let (_, ran) =
        xpu::autotune::trace(|| forced("winograd_f4", || x.conv2d(&w, None, pad(1, 1)).unwrap()));
    assert_eq!(ran[0].candidate, "implicit_gemm");
}

/// At SD's channel counts (320 in, 320 out: F(4,3) by default) a Winograd layer stays within
/// the f32 tolerance of the implicit GEMM: F(4,3)'s larger transform coefficients do not grow
/// the error beyond what the number of summed products allows (seen: ~1e-6 relative).
#[test]
fn wide_f32_winograd_layer_matches_the_implicit_gemm() {
    let _turn = layers_lock();
    let x = randn(&[1, 320, 13, 11], DType::F32, 7).to_memory_format(MemoryFormat::ChannelsLast);
    let x = x.unwrap();
    let w = randn(&[320, 320, 3, 3], DType::F32, 8)
        .affine(0.05, 0.0)
        .unwrap();
    let layer = |k| forced(k, || Conv2d::new(w.clone(), None, pad(1, 1)).unwrap());
    let (gemm, wino) = (layer("implicit_gemm"), layer("winograd_f4"));
    assert!(!gemm.uses_winograd() && wino.uses_winograd());
    let want = forced("implicit_gemm", || gemm.forward(&x).unwrap());
    let got = forced("winograd_f4", || wino.forward(&x).unwrap());
    let t = tol(DType::F32, 320);
    assert_close("320 channels", &values(&got), &values(&want), t, t);
}
