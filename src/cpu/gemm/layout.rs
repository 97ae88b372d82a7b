//! The packed-B layout shared by every kernel path, and prepacked weights ([`PackedB`]).
//!
//! Invariants:
//! - B is cut into K blocks of `kcu` *units* (a unit is one k for the f32 layout and a pair of
//!   consecutive k for the bf16 layout; every block but the last is full) and into panels of
//!   [`NR`] = 32 columns. Block `bi`, panel `p` is the contiguous run of `(u1 - u0) * 32`
//!   elements at `u0 * npanels * 32 + p * (u1 - u0) * 32`, unit-major, lane-minor.
//! - f32 layout: one `f32` per (unit, lane). bf16 layout: one `u32` per (unit, lane) holding
//!   `b[2u, n]` in the low and `b[2u + 1, n]` in the high half: the VNNI pairing `vdpbf16ps`
//!   consumes. Padding (k past K, columns past N) is zero.
//! - GLU layout: panel `p` holds output columns `16p..16p + 16` of the first half of B in lanes
//!   0..16 and the same columns of the second half in lanes 16..32, and K is never split (one
//!   block), so a tile's accumulators hold both halves and the final values at once.
//! - AMX layout ([`PackKind::Amx`], built by [`super::amx_pack`]): the bf16 pair layout with
//!   the pair count padded to whole 16-pair AMX steps and K blocks of whole steps.
//! - The layout depends only on the element kind, never on the kernel path, so a [`PackedB`]
//!   built under one path works under every other.

use super::pack::{pack_b_bf16, pack_b_f32};
use super::peak::bf16_kind;
use super::{scratch::AlignedBuf, MatRef};
use crate::{Error, Result};
use half::{bf16, f16};

/// The op named when the host will not allocate a pack.
const PACK: &str = "prepack";

/// Columns per packed B panel (two zmm registers of f32).
pub(crate) const NR: usize = 32;
/// Maximum units per K block for the f32 layout: a 14×512 A micro-panel (28 KiB) stays in L1
/// while 64 KiB B micro-panels stream from L2; larger K blocks mean fewer passes over C (and
/// fewer A packings). 512 rather than 384 (chosen on Sapphire Rapids, 48 KiB L1): on Zen 4
/// (32 KiB L1), paired best-of runs put 512³ at 191–196 against 162–191 GFLOP/s, 1024³ and
/// 2048³ 1–4% faster, K = 1280 and 2560 products equal or faster.
pub(crate) const KCU_F32: usize = 512;
/// Maximum units (k pairs) per K block for the bf16-pair layout (same footprint as f32; 512
/// measured on Zen 4 as for f32: 1024³ 333–362 → 368–380 GFLOP/s, other shapes within noise).
pub(crate) const KCU_BF16: usize = 512;

/// Element kind of a packed buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PackKind {
    /// One f32 per unit (sources f32 and f16).
    F32,
    /// One u32 = two bf16 per unit.
    Bf16,
    /// bf16 pairs as [`PackKind::Bf16`], padded to whole AMX steps (see [`super::amx_pack`]).
    Amx,
}

/// Geometry of a packed B.
#[derive(Clone, Copy, Debug)]
pub struct BLayout {
    pub k: usize,
    /// Output columns (half of B's columns for GLU).
    pub n: usize,
    pub units: usize,
    pub kcu: usize,
    pub nblk: usize,
    pub npanels: usize,
    pub glu: bool,
    pub kind: PackKind,
}

impl BLayout {
    pub(crate) fn new(kind: PackKind, k: usize, n: usize, glu: bool) -> Self {
        let (per_unit, max) = match kind {
            PackKind::F32 => (1, KCU_F32),
            PackKind::Bf16 => (2, KCU_BF16),
            PackKind::Amx => return super::amx_pack::layout(k, n, glu),
        };
        Self::blocked(kind, per_unit, max, (k, n, glu))
    }

    /// The f32 layout (not GLU) with K blocks of at most `max_kcu` units.
    pub(crate) fn f32_blocked(k: usize, n: usize, max_kcu: usize) -> Self {
        Self::blocked(PackKind::F32, 1, max_kcu.max(1), (k, n, false))
    }

