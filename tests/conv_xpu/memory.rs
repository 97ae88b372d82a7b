//! Memory of the Xpu convolution: no im2col buffer (the allocator's peak is the output and
//! the inputs), and the public `conv2d` on Xpu computing what the implicit GEMM computes. Both
//! under the static rules (the implicit GEMM on these narrow layers), so no measured Winograd
//! candidate adds its temporaries.

use super::common::{self, assert_close, eps, randn, values};
use super::{gpu_lock, params};
use xpu::ops::conv_xpu::{conv2d_xpu, ConvXpuArgs};
use xpu::{Activation, DType, Device, Tensor};

/// Bytes of a tensor's elements (the allocator rounds each buffer up to 256 bytes below 1 MiB).
fn bytes(t: &Tensor) -> u64 {
    (t.numel() * t.dtype().size_in_bytes()) as u64
}

#[test]
fn no_im2col_buffer() {
    if !common::xpu() {
        return;
    }
    let _g = gpu_lock();
    common::coop16::static_rules(no_im2col_cases);
}

fn no_im2col_cases() {
    // im2col of this conv is [4096, 144]: 9x the input, 36x the output.
    for (dtype, nhwc) in [(DType::F32, false), (DType::F16, true)] {
        let x = if nhwc {
            randn(&[1, 64, 64, 16], dtype, 1)
                .to(Device::Xpu)
                .unwrap()
                .permute(&[0, 3, 1, 2])
                .unwrap()
        } else {
            randn(&[1, 16, 64, 64], dtype, 1).to(Device::Xpu).unwrap()
        };
        // Channels-last weights for the channels-last case: the f16 tensor-core path reads
        // them in place (other layouts it repacks per call).
        let w = if nhwc {
            randn(&[4, 3, 3, 16], dtype, 2)
                .to(Device::Xpu)
                .unwrap()
                .permute(&[0, 3, 1, 2])
                .unwrap()
        } else {
            randn(&[4, 16, 3, 3], dtype, 2).to(Device::Xpu).unwrap()
        };
        let b = randn(&[4], dtype, 3).to(Device::Xpu).unwrap();
        let args = ConvXpuArgs {
            bias: Some(&b),
            activation: Activation::Silu,
            channels_last_out: nhwc,
            ..Default::default()
        };
        // A first call compiles the kernels (and runs the tensor cores' one-time self-check).
        conv2d_xpu(&x, &w, params(1, 1, 1, 1), &args).unwrap();
        xpu::synchronize().unwrap();
        let before = xpu::memory_stats(Device::Xpu).unwrap().allocated;
        xpu::reset_peak_memory_stats().unwrap();
        let y = conv2d_xpu(&x, &w, params(1, 1, 1, 1), &args).unwrap();
        xpu::synchronize().unwrap();
        let peak = xpu::memory_stats(Device::Xpu).unwrap().peak_allocated;
        let im2col = (4096 * 144 * dtype.size_in_bytes()) as u64;
        let extra = peak - before;
        // The output (rounded to its 256-byte size class) is the only new buffer.
        assert!(
            extra <= bytes(&y).div_ceil(256) * 256,
            "{dtype}: conv allocated {extra} bytes beyond its operands (output {} bytes, \
             im2col would be {im2col})",
            bytes(&y)
        );
        assert!(extra * 8 < im2col);
    }
}

#[test]
fn public_conv2d_on_xpu_is_the_implicit_gemm() {
    if !common::xpu() {
        return;
    }
    let _g = gpu_lock();
    common::coop16::static_rules(public_conv2d_cases);
}

fn public_conv2d_cases() {
    let p = params(1, 1, 1, 1);
    for (dtype, nhwc) in [
        (DType::F32, false),
        (DType::BF16, true),
        (DType::F16, false),
    ] {
        let x_cpu = if nhwc {
            randn(&[1, 32, 32, 16], dtype, 11)
        } else {
            randn(&[1, 16, 32, 32], dtype, 11)
        };
        let view = |t: Tensor| {
            if nhwc {
                t.permute(&[0, 3, 1, 2]).unwrap()
            } else {
                t
            }
        };
        let x = view(x_cpu.to(Device::Xpu).unwrap());
        let x_cpu = view(x_cpu);
        let w_cpu = randn(&[8, 16, 3, 3], dtype, 12);
        let b_cpu = randn(&[8], dtype, 13);
        let r_cpu = randn(&[1, 8, 32, 32], dtype, 14);
        let (w, b, r) = (
            w_cpu.to(Device::Xpu).unwrap(),
            b_cpu.to(Device::Xpu).unwrap(),
            r_cpu.to(Device::Xpu).unwrap(),
        );
        let want = x_cpu
            .conv2d_fused(&w_cpu, p)
            .bias(&b_cpu)
            .activation(Activation::Silu)
            .residual(&r_cpu)
            .run_unfused()
            .unwrap();
        // A first call compiles the kernels (and runs the tensor cores' one-time self-check).
        x.conv2d_fused(&w, p).bias(&b).run().unwrap();
        xpu::synchronize().unwrap();
        let before = xpu::memory_stats(Device::Xpu).unwrap().allocated;
        xpu::reset_peak_memory_stats().unwrap();
        let got = x
            .conv2d_fused(&w, p)
            .bias(&b)
            .activation(Activation::Silu)
            .residual(&r)
            .run()
            .unwrap();
        let extra = xpu::memory_stats(Device::Xpu).unwrap().peak_allocated - before;
        let what = format!("conv2d_fused {dtype} nhwc {nhwc}");
        // PyTorch's rule: a channels-last input gives a channels-last output.
        let fmt = if nhwc {
            xpu::MemoryFormat::ChannelsLast
        } else {
            xpu::MemoryFormat::Contiguous
        };
        assert_eq!(got.memory_format(), fmt, "{what}");
        // Only the output is allocated (im2col would add [1024, 144]); f16 on tensor cores may
        // also copy NCHW operands channels-last and the output back (never an im2col).
        let round = |t: &Tensor| bytes(t).div_ceil(256) * 256;
        let copies = if dtype == DType::F16 {
            round(&x) + round(&w) + round(&r) + round(&got)
        } else {
            0
        };
        assert!(extra <= round(&got) + copies, "{what}: {extra} bytes");
        assert!(
            extra < (1024 * 144 * dtype.size_in_bytes()) as u64,
            "{what}"
        );
        // Both round once from f32; they may differ by one rounding step.
        let tol = if dtype == DType::F32 {
            1e-4
        } else {
            2.0 * eps(dtype)
        };
        assert_close(&what, &values(&got), &values(&want), tol, tol);
        let plain = x.conv2d(&w, Some(&b), p).unwrap();
        let plain_cpu = x_cpu.conv2d(&w_cpu, Some(&b_cpu), p).unwrap();
        let what = format!("conv2d {dtype} nhwc {nhwc}");
        assert_eq!(plain.memory_format(), fmt, "{what}");
        assert_close(&what, &values(&plain), &values(&plain_cpu), tol, tol);
    }
}
