//! Zeroed, cache-line-aligned storage that the kernel zeroes lazily.
//!
//! `Vec<Line>` (64-byte alignment) cannot be both: Rust's system allocator serves
//! `alloc_zeroed` with `calloc` only up to 16-byte alignment, and above it allocates and then
//! `memset`s the whole buffer on the calling thread. For a large buffer that is a page fault per
//! 4 KiB plus a full write before the kernels write it again: loading SD 1.5 spent ~23% of its
//! samples in that `memset` (the Winograd filter packs, 3.4 GB in f32, faulted in by the
//! main thread alone). [`LineVec`] asks `calloc`'s alignment (16) for 64 bytes more and starts
//! on the first line boundary inside, so fresh pages stay untouched until the kernels that fill
//! them (on their own threads) write them.
//!
//! Invariants: `ptr` is the allocation `alloc_zeroed(layout)` returned (null only when `len`
//! is 0), `layout` is the layout it was allocated with, and `ptr + offset` is 64-byte aligned
//! with `len` zero-initialised (or since written) [`Line`]s after it, inside the allocation.

use super::scratch::Line;
use crate::Result;
use std::alloc::{alloc_zeroed, dealloc, Layout};

/// The alignment the system allocator serves from `calloc` (`MIN_ALIGN` on the 64-bit
/// targets this crate builds for).
const CALLOC_ALIGN: usize = 16;

/// A fixed-length, zero-initialised array of cache lines (see the module docs).
pub(crate) struct LineVec {
    ptr: *mut u8,
    offset: usize,
    len: usize,
    layout: Layout,
}

// SAFETY: LineVec owns its allocation exclusively, like a Vec<Line>.
unsafe impl Send for LineVec {}
// SAFETY: shared access only reads, like a Vec<Line>.
unsafe impl Sync for LineVec {}

impl Default for LineVec {
    fn default() -> Self {
        LineVec {
            ptr: std::ptr::null_mut(),
            offset: 0,
            len: 0,
            layout: Layout::new::<()>(),
        }
    }
}

impl LineVec {
    /// `len` zeroed lines; large ones are advised for huge pages (`hugepage`). A size the
    /// allocator refuses (or past the address space) is an error naming `op`.
    pub(crate) fn zeroed(op: &'static str, len: usize) -> Result<LineVec> {
        if len == 0 {
            return Ok(LineVec::default());
        }
        let refused = || crate::cpu::alloc::out_of_memory(op, len.saturating_mul(64));
        let layout = len
            .checked_mul(64)
            .and_then(|b| b.checked_add(64))
            .and_then(|b| Layout::from_size_align(b, CALLOC_ALIGN).ok())
            .ok_or_else(refused)?;
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(refused());
        }
        let offset = ptr.align_offset(64);
        let v = LineVec {
            ptr,
            offset,
            len,
            layout,
        };
        crate::cpu::hugepage::advise(&v[..]);
        Ok(v)
    }

    /// Number of lines.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    fn base(&self) -> *mut Line {
        if self.len == 0 {
            std::ptr::NonNull::<Line>::dangling().as_ptr()
        } else {
            // SAFETY: offset < 64 and the allocation holds 64 bytes more than len lines.
            unsafe { self.ptr.add(self.offset) as *mut Line }
        }
    }
}

impl std::ops::Deref for LineVec {
    type Target = [Line];
    fn deref(&self) -> &[Line] {
        // SAFETY: base() is 64-byte aligned with len initialised lines inside the allocation
        // (a dangling aligned pointer for len 0).
        unsafe { std::slice::from_raw_parts(self.base(), self.len) }
    }
}

impl std::ops::DerefMut for LineVec {
    fn deref_mut(&mut self) -> &mut [Line] {
        // SAFETY: as in `deref`, and `&mut self` gives exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.base(), self.len) }
    }
}

impl Drop for LineVec {
    fn drop(&mut self) {
        if !self.ptr.is_null() {
            // SAFETY: ptr came from alloc_zeroed(layout) and is freed once.
            unsafe { dealloc(self.ptr, self.layout) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_aligned_zeroed_and_writable() {
        for len in [0usize, 1, 3, 1000, (8 << 20) / 64 + 5] {
            let mut v = LineVec::zeroed("test", len).unwrap();
            assert_eq!(v.len(), len);
            assert_eq!(v.as_ptr() as usize % 64, 0, "len {len}");
            let words: &mut [u32] = bytemuck::cast_slice_mut(&mut v[..]);
            assert!(words.iter().all(|&w| w == 0), "len {len}");
            for (i, w) in words.iter_mut().enumerate() {
                *w = i as u32;
            }
            let words: &[u32] = bytemuck::cast_slice(&v[..]);
            assert!(words.iter().enumerate().all(|(i, &w)| w == i as u32));
        }
        assert!(LineVec::zeroed("test", usize::MAX / 32).is_err());
        let empty = LineVec::default();
        assert!(empty.iter().next().is_none());
        assert_eq!(empty.len(), 0);
    }
}
