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

use super::{conv2d, coop, ConvLaunch};
use crate::desc::{Activation, Conv2dParams, ConvGeom, ConvTile};
use crate::gpu::kernels::self_check::{download_f32, exact, max_abs_diff, once, upload_exact};
use crate::{DType, Layout};

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
        let ctx = crate::gpu::ctx()?;
        for (ci, &(shape, o, k, stride, padding, dilation)) in cases.iter().enumerate() {
            let [n, c, h, w] = shape;
            // The input channels-last, as the tensor-core gather reads it.
            let x = upload_exact(&ctx, &exact(n * c * h * w, ci), DType::F16)?;
            let xl = Layout::contiguous(&[n, h, w, c]).permute(&[0, 3, 1, 2])?;
            let wt = upload_exact(&ctx, &exact(o * c * k * k, ci + 5), DType::F16)?;
            let wl = Layout::contiguous(&[o, c, k, k]);
            let p = Conv2dParams {
                stride: (stride, stride),
                padding: (padding, padding),
                dilation: (dilation, dilation),
                groups: 1,
            };
            let geom = ConvGeom::new("conv2d self-check", &shape, &[o, c, k, k], p)?;
            let (pix, out_len) = (geom.ho * geom.wo, n * o * geom.ho * geom.wo);
            let run = |tensor_cores: bool| -> crate::Result<Vec<f32>> {
                let launch = ConvLaunch {
                    shape: geom,
                    input: (&x, &xl),
                    weight: (&wt, &wl),
                    bias: None,
                    residual: None,
                    activation: Activation::None,
                    out_strides: [pix * o, 1, o],
                    tile: if tensor_cores {
                        ConvTile::Auto
                    } else {
                        ConvTile::Medium
                    },
                };
                let out = if tensor_cores {
                    coop::conv2d(&launch, 1)?
                } else {
                    conv2d(&launch)?
                };
                download_f32(&out, &Layout::contiguous(&[out_len]))
            };
            let (coop, fma) = (run(true)?, run(false)?);
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
