//! The Winograd filter transform written straight into the GEMM engine's packed B layouts.
//!
//! Each point's `C × O` matrix `U[point]` is what [`PackedB::new`] would pack from a row-major
//! `[C][O]` source: in the f32 layout row `ci` of panel `p` holds columns `32p..32p + 32`, zeros
//! past `O`; in the bf16 pair layout unit `ci / 2` holds rows `ci & !1` (low half) and `ci | 1`
//! (high half, zero past C) as bf16 rounded to nearest even (the rounding of the SIMD
//! conversion the intermediate path takes, bit for bit). Writing the transform's values there directly skips a `points·C·O`
//! intermediate that was written, read back and copied by the packer (with its page faults):
//! a per-call 1280-channel F(2,3) transform spent about 60% of its time on that round trip.
//!
//! Invariants: the values are the transform's f32 roundings, the same as the packer would have
//! copied, and every element of every point's buffer is written (padding lanes zero), so the
//! packs equal `PackedB::new` over the intermediate bit for bit (tested in
//! `winograd_tests`); tasks own disjoint input-channel rows of every buffer.

use super::winograd::CI_BLOCK;
use super::winograd_math::{transform_filters, FilterSink, Tile, FILTER_LANES};
use crate::cpu::gemm::{bf16_kind, AlignedBuf, BLayout, PackKind, PackedB, ToF32, NR};
use crate::cpu::simd::SimdLevel;
use half::bf16;
use rayon::prelude::*;

/// A point's packed buffer, shared by the transform's tasks, which write disjoint elements.
#[derive(Clone, Copy)]
struct Dst<T>(*mut T);
// SAFETY: the tasks holding copies write disjoint elements (their own input-channel rows) of a
// buffer whose heap storage outlives the parallel loop (moving its `AlignedBuf` afterwards does
// not move that storage).
unsafe impl<T> Send for Dst<T> {}
// SAFETY: as above.
unsafe impl<T> Sync for Dst<T> {}

/// Index of unit `u`, column `col` in the packed layout `l` (f32: a unit is a row of B; bf16
/// pairs: two rows).
fn packed_index(l: &BLayout, u: usize, col: usize) -> usize {
    let bi = u / l.kcu;
    let (u0, _) = l.block(bi);
    l.panel_offset(bi, col / NR) + (u - u0) * NR + col % NR
}

/// One fresh-or-recycled buffer per point, grown to `len` elements of `T`, and their pointers
/// (an error when the host will not allocate them).
fn point_buffers<T: bytemuck::Pod>(
    points: usize,
    len: usize,
) -> crate::Result<(Vec<AlignedBuf>, Vec<Dst<T>>)> {
    let mut bufs: Vec<AlignedBuf> = (0..points)
        .map(|_| AlignedBuf::recycled::<T>(len))
        .collect();
    let dsts = bufs
        .iter_mut()
        .map(|b| Ok(Dst(b.slice_mut::<T>("conv2d prepack", len)?.as_mut_ptr())))
        .collect::<crate::Result<_>>()?;
    Ok((bufs, dsts))
}

/// The f32 layout's sink: row `ci`, 16 columns from `o0`, of every point's buffer.
struct F32Sink<'a> {
    layout: &'a BLayout,
    dsts: &'a [Dst<f32>],
    o: usize,
    /// Where the current row's columns start (the same in every point's buffer).
    at: usize,
    lanes: usize,
}

impl FilterSink for F32Sink<'_> {
    #[inline(always)]
    fn start(&mut self, ci: usize, o0: usize) {
        self.at = packed_index(self.layout, ci, o0);
        self.lanes = (self.o - o0).min(FILTER_LANES);
    }
    #[inline(always)]
    fn put(&mut self, point: usize, v: &[f64; FILTER_LANES]) {
        // SAFETY: `o0` is a multiple of 16, so its `lanes <= 16` columns sit in one panel row
        // at `at..at + lanes`, inside the buffer and in this task's row `ci` (the transform
        // only hands a task its own input channels).
        let dst =
            unsafe { std::slice::from_raw_parts_mut(self.dsts[point].0.add(self.at), self.lanes) };
        if let Ok(full) = <&mut [f32; FILTER_LANES]>::try_from(&mut *dst) {
            // Whole blocks as fixed-size arrays: two conversions and one store, no loop.
            *full = std::array::from_fn(|l| v[l] as f32);
        } else {
            for (d, &x) in dst.iter_mut().zip(v) {
                *d = x as f32;
            }
        }
    }
}

/// The pair layout's sink: the low (even `ci`) or high (odd `ci`) halves of unit `ci / 2`, 16
/// columns from `o0`, of every point's buffer.
struct PairSink<'a> {
    layout: &'a BLayout,
    dsts: &'a [Dst<u32>],
    o: usize,
    at: usize,
    lanes: usize,
    high: bool,
}

impl FilterSink for PairSink<'_> {
    #[inline(always)]
    fn start(&mut self, ci: usize, o0: usize) {
        self.at = packed_index(self.layout, ci / 2, o0);
        self.lanes = (self.o - o0).min(FILTER_LANES);
        self.high = ci % 2 == 1;
    }
    #[inline(always)]
    fn put(&mut self, point: usize, v: &[f64; FILTER_LANES]) {
        // SAFETY: as in `F32Sink::put`, for unit `ci / 2` of this task's units.
        let dst =
            unsafe { std::slice::from_raw_parts_mut(self.dsts[point].0.add(self.at), self.lanes) };
        // Rows arrive in order (input channels ascending within each block of output
        // channels): the even row sets the word, the odd row adds its high half; a last even
        // row past C leaves the high half zero.
        let bits: [u32; FILTER_LANES] = std::array::from_fn(|l| round_bf16(v[l] as f32));
        match (<&mut [u32; FILTER_LANES]>::try_from(&mut *dst), self.high) {
            (Ok(full), false) => *full = bits,
            (Ok(full), true) => *full = std::array::from_fn(|l| full[l] | bits[l] << 16),
            (Err(_), high) => {
                for (d, b) in dst.iter_mut().zip(bits) {
                    *d = if high { *d | b << 16 } else { b };
                }
            }
        }
    }
}

