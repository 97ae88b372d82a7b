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
