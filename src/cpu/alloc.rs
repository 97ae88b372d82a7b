//! The one way the CPU backend takes host memory for data: every output, recycled buffer and
//! scratch block sized by a tensor comes from these functions, which return
//! [`Error::CpuOutOfMemory`] (naming the op and the bytes) where the allocator refuses, instead
//! of aborting the process (`Vec::with_capacity`, `vec![x; n]`) or panicking inside a kernel.
//!
//! Invariants:
//! - Nothing here panics or aborts: a size whose bytes overflow `usize`, or that the allocator
//!   will not give (an address-space limit, a system that will not overcommit), is an error.
//! - [`zeroed`] takes already-zeroed memory from the allocator (`calloc`, so a large buffer's
//!   fresh pages are first touched by the caller's own writes, on its worker threads) and
//!   advises large buffers for huge pages ([`super::hugepage`]), exactly as the infallible
//!   `bytemuck::zeroed_vec` did: the fast path costs the same.
//! - Kernels that run on rayon threads take their scratch before the parallel part, or take it
//!   here inside a task and carry the error out of the parallel loop ([`FirstError`]).

use crate::{Error, Result};
use std::sync::Mutex;

/// The bytes `n` elements of `T` take (saturating: a count past `usize` still reports a size).
pub(crate) fn bytes_of<T>(n: usize) -> usize {
    n.saturating_mul(std::mem::size_of::<T>())
}

/// The error for `bytes` the host would not give `op`.
pub(crate) fn out_of_memory(op: &'static str, bytes: usize) -> Error {
    Error::CpuOutOfMemory {
        op,
        requested: bytes as u64,
    }
}

/// `n` zeroed elements from the allocator (see the module docs), or an error naming `op`.
pub(crate) fn zeroed<T: bytemuck::Zeroable>(op: &'static str, n: usize) -> Result<Vec<T>> {
    let v = bytemuck::allocation::try_zeroed_slice_box::<T>(n)
        .map_err(|()| out_of_memory(op, bytes_of::<T>(n)))?
        .into_vec();
    super::hugepage::advise(&v);
    Ok(v)
}

/// The largest request the C allocator serves from its heap once [`retain_freed_memory`] ran:
/// above it, a buffer is its own mapping, returned to the kernel when freed.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
const HEAP_SERVED_MAX: i32 = 1 << 30;

/// Asks the C allocator (glibc) to keep the memory the process frees for its own later
/// requests: buffers below [`HEAP_SERVED_MAX`] come from the heap instead of fresh mappings,
/// and free memory at the heap's top is not handed back to the kernel (`mallopt`
/// `M_MMAP_THRESHOLD` and `M_TRIM_THRESHOLD`). Returns whether both settings were taken (false
/// on other C libraries and systems, where nothing changes).
///
/// Invariant: only the allocator's policy changes, never the contents or validity of any
/// allocation; the process's resident memory then stays near its peak after large transient
/// buffers are freed, the price of reusing their pages.
pub(crate) fn retain_freed_memory() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        // SAFETY: `mallopt` only changes glibc's allocation policy (two integer parameters);
        // it is thread-safe and allocations made before or after stay valid.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, HEAP_SERVED_MAX) == 1
                && libc::mallopt(libc::M_TRIM_THRESHOLD, i32::MAX) == 1
        }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

/// An empty vector with room for exactly `n` elements, or an error naming `op`.
pub(crate) fn with_capacity<T>(op: &'static str, n: usize) -> Result<Vec<T>> {
    let mut v = Vec::new();
    v.try_reserve_exact(n)
        .map_err(|_| out_of_memory(op, bytes_of::<T>(n)))?;
    Ok(v)
}

/// `n` copies of `value`, or an error naming `op` (for a zero value prefer [`zeroed`], which
/// leaves fresh pages untouched).
pub(crate) fn filled<T: Clone>(op: &'static str, n: usize, value: T) -> Result<Vec<T>> {
    let mut v = with_capacity(op, n)?;
    v.resize(n, value);
    Ok(v)
}