    fn blocked(
        kind: PackKind,
        per_unit: usize,
        max: usize,
        (k, n, glu): (usize, usize, bool),
    ) -> Self {
        let units = k.div_ceil(per_unit);
        let kcu = if glu || units == 0 {
            units
        } else {
            units.div_ceil(units.div_ceil(max))
        };
        let nblk = if units == 0 { 1 } else { units.div_ceil(kcu) };
        let npanels = if glu { n.div_ceil(16) } else { n.div_ceil(NR) };
        BLayout {
            k,
            n,
            units,
            kcu,
            nblk,
            npanels,
            glu,
            kind,
        }
    }

    /// Unit range of K block `bi`.
    #[inline]
    pub(crate) fn block(&self, bi: usize) -> (usize, usize) {
        let u0 = bi * self.kcu;
        (u0, (u0 + self.kcu).min(self.units))
    }

    /// Element offset of (block `bi`, panel `p`).
    #[inline]
    pub(crate) fn panel_offset(&self, bi: usize, p: usize) -> usize {
        let (u0, u1) = self.block(bi);
        u0 * self.npanels * NR + p * (u1 - u0) * NR
    }

    /// Total packed elements.
    pub(crate) fn len(&self) -> usize {
        self.units * self.npanels * NR
    }

    /// First output column of panel `p` and how many output columns it holds.
    #[inline]
    pub(crate) fn panel_cols(&self, p: usize) -> (usize, usize) {
        let w = if self.glu { 16 } else { NR };
        let c0 = p * w;
        (c0, w.min(self.n - c0))
    }

    /// Column of the source B feeding `lane` of panel `p`, if any.
    #[inline]
    pub(crate) fn src_col(&self, p: usize, lane: usize) -> Option<usize> {
        if self.glu {
            let c = p * 16 + lane % 16;
            (c < self.n).then_some(if lane < 16 { c } else { self.n + c })
        } else {
            let c = p * NR + lane;
            (c < self.n).then_some(c)
        }
    }
}

/// Packed data plus its geometry, borrowed by the driver.
#[derive(Clone, Copy)]
pub(crate) struct PackedView<'a, P> {
    pub data: &'a [P],
    pub layout: BLayout,
}

pub(crate) mod sealed {
    use super::{AlignedBuf, BLayout, MatRef, PackKind};
    /// Crate-private half of [`super::PackElem`].
    pub trait Sealed: Sized {
        /// The packed layout new packs of this type use (bf16: see [`super::bf16_kind`]).
        fn kind() -> PackKind;
        /// Packs `b` into `buf` (grown as needed: an error when the host will not allocate).
        fn pack_into(b: &MatRef<Self>, layout: &BLayout, buf: &mut AlignedBuf)
            -> crate::Result<()>;
    }
}

/// Element types that can be prepacked: `f32`, `f16` (stored widened to f32) and `bf16`
/// (stored as VNNI bf16 pairs for the `vdpbf16ps` kernel, or widened to f32 where the FMA kernel
/// is faster: see [`super::gemm_bf16`]).
pub trait PackElem: sealed::Sealed + Copy + Send + Sync + 'static {}
impl PackElem for f32 {}
impl PackElem for f16 {}
impl PackElem for bf16 {}

impl sealed::Sealed for f32 {
    fn kind() -> PackKind {
        PackKind::F32
    }
    fn pack_into(b: &MatRef<f32>, layout: &BLayout, buf: &mut AlignedBuf) -> Result<()> {
        pack_b_f32(b, layout, buf.slice_mut::<f32>(PACK, layout.len())?);
        Ok(())
    }
}
impl sealed::Sealed for f16 {
    fn kind() -> PackKind {
        PackKind::F32
    }
    fn pack_into(b: &MatRef<f16>, layout: &BLayout, buf: &mut AlignedBuf) -> Result<()> {
        pack_b_f32(b, layout, buf.slice_mut::<f32>(PACK, layout.len())?);
        Ok(())
    }
}
impl sealed::Sealed for bf16 {
    fn kind() -> PackKind {
        bf16_kind()
    }
    fn pack_into(b: &MatRef<bf16>, layout: &BLayout, buf: &mut AlignedBuf) -> Result<()> {
        match layout.kind {
            PackKind::F32 => pack_b_f32(b, layout, buf.slice_mut::<f32>(PACK, layout.len())?),
            PackKind::Bf16 => pack_b_bf16(b, layout, buf.slice_mut::<u32>(PACK, layout.len())?),
            PackKind::Amx => {
                super::amx_pack::pack_b_amx(b, layout, buf.slice_mut::<u32>(PACK, layout.len())?)
            }
        }
        Ok(())
    }
}

