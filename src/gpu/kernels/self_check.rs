//! The shared shape of the once-per-process kernel self-checks (the tensor-core products,
//! convolutions and attention each compare their kernel with the FMA kernels on small exact
//! problems before it serves a call).
//!
//! Invariants: a check runs at most once per process and its verdict is kept; while it runs,
//! a thread-local flag makes the check's own calls (which ask for the verdict again) see `Ok`,
//! so a check never re-enters its cell.

use std::cell::Cell;
use std::sync::OnceLock;

/// The first call runs `check` with `checking` set on this thread and keeps its verdict in
/// `verdict`; later calls (and the check's own calls on this thread) return without running
/// it.
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

/// Small integers over 8: exact in f16 and in every partial sum of the checks' products.
pub(crate) fn exact(len: usize, seed: usize) -> Vec<f32> {
    (0..len)
        .map(|i| (((i * 7 + seed * 3) % 13) as f32 - 6.0) / 8.0)
        .collect()
}

/// Uploads `values` (exact in every float dtype) to the context's device as `dtype`.
pub(crate) fn upload_exact(
    ctx: &std::sync::Arc<crate::gpu::context::Context>,
    values: &[f32],
    dtype: crate::DType,
) -> crate::Result<crate::gpu::XpuStorage> {
    use crate::gpu::XpuStorage;
    use crate::DType;
    let n = values.len();
    match dtype {
        DType::F32 => XpuStorage::upload(ctx, dtype, n, bytemuck::cast_slice(values)),
        DType::F16 => {
            let v: Vec<half::f16> = values.iter().map(|&x| half::f16::from_f32(x)).collect();
            XpuStorage::upload(ctx, dtype, n, bytemuck::cast_slice(&v))
        }
        DType::BF16 => {
            let v: Vec<half::bf16> = values.iter().map(|&x| half::bf16::from_f32(x)).collect();
            XpuStorage::upload(ctx, dtype, n, bytemuck::cast_slice(&v))
        }
        other => Err(crate::Error::invalid(
            "self-check",
            format!("a float dtype, got {other}"),
        )),
    }
}

/// Reads the elements of `layout` back as f32 values (from f32, f16 or bf16 storage).
pub(crate) fn download_f32(
    s: &crate::gpu::XpuStorage,
    layout: &crate::Layout,
) -> crate::Result<Vec<f32>> {
    use crate::DType;
    let bytes = s.download(layout)?;
    Ok(match s.dtype {
        DType::F32 => bytemuck::pod_collect_to_vec::<u8, f32>(&bytes),
        DType::F16 => bytemuck::pod_collect_to_vec::<u8, half::f16>(&bytes)
            .into_iter()
            .map(half::f16::to_f32)
            .collect(),
        DType::BF16 => bytemuck::pod_collect_to_vec::<u8, half::bf16>(&bytes)
            .into_iter()
            .map(half::bf16::to_f32)
            .collect(),
        other => {
            return Err(crate::Error::invalid(
                "self-check",
                format!("a float result, got {other}"),
            ))
        }
    })
}