/// A copy of `src`, or an error naming `op`.
pub(crate) fn copied<T: Copy>(op: &'static str, src: &[T]) -> Result<Vec<T>> {
    let mut v = with_capacity(op, src.len())?;
    v.extend_from_slice(src);
    Ok(v)
}

/// The items of `iter` (at most `n` of them, the room reserved up front), or an error naming
/// `op`.
pub(crate) fn collected<T>(
    op: &'static str,
    n: usize,
    iter: impl IntoIterator<Item = T>,
) -> Result<Vec<T>> {
    let mut v = with_capacity(op, n)?;
    v.extend(iter.into_iter().take(n));
    Ok(v)
}

/// Resizes `v` to `n` elements (new ones `value`), reserving fallibly: an error naming `op`
/// when the host will not give the room (`v` is then unchanged).
pub(crate) fn resize<T: Clone>(op: &'static str, v: &mut Vec<T>, n: usize, value: T) -> Result<()> {
    if n > v.len() {
        let more = n - v.len();
        v.try_reserve(more)
            .map_err(|_| out_of_memory(op, bytes_of::<T>(n)))?;
    }
    v.resize(n, value);
    Ok(())
}

/// The first error raised by the tasks of a parallel loop: tasks record theirs with
/// [`FirstError::record`] (and return; a failed task's output is discarded with the whole
/// result) and the caller returns it after the loop with [`FirstError::into_result`]. Tasks may
/// ask [`FirstError::failed`] to skip work once one has failed.
#[derive(Default)]
pub(crate) struct FirstError {
    error: Mutex<Option<Error>>,
    failed: std::sync::atomic::AtomicBool,
}

impl FirstError {
    /// Keeps `r`'s error if it is the first.
    pub(crate) fn record(&self, r: Result<()>) {
        if let Err(e) = r {
            self.failed
                .store(true, std::sync::atomic::Ordering::Relaxed);
            if let Ok(mut slot) = self.error.lock() {
                slot.get_or_insert(e);
            }
        }
    }

    /// True once a task has failed.
    pub(crate) fn failed(&self) -> bool {
        self.failed.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// `Err` with the first recorded error, else `Ok`.
    pub(crate) fn into_result(self) -> Result<()> {
        let failed = self.failed();
        match self.error.into_inner() {
            Ok(Some(e)) => Err(e),
            // A poisoned slot (a task panicked while recording) still reports a failure.
            Err(_) if failed => Err(Error::invalid("cpu", "a parallel task failed")),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn impossible_sizes_are_errors_naming_the_op_and_the_bytes() {
        let e = zeroed::<f32>("probe", usize::MAX / 2).unwrap_err();
        assert!(
            matches!(e, Error::CpuOutOfMemory { op: "probe", requested } if requested > 1 << 60),
            "{e}"
        );
        assert!(with_capacity::<u64>("probe", usize::MAX / 4).is_err());
        assert!(filled("probe", usize::MAX / 4, 1u32).is_err());
        assert!(collected::<u8>("probe", usize::MAX, std::iter::empty()).is_err());
        assert_eq!(zeroed::<f32>("probe", 3).unwrap(), [0.0; 3]);
        assert_eq!(filled("probe", 2, 7u8).unwrap(), [7, 7]);
        assert_eq!(copied("probe", &[1, 2]).unwrap(), [1, 2]);
        assert_eq!(collected("probe", 2, 0..5).unwrap(), [0, 1]);
        let mut v = vec![1u8];
        assert!(resize("probe", &mut v, usize::MAX / 2, 0).is_err());
        assert_eq!(v, [1]);
        resize("probe", &mut v, 3, 9).unwrap();
        assert_eq!(v, [1, 9, 9]);
    }

    #[test]
    fn the_first_error_of_a_parallel_loop_is_returned() {
        use rayon::prelude::*;
        let first = FirstError::default();
        (0..64).into_par_iter().for_each(|i| {
            first.record(if i % 7 == 3 {
                Err(out_of_memory("task", i))
            } else {
                Ok(())
            })
        });
        assert!(first.failed());
        assert!(matches!(
            first.into_result(),
            Err(Error::CpuOutOfMemory { op: "task", .. })
        ));
        assert!(FirstError::default().into_result().is_ok());
    }
}
