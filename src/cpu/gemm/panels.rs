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
//! - With a [`DirectB`] source (row-major B, on a kernel that declares
//!   [`super::driver::Kernel::FILLS_B`]), a full panel whose K block has no padding rows is not
//!   packed by a separate pass: the claimant gets a [`Fill`] and its first tile multiplies the
//!   panel straight from B while writing it into place
//!   ([`super::driver::Kernel::tile_filling_b`], [`super::avx512_fill`]); dropping the [`Fill`]
//!   (after that tile, or on unwinding) publishes the panel. The values written are the
//!   packer's, so results are bit-identical either way. Why: the packer's
//!   loads of B from L3 were 3.5% of the samples at 512³ (a prepacked B ran 3.7% faster);
//!   inside the tile they overlap the multiply-adds.

use super::layout::{BLayout, PackKind, PackedView, NR};
use super::scratch::AlignedBuf;
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
    /// Panel `q` of K block `bi`, packed ([`PanelAccess::Ready`]), or claimed for the caller to
    /// fill from B in its tile ([`PanelAccess::Fill`]).
    fn access(&self, bi: usize, q: usize) -> PanelAccess<'_, P> {
        PanelAccess::Ready(self.panel(bi, q))
    }
}

/// How a task reaches a B micro-panel.
pub(crate) enum PanelAccess<'s, P> {
    /// Packed and published: read it.
    Ready(*const P),
    /// Claimed by this task, which must fill it (see [`Fill`]).
    Fill(Fill<'s, P>),
}

/// A claimed panel to be filled from a row-major source: the K block's rows of B (one row per
/// unit in the f32 layout, two in the bf16 pair layout), 32 values each, `ld` values apart from
/// `src`, converted to `dst` (`kcu * 32` units, the packed layout). Publishes the panel when
/// dropped, also on unwinding.
pub(crate) struct Fill<'s, P> {
    /// The panel's first source value (B at the K block's first row and its first column), of
    /// the element type of the [`DirectB`] the panels were given (f32, f16 or bf16).
    pub src: *const u8,
    /// Distance between consecutive source rows, in values.
    pub ld: usize,
    /// The panel's packed storage.
    pub dst: *mut P,
    _publish: Publish<'s>,
}

/// Publishes a panel (READY, release) when dropped, also on unwinding.
struct Publish<'s>(&'s AtomicU8);

impl Drop for Publish<'_> {
    fn drop(&mut self) {
        self.0.store(READY, Ordering::Release);
    }
}

/// A validated row-major source of B (`col_stride == 1`) whose full panels may be filled by
/// the tiles ([`Fill`]) instead of the packer.
#[derive(Clone, Copy)]
pub(crate) struct DirectB<'a, S> {
    /// B's storage.
    pub data: &'a [S],
    /// Index of B's element (0, 0).
    pub offset: usize,
    /// Distance between B's rows, in values.
    pub row_stride: usize,
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
pub(crate) struct LazyPanels<'a, P, F, S = P> {
    ptr: *mut P,
    layout: BLayout,
    state: Vec<AtomicU8>,
    pack: F,
    direct: Option<DirectB<'a, S>>,
    _buf: PhantomData<&'a mut AlignedBuf>,
}

// SAFETY: the buffer is only written by the thread that claimed a panel and only read after it
// is published (module invariants); `F` and the direct source are shared by reference only.
unsafe impl<P: Send + Sync, F: Sync, S: Sync> Sync for LazyPanels<'_, P, F, S> {}

impl<'a, P, F> LazyPanels<'a, P, F>
where
    P: bytemuck::Pod,
    F: Fn(usize, usize, usize, &mut [P]) + Sync,
{
    /// Panels of `layout` to be packed by `pack` into the first `layout.len()` elements of
    /// `buf` (grown as needed: an error when the host will not allocate it).
    pub(crate) fn new(buf: &'a mut AlignedBuf, layout: BLayout, pack: F) -> crate::Result<Self> {
        const OP: &str = "gemm (packed B)";
        let panels = layout.nblk * layout.npanels;
        Ok(LazyPanels {
            ptr: buf.slice_mut::<P>(OP, layout.len())?.as_mut_ptr(),
            layout,
            state: crate::cpu::alloc::collected(
                OP,
                panels,
                (0..panels).map(|_| AtomicU8::new(EMPTY)),
            )?,
            pack,
            direct: None,
            _buf: PhantomData,
        })
    }
}

