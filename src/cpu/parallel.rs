//! Splitting work across rayon threads.
//!
//! Invariants: small jobs (under [`PAR_THRESHOLD`] units of work) run on the calling thread;
//! larger ones are cut into chunks whose lengths are multiples of the caller's `unit` (a row, or
//! 64 elements for flat data), so every chunk starts on a unit boundary and the closure learns
//! the element index where its chunk starts. Results never depend on the number of threads.

use rayon::prelude::*;

/// Amount of work (elements touched) below which an operation stays single-threaded.
pub(crate) const PAR_THRESHOLD: usize = 1 << 16;

/// Target work per parallel chunk.
const CHUNK_WORK: usize = 1 << 15;

/// Calls `f(start, chunk)` over `data` cut into chunks of whole `unit`s; `work_per_unit` is the
/// cost of one unit (e.g. the reduced length for a reduction output). Runs in parallel only when
/// the total work exceeds [`PAR_THRESHOLD`].
pub(crate) fn for_each_chunk<T, F>(data: &mut [T], unit: usize, work_per_unit: usize, f: F)
where
    T: Send,
    F: Fn(usize, &mut [T]) + Sync + Send,
{
    let n = data.len();
    if n == 0 {
        return;
    }
    let unit = unit.max(1);
    let units = n.div_ceil(unit);
    let work = units.saturating_mul(work_per_unit.max(1));
    let threads = rayon::current_num_threads();
    if work < PAR_THRESHOLD || threads <= 1 || units <= 1 {
        f(0, data);
        return;
    }
    let by_work = (CHUNK_WORK / work_per_unit.max(1)).max(1);
    let by_threads = units.div_ceil(threads * 4).max(1);
    let units_per_chunk = by_work.max(by_threads.min(by_work.saturating_mul(16)));
    let chunk = units_per_chunk.saturating_mul(unit).min(n);
    data.par_chunks_mut(chunk)
        .enumerate()
        .for_each(|(i, c)| f(i * chunk, c));
}

/// Flat elementwise helper: chunks are multiples of 64 elements.
pub(crate) fn for_each_flat<T, F>(data: &mut [T], f: F)
where
    T: Send,
    F: Fn(usize, &mut [T]) + Sync + Send,
{
    for_each_chunk(data, 64, 64, f)
}
