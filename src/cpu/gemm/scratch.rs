//! 64-byte aligned, growable scratch storage and per-thread reuse of it.
//!
//! Invariants: every buffer starts on a cache line (so a packed 32-float B row is exactly two
//! lines and never splits); per-thread scratch is *taken* out of its thread-local slot for the
//! duration of a use and put back afterwards, so a re-entrant call on the same thread (e.g. a
//! rayon worker that steals another GEMM while waiting) just allocates a fresh buffer instead of
//! panicking on a double borrow. The storage of dropped buffers of 1 MiB or more is kept (at
//! most 4, 512 MiB) for [`AlignedBuf::recycled`], whose callers write every element they read;
//! every other new (or replaced, see [`AlignedBuf::slice_mut`]) buffer is zeroed.

use super::lazy_zeroed::LineVec;
use crate::Result;
use std::cell::Cell;
use std::sync::Mutex;

/// One cache line of storage.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
pub struct Line([u32; 16]);

// SAFETY: `Line` is 64 bytes of `u32` with alignment 64: no padding, every bit pattern valid.
unsafe impl bytemuck::Zeroable for Line {}
// SAFETY: see above.
unsafe impl bytemuck::Pod for Line {}

/// A growable buffer of cache lines, viewed as a slice of any plain 4-byte-or-smaller type.
#[derive(Default)]
pub struct AlignedBuf {
    lines: LineVec,
}

impl AlignedBuf {
    /// The first `n` elements as `T`. A buffer too small is replaced by a zeroed one (all of
    /// it zero); reused space keeps old contents. The replacement comes from the allocator
    /// already zeroed ([`LineVec`]: fresh pages of a large one are only touched when written,
    /// as huge pages where the kernel allows), not grown in place, which wrote every
    /// new line: a 84 MB bf16 product's partial-sum buffer, never read or written when K fits
    /// one block, cost 30 ms a call. A replacement the host will not allocate is an error
    /// naming `op` (the buffer is then empty).
    pub(crate) fn slice_mut<T: bytemuck::Pod>(
        &mut self,
        op: &'static str,
        n: usize,
    ) -> Result<&mut [T]> {
        let bytes = crate::cpu::alloc::bytes_of::<T>(n);
        let lines = bytes.div_ceil(64);
        if self.lines.len() < lines {
            self.lines = LineVec::default();
            self.lines = LineVec::zeroed(op, lines)?;
        }
        let all: &mut [T] = bytemuck::cast_slice_mut(&mut self.lines[..lines]);
        Ok(&mut all[..n])
    }

    /// The first `n` elements as `T` (`n` must not exceed what was allocated).
    pub(crate) fn slice<T: bytemuck::Pod>(&self, n: usize) -> &[T] {
        let lines = (n * std::mem::size_of::<T>()).div_ceil(64);
        let all: &[T] = bytemuck::cast_slice(&self.lines[..lines.min(self.lines.len())]);
        &all[..n.min(all.len())]
    }
}

impl AlignedBuf {
    /// An empty buffer holding the storage of a dropped one with room for `n` elements of `T`
    /// (at most twice that), if one was kept (see [`SPARE`]); else a plain empty buffer. The
    /// kept storage's old contents stay until written: only for callers that write every
    /// element they read (the B packers do: per-call products already reuse scratch unzeroed).
    pub(crate) fn recycled<T>(n: usize) -> AlignedBuf {
        let lines = crate::cpu::alloc::bytes_of::<T>(n).div_ceil(64);
        if lines >= SPARE_MIN_LINES {
            if let Ok(mut spare) = SPARE.lock() {
                let best = crate::cpu::pool::best_fit(spare.iter().map(|s| s.len()), lines);
                if let Some(i) = best {
                    return AlignedBuf {
                        lines: spare.swap_remove(i),
                    };
                }
            }
        }
        AlignedBuf::default()
    }
}

/// Storage of dropped buffers of at least [`SPARE_MIN_LINES`] (256 KiB), kept for
/// [`AlignedBuf::recycled`]: a per-call convolution packs its whole weight on every call, and a
/// fresh 59 MB pack (1280 channels, 3×3) spent about a third of its time in page faults. A
/// per-call Winograd convolution drops one pack per point (16 or 36, 0.8 MB each at 448
/// channels): with 4 spares of at least 1 MiB kept, a 448-channel call ran 40% slower than a
/// 512-channel one.
static SPARE: Mutex<Vec<LineVec>> = Mutex::new(Vec::new());
/// Smallest storage worth keeping (256 KiB).
const SPARE_MIN_LINES: usize = (256 << 10) / 64;
/// Most storages kept, and most bytes.
const SPARE_MAX: usize = 40;
const SPARE_MAX_LINES: usize = (512 << 20) / 64;

