//! Strided-layout helpers: bounds validation, gathers into contiguous buffers, and joint row
//! iteration over two layouts of the same shape.
//!
//! Invariants: [`check_layout`] must succeed before any other helper is used with a
//! layout/storage pair; after it, `layout.numel()` does not overflow and every offset the layout
//! reaches is `< storage.len()`, so the indexing below cannot go out of bounds (it still uses
//! checked slice access, and [`transpose_block`] checks its whole block against both slices
//! before its unchecked loads and stores).

use super::parallel;
use super::pool::{self, Recycle};
use super::transpose::transpose_block;
use crate::layout::Layout;
use crate::{Error, Result};
use bytemuck::Zeroable;

/// Checks that `layout` is well formed and stays inside a storage of `len` elements; returns the
/// number of elements.
pub(crate) fn check_layout(op: &'static str, layout: &Layout, len: usize) -> Result<usize> {
    let (shape, strides) = (layout.shape(), layout.strides());
    if shape.len() != strides.len() {
        return Err(Error::invalid(
            op,
            format!(
                "layout has {} dims but {} strides",
                shape.len(),
                strides.len()
            ),
        ));
    }
    let overflow = || {
        Error::invalid(
            op,
            format!("layout {shape:?} / {strides:?} overflows usize"),
        )
    };
    let numel = shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(overflow)?;
    if numel == 0 {
        return Ok(0);
    }
    let last = shape
        .iter()
        .zip(strides)
        .try_fold(layout.offset(), |acc, (&d, &s)| {
            acc.checked_add((d - 1).checked_mul(s)?)
        })
        .ok_or_else(overflow)?;
    if last >= len {
        return Err(Error::invalid(
            op,
            format!(
                "layout (shape {shape:?}, strides {strides:?}, offset {}) reaches element {last} \
                 but the storage holds {len}",
                layout.offset()
            ),
        ));
    }
    Ok(numel)
}

/// Checks a dim index against a rank.
pub(crate) fn check_dim(op: &'static str, dim: usize, rank: usize) -> Result<()> {
    if dim >= rank {
        return Err(Error::DimOutOfRange {
            op,
            dim: dim as isize,
            rank,
        });
    }
    Ok(())
}

/// A layout split into outer dims (iterated) and one inner run of `len` elements `stride` apart.
pub(crate) struct Rows {
    outer_shape: Vec<usize>,
    outer_strides: Vec<usize>,
    offset: usize,
    /// Length of each row.
    pub len: usize,
    /// Stride inside a row.
    pub stride: usize,
}

impl Rows {
    /// Rows of a (checked, non-empty) layout after coalescing.
    pub fn new(layout: &Layout) -> Rows {
        let l = layout.coalesced();
        let rank = l.rank();
        let (len, stride) = match (l.shape().last(), l.strides().last()) {
            (Some(&d), Some(&s)) => (d, s),
            _ => (1, 1),
        };
        let cut = rank.saturating_sub(1);
        Rows {
            outer_shape: l.shape()[..cut].to_vec(),
            outer_strides: l.strides()[..cut].to_vec(),
            offset: l.offset(),
            len,
            stride,
        }
    }

    /// A cursor at row `row` whose [`RowCursor::advance`] steps to the next row with additions
    /// only (the divisions of locating a row are paid once per cursor, not once per row: a
    /// permute with short rows spent most of its copy time dividing).
    pub fn cursor(&self, mut row: usize) -> RowCursor<'_> {
        let mut index = vec![0; self.outer_shape.len()];
        let mut base = self.offset;
        for ((&d, &s), i) in self
            .outer_shape
            .iter()
            .zip(&self.outer_strides)
            .zip(index.iter_mut())
            .rev()
        {
            *i = row % d;
            base += *i * s;
            row /= d;
        }
        RowCursor {
            rows: self,
            index,
            base,
        }
    }
}

/// A position among the rows of a [`Rows`]: the outer multi-index and its storage offset.
pub(crate) struct RowCursor<'a> {
    rows: &'a Rows,
    index: Vec<usize>,
    /// Storage offset of the current row's first element.
    pub base: usize,
}

