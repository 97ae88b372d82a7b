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
//! Invariants: the check runs at most once per process (its verdict is kept); while it runs,
//! `choose` is bypassed through a thread-local flag so the check's own products do not recurse;
//! a failed check turns `Auto` back to the tiled kernels and makes a forced `CoopMatrix` an error
//! that carries the verdict.

use std::cell::Cell;
use std::sync::OnceLock;

use crate::gpu::context::COOP16_DOUBLE_WORKGROUP_BYTES;
use crate::gpu::pipelines::ShaderId;
use crate::{DType, Device, MatmulKernel, Tensor, TileConfig};

thread_local! {
    /// True while this thread runs the check (its products skip the check).
    static CHECKING: Cell<bool> = const { Cell::new(false) };
}

static VERDICT: OnceLock<std::result::Result<(), String>> = OnceLock::new();

/// Diagnostic switches for investigating a driver's cooperative matrices (`examples/coop_probe`):
/// `XPU_COOP_CHECK=0` trusts the driver without the check, `XPU_COOP16_VARIANT=N` builds the f16
/// kernel with its `VARIANT` bits (see `shaders/matmul_coop16.wgsl`).
fn env_u32(name: &str) -> Option<u32> {
    std::env::var(name).ok().and_then(|v| v.parse().ok())
}

/// `VARIANT` of the f16 cooperative kernel: 0 unless `XPU_COOP16_VARIANT` says otherwise.
pub(crate) fn coop16_variant() -> u32 {
    env_u32("XPU_COOP16_VARIANT").unwrap_or(0)
}

/// `VARIANT` bits of the lean staging (`shaders/matmul_coop16_lean.wgsl`) for a product whose B
/// is column-major (`b_col_major`) or not: bit 13, and bit 14 for B column-major, where
/// `XPU_COOP16_LEAN=1` asks for it (an experiment until a GPU times it); else 0.
pub(crate) fn coop16_lean_bits(b_col_major: bool) -> u32 {
    static LEAN: OnceLock<bool> = OnceLock::new();
    if *LEAN.get_or_init(|| env_u32("XPU_COOP16_LEAN") == Some(1)) {
        8192 | if b_col_major { 16384 } else { 0 }
    } else {
        0
    }
}

/// The tensor-core matmul module for a product (`geglu`: with the GEGLU epilogue) on a device
/// whose workgroup memory is `workgroup_bytes`: the double-buffered layout where
/// `XPU_COOP16_DOUBLE=1` asks for it (an experiment until a GPU measures it), the product has
/// no GEGLU epilogue (its tiles finish one at a time) and the memory fits; else the default.
pub(crate) fn coop16_shader(workgroup_bytes: u32, geglu: bool) -> ShaderId {
    static DOUBLE: OnceLock<bool> = OnceLock::new();
    let asked = *DOUBLE.get_or_init(|| env_u32("XPU_COOP16_DOUBLE") == Some(1));
    if asked && !geglu && workgroup_bytes >= COOP16_DOUBLE_WORKGROUP_BYTES {
        ShaderId::MatmulCoop16Double
    } else {
        ShaderId::MatmulCoop16
    }
}

/// Whether the cooperative engines passed the check (running it on first call), or why not.
pub(crate) fn verdict() -> std::result::Result<(), String> {
    if env_u32("XPU_COOP_CHECK") == Some(0) {
        return Ok(());
    }
    once(&VERDICT, &CHECKING, run_check)
}

/// The shared shape of xpu's once-per-process kernel checks: the first call runs `check` with
/// `checking` set on this thread (so the check's own calls, which ask again, get `Ok` and never
/// re-enter the cell) and keeps its verdict in `verdict`; later calls return the kept verdict.
pub(crate) fn once(
    verdict: &'static OnceLock<std::result::Result<(), String>>,
    checking: &'static std::thread::LocalKey<Cell<bool>>,
    check: impl FnOnce() -> std::result::Result<(), String>,
) -> std::result::Result<(), String> {
    if checking.with(Cell::get) {
        return Ok(());
    }
    verdict
        .get_or_init(|| {
            checking.with(|c| c.set(true));
            let r = check();
            checking.with(|c| c.set(false));
            r
        })
        .clone()
}

/// The largest |a - b| over the pairs (infinite if any difference is NaN).
pub(crate) fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(
            0.0f32,
            |w, d| if d.is_nan() { f32::INFINITY } else { w.max(d) },
        )
}

/// Small integers over 8: exact in f16 and in every partial sum of the products below (also
/// the convolution check's values).
pub(crate) fn exact(len: usize, seed: usize) -> Vec<f32> {
    (0..len)
        .map(|i| (((i * 7 + seed * 3) % 13) as f32 - 6.0) / 8.0)
        .collect()
}

fn run_check() -> std::result::Result<(), String> {
    // Odd K takes the per-element staging; even K the word-pair staging, with B row-major
    // (pairs along columns) and transposed (pairs along k); K = 110 runs four K steps, so the
    // words carried from step to step are checked too (two steps ran only the first fetch).
    // 70 x 83 outputs are all edge tiles; the 128 x 128 cases are one whole tile, whose K steps
    // inside K take the unchecked fetches (the lean staging's), the last (K = 110) the checked.
    let check = || -> crate::Result<std::result::Result<(), String>> {
        let dtypes = {
            let f = crate::xpu_features()?;
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
            let a = Tensor::from_vec(exact(m * k, 1), &[m, k], Device::Cpu)?
                .to_dtype(dtype)?
                .to(Device::Xpu)?;
            let b = if b_transposed {
                Tensor::from_vec(exact(k * n, 2), &[n, k], Device::Cpu)?
                    .to_dtype(dtype)?
                    .to(Device::Xpu)?
                    .t()?
            } else {
                Tensor::from_vec(exact(k * n, 2), &[k, n], Device::Cpu)?
                    .to_dtype(dtype)?
                    .to(Device::Xpu)?
            };
            let run = |kernel| -> crate::Result<Vec<f32>> {
                a.matmul_fused(&b)
                    .kernel(kernel)
                    .out_dtype(DType::F32)
                    .run()?
                    .to_vec::<f32>()
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