impl<'a, P, F, S> LazyPanels<'a, P, F, S>
where
    P: bytemuck::Pod,
    F: Fn(usize, usize, usize, &mut [P]) + Sync,
{
    /// The same, with full panels of `direct` (the B that `pack` packs) handed to tiles to
    /// fill ([`PanelAccess::Fill`]).
    pub(crate) fn with_direct<S2>(
        self,
        direct: Option<DirectB<'a, S2>>,
    ) -> LazyPanels<'a, P, F, S2> {
        LazyPanels {
            ptr: self.ptr,
            layout: self.layout,
            state: self.state,
            pack: self.pack,
            direct,
            _buf: PhantomData,
        }
    }

    /// Where panel `q` of block `bi` starts in the direct source, when it has one there: a
    /// full panel of 32 consecutive B columns, every row of the K block (two per unit in the
    /// bf16 pair layout, none of them padding past K) inside the storage.
    fn direct_src(&self, bi: usize, q: usize) -> Option<(*const u8, usize)> {
        let d = self.direct.as_ref()?;
        let l = &self.layout;
        let c0 = l.src_col(q, 0)?;
        if l.glu || l.src_col(q, NR - 1) != Some(c0 + NR - 1) {
            return None;
        }
        let rows_per_unit = match l.kind {
            PackKind::F32 => 1,
            PackKind::Bf16 => 2,
            PackKind::Amx => return None,
        };
        let (u0, u1) = l.block(bi);
        let (r0, r1) = (u0 * rows_per_unit, u1 * rows_per_unit);
        if r1 > l.k {
            return None;
        }
        let first = d.offset + r0 * d.row_stride + c0;
        let last = d.offset + r1.checked_sub(1)? * d.row_stride + c0 + NR - 1;
        d.data.get(last)?;
        Some((d.data[first..].as_ptr() as *const u8, d.row_stride))
    }

    /// Waits for another thread to publish a panel it claimed.
    fn wait_ready(state: &AtomicU8) {
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

    fn ensure(&self, bi: usize, q: usize, state: &AtomicU8) {
        if state
            .compare_exchange(EMPTY, PACKING, Ordering::Acquire, Ordering::Acquire)
            .is_ok()
        {
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
        Self::wait_ready(state);
    }
}

impl<P: bytemuck::Pod + Send + Sync, F, S: Sync> Panels<P> for LazyPanels<'_, P, F, S>
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
    fn access(&self, bi: usize, q: usize) -> PanelAccess<'_, P> {
        let state = &self.state[bi * self.layout.npanels + q];
        if state.load(Ordering::Acquire) != READY {
            let Some((src, ld)) = self.direct_src(bi, q) else {
                return PanelAccess::Ready(self.panel(bi, q));
            };
            if state
                .compare_exchange(EMPTY, PACKING, Ordering::Acquire, Ordering::Acquire)
                .is_ok()
            {
                return PanelAccess::Fill(Fill {
                    src,
                    ld,
                    // SAFETY: inside the buffer (`new` took `layout.len()`); the claim gives
                    // this thread the only access to the panel until the Fill is dropped.
                    dst: unsafe { self.ptr.add(self.layout.panel_offset(bi, q)) },
                    _publish: Publish(state),
                });
            }
            Self::wait_ready(state);
        }
        // SAFETY: inside the buffer; READY was observed (acquire).
        PanelAccess::Ready(unsafe { self.ptr.add(self.layout.panel_offset(bi, q)) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cpu::gemm::scratch::AlignedBuf;
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
        let lazy = LazyPanels::new(&mut buf, layout, pack).unwrap();
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

    /// With a direct source, each full panel is handed out to fill exactly once (readers wait
    /// for the filler, however slow), and only the N-edge panel goes through the packer.
    #[test]
    fn each_full_panel_is_filled_once_and_read_complete() {
        let (k, n, ld) = (1000, 300, 307);
        let layout = BLayout::f32_blocked(k, n, 256);
        let src: Vec<f32> = (0..k * ld).map(|i| i as f32).collect();
        let offset = 5;
        let at = |u: usize, c: usize| src[offset + u * ld + c];
        let packs: Vec<AtomicUsize> = (0..layout.npanels).map(|_| AtomicUsize::new(0)).collect();
        let fills: Vec<AtomicUsize> = (0..layout.npanels).map(|_| AtomicUsize::new(0)).collect();
        let pack = |u0: usize, u1: usize, q: usize, ch: &mut [f32]| {
            packs[q].fetch_add(1, Ordering::Relaxed);
            for (u, row) in (u0..u1).zip(ch.chunks_exact_mut(NR)) {
                for (i, x) in row.iter_mut().enumerate() {
                    let c = q * NR + i;
                    *x = if c < n { at(u, c) } else { 0.0 };
                }
            }
        };
        let mut buf = AlignedBuf::default();
        let direct = DirectB {
            data: &src,
            offset,
            row_stride: ld,
        };
        let lazy = LazyPanels::new(&mut buf, layout, pack)
            .unwrap()
            .with_direct(Some(direct));
        let panels: Vec<(usize, usize)> = (0..layout.nblk)
            .flat_map(|bi| (0..layout.npanels).map(move |q| (bi, q)))
            .collect();
        (0..64usize).into_par_iter().for_each(|t| {
            for j in 0..panels.len() {
                let (bi, q) = panels[(t * 5 + j) % panels.len()];
                let (u0, u1) = layout.block(bi);
                let ptr = match lazy.access(bi, q) {
                    PanelAccess::Ready(p) => p,
                    PanelAccess::Fill(f) => {
                        fills[q].fetch_add(1, Ordering::Relaxed);
                        assert_eq!(f.ld, ld);
                        for u in 0..u1 - u0 {
                            if u == (u1 - u0) / 2 {
                                std::thread::sleep(std::time::Duration::from_millis(2));
                            }
                            // SAFETY: the Fill's rows lie in `src`; its panel is ours.
                            unsafe {
                                std::ptr::copy_nonoverlapping(
                                    (f.src as *const f32).add(u * ld),
                                    f.dst.add(u * NR),
                                    NR,
                                )
                            };
                        }
                        continue;
                    }
                };
                // SAFETY: a READY panel of `(u1 - u0) * NR` published values.
                let got = unsafe { std::slice::from_raw_parts(ptr, (u1 - u0) * NR) };
                for (u, row) in (u0..u1).zip(got.chunks_exact(NR)) {
                    for (i, &x) in row.iter().enumerate() {
                        let c = q * NR + i;
                        assert_eq!(x, if c < n { at(u, c) } else { 0.0 }, "{bi} {q} {u} {i}");
                    }
                }
            }
        });
        let full = n / NR;
        for q in 0..layout.npanels {
            let (f, p) = (
                fills[q].load(Ordering::Relaxed),
                packs[q].load(Ordering::Relaxed),
            );
            let want = if q < full {
                (layout.nblk, 0)
            } else {
                (0, layout.nblk)
            };
            assert_eq!((f, p), want, "panel {q}");
        }
    }
}