/// The sinks that write one packed layout: its word, rows per unit, and construction.
trait PackedSink<'a>: FilterSink + Sized {
    /// The packed layout's element.
    type Word: bytemuck::Pod;
    /// Rows of B per unit of the layout.
    const ROWS_PER_UNIT: usize;
    /// A sink writing the `o` output channels of `layout` into the buffers `dsts`.
    fn new(layout: &'a BLayout, dsts: &'a [Dst<Self::Word>], o: usize) -> Self;
}

impl<'a> PackedSink<'a> for F32Sink<'a> {
    type Word = f32;
    const ROWS_PER_UNIT: usize = 1;
    fn new(layout: &'a BLayout, dsts: &'a [Dst<f32>], o: usize) -> Self {
        F32Sink {
            layout,
            dsts,
            o,
            at: 0,
            lanes: 0,
        }
    }
}

impl<'a> PackedSink<'a> for PairSink<'a> {
    type Word = u32;
    const ROWS_PER_UNIT: usize = 2;
    fn new(layout: &'a BLayout, dsts: &'a [Dst<u32>], o: usize) -> Self {
        PairSink {
            layout,
            dsts,
            o,
            at: 0,
            lanes: 0,
            high: false,
        }
    }
}

/// Transforms `w` into one pack per point in `layout`, through sinks of type `K`: tasks over
/// blocks of CI_BLOCK input channels (an even count, so a task owns whole units), each zeroing
/// its units' padding columns in the last panel before the transform writes the rest.
fn transform_packed<'a, S: ToF32, K: PackedSink<'a>>(
    w: &[S],
    (o, c): (usize, usize),
    tile: Tile,
    level: SimdLevel,
    layout: &'a BLayout,
    dsts: &'a [Dst<K::Word>],
) {
    let pad = (o % NR != 0).then(|| (o / NR * NR, o % NR));
    (0..c.div_ceil(CI_BLOCK)).into_par_iter().for_each(|cb| {
        let cis = cb * CI_BLOCK..((cb + 1) * CI_BLOCK).min(c);
        if let Some((last, used)) = pad {
            let units = cis.start / K::ROWS_PER_UNIT..cis.end.div_ceil(K::ROWS_PER_UNIT);
            for u in units {
                let at = packed_index(layout, u, last);
                for d in dsts {
                    // SAFETY: words `used..NR` of unit `u` in the last panel lie inside the
                    // buffer (`layout.len()` words) and belong to this task's units.
                    unsafe { std::slice::from_raw_parts_mut(d.0.add(at + used), NR - used) }
                        .fill(<K::Word as bytemuck::Zeroable>::zeroed());
                }
            }
        }
        let mut sink = K::new(layout, dsts, o);
        transform_filters(level, w, tile, (c, o), cis, &mut sink);
    });
}

/// Transforms an `[O, C, 3, 3]` bank `w` for `tile` into one packed f32 B per point.
pub(super) fn transform_packed_f32<S: ToF32>(
    w: &[S],
    (o, c): (usize, usize),
    tile: Tile,
    level: SimdLevel,
) -> crate::Result<Vec<PackedB<f32>>> {
    let layout = BLayout::new(PackKind::F32, c, o, false);
    let (bufs, dsts) = point_buffers::<f32>(tile.points(), layout.len())?;
    transform_packed::<S, F32Sink>(w, (o, c), tile, level, &layout, &dsts);
    Ok(bufs
        .into_iter()
        .map(|buf| PackedB::from_packed(layout, buf))
        .collect())
}

/// `x` rounded to bf16 bits, nearest even, NaN kept and made quiet: the rounding of the SIMD
/// kernels' `f32_to_bf16` (and `half`'s), bit for bit, written without branches so that the
/// transform's sink stays small enough to inline and vectorise (calling `bf16::from_f32` per
/// lane left the sink out of line: 42% of a per-call 640-channel bf16 convolution).
#[inline(always)]
fn round_bf16(x: f32) -> u32 {
    let b = x.to_bits();
    let rounded = b.wrapping_add(0x7fff + ((b >> 16) & 1)) >> 16;
    let quiet_nan = (b >> 16) | 0x40;
    if x.is_nan() {
        quiet_nan
    } else {
        rounded
    }
}

/// Transforms an `[O, C, 3, 3]` bank `w` for `tile` into one packed bf16 B per point, in the
/// pair layout; `None` where new bf16 packs take another layout (see `bf16_kind`).
pub(super) fn transform_packed_bf16<S: ToF32>(
    w: &[S],
    (o, c): (usize, usize),
    tile: Tile,
    level: SimdLevel,
) -> crate::Result<Option<Vec<PackedB<bf16>>>> {
    if bf16_kind() != PackKind::Bf16 {
        return Ok(None);
    }
    let layout = BLayout::new(PackKind::Bf16, c, o, false);
    let (bufs, dsts) = point_buffers::<u32>(tile.points(), layout.len())?;
    transform_packed::<S, PairSink>(w, (o, c), tile, level, &layout, &dsts);
    Ok(Some(
        bufs.into_iter()
            .map(|buf| PackedB::from_packed(layout, buf))
            .collect(),
    ))
}