impl RowCursor<'_> {
    /// Moves to the next row (odometer order; past the last row it wraps to the first).
    pub fn advance(&mut self) {
        let rows = self.rows;
        for ((i, &d), &s) in self
            .index
            .iter_mut()
            .zip(&rows.outer_shape)
            .zip(&rows.outer_strides)
            .rev()
        {
            *i += 1;
            self.base += s;
            if *i < d {
                return;
            }
            *i = 0;
            self.base -= d * s;
        }
    }
}

/// Output rows per task step of the blocked transpose ([`transpose_block`] moves 16×16 tiles
/// through registers).
const TILE: usize = 32;

/// Gathers a layout whose last two (coalesced) dims are a transposed matrix — inner stride > 1,
/// the dim before it stride 1 — tile by tile, so both the reads and the writes stay local.
/// Returns false (doing nothing) for any other layout.
fn gather_transposed<T: Copy + Send + Sync>(
    op: &'static str,
    src: &[T],
    layout: &Layout,
    dst: &mut [T],
) -> Result<bool> {
    let l = layout.coalesced();
    let r = l.rank();
    if r < 2 || l.strides()[r - 2] != 1 || l.strides()[r - 1] <= 1 {
        return Ok(false);
    }
    let (rows, cols, col_stride) = (l.shape()[r - 2], l.shape()[r - 1], l.strides()[r - 1]);
    let outer = Layout::from_parts(
        l.shape()[..r - 2].to_vec(),
        l.strides()[..r - 2].to_vec(),
        l.offset(),
    );
    let bases = super::alloc::collected(op, outer.numel(), outer.offsets())?;
    let plane = rows * cols;
    // Tasks own whole bands of output rows; a band never crosses a matrix boundary below.
    let band = TILE * cols;
    parallel::for_each_chunk(dst, band, band, |start, chunk| {
        let total = chunk.len() / cols;
        let mut done = 0;
        while done < total {
            let pos = start + done * cols;
            let (m, row0) = (pos / plane, (pos % plane) / cols);
            let n = (rows - row0).min(total - done).min(TILE);
            let Some(&base) = bases.get(m) else { return };
            let out = &mut chunk[done * cols..(done + n) * cols];
            // Output rows row0..row0 + n are columns row0.. of the source matrix whose row c
            // starts at base + c * col_stride.
            if !transpose_block((src, base + row0, col_stride), (out, 0, cols), (cols, n)) {
                return;
            }
            done += n;
        }
    });
    Ok(true)
}

fn gather_into<T: Copy + Send + Sync>(
    op: &'static str,
    src: &[T],
    layout: &Layout,
    dst: &mut [T],
) -> Result<()> {
    if layout.numel() >= TILE * TILE && gather_transposed(op, src, layout, dst)? {
        return Ok(());
    }
    let rows = Rows::new(layout);
    let len = rows.len;
    if len == 0 {
        return Ok(());
    }
    parallel::for_each_chunk(dst, len, len, |start, chunk| {
        let mut cursor = rows.cursor(start / len);
        for out in chunk.chunks_mut(len) {
            let base = cursor.base;
            cursor.advance();
            if rows.stride == 1 {
                if let Some(s) = src.get(base..base + out.len()) {
                    out.copy_from_slice(s);
                }
            } else {
                for (j, o) in out.iter_mut().enumerate() {
                    if let Some(&v) = src.get(base + j * rows.stride) {
                        *o = v;
                    }
                }
            }
        }
    });
    Ok(())
}

/// Contiguous copy of a (checked) layout's elements for `op` (an error when the host will
/// not allocate it).
pub(crate) fn gather<T: Copy + Send + Sync + Zeroable>(
    op: &'static str,
    src: &[T],
    layout: &Layout,
) -> Result<Vec<T>> {
    let n = layout.numel();
    if n == 0 {
        return Ok(Vec::new());
    }
    if layout.is_contiguous() {
        if let Some(s) = src.get(layout.offset()..layout.offset() + n) {
            return super::alloc::copied(op, s);
        }
    }
    let mut out = super::alloc::zeroed(op, n)?;
    gather_into(op, src, layout, &mut out)?;
    Ok(out)
}

