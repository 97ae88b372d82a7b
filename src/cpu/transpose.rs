//! The 2-D block transpose behind strided copies of transposed views (`x.t().contiguous()`,
//! `permute` then `contiguous`) and the convolutions' NCHW ↔ NHWC conversions:
//! `dst[d0 + j·ld_dst + i] = src[s0 + i·ld_src + j]` for a `rows × cols` source block.
//!
//! Why registers: an element-by-element tile copy writes each destination line in pieces,
//! column after column, and when the leading dimensions are powers of two all destination rows
//! of a tile share one L1 set, so the pieces evict each other: `x.t().contiguous()` of a
//! `[16384, 1024]` f32 view ran at 1.5 GB/s (4.8% of the copy bandwidth). With AVX-512 the
//! block goes 16×16 at a time through registers (`transpose16`), so every destination row
//! segment (one cache line of f32) is written whole, once. 4-byte edge tiles use masked loads
//! and stores (the convolutions' `[C, 9]` → `[9, C]` weight transposes are all edges: 6% → 4%
//! of a per-call 1280-channel convolution's samples). 16-bit elements are widened to 32 bits
//! for the shuffle and narrowed back (whole tiles only); other sizes, 16-bit edges and CPUs
//! without AVX-512 copy element by element.
//!
//! Invariants: the block is checked against both slices before any unchecked access (a block
//! that does not fit is not copied, and the call returns false); every destination element of
//! the block is written exactly once; values are moved bit for bit.

/// Transposes the `rows × cols` block of `src` at `s0` (row stride `ld_src`) into `dst` at `d0`
/// (row stride `ld_dst`): `dst[d0 + j·ld_dst + i] = src[s0 + i·ld_src + j]`. Returns false,
/// copying nothing, when the block does not lie inside both slices.
pub(crate) fn transpose_block<T: Copy>(
    (src, s0, ld_src): (&[T], usize, usize),
    (dst, d0, ld_dst): (&mut [T], usize, usize),
    (rows, cols): (usize, usize),
) -> bool {
    if rows == 0 || cols == 0 {
        return true;
    }
    let end = |base: usize, ld: usize, outer: usize, inner: usize| {
        ld.checked_mul(outer - 1)
            .and_then(|x| x.checked_add(base))
            .and_then(|x| x.checked_add(inner))
    };
    let fits_src = end(s0, ld_src, rows, cols).is_some_and(|e| e <= src.len()) && ld_src >= cols;
    let fits_dst = end(d0, ld_dst, cols, rows).is_some_and(|e| e <= dst.len()) && ld_dst >= rows;
    if !fits_src || !fits_dst {
        return false;
    }
    let (sp, dp) = (src[s0..].as_ptr(), dst[d0..].as_mut_ptr());
    // SAFETY: the whole block lies inside both slices (checked above); `src` and `dst` are
    // distinct borrows, so they do not overlap.
    unsafe { transpose_raw(sp, ld_src, dp, ld_dst, rows, cols) };
    true
}

