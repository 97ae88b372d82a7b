//! The BLIS-style loop nest shared by every kernel, and its work split across rayon threads.
//!
//! Invariants:
//! - Work is cut into tasks, each a range of `MR`-row panels of M times a range of B panels.
//!   Tasks write disjoint C tiles, so they run in parallel without synchronisation.
//! - Inside a task, for each K block: pack the task's A rows (thread-local scratch, L2 sized);
//!   then for each B sub-block of about [`B_BLOCK_BYTES`] (whole micro-panels, L2 resident),
//!   each A micro-panel (L1 resident) sweeps the sub-block's B micro-panels, which stream from
//!   L2 (BLIS's order with the operands' roles swapped: our broadcast operand is A). Kernels with
//!   [`Kernel::B_STATIONARY`] (the implicit-GEMM convolution's) use the other order: each B
//!   micro-panel (`kcu × 32`, L1 resident with `kcu` ≈ 192) is swept by every A micro-panel of
//!   the task's A block (L2 resident with its C and B blocks in [`TASK_BYTES`]), and tasks are
//!   planned by [`plan_b_stationary`]. Measured with the 14×32 f32 kernel on this machine (best of
//!   interleaved runs, per CPU-second): ~90% of the FMA peak with B in L1 and A streaming
//!   from L2, ~75% with A in L1 and the 2.3× larger B panels streaming.
//! - A tile is `first` on K block 0 (C is overwritten, or blended with `beta`) and `last` on the
//!   final K block, where the whole epilogue is applied as the tile is stored (into C, or
//!   rounded into [`EpCtx::out16`] when set, in which case C only ever holds partial sums).
//! - B panels come through [`Panels`]: packed beforehand, or packed by the first task that
//!   needs each one ([`super::panels::LazyPanels`], per-call products); then each M task starts
//!   its sweep over the panels at a different place so threads pack different panels at once.
//!   A panel that a task claims to fill ([`super::panels::Fill`]) is filled by that task's tile
//!   ([`Kernel::tile_filling_b`]) and published after it.
//! - Calls below [`PAR_MIN_FLOPS`], and calls inside [`sequential`], never touch the thread
//!   pool. Parallel calls below [`EAGER_MAX_FLOPS`] from outside the pool start on the calling
//!   thread at once ([`super::eager`]); larger ones, and calls from pool threads, go through
//!   `into_par_iter` (whose splitting keeps each thread's tasks neighbours, which the larger
//!   products need: a shared task counter interleaved them and cost 1024³ and 2048³ 3–4%).

use super::layout::PackedView;
use super::layout::NR;
use super::panels::{PanelAccess, Panels};
use super::scratch::{with_scratch, Slot};
use super::types::{Out16, Residual};
use crate::cpu::alloc::FirstError;
use crate::desc::Activation;
use crate::Result;
use rayon::prelude::*;

/// Products smaller than this many flops run on the calling thread.
pub(crate) const PAR_MIN_FLOPS: f64 = (1u64 << 22) as f64;
/// Parallel products below this many flops (512³ is 2.7e8) start on the calling thread.
pub(crate) const EAGER_MAX_FLOPS: f64 = 6e8;
/// Maximum A micro-panels per task (an `MC = 12 * 14 = 168`-row A block: ~170 KiB, L2 resident).
pub(crate) const MC_PANELS: usize = 12;

/// Bytes of an L2-resident B sub-block (576 KiB: 12 micro-panels of 384 units, 9 of 512): the
/// sub-block holds as many whole micro-panels of the K block as fit, at least one.
pub(crate) const B_BLOCK_BYTES: usize = 576 << 10;

/// Bytes of L2 a [`Kernel::B_STATIONARY`] task's working set may take (of a 2 MiB L2).
pub(crate) const TASK_BYTES: usize = 3 << 19;

