//! A once-per-process check that the adapter's cooperative-matrix kernels compute the right
//! product before any of them serves a real call.
//!
//! Why: a driver can report a cooperative-matrix configuration, compile our kernel and still
//! return wrong numbers (on an H100 the naga-compiled kernels returned zeros, then garbage). A
//! matrix engine that is silently wrong is worse than a slow one, so the first time a
//! cooperative engine is chosen, a small product with exactly representable inputs (every dtype
//! the engine takes, odd edges included) runs through it and through the tiled kernels, and the
//! results must agree to f32 rounding.
//!
//! Invariants: the check runs at most once per process (`self_check::once`: its verdict is
//! kept, and the check's own products skip it); a failed check turns `Auto` back to the tiled
//! kernels and makes a forced `CoopMatrix` an error that carries the verdict.

use std::cell::Cell;
use std::sync::OnceLock;

use super::Epilogue;
use crate::gpu::kernels::self_check::{download_f32, exact, max_abs_diff, once, upload_exact};
use crate::{DType, Layout, MatmulKernel, TileConfig};

thread_local! {
    /// True while this thread runs the check (its products skip the check).
    static CHECKING: Cell<bool> = const { Cell::new(false) };
}

static VERDICT: OnceLock<std::result::Result<(), String>> = OnceLock::new();

/// Whether the cooperative engines passed the check (running it on first call), or why not.
pub(crate) fn verdict() -> std::result::Result<(), String> {
    once(&VERDICT, &CHECKING, run_check)
}

fn run_check() -> std::result::Result<(), String> {
    // Odd K takes the per-element staging; even K the word-pair staging, with B row-major
    // (pairs along columns) and transposed (pairs along k); K = 110 runs four K steps, so the
    // words carried from step to step are checked too (two steps ran only the first fetch).
    // 70 x 83 outputs are all edge tiles; the 128 x 128 cases are one whole tile.
    let check = || -> crate::Result<std::result::Result<(), String>> {
        let ctx = crate::gpu::ctx()?;
        let dtypes = {
            let f = ctx.features();
            if f.coop_f32_8x8 {
                vec![DType::F32, DType::F16, DType::BF16]
            } else {
                vec![DType::F16]
            }
        };
        let cases = dtypes.iter().flat_map(|&d| {
            [
                (d, [70, 45, 83], false),
                (d, [70, 46, 83], false),
                (d, [70, 46, 83], true),
                (d, [70, 110, 83], true),
                (d, [128, 110, 128], false),
                (d, [128, 110, 128], true),
            ]
        });
        for (dtype, [m, k, n], b_transposed) in cases {
            let a = upload_exact(&ctx, &exact(m * k, 1), dtype)?;
            let al = Layout::contiguous(&[m, k]);
            let b = upload_exact(&ctx, &exact(k * n, 2), dtype)?;
            let bl = if b_transposed {
                Layout::contiguous(&[n, k]).transpose(0, 1)
            } else {
                Layout::contiguous(&[k, n])
            };
            let run = |kernel| -> crate::Result<Vec<f32>> {
                let ep = Epilogue::identity("matmul self-check", kernel, DType::F32);
                let out = a.matmul_fused(&al, &b, &bl, &ep)?;
                download_f32(&out, &Layout::contiguous(&[m, n]))
            };
            let coop = run(MatmulKernel::CoopMatrix)?;
            let tiled = run(MatmulKernel::Tiled(TileConfig::Medium))?;
            let worst = max_abs_diff(&coop, &tiled);
            if worst > 1e-3 {
                return Ok(Err(format!(
                    "the adapter's cooperative-matrix kernel gave wrong results in xpu's \
                     self-check ({dtype} {m}x{k}x{n}, B transposed {b_transposed}: max |coop - tiled| = {worst:e}, first \
                     values {:?} vs {:?}); the tiled kernels are used instead",
                    &coop[..3],
                    &tiled[..3]
                )));
            }
        }
        Ok(Ok(()))
    };
    match check() {
        Ok(v) => v,
        Err(e) => Err(format!(
            "the adapter's cooperative-matrix kernel failed in xpu's self-check: {e}; the tiled \
             kernels are used instead"
        )),
    }
}