/// A B operand (`K × N`) packed once into the microkernel layout, IPEX-style, so a Linear layer
/// pays packing once and every later [`super::gemm_prepacked_f32`] (or bf16/f16) call only packs A.
pub struct PackedB<T: PackElem> {
    pub(crate) layout: BLayout,
    pub(crate) buf: AlignedBuf,
    _elem: std::marker::PhantomData<T>,
}

impl<T: PackElem> PackedB<T> {
    /// Packs `b` (`K × N`, any strides) for the plain GEMM.
    pub fn new(b: MatRef<T>) -> Result<Self> {
        b.validate("PackedB::new", "b")?;
        Self::build(&b, BLayout::new(T::kind(), b.rows, b.cols, false))
    }

    /// Packs `b` (`K × 2N`) for the GLU GEMM: the result is used with the same
    /// `gemm_prepacked_*` functions, which then compute `h * act(g)` (see [`super::Epilogue`]).
    pub fn new_geglu(b: MatRef<T>) -> Result<Self> {
        b.validate("PackedB::new_geglu", "b")?;
        if !b.cols.is_multiple_of(2) {
            return Err(Error::shape(
                "PackedB::new_geglu",
                "B with an even number of columns (2N)",
                &[b.rows, b.cols],
            ));
        }
        Self::build(&b, BLayout::new(T::kind(), b.rows, b.cols / 2, true))
    }

    fn build(b: &MatRef<T>, layout: BLayout) -> Result<Self> {
        // Every packer writes every element, so storage kept from a dropped buffer will do.
        let mut buf = AlignedBuf::recycled::<u32>(layout.len());
        T::pack_into(b, &layout, &mut buf)?;
        Ok(PackedB {
            layout,
            buf,
            _elem: std::marker::PhantomData,
        })
    }

    /// A pack whose `buf` a caller filled in `layout` itself (every one of its `layout.len()`
    /// elements written, padding lanes zero), as the packer would have.
    pub(crate) fn from_packed(layout: BLayout, buf: AlignedBuf) -> Self {
        PackedB {
            layout,
            buf,
            _elem: std::marker::PhantomData,
        }
    }

    /// K (rows of the original B).
    pub fn k(&self) -> usize {
        self.layout.k
    }

    /// Output columns N (for a GLU pack: half of the original B's columns).
    pub fn n(&self) -> usize {
        self.layout.n
    }

    /// True when packed in the AMX tile layout.
    pub(crate) fn is_amx(&self) -> bool {
        self.layout.kind == PackKind::Amx
    }

    /// True for the plain bf16 pair layout (the `vdpbf16ps` kernel's).
    pub(crate) fn is_pairs(&self) -> bool {
        self.layout.kind == PackKind::Bf16
    }

    /// True when built by [`PackedB::new_geglu`].
    pub fn is_geglu(&self) -> bool {
        self.layout.glu
    }
}

impl<T: PackElem> PackedB<T> {
    /// The packed B given back, transposed: row-major `cols × K` f32 values (`cols` = N, or 2N
    /// for a GLU pack: the `[h | g]` columns in source order), exactly the values packed (16-bit
    /// sources were widened exactly, so they round back unchanged). The AMX layout is the pair
    /// layout with more (zero) pairs past K, which are skipped. `None` only when the host will
    /// not allocate the result.
    pub(crate) fn unpack_transposed(&self) -> Option<Vec<f32>> {
        let l = self.layout;
        let cols = if l.glu { 2 * l.n } else { l.n };
        // Memory the host will not give is `None` too (the caller's "cannot give it back").
        let mut out = crate::cpu::alloc::zeroed::<f32>("unpack", cols * l.k).ok()?;
        let mut put = |k: usize, col: usize, v: f32| {
            if k < l.k {
                out[col * l.k + k] = v;
            }
        };
        // Calls `f(unit, source column, packed index)` for every lane that holds a value.
        let each = |f: &mut dyn FnMut(usize, usize, usize)| {
            for bi in 0..l.nblk {
                let (u0, u1) = l.block(bi);
                for p in 0..l.npanels {
                    let at = l.panel_offset(bi, p);
                    for u in u0..u1 {
                        for lane in 0..NR {
                            if let Some(col) = l.src_col(p, lane) {
                                f(u, col, at + (u - u0) * NR + lane);
                            }
                        }
                    }
                }
            }
        };
        match l.kind {
            PackKind::F32 => {
                let data = self.buf.slice::<f32>(l.len());
                each(&mut |u, col, i| put(u, col, data[i]));
            }
            PackKind::Bf16 | PackKind::Amx => {
                let data = self.buf.slice::<u32>(l.len());
                let widen = |bits: u32| f32::from_bits(bits << 16);
                each(&mut |u, col, i| {
                    put(2 * u, col, widen(data[i] & 0xffff));
                    put(2 * u + 1, col, widen(data[i] >> 16));
                });
            }
        }
        Some(out)
    }
}

