//! Recycling of large CPU buffers.
//!
//! A fresh multi-megabyte `Vec` costs a page fault (and the kernel zeroing a page) per 4 KiB on
//! first write, which halves the bandwidth of elementwise ops. Dropped storages of at least
//! [`MIN_BYTES`] go into a small per-dtype free list instead, and ops that overwrite every
//! element of their output take from it.
//!
//! Invariants: a recycled vector is only handed out truncated to a length no larger than the
//! length it had when returned, so every element it exposes was initialised (and any bit pattern
//! is a valid value of these `Pod` types); at most [`MAX_KEPT`] vectors and [`MAX_BYTES`] are
//! kept per dtype; only callers that write every element use [`take`]; a fresh buffer comes
//! from the one fallible allocation path ([`super::alloc`]), so running out of memory is an
//! error, never an abort.

use std::sync::Mutex;

use crate::Result;
use half::{bf16, f16};

/// Smallest buffer worth recycling.
pub(crate) const MIN_BYTES: usize = 1 << 20;
/// Vectors kept per dtype.
pub(crate) const MAX_KEPT: usize = 8;
/// Bytes kept per dtype.
pub(crate) const MAX_BYTES: usize = 1 << 30;

/// Element types with a free list.
pub(crate) trait Recycle: bytemuck::Pod {
    /// This type's free list.
    fn free_list() -> &'static Mutex<Vec<Vec<Self>>>;
}

macro_rules! recycle {
    ($($t:ty),*) => {$(
        impl Recycle for $t {
            fn free_list() -> &'static Mutex<Vec<Vec<Self>>> {
                static FREE: Mutex<Vec<Vec<$t>>> = Mutex::new(Vec::new());
                &FREE
            }
        }
    )*};
}

recycle!(f32, f16, bf16, i32, u8);

fn bytes<T>(n: usize) -> usize {
    n.saturating_mul(std::mem::size_of::<T>())
}

/// Index of the smallest of `lens` that holds `n`, if one is not more than twice too big.
pub(crate) fn best_fit(lens: impl Iterator<Item = usize>, n: usize) -> Option<usize> {
    lens.enumerate()
        .filter(|&(_, len)| len >= n && len <= n.saturating_mul(2))
        .min_by_key(|&(_, len)| len)
        .map(|(i, _)| i)
}

/// A vector of `n` elements whose contents are unspecified (but initialised): the caller must
/// overwrite every element. A recycled buffer when one fits, else a fresh zeroed one
/// ([`super::alloc::zeroed`]); an error naming `op` when the host will not give the memory.
pub(crate) fn take<T: Recycle>(op: &'static str, n: usize) -> Result<Vec<T>> {
    if bytes::<T>(n) >= MIN_BYTES {
        if let Ok(mut free) = T::free_list().lock() {
            if let Some(i) = best_fit(free.iter().map(Vec::len), n) {
                let mut v = free.swap_remove(i);
                v.truncate(n);
                return Ok(v);
            }
        }
    }
    // Zeroed by the allocator: a large fresh buffer's pages are then first touched by the
    // caller's own writes (on its worker threads) instead of by a fill on this thread, as huge
    // pages where the kernel allows (see `hugepage`).
    super::alloc::zeroed(op, n)
}

/// Returns a vector to its free list (or frees it if it is small or the list is full).
pub(crate) fn give<T: Recycle>(v: Vec<T>) {
    if bytes::<T>(v.len()) < MIN_BYTES {
        return;
    }
    if let Ok(mut free) = T::free_list().lock() {
        let kept: usize = free.iter().map(|x| bytes::<T>(x.len())).sum();
        if free.len() >= MAX_KEPT || kept + bytes::<T>(v.len()) > MAX_BYTES {
            // Keep the most recent buffers: drop the oldest.
            if !free.is_empty() {
                free.remove(0);
            }
        }
        if free.len() < MAX_KEPT {
            free.push(v);
        }
    }
}

/// Frees every kept buffer of every dtype, and the GEMM's spare packed-B storage.
pub(crate) fn clear() {
    fn one<T: Recycle>() {
        if let Ok(mut free) = T::free_list().lock() {
            free.clear();
        }
    }
    one::<f32>();
    one::<f16>();
    one::<bf16>();
    one::<i32>();
    one::<u8>();
    super::gemm::clear_spare();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recycles_large_buffers_only() {
        let n = (MIN_BYTES / 4) * 3;
        let mut v: Vec<i32> = take("test", n).unwrap();
        v.iter_mut().enumerate().for_each(|(i, x)| *x = i as i32);
        let ptr = v.as_ptr();
        give(v);
        let w: Vec<i32> = take("test", n - 5).unwrap();
        assert_eq!(w.len(), n - 5);
        // Another test thread may have taken it first; when it is ours, it is the same memory.
        if w.as_ptr() == ptr {
            assert_eq!(w[7], 7);
        }
        let small: Vec<i32> = take("test", 10).unwrap();
        assert_eq!(small, vec![0; 10]);
    }
}