/// Frees every kept spare storage (see [`SPARE`]; `xpu::empty_cache` calls this).
pub(crate) fn clear_spare() {
    let freed = SPARE.lock().map(|mut s| std::mem::take(&mut *s));
    drop(freed);
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        if self.lines.len() < SPARE_MIN_LINES {
            return;
        }
        let lines = std::mem::take(&mut self.lines);
        if lines.len() > SPARE_MAX_LINES {
            return;
        }
        // The newest is kept; the oldest go first when over the limits (drop them outside the
        // lock).
        let mut evicted = Vec::new();
        if let Ok(mut spare) = SPARE.lock() {
            spare.push(lines);
            let mut kept: usize = spare.iter().map(|s| s.len()).sum();
            while spare.len() > SPARE_MAX || kept > SPARE_MAX_LINES {
                let old = spare.remove(0);
                kept -= old.len();
                evicted.push(old);
            }
        }
        drop(evicted);
    }
}

/// Scratch larger than this (64 MiB) is freed after use instead of kept for the next call.
const MAX_KEPT_LINES: usize = (64 << 20) / 64;

thread_local! {
    static A_SCRATCH: Cell<AlignedBuf> = Cell::new(AlignedBuf::default());
    static B_SCRATCH: Cell<AlignedBuf> = Cell::new(AlignedBuf::default());
    static C_SCRATCH: Cell<AlignedBuf> = Cell::new(AlignedBuf::default());
}

/// Which per-thread scratch slot to use.
#[derive(Clone, Copy)]
pub(crate) enum Slot {
    /// Packed A blocks (one per worker).
    A,
    /// Packed B of a non-prepacked call (on the calling thread).
    B,
    /// The f32 partial sums of a product rounded to 16 bits in the store (calling thread).
    C,
}

/// Runs `f` with this thread's scratch buffer for `slot`, reusing its allocation.
pub(crate) fn with_scratch<R>(slot: Slot, f: impl FnOnce(&mut AlignedBuf) -> R) -> R {
    let key = match slot {
        Slot::A => &A_SCRATCH,
        Slot::B => &B_SCRATCH,
        Slot::C => &C_SCRATCH,
    };
    let mut buf = key.take();
    let r = f(&mut buf);
    // Keep the larger of the two if a re-entrant call put one back meanwhile.
    let other = key.take();
    let keep_new = buf.lines.len() <= MAX_KEPT_LINES && buf.lines.len() >= other.lines.len();
    key.set(if keep_new { buf } else { other });
    r
}

/// Runs `f` with `n` floats of this thread's scratch for the partial sums of a product whose
/// output is rounded to 16 bits in the store ([`super::Out16`]): on cache lines, unlike a
/// `Vec<f32>` (16 bytes past a line for large allocations), so the AMX path's tile loads and
/// stores of C between K blocks never straddle two lines (11–23% faster multi-block bf16
/// products, `speed_out16_c_alignment`). Contents are left over from earlier use: the engine
/// writes C before it reads it.
///
/// A buffer too small for `n` is swapped for a kept spare storage where one fits (see
/// [`AlignedBuf::recycled`]; the engine's writes-before-reads is what that asks for): partial
/// sums above [`MAX_KEPT_LINES`] are dropped after each use, and a fresh 84 MB one (a bf16
/// 8192 × 320 × 2560 product, two K blocks) took 40 ms of page faults a call against 5 ms of
/// products.
pub(crate) fn with_partial_sums<R>(
    op: &'static str,
    n: usize,
    f: impl FnOnce(&mut [f32]) -> Result<R>,
) -> Result<R> {
    with_scratch(Slot::C, |buf| {
        let lines = crate::cpu::alloc::bytes_of::<f32>(n).div_ceil(64);
        if buf.lines.len() < lines {
            let spare = AlignedBuf::recycled::<f32>(n);
            if spare.lines.len() >= lines {
                *buf = spare;
            }
        }
        f(buf.slice_mut::<f32>(op, n)?)
    })
}
