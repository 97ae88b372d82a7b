//! NCHW ↔ NHWC conversions for the convolution: batched 2-D transposes (`[C, H·W]` ↔
//! `[H·W, C]` per image) in 32×32 tiles, threaded over tiles of destination rows.
//!
//! Invariants: the source is a dense row-major `[B, R, S]` block (any offset) and the
//! destination a new `[B, S, R]` vector; every destination element is written exactly once, so
//! destinations come from the recycling pool uninitialised.

use super::super::alloc;
use super::super::pool::{self, Recycle};
use super::super::storage::CpuStorage;
use super::super::transpose::transpose_block;
use crate::layout::Layout;
use crate::Result;
use rayon::prelude::*;

/// Tile edge (elements).
const T: usize = 32;
/// Transposes below this many elements stay on the calling thread.
const PAR_MIN: usize = 1 << 15;

/// `dst[b, j, i] = src[off + (b·rows + i)·cols + j]` for a `[batch, rows, cols]` source.
pub(super) fn transpose<E: Recycle + Send + Sync>(
    src: &[E],
    off: usize,
    (batch, rows, cols): (usize, usize, usize),
) -> Result<Vec<E>> {
    let total = batch * rows * cols;
    let mut dst = pool::take::<E>(OP, total)?;
    if dst.is_empty() {
        return Ok(dst);
    }
    // One chunk = destination rows j0..j0 + T of one image (T · rows elements).
    let chunk = T * rows;
    let per_image = cols.div_ceil(T);
    let work = |ci: usize, d: &mut [E]| {
        let (b, jt) = (ci / per_image, ci % per_image);
        let j0 = jt * T;
        let nj = T.min(cols - j0);
        let s = &src[off + b * rows * cols..][..rows * cols];
        // Destination rows j0..j0 + nj are source columns j0..: one block transpose (it always
        // fits: the chunk holds nj whole destination rows of this image).
        if !transpose_block((s, j0, cols), (d, 0, rows), (rows, nj)) {
            for (j, row) in d.chunks_mut(rows).enumerate() {
                for (i, x) in row.iter_mut().enumerate() {
                    *x = s[i * cols + j0 + j];
                }
            }
        }
    };
    // Chunks never straddle images: split each image's destination separately.
    let images = dst.chunks_mut(rows * cols);
    let pieces = images.flat_map(|img| img.chunks_mut(chunk));
    if total < PAR_MIN {
        pieces.enumerate().for_each(|(ci, d)| work(ci, d));
    } else {
        let count = batch * per_image;
        let v: Vec<(usize, &mut [E])> = alloc::collected(OP, count, pieces.enumerate())?;
        v.into_par_iter().for_each(|(ci, d)| work(ci, d));
    }
    Ok(dst)
}

/// The op named when the host will not allocate a transposed copy.
const OP: &str = "conv2d (layout conversion)";

macro_rules! per_dtype {
    ($x:expr, $v:ident => $body:expr) => {
        match $x {
            CpuStorage::F32($v) => Some(CpuStorage::F32($body?)),
            CpuStorage::F16($v) => Some(CpuStorage::F16($body?)),
            CpuStorage::BF16($v) => Some(CpuStorage::BF16($body?)),
            _ => None,
        }
    };
}

/// The NHWC data of a dense row-major NCHW view (`None` for other views or dtypes; an error
/// when the host will not allocate the copy).
pub(crate) fn nchw_to_nhwc(x: &CpuStorage, l: &Layout) -> Result<Option<CpuStorage>> {
    let &[n, c, h, w] = l.shape() else {
        return Ok(None);
    };
    if !l.is_contiguous() || l.max_offset() > x.len() {
        return Ok(None);
    }
    Ok(per_dtype!(x, v => transpose(v, l.offset(), (n, c, h * w))))
}

/// The NCHW data of a dense `[N, H, W, C]` storage (`None` for other dtypes or sizes; an
/// error when the host will not allocate the copy).
pub(crate) fn nhwc_to_nchw(x: &CpuStorage, [n, h, w, c]: [usize; 4]) -> Result<Option<CpuStorage>> {
    if x.len() != n * h * w * c {
        return Ok(None);
    }
    Ok(per_dtype!(x, v => transpose(v, 0, (n, h * w, c))))
}