/// [`transpose_block`] after its checks.
///
/// # Safety
/// `src` holds `rows` rows of `cols` values `ld_src` apart, `dst` `cols` rows of `rows` values
/// `ld_dst` apart; they do not overlap.
unsafe fn transpose_raw<T: Copy>(
    src: *const T,
    ld_src: usize,
    dst: *mut T,
    ld_dst: usize,
    rows: usize,
    cols: usize,
) {
    // The part the register tiles covered: all of it, only whole 16×16 tiles, or nothing.
    #[cfg(target_arch = "x86_64")]
    let (r_from, c_from) = simd::tiles(src, ld_src, dst, ld_dst, rows, cols);
    #[cfg(not(target_arch = "x86_64"))]
    let (r_from, c_from) = (0, 0);
    // Rows past the full tiles, over every column; then the full tiles' rows past their columns.
    for i in r_from..rows {
        for j in 0..cols {
            *dst.add(j * ld_dst + i) = *src.add(i * ld_src + j);
        }
    }
    for i in 0..r_from {
        for j in c_from..cols {
            *dst.add(j * ld_dst + i) = *src.add(i * ld_src + j);
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod simd {
    use crate::cpu::gemm::transpose16;
    use std::arch::x86_64::*;

    /// Transposes the `rows × cols` block in 16×16 register tiles on CPUs with AVX-512F: all
    /// of it for 4-byte elements (edge tiles with masked loads and stores), the whole tiles for
    /// 2-byte ones. Returns the `(rows, cols)` extent covered, from (0, 0): the caller copies
    /// the rest ((0, 0) when nothing was done).
    ///
    /// # Safety
    /// As [`super::transpose_raw`].
    pub(super) unsafe fn tiles<T: Copy>(
        src: *const T,
        ld_src: usize,
        dst: *mut T,
        ld_dst: usize,
        rows: usize,
        cols: usize,
    ) -> (usize, usize) {
        // The SIMD level in force (detected, or forced lower by `XPU_CPU_SIMD`): AVX-512
        // there means AVX-512F was detected.
        if crate::cpu::simd::Kernels::current().level() != crate::cpu::simd::SimdLevel::Avx512 {
            return (0, 0);
        }
        let (full_r, full_c) = (rows / 16 * 16, cols / 16 * 16);
        match std::mem::size_of::<T>() {
            4 => {
                tiles32(
                    src as *const f32,
                    ld_src,
                    dst as *mut f32,
                    ld_dst,
                    rows,
                    cols,
                );
                (rows, cols)
            }
            2 if full_r > 0 && full_c > 0 => {
                let (s, d) = (src as *const u16, dst as *mut u16);
                tiles16(s, ld_src, d, ld_dst, full_r, full_c);
                (full_r, full_c)
            }
            _ => (0, 0),
        }
    }

    /// Source rows per block: the 16×16 tiles of a block of this many source rows are done
    /// for every column before the next block, so the block's source lines are reused from L1
    /// and the pages in play stay few (a source row per page when rows are 4 KiB apart).
    const BLOCK_ROWS: usize = 64;

    /// Tile corners `(j0, i0)` in block order (see [`BLOCK_ROWS`]).
    fn tile_order(rows: usize, cols: usize) -> impl Iterator<Item = (usize, usize)> {
        (0..rows).step_by(BLOCK_ROWS).flat_map(move |ib| {
            let ie = (ib + BLOCK_ROWS).min(rows);
            (0..cols)
                .step_by(16)
                .flat_map(move |j0| (ib..ie).step_by(16).map(move |i0| (j0, i0)))
        })
    }

    /// 4-byte elements (moved as f32 bit patterns: loads, shuffles and stores never change
    /// bits). Edge tiles load only their `nr` rows of `nc` values and store only their `nc` rows
    /// of `nr` values (masked), so nothing outside the block is touched: a `[C, 9]` → `[9, C]`
    /// weight transpose is all edge tiles.
    #[target_feature(enable = "avx512f")]
    unsafe fn tiles32(
        src: *const f32,
        ld_src: usize,
        dst: *mut f32,
        ld_dst: usize,
        rows: usize,
        cols: usize,
    ) {
        let mut r = [_mm512_setzero_ps(); 16];
        for (j0, i0) in tile_order(rows, cols) {
            let (nr, nc) = ((rows - i0).min(16), (cols - j0).min(16));
            if nr == 16 && nc == 16 {
                for (k, v) in r.iter_mut().enumerate() {
                    *v = _mm512_loadu_ps(src.add((i0 + k) * ld_src + j0));
                }
                transpose16(&mut r);
                for (k, v) in r.iter().enumerate() {
                    _mm512_storeu_ps(dst.add((j0 + k) * ld_dst + i0), *v);
                }
                continue;
            }
            let (load, store) = (lanes(nc), lanes(nr));
            for (k, v) in r.iter_mut().enumerate() {
                *v = if k < nr {
                    _mm512_maskz_loadu_ps(load, src.add((i0 + k) * ld_src + j0))
                } else {
                    _mm512_setzero_ps()
                };
            }
            transpose16(&mut r);
            for (k, v) in r.iter().take(nc).enumerate() {
                _mm512_mask_storeu_ps(dst.add((j0 + k) * ld_dst + i0), store, *v);
            }
        }
    }

    /// The mask of the first `n` (<= 16) lanes.
    fn lanes(n: usize) -> __mmask16 {
        ((1u32 << n) - 1) as __mmask16
    }

    /// 2-byte elements, zero-extended to 32-bit lanes for the shuffle and truncated back.
    #[target_feature(enable = "avx512f")]
    unsafe fn tiles16(
        src: *const u16,
        ld_src: usize,
        dst: *mut u16,
        ld_dst: usize,
        rows: usize,
        cols: usize,
    ) {
        let mut r = [_mm512_setzero_ps(); 16];
        for (j0, i0) in tile_order(rows, cols) {
            {
                for (k, v) in r.iter_mut().enumerate() {
                    let p = src.add((i0 + k) * ld_src + j0) as *const __m256i;
                    *v = _mm512_castsi512_ps(_mm512_cvtepu16_epi32(_mm256_loadu_si256(p)));
                }
                transpose16(&mut r);
                for (k, v) in r.iter().enumerate() {
                    let p = dst.add((j0 + k) * ld_dst + i0) as *mut __m256i;
                    _mm256_storeu_si256(p, _mm512_cvtepi32_epi16(_mm512_castps_si512(*v)));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::transpose_block;

    /// Every element lands where the definition says, for full tiles, edges on both sides,
    /// padded leading dimensions and offsets, in 4-, 2- and 1-byte elements; blocks that do not
    /// fit are refused untouched.
    #[test]
    fn blocks_transpose_exactly() {
        fn case<T: Copy + PartialEq + std::fmt::Debug>(make: impl Fn(usize) -> T, zero: T) {
            for (rows, cols) in [(1, 1), (16, 16), (33, 47), (64, 17), (7, 100), (48, 32)] {
                let (ld_src, ld_dst, s0, d0) = (cols + 5, rows + 3, 11, 7);
                let src: Vec<T> = (0..s0 + rows * ld_src).map(&make).collect();
                let mut dst = vec![zero; d0 + cols * ld_dst];
                assert!(transpose_block(
                    (&src, s0, ld_src),
                    (&mut dst, d0, ld_dst),
                    (rows, cols)
                ));
                for i in 0..rows {
                    for j in 0..cols {
                        let got = dst[d0 + j * ld_dst + i];
                        assert_eq!(got, src[s0 + i * ld_src + j], "{rows}x{cols} ({i}, {j})");
                    }
                }
                // Padding between destination rows is untouched.
                for j in 0..cols {
                    for i in rows..ld_dst {
                        if let Some(&x) = dst.get(d0 + j * ld_dst + i) {
                            assert_eq!(x, zero, "{rows}x{cols} pad ({j}, {i})");
                        }
                    }
                }
                let mut short = vec![zero; d0 + (cols - 1) * ld_dst + rows - 1];
                let fits =
                    transpose_block((&src, s0, ld_src), (&mut short, d0, ld_dst), (rows, cols));
                assert!(!fits && short.iter().all(|&x| x == zero));
            }
        }
        case(|i| i as f32 + 0.5, 0.0f32);
        case(|i| i as u32 | 0x8000_0000, 0u32);
        case(
            |i| half::bf16::from_bits((i as u16).wrapping_mul(7) | 1),
            half::bf16::ZERO,
        );
        case(|i| (i % 251) as u8 + 1, 0u8);
    }
}
