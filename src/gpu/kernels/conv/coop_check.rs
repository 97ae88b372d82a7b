//! Once-per-process self-check of the tensor-core convolution (`mm_coop16` in its gather
//! mode, [`super::coop`]).
//!
//! Why: the matmul self-check (`matmul::coop_check`) vouches for the plain products, but the gather is
//! a separately compiled variant with its own address arithmetic (output pixels decoded to
//! input positions, padding, stride and dilation); a driver that miscompiled only it would
//! otherwise give wrong convolutions with no fallback. The check runs small f16 convolutions
//! on both the tensor-core path and the FMA kernel and compares them; a mismatch keeps every
//! f16 convolution on the FMA kernels (printed once to stderr).
//!
//! Invariants: values are multiples of 1/8 below 1 and K = 9·C is small, so every product and
//! partial sum is exact in f32 and both paths round the same sums to f16: any difference is a
//! wrong kernel. The check's own calls run with the gather assumed good (a thread-local flag),
//! never re-entering the once-cell.

use std::cell::Cell;
use std::sync::OnceLock;

use crate::gpu::kernels::self_check::{exact, max_abs_diff, once};
use crate::desc::Conv2dParams;
use crate::ops::conv_xpu::{conv2d_xpu, ConvTile, ConvXpuArgs};
use crate::{DType, Device, Tensor};

thread_local! {
    /// True while this thread runs the check.
    static CHECKING: Cell<bool> = const { Cell::new(false) };
}

static VERDICT: OnceLock<Result<(), String>> = OnceLock::new();

/// Whether the gather passed the check (running it on first call), or why not.
pub(crate) fn verdict() -> Result<(), String> {
    once(&VERDICT, &CHECKING, || {
        let r = run_check();
        if let Err(why) = &r {
            // Once per process: the user loses the tensor cores, not correctness.
            eprintln!("xpu: {why}");
        }
        r
    })
}

fn run_check() -> Result<(), String> {
    // [N, C, H, W], O, kernel, stride, padding, dilation: 3x3 with padding, stride 2, 1x1,
    // and a dilated kernel, on odd sizes (edge tiles, rows past M).
    let cases = [
        ([2, 6, 9, 7], 10, 3, 1, 1, 1),
        ([1, 8, 11, 10], 4, 3, 2, 1, 1),
        ([1, 4, 6, 6], 6, 1, 1, 0, 1),
        ([1, 2, 7, 9], 8, 3, 1, 2, 2),
    ];
    let check = || -> crate::Result<Result<(), String>> {
        for (ci, &(shape, o, k, stride, padding, dilation)) in cases.iter().enumerate() {
            let [n, c, h, w] = shape;
            let x = Tensor::from_vec(exact(n * c * h * w, ci), &shape, Device::Cpu)?
                .to_dtype(DType::F16)?
                .to(Device::Xpu)?;
            let wt = Tensor::from_vec(exact(o * c * k * k, ci + 5), &[o, c, k, k], Device::Cpu)?
                .to_dtype(DType::F16)?
                .to(Device::Xpu)?;
            let p = Conv2dParams {
                stride: (stride, stride),
                padding: (padding, padding),
                dilation: (dilation, dilation),
                groups: 1,
            };
            let run = |tile| -> crate::Result<Vec<f32>> {
                let args = ConvXpuArgs {
                    channels_last_out: true,
                    tile,
                    ..ConvXpuArgs::default()
                };
                conv2d_xpu(&x, &wt, p, &args)?
                    .to_dtype(DType::F32)?
                    .to_vec::<f32>()
            };
            let (coop, fma) = (run(ConvTile::Auto)?, run(ConvTile::Medium)?);
            let worst = max_abs_diff(&coop, &fma);
            if worst > 1e-3 {
                return Ok(Err(format!(
                    "the tensor-core convolution disagreed with the FMA kernel in xpu's \
                     self-check ({shape:?} -> {o} channels, {k}x{k}, stride {stride}, padding \
                     {padding}, dilation {dilation}: max difference {worst:e}); f16 \
                     convolutions use the FMA kernels instead"
                )));
            }
        }
        Ok(Ok(()))
    };
    match check() {
        Ok(v) => v,
        Err(e) => Err(format!(
            "the tensor-core convolution failed in xpu's self-check: {e}; f16 convolutions use \
             the FMA kernels"
        )),
    }
}