impl PackedB<bf16> {
    /// Packs `b` (`K × N`, or `K × 2N` with `glu`) in the layout `kind` instead of this
    /// process's ([`bf16_kind`]): the autotuner's bf16 product candidates (each layout selects
    /// its kernel: widened f32 FMA, `vdpbf16ps` pairs, AMX tiles).
    pub(crate) fn new_in(b: MatRef<bf16>, kind: PackKind, glu: bool) -> Result<Self> {
        b.validate("PackedB::new_in", "b")?;
        if glu && !b.cols.is_multiple_of(2) {
            return Err(Error::shape(
                "PackedB::new_in",
                "B with an even number of columns (2N)",
                &[b.rows, b.cols],
            ));
        }
        let n = if glu { b.cols / 2 } else { b.cols };
        Self::build(&b, BLayout::new(kind, b.rows, n, glu))
    }

    /// The layout these panels are in.
    pub(crate) fn kind(&self) -> PackKind {
        self.layout.kind
    }
}

impl PackedB<f32> {
    /// Packs `b` (`K × N`, any strides) in the f32 layout with K blocks of at most `max_kcu`
    /// units (for kernels that keep a B micro-panel in L1, see `gemm_gather`).
    pub(crate) fn new_f32_blocked(b: MatRef<f32>, max_kcu: usize) -> Result<Self> {
        b.validate("PackedB::new", "b")?;
        Self::build(&b, BLayout::f32_blocked(b.rows, b.cols, max_kcu))
    }
}

impl<T: PackElem> std::fmt::Debug for PackedB<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PackedB")
            .field("k", &self.layout.k)
            .field("n", &self.layout.n)
            .field("geglu", &self.layout.glu)
            .finish()
    }
}

#[cfg(test)]
mod unpack_tests {
    use super::*;

    /// Every layout gives B back exactly: f32, bf16-pair and AMX kinds, plain and GLU, K over
    /// several blocks and odd (a half-filled last pair), N not a multiple of a panel.
    #[test]
    fn unpack_transposed_gives_back_every_packed_value() {
        let (k, n) = (2 * KCU_F32 + 37, 90);
        let vals: Vec<f32> = (0..k * n)
            .map(|i| bf16::from_f32(((i * 7919) % 1013) as f32 / 97.0 - 5.0).to_f32())
            .collect();
        let b32 = MatRef::row_major(&vals, k, n);
        let b16: Vec<bf16> = vals.iter().map(|&v| bf16::from_f32(v)).collect();
        let b16 = MatRef::row_major(&b16, k, n);
        let want = |cols: usize| -> Vec<f32> {
            let mut t = vec![0f32; cols * k];
            for r in 0..k {
                for c in 0..cols {
                    t[c * k + r] = vals[r * n + c];
                }
            }
            t
        };
        for glu in [false, true] {
            let nout = if glu { n / 2 } else { n };
            let f = PackedB::<f32>::build(&b32, BLayout::new(PackKind::F32, k, nout, glu)).unwrap();
            assert_eq!(f.unpack_transposed(), Some(want(n)), "f32 glu={glu}");
            let p =
                PackedB::<bf16>::build(&b16, BLayout::new(PackKind::Bf16, k, nout, glu)).unwrap();
            assert_eq!(p.unpack_transposed(), Some(want(n)), "bf16 pairs glu={glu}");
            let a =
                PackedB::<bf16>::build(&b16, super::super::amx_pack::layout(k, nout, glu)).unwrap();
            assert!(a.is_amx());
            assert_eq!(a.unpack_transposed(), Some(want(n)), "AMX glu={glu}");
        }
    }
}