thread_local! {
    /// Set inside [`sequential`]: products run on the calling thread.
    static SEQUENTIAL: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Runs `f` with every product it starts on this thread kept on this thread (no split over
/// the pool), for callers that already run independent products in parallel (the Winograd
/// convolution's per-point GEMMs): one parallel region over the products instead of one per
/// product, whose wake-ups and uneven splits of small products cost more than they gain.
pub(crate) fn sequential<R>(f: impl FnOnce() -> R) -> R {
    let was = SEQUENTIAL.with(|s| s.replace(true));
    let r = f();
    SEQUENTIAL.with(|s| s.set(was));
    r
}

/// Epilogue parameters in the form the kernels consume.
pub(crate) struct EpCtx<'a> {
    pub alpha: f32,
    pub beta: f32,
    pub bias: Option<&'a [f32]>,
    pub act: Activation,
    pub residual: Option<Residual<'a>>,
    /// GLU mode: each tile's lanes 0..16 are `h`, lanes 16..32 are `g`.
    pub glu: bool,
    /// Output columns N (offset of the gate's bias in GLU mode).
    pub n: usize,
    /// 16-bit destination of the last K block's values (C then holds only partial sums).
    pub out16: Option<Out16<'a>>,
}

/// One output tile handed to a kernel.
pub(crate) struct Tile {
    /// C element `(row0, col0)`.
    pub c: *mut f32,
    pub ldc: usize,
    pub row0: usize,
    pub col0: usize,
    /// Valid rows (`<= MR`).
    pub mr: usize,
    /// Valid output columns (`<= 32`, `<= 16` in GLU mode).
    pub nr: usize,
    pub first: bool,
    pub last: bool,
}

/// A microkernel with its A source.
pub(crate) trait Kernel: Sync {
    /// Packed A unit.
    type PA: bytemuck::Pod + Send;
    /// Packed B unit.
    type PB: bytemuck::Pod + Sync;
    /// Rows per micro-panel.
    const MR: usize;
    /// Bytes of an L2-resident B sub-block (see [`B_BLOCK_BYTES`]).
    const B_BLOCK_BYTES: usize = B_BLOCK_BYTES;
    /// Loop order inside a task: `false` keeps each A micro-panel in L1 while B micro-panels
    /// stream past it; `true` keeps each B micro-panel in L1 while the A block streams.
    const B_STATIONARY: bool = false;
    /// True for kernels fast enough that a task streaming B from L3 is bound by it (the AMX
    /// ones: ~130 rows of A per B panel balance a core's L3 bandwidth): large B is then split
    /// by [`plan_streams`] to stream it fewer times.
    const L3_BOUND_B: bool = false;
    /// Packs A rows `row0..row0 + rows` (`rows <= MR`), units `u0..u1`, into `dst`
    /// (`MR * (u1 - u0)` elements, zero padded).
    fn pack_a(&self, row0: usize, rows: usize, u0: usize, u1: usize, dst: &mut [Self::PA]);
    /// Called on the worker thread before a task's first [`Kernel::tile`] (the AMX kernel loads
    /// its tile configuration here); nothing else runs on that thread until [`Kernel::end`].
    fn begin(&self) {}
    /// Called on the worker thread after a task's last [`Kernel::tile`].
    fn end(&self) {}
    /// Multiplies an A micro-panel by a B micro-panel over `kcu` units and stores the tile.
    ///
    /// # Safety
    /// `a` holds `MR * kcu` and `b` `32 * kcu` elements; the tile lies inside C; the epilogue's
    /// bias and residual have been validated against the output shape; [`Kernel::begin`] ran
    /// on this thread (with no [`Kernel::end`] since).
    unsafe fn tile(&self, kcu: usize, a: *const Self::PA, b: *const Self::PB, t: &Tile, ep: &EpCtx);
    /// True when the kernel fills B panels in its tiles ([`Kernel::tile_filling_b`]); only then
    /// does the driver ask the panels for [`super::panels::Fill`]s.
    const FILLS_B: bool = false;
    /// [`Kernel::tile`] over a B micro-panel read from its row-major source (`src`: the
    /// [`super::panels::Fill`]'s first value, rows `ld` values apart: one row per unit of f32
    /// sources, two of bf16 ones), which it also converts value for value into `dst` (`32 * kcu`
    /// units, the packed layout) for the tiles after it. This default serves sources of `PB`
    /// values, one row per unit: it copies first, then multiplies; kernels override it to do
    /// both in one pass.
    ///
    /// # Safety
    /// As [`Kernel::tile`]; `src` rows are readable values of the source type the kernel fills
    /// from, `dst` is writable and touched by no one else until this returns.
    #[allow(clippy::too_many_arguments)]
    unsafe fn tile_filling_b(
        &self,
        kcu: usize,
        a: *const Self::PA,
        (src, ld): (*const u8, usize),
        dst: *mut Self::PB,
        t: &Tile,
        ep: &EpCtx,
    ) {
        let src = src as *const Self::PB;
        for u in 0..kcu {
            std::ptr::copy_nonoverlapping(src.add(u * ld), dst.add(u * NR), NR);
        }
        self.tile(kcu, a, dst, t, ep);
    }
}

#[derive(Clone, Copy)]
struct CPtr(*mut f32);
// SAFETY: tasks write disjoint tiles of C (see module invariants).
unsafe impl Send for CPtr {}
// SAFETY: as above.
unsafe impl Sync for CPtr {}

/// Splits `mp` A panels and `np` B panels into (M tasks, N tasks).
fn plan(mp: usize, np: usize, threads: usize) -> (usize, usize) {
    let cache_min = mp.div_ceil(MC_PANELS).max(1);
    if threads <= 1 {
        return (cache_min, 1);
    }
    let target = threads * 4;
    let mut mt = cache_min.max(target.min(mp.div_ceil(2)));
    if mt >= threads {
        mt = mt.div_ceil(threads) * threads;
    }
    let mt = mt.min(mp).max(1);
    let nt = if mt >= target {
        1
    } else {
        target.div_ceil(mt).min(np.div_ceil(2)).max(1)
    };
    (mt, nt)
}

/// B larger than this (bytes) cannot stay in L2 from one M task to the next: every M task
/// streams it again from L3 (see [`plan_streams`]).
pub(crate) const B_STREAM_BYTES: usize = 8 << 20;

/// [`plan`] for kernels with [`Kernel::L3_BOUND_B`] whose packed B (`b_bytes`) exceeds
/// [`B_STREAM_BYTES`]: every M task streams its columns of B from L3 and every N task packs
/// all of its A rows, so among splits into at least two tasks per thread, a multiple of the
/// thread count, with A blocks that fit L2 (at most [`MC_PANELS`] micro-panels a task), the
/// one with the least `mt · np + nt · mp` panel traffic wins. Measured on the AMX machine
/// (measured on a Sapphire Rapids): SD's bf16 3×3 convolution 2×1280×16×16 (29 MB of
/// B; [`plan`] gave 8 M tasks, 236 MB of B traffic per call) 8.1 → 6.3 ms, the 1280-wide
/// feed-forward products 512 × 5120 × 1280 3.7 → 2.9 ms.
fn plan_streams(mp: usize, np: usize, threads: usize, b_bytes: usize) -> (usize, usize) {
    if threads <= 1 || b_bytes <= B_STREAM_BYTES {
        return plan(mp, np, threads);
    }
    let mut best = plan(mp, np, threads);
    let mut best_cost = usize::MAX;
    for mt in mp.div_ceil(MC_PANELS).max(1)..=mp {
        for nt in 1..=np {
            let tasks = mt * nt;
            if tasks < 2 * threads || !tasks.is_multiple_of(threads) {
                continue;
            }
            let cost = mt * np + nt * mp;
            if cost < best_cost {
                (best, best_cost) = ((mt, nt), cost);
            }
        }
    }
    best
}

/// [`plan`] for [`Kernel::B_STATIONARY`] kernels. A task's working set per K block is its
/// packed A block (`rows × kcu`), its C block (`rows × cols`, read and written on every K block)
/// and its B block (`kcu × cols`); it must fit [`TASK_BYTES`] of L2. Every M task streams its B
/// panels once and every N task packs its A rows once, so among fitting splits into at least
/// four tasks per thread (load balance on a shared machine) the one with the least
/// `mt · N + nt · M` traffic wins. `unit` is the bytes of one packed value.
fn plan_b_stationary(
    (mp, np): (usize, usize),
    (mr, kcu, unit): (usize, usize, usize),
    threads: usize,
) -> (usize, usize) {
    let nr = NR;
    let target = if threads <= 1 { 1 } else { threads * 4 };
    let (m, n) = (mp * mr, np * nr);
    let mut best = (mp, np, usize::MAX);
    for nt in 1..=np {
        let cols = np.div_ceil(nt) * nr;
        // Rows whose A and C blocks fit beside this task's B block.
        let fixed = kcu * cols * unit;
        let per_row = kcu * unit + cols * 4;
        let panels = TASK_BYTES.saturating_sub(fixed) / per_row / mr.max(1);
        if panels == 0 {
            continue;
        }
        let mt = mp
            .div_ceil(panels)
            .max(target.min(mp * np).div_ceil(nt))
            .clamp(1, mp.max(1));
        let cost = mt * n + nt * m;
        if cost < best.2 {
            best = (mt, nt, cost);
        }
    }
    (best.0, best.1)
}

/// Computes `C[..m, ..n] (op)= A @ B` with the epilogue. C must be validated for `m × n` with
/// leading dimension `ldc`, A (inside `k`) for `m × K`.
pub(crate) fn run<K: Kernel>(
    kern: &K,
    m: usize,
    b: PackedView<K::PB>,
    c: &mut [f32],
    ldc: usize,
    ep: &EpCtx,
) -> Result<()> {
    run_panels(kern, m, &b, c, ldc, ep)
}

/// [`run`] over any source of B panels (a packed B, or one packed on first use). A task whose
/// packed-A scratch the host will not allocate ends the product with that error (C is then
/// incomplete; the caller discards it).
pub(crate) fn run_panels<K: Kernel>(
    kern: &K,
    m: usize,
    b: &dyn Panels<K::PB>,
    c: &mut [f32],
    ldc: usize,
    ep: &EpCtx,
) -> Result<()> {
    let l = *b.layout();
    if m == 0 || l.n == 0 {
        return Ok(());
    }
    let mp = m.div_ceil(K::MR);
    let np = l.npanels;
    let width = if l.glu { 2 } else { 1 };
    let flops = 2.0 * m as f64 * (l.n * width) as f64 * l.k.max(1) as f64;
    let threads = if flops < PAR_MIN_FLOPS || SEQUENTIAL.with(|s| s.get()) {
        1
    } else {
        rayon::current_num_threads().max(1)
    };
    let (mt, nt) = if K::B_STATIONARY {
        let unit = std::mem::size_of::<K::PA>();
        plan_b_stationary((mp, np), (K::MR, l.kcu, unit), threads)
    } else {
        if K::L3_BOUND_B {
            let b_bytes = l.units * l.n * width * std::mem::size_of::<K::PB>();
            plan_streams(mp, np, threads, b_bytes)
        } else {
            plan(mp, np, threads)
        }
    };
    let cp = CPtr(c.as_mut_ptr());
    let failed = FirstError::default();
    let task = |i: usize| {
        if failed.failed() {
            return;
        }
        let (mi, ni) = (i / nt, i % nt);
        let (p0, p1) = (mi * mp / mt, (mi + 1) * mp / mt);
        let (q0, q1) = (ni * np / nt, (ni + 1) * np / nt);
        failed.record(run_task(
            kern,
            m,
            (p0, p1),
            (q0, q1),
            b,
            cp,
            ldc,
            ep,
            (mi, mt),
        ));
    };
    if threads == 1 || mt * nt == 1 {
        (0..mt * nt).for_each(task);
    } else if flops < EAGER_MAX_FLOPS && rayon::current_thread_index().is_none() {
        super::caller_first::for_each_eager(mt * nt, threads - 1, &task);
    } else {
        (0..mt * nt).into_par_iter().for_each(task);
    }
    failed.into_result()
}

/// The op named when the host will not allocate a task's packed A.
const PACKED_A: &str = "gemm (packed A)";

#[allow(clippy::too_many_arguments)]
fn run_task<K: Kernel>(
    kern: &K,
    m: usize,
    (p0, p1): (usize, usize),
    (q0, q1): (usize, usize),
    b: &dyn Panels<K::PB>,
    c: CPtr,
    ldc: usize,
    ep: &EpCtx,
    (task_row, task_rows): (usize, usize),
) -> Result<()> {
    let c = c.0;
    if p0 >= p1 || q0 >= q1 {
        return Ok(());
    }
    let l = b.layout();
    let mr = K::MR;
    with_scratch(Slot::A, |scratch| {
        kern.begin();
        let mut result = Ok(());
        for bi in 0..l.nblk {
            let (u0, u1) = l.block(bi);
            let kcu = u1 - u0;
            let panel = mr * kcu;
            let abuf = match scratch.slice_mut::<K::PA>(PACKED_A, panel * (p1 - p0)) {
                Ok(abuf) => abuf,
                Err(e) => {
                    result = Err(e);
                    break;
                }
            };
            for (ip, dst) in (p0..p1).zip(abuf.chunks_mut(panel.max(1))) {
                let row0 = ip * mr;
                kern.pack_a(row0, mr.min(m - row0), u0, u1, dst);
            }
            let abuf = &*abuf;
            if K::B_STATIONARY {
                for q in q0..q1 {
                    let (col0, nr) = l.panel_cols(q);
                    let bptr = b.panel(bi, q);
                    for (j, ip) in (p0..p1).enumerate() {
                        let row0 = ip * mr;
                        let t = Tile {
                            // SAFETY: row0 < m and col0 < n, inside the validated C.
                            c: unsafe { c.add(row0 * ldc + col0) },
                            ldc,
                            row0,
                            col0,
                            mr: mr.min(m - row0),
                            nr,
                            first: bi == 0,
                            last: bi + 1 == l.nblk,
                        };
                        // SAFETY: the A panel has `panel` elements, the B panel `32 * kcu`.
                        unsafe { kern.tile(kcu, abuf[j * panel..].as_ptr(), bptr, &t, ep) };
                    }
                }
                continue;
            }
            let panel_bytes = kcu * NR * std::mem::size_of::<K::PB>();
            let nbp = (K::B_BLOCK_BYTES / panel_bytes.max(1)).max(1);
            // B sub-block (kcu x 32*nbp) stays in L2; each A micro-panel stays in L1 while it
            // sweeps the sub-block's B micro-panels.
            // Panels packed on first use: M tasks sweep the panels from different starts, so
            // that the threads pack different panels at the same time (rayon hands each thread
            // a contiguous range of tasks: the starts spread over the task range). Sub-blocks
            // are runs of `nbp` panels in the task's (rotated, wrapping) order.
            let span = q1 - q0;
            let start = if b.lazy() {
                task_row * span / task_rows.max(1)
            } else {
                0
            };
            let mut s = 0;
            while s < span {
                let e = (s + nbp).min(span);
                for (j, ip) in (p0..p1).enumerate() {
                    let row0 = ip * mr;
                    let apanel = abuf[j * panel..].as_ptr();
                    for i in s..e {
                        let q = q0 + (start + i) % span;
                        let (col0, nr) = l.panel_cols(q);
                        let t = Tile {
                            // SAFETY: row0 < m and col0 < n, inside the validated C.
                            c: unsafe { c.add(row0 * ldc + col0) },
                            ldc,
                            row0,
                            col0,
                            mr: mr.min(m - row0),
                            nr,
                            first: bi == 0,
                            last: bi + 1 == l.nblk,
                        };
                        // SAFETY: the A panel has `panel` elements, the B panel `32 * kcu`;
                        // a Fill's source rows were checked against B's storage and its panel
                        // is this task's until the Fill is dropped (after the tile).
                        let access = if K::FILLS_B {
                            b.access(bi, q)
                        } else {
                            PanelAccess::Ready(b.panel(bi, q))
                        };
                        match access {
                            PanelAccess::Ready(bptr) => unsafe {
                                kern.tile(kcu, apanel, bptr, &t, ep)
                            },
                            PanelAccess::Fill(f) => unsafe {
                                kern.tile_filling_b(kcu, apanel, (f.src, f.ld), f.dst, &t, ep)
                            },
                        }
                    }
                }
                s = e;
            }
        }
        kern.end();
        result
    })
}

#[cfg(test)]
mod plan_tests {
    use super::*;

    #[test]
    fn small_b_keeps_the_plain_plan() {
        for (mp, np) in [(16, 40), (256, 10), (1, 1), (37, 320)] {
            assert_eq!(plan_streams(mp, np, 2, B_STREAM_BYTES), plan(mp, np, 2));
            assert_eq!(plan_streams(mp, np, 1, usize::MAX), plan(mp, np, 1));
        }
    }

    #[test]
    fn large_b_is_streamed_fewer_times() {
        // SD's 2×1280×16×16 bf16 convolution: 16 A panels, 40 B panels, 29 MB of B.
        assert_eq!(plan(16, 40, 2), (8, 1));
        assert_eq!(plan_streams(16, 40, 2, 29 << 20), (2, 2));
        for threads in [2, 3, 4, 8, 16] {
            for (mp, np) in [
                (1, 1),
                (1, 40),
                (4, 40),
                (16, 40),
                (64, 20),
                (300, 7),
                (5, 3),
            ] {
                let (mt, nt) = plan_streams(mp, np, threads, 29 << 20);
                assert!(
                    (1..=mp).contains(&mt) && (1..=np).contains(&nt),
                    "{mp} {np}"
                );
                if (mt, nt) != plan(mp, np, threads) {
                    assert!(mt * nt >= 2 * threads && (mt * nt).is_multiple_of(threads));
                    assert!(mt >= mp.div_ceil(MC_PANELS));
                }
            }
        }
    }
}
