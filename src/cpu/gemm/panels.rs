//! Where the driver's B micro-panels come from: a B packed beforehand ([`PackedView`]), or a B
//! packed panel by panel by the tasks that first need it ([`LazyPanels`]).
//!
//! Why lazy: a per-call product used to pack all of B in one parallel pass, then start the
//! tasks in a second one (perf at 512³ on 2 threads: packing ~5% of the samples, thread
//! hand-offs ~3%). Packed on first use, the packing runs inside the tasks (one pass over the
//! pool), beside the other thread's multiply-adds, into the caches of a core that uses it; the
//! driver starts the tasks' sweeps at different panels so two threads rarely want the same
//! unpacked panel. Measured on Zen 4 (medians of alternating runs, `Tensor::matmul`): f32
//! 154×768×320 147–149 → 163–165 GFLOP/s, 512³ 194 → 195–196; bf16 154×768×320 260–264 →
//! 275–282, 512³ 350–352 → 354–358; 1024³ and larger unchanged within noise. (Without the
//! staggered starts the threads packed in lockstep and 512³ fell to 155 GFLOP/s.)
//!
//! Invariants of [`LazyPanels`]:
//! - Each panel has a state: empty, being packed, ready. A thread that moves it from empty to
//!   being packed (compare-exchange) is the only one to touch its elements until it publishes
//!   ready (release store); readers see ready (acquire load) before they read a single element.
//!   Nothing ever holds a reference to the whole buffer while tasks run: elements are reached
//!   through the raw pointer only.
//! - Packing a panel never waits on anything (no pool calls inside), so a thread that finds a
//!   panel being packed only waits for running code: it spins briefly, then yields.
//! - The ready state is published even if the packer unwinds (the panic then propagates out of
//!   the parallel loop; no thread is left waiting forever).

use super::buf::AlignedBuf;
use super::layout::{BLayout, PackedView};
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU8, Ordering};

/// A source of packed B micro-panels in the [`BLayout`] layout.
pub(crate) trait Panels<P>: Sync {
    /// The geometry of the packed B.
    fn layout(&self) -> &BLayout;
    /// The start of panel `q` of K block `bi` (`layout().block(bi)` units × 32 lanes), packed.
    fn panel(&self, bi: usize, q: usize) -> *const P;
    /// True when panels are packed on first use (tasks then begin their sweeps at different
    /// places, so that the threads pack different panels at the same time).
    fn lazy(&self) -> bool {
        false
    }
}

impl<P: Sync> Panels<P> for PackedView<'_, P> {
    fn layout(&self) -> &BLayout {
        &self.layout
    }
    fn panel(&self, bi: usize, q: usize) -> *const P {
        self.data[self.layout.panel_offset(bi, q)..].as_ptr()
    }
}

const EMPTY: u8 = 0;
const PACKING: u8 = 1;
const READY: u8 = 2;

/// B panels packed on first use by `pack(u0, u1, q, panel)`, which must write all of the
/// `(u1 - u0) * 32` elements of panel `q` over units `u0..u1` (as the packers of
/// [`super::pack`] do).
pub(crate) struct LazyPanels<'a, P, F> {
    ptr: *mut P,
    layout: BLayout,
    state: Vec<AtomicU8>,
    pack: F,
    _buf: PhantomData<&'a mut AlignedBuf>,
}

// SAFETY: the buffer is only written by the thread that claimed a panel and only read after it
// is published (module invariants); `F` is shared by reference only.
unsafe impl<P: Send, F: Sync> Sync for LazyPanels<'_, P, F> {}