/// [`gather`] into a recycled buffer when one is free ([`pool::take`]: every element is
/// written, so its old contents never show). A fresh multi-megabyte buffer costs a page fault
/// per 4 KiB on first write: `x.t().contiguous()` of 64 MB spent as long faulting as
/// transposing.
pub(crate) fn gather_pooled<T: Recycle + Send + Sync>(
    op: &'static str,
    src: &[T],
    layout: &Layout,
) -> Result<Vec<T>> {
    let n = layout.numel();
    if n == 0 {
        return Ok(Vec::new());
    }
    if layout.is_contiguous() {
        if let Some(s) = src.get(layout.offset()..layout.offset() + n) {
            let mut out = pool::take::<T>(op, n)?;
            out.copy_from_slice(s);
            return Ok(out);
        }
    }
    let mut out = pool::take::<T>(op, n)?;
    gather_into(op, src, layout, &mut out)?;
    Ok(out)
}

/// The contiguous slice of a (checked) layout if it is contiguous, else a gathered copy for
/// `op` (an error when the host will not allocate it).
pub(crate) fn contiguous_cow<'a, T: Copy + Send + Sync + Zeroable>(
    op: &'static str,
    src: &'a [T],
    layout: &Layout,
) -> Result<std::borrow::Cow<'a, [T]>>
where
    [T]: ToOwned<Owned = Vec<T>>,
{
    let n = layout.numel();
    if layout.is_contiguous() {
        if let Some(s) = src.get(layout.offset()..layout.offset() + n) {
            return Ok(std::borrow::Cow::Borrowed(s));
        }
    }
    Ok(std::borrow::Cow::Owned(gather(op, src, layout)?))
}

/// Two layouts of one shape, jointly coalesced into outer dims and an inner run.
pub(crate) struct JointRows {
    outer: Vec<(usize, usize, usize)>,
    offsets: (usize, usize),
    /// Inner run length.
    pub len: usize,
    /// Inner strides of the two operands.
    pub strides: (usize, usize),
}

impl JointRows {
    /// Joint rows of two checked layouts with equal (non-empty) shapes.
    pub fn new(a: &Layout, b: &Layout) -> JointRows {
        let mut dims: Vec<(usize, usize, usize)> = Vec::with_capacity(a.rank());
        for ((&d, &sa), &sb) in a.shape().iter().zip(a.strides()).zip(b.strides()) {
            if d == 1 {
                continue;
            }
            if let Some(last) = dims.last_mut() {
                if last.1 == sa * d && last.2 == sb * d {
                    *last = (last.0 * d, sa, sb);
                    continue;
                }
            }
            dims.push((d, sa, sb));
        }
        let (len, sa, sb) = dims.pop().unwrap_or((1, 1, 1));
        JointRows {
            outer: dims,
            offsets: (a.offset(), b.offset()),
            len,
            strides: (sa, sb),
        }
    }

    /// Storage offsets of the first elements of row `row` in both operands.
    pub fn bases(&self, mut row: usize) -> (usize, usize) {
        let (mut oa, mut ob) = self.offsets;
        for &(d, sa, sb) in self.outer.iter().rev() {
            let i = row % d;
            oa += i * sa;
            ob += i * sb;
            row /= d;
        }
        (oa, ob)
    }

    /// Calls `f(out_start, a_base, b_base, len)` for every piece of a row that overlaps the
    /// output element range `start..start + count`.
    pub fn for_each_piece(
        &self,
        start: usize,
        count: usize,
        mut f: impl FnMut(usize, usize, usize, usize),
    ) {
        let len = self.len.max(1);
        let end = start + count;
        let mut pos = start;
        while pos < end {
            let (row, col) = (pos / len, pos % len);
            let take = (len - col).min(end - pos);
            let (ba, bb) = self.bases(row);
            f(
                pos - start,
                ba + col * self.strides.0,
                bb + col * self.strides.1,
                take,
            );
            pos += take;
        }
    }
}