impl<'a, P, F> LazyPanels<'a, P, F>
where
    P: bytemuck::Pod,
    F: Fn(usize, usize, usize, &mut [P]) + Sync,
{
    /// Panels of `layout` to be packed by `pack` into the first `layout.len()` elements of
    /// `buf` (grown as needed).
    pub(crate) fn new(buf: &'a mut AlignedBuf, layout: BLayout, pack: F) -> Self {
        LazyPanels {
            ptr: buf.slice_mut::<P>(layout.len()).as_mut_ptr(),
            layout,
            state: (0..layout.nblk * layout.npanels)
                .map(|_| AtomicU8::new(EMPTY))
                .collect(),
            pack,
            _buf: PhantomData,
        }
    }

    fn ensure(&self, bi: usize, q: usize, state: &AtomicU8) {
        if state
            .compare_exchange(EMPTY, PACKING, Ordering::Acquire, Ordering::Acquire)
            .is_ok()
        {
            /// Publishes the panel when dropped, also on unwinding.
            struct Publish<'s>(&'s AtomicU8);
            impl Drop for Publish<'_> {
                fn drop(&mut self) {
                    self.0.store(READY, Ordering::Release);
                }
            }
            let _publish = Publish(state);
            let (u0, u1) = self.layout.block(bi);
            let len = (u1 - u0) * super::layout::NR;
            // SAFETY: the panel lies inside the buffer (`new` took `layout.len()`); the
            // claim above gives this thread the only access to its elements until `_publish`
            // stores READY, and no reference to them exists elsewhere.
            let panel = unsafe {
                std::slice::from_raw_parts_mut(self.ptr.add(self.layout.panel_offset(bi, q)), len)
            };
            (self.pack)(u0, u1, q, panel);
            return;
        }
        let mut spins = 0u32;
        while state.load(Ordering::Acquire) != READY {
            if spins < 256 {
                std::hint::spin_loop();
                spins += 1;
            } else {
                std::thread::yield_now();
            }
        }
    }
}

impl<P: bytemuck::Pod + Send, F> Panels<P> for LazyPanels<'_, P, F>
where
    F: Fn(usize, usize, usize, &mut [P]) + Sync,
{
    fn layout(&self) -> &BLayout {
        &self.layout
    }
    fn panel(&self, bi: usize, q: usize) -> *const P {
        let state = &self.state[bi * self.layout.npanels + q];
        if state.load(Ordering::Acquire) != READY {
            self.ensure(bi, q, state);
        }
        // SAFETY: inside the buffer (`new` took `layout.len()`); READY was observed (acquire).
        unsafe { self.ptr.add(self.layout.panel_offset(bi, q)) }
    }
    fn lazy(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::gemm::buf::AlignedBuf;
    use crate::cpu::gemm::layout::NR;
    use rayon::prelude::*;
    use std::sync::atomic::AtomicUsize;

    /// Many tasks on every pool thread ask for panels in clashing orders (and, by a slow packer,
    /// while others are packing them): every panel is packed exactly once, and every reader sees
    /// its complete contents.
    #[test]
    fn each_panel_is_packed_once_and_read_complete() {
        let layout = BLayout::f32_blocked(1000, 300, 256);
        assert!(layout.nblk > 1 && layout.npanels > 1, "{layout:?}");
        let calls: Vec<AtomicUsize> = (0..layout.nblk * layout.npanels)
            .map(|_| AtomicUsize::new(0))
            .collect();
        let value = |bi: usize, q: usize, i: usize| (bi * 1000 + q * 10 + i % 7) as f32;
        let pack = |u0: usize, u1: usize, q: usize, ch: &mut [f32]| {
            let bi = u0 / layout.kcu;
            calls[bi * layout.npanels + q].fetch_add(1, Ordering::Relaxed);
            assert_eq!(ch.len(), (u1 - u0) * NR);
            let half = ch.len() / 2;
            for (i, x) in ch.iter_mut().enumerate() {
                if i == half {
                    // Others ask for this panel meanwhile: they must wait, not read half of it.
                    std::thread::sleep(std::time::Duration::from_millis(2));
                }
                *x = value(bi, q, i);
            }
        };
        let mut buf = AlignedBuf::default();
        let lazy = LazyPanels::new(&mut buf, layout, pack);
        let panels: Vec<(usize, usize)> = (0..layout.nblk)
            .flat_map(|bi| (0..layout.npanels).map(move |q| (bi, q)))
            .collect();
        (0..64usize).into_par_iter().for_each(|t| {
            for j in 0..panels.len() {
                let (bi, q) = panels[(t * 7 + j) % panels.len()];
                let (u0, u1) = layout.block(bi);
                let len = (u1 - u0) * NR;
                // SAFETY: READY panels are only read; `panel` returns the start of `len`
                // published elements.
                let got = unsafe { std::slice::from_raw_parts(lazy.panel(bi, q), len) };
                assert!(got.iter().enumerate().all(|(i, &x)| x == value(bi, q, i)));
            }
        });
        assert!(calls.iter().all(|c| c.load(Ordering::Relaxed) == 1));
    }
}
