//! Vectorised packing of one head's K and V into the AMX attention layouts (see `super::amx`
//! for the layouts), for rows whose `D` (`Dv`) values are contiguous.
//!
//! Why: the scalar packer wrote each u32 pair on its own (K with a 64-byte stride, V by `|=`
//! into half words): ~3% of an SD 1.5 bf16 step on the AMX machine. Here a 1 KiB K tile is
//! 16 key rows of 32 bf16 (one masked 64-byte load each) transposed in registers, and a V tile
//! row is two keys' 16 columns widened and interleaved.
//!
//! Invariants: every u32 of the head's blocks is written (padding keys, pairs and columns as
//! zeros), so the buffers need not be zeroed first; loads are masked to the `D` (`Dv`) valid
//! values of rows whose bounds the caller checked (`rows` gives `None` for padding keys).
//! The result is bit for bit the scalar packer's (tested against it).

use super::amx_kernel::{KB, TILE};
use crate::cpu::gemm::transpose16;
use std::arch::x86_64::*;

/// Whether this CPU can run [`pack_head`] (AVX-512F and BW).
pub(super) fn available() -> bool {
    is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512bw")
}

/// One head's operands: `k(j)` / `v(j)` give key `j`'s row (`d` / `dv` contiguous values,
/// bounds checked) or `None` for a padding key; `kh` and `vh` are the head's packed blocks.
pub(super) struct HeadRows<'a, FK, FV> {
    pub k: FK,
    pub v: FV,
    pub lk: usize,
    pub d: usize,
    pub dv: usize,
    pub dp: usize,
    pub dvp: usize,
    pub kh: &'a mut [u32],
    pub vh: &'a mut [u32],
}

/// Packs a head (see [`HeadRows`]); returns `false` (nothing written) when the CPU lacks
/// AVX-512BW or the buffers are not the layouts' sizes.
pub(super) fn pack_head<'d, FK, FV>(h: HeadRows<FK, FV>) -> bool
where
    FK: Fn(usize) -> Option<&'d [u16]>,
    FV: Fn(usize) -> Option<&'d [u16]>,
{
    let blocks = h.lk.div_ceil(KB);
    let sizes_ok = h.dp.is_multiple_of(32)
        && h.dvp.is_multiple_of(16)
        && h.d <= h.dp
        && h.dv <= h.dvp
        && h.kh.len() == blocks * KB * h.dp / 2
        && h.vh.len() == blocks * KB * h.dvp / 2;
    if !sizes_ok || !available() {
        return false;
    }
    // SAFETY: AVX-512F/BW checked above; the sizes were checked against the layouts.
    unsafe { pack_head_avx512(h) };
    true
}

/// Mask of the first `n` of `lanes` lanes.
fn first(n: usize, lanes: usize) -> u64 {
    if n >= lanes {
        u64::MAX >> (64 - lanes)
    } else {
        (1u64 << n) - 1
    }
}

/// # Safety
/// AVX-512F/BW; `h`'s sizes as checked by [`pack_head`].
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn pack_head_avx512<'d, FK, FV>(h: HeadRows<FK, FV>)
where
    FK: Fn(usize) -> Option<&'d [u16]>,
    FV: Fn(usize) -> Option<&'d [u16]>,
{
    let (sd, sk) = (h.dp / 32, KB / 32);
    let blocks = h.lk.div_ceil(KB);
    for blk in 0..blocks {
        let kblk = &mut h.kh[blk * KB * h.dp / 2..][..KB * h.dp / 2];
        for g in 0..KB / 16 {
            let rows: [Option<&[u16]>; 16] = std::array::from_fn(|r| {
                let j = blk * KB + g * 16 + r;
                if j < h.lk {
                    (h.k)(j).filter(|row| row.len() >= h.d)
                } else {
                    None
                }
            });
            for qc in 0..sd {
                let c0 = 32 * qc;
                let mask = first(h.d.saturating_sub(c0), 32) as __mmask32;
                let mut t = [_mm512_setzero_ps(); 16];
                for (tr, row) in t.iter_mut().zip(&rows) {
                    if let Some(row) = row {
                        // SAFETY: c0 < d <= row.len() (dp is d rounded up to 32), and the
                        // load is masked to the row's values from c0.
                        let p = row.as_ptr().add(c0) as *const i16;
                        *tr = _mm512_castsi512_ps(_mm512_maskz_loadu_epi16(mask, p));
                    }
                }
                transpose16(&mut t);
                let dst = &mut kblk[(g * sd + qc) * TILE..][..TILE];
                for (q, v) in t.iter().enumerate() {
                    // SAFETY: dst holds TILE = 16 × 16 values.
                    _mm512_storeu_ps(dst.as_mut_ptr().add(16 * q) as *mut f32, *v);
                }
            }
        }
        let vblk = &mut h.vh[blk * KB * h.dvp / 2..][..KB * h.dvp / 2];
        for st in 0..sk {
            let row = |jj: usize| {
                let j = blk * KB + st * 32 + jj;
                if j < h.lk {
                    (h.v)(j).filter(|row| row.len() >= h.dv)
                } else {
                    None
                }
            };
            let rows: [Option<&[u16]>; 32] = std::array::from_fn(row);
            for cc in 0..h.dvp / 16 {
                let c0 = 16 * cc;
                let mask = first(h.dv.saturating_sub(c0), 16) as __mmask16;
                let dst = &mut vblk[(cc * sk + st) * TILE..][..TILE];
                for i in 0..16 {
                    // SAFETY: c0 < dv <= each row's length.
                    let lo = widen16(rows[2 * i], c0, mask);
                    let hi = widen16(rows[2 * i + 1], c0, mask);
                    let pair = _mm512_or_si512(lo, _mm512_slli_epi32::<16>(hi));
                    // SAFETY: dst holds TILE = 16 × 16 values.
                    _mm512_storeu_si512(dst.as_mut_ptr().add(16 * i) as *mut __m512i, pair);
                }
            }
        }
    }
}

/// Values `c0..c0 + 16` of `row` (lanes outside `mask` zero) widened to u32, or zeros.
///
/// # Safety
/// AVX-512F/BW; `c0 < row.len()` where `row` is given.
#[inline]
#[target_feature(enable = "avx512f,avx512bw")]
unsafe fn widen16(row: Option<&[u16]>, c0: usize, mask: __mmask16) -> __m512i {
    match row {
        Some(row) => _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(
            mask,
            row.as_ptr().add(c0) as *const i16,
        )),
        None => _mm512_setzero_si512(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::amx::{pack, SCALAR_PACK};
    use super::super::amx_kernel::Geo;
    use super::super::operands::View;
    use crate::desc::AttnShape;
    use crate::layout::Layout;
    use half::bf16;

    /// The vectorised packer writes the scalar packer's bits, for contiguous heads and for
    /// `[B, L, H, D]` views (rows strided, values contiguous), over odd key counts and widths.
    #[test]
    fn vectorised_pack_matches_the_scalar_one() {
        if !super::available() {
            eprintln!("no AVX-512BW: the vectorised K/V packer is never used here");
            return;
        }
        let mut seed = 7u32;
        let mut next = || {
            seed = seed.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            bf16::from_f32((seed >> 8) as f32 / (1u32 << 24) as f32 - 0.5)
        };
        for (lk, d, dv) in [
            (1, 40, 40),
            (7, 1, 17),
            (63, 64, 160),
            (65, 80, 1),
            (130, 33, 48),
        ] {
            for transposed in [false, true] {
                let heads = 3;
                let (kdata, vdata): (Vec<bf16>, Vec<bf16>) = (
                    (0..heads * lk * d).map(|_| next()).collect(),
                    (0..heads * lk * dv).map(|_| next()).collect(),
                );
                let lay = |w: usize| {
                    if transposed {
                        Layout::contiguous(&[1, lk, heads, w]).transpose(1, 2)
                    } else {
                        Layout::contiguous(&[1, heads, lk, w])
                    }
                };
                let (kl, vl) = (lay(d), lay(dv));
                let kv = (
                    View {
                        data: &kdata,
                        layout: &kl,
                    },
                    View {
                        data: &vdata,
                        layout: &vl,
                    },
                );
                let s = AttnShape {
                    lead: vec![1, heads],
                    lq: 1,
                    lk,
                    d,
                    dv,
                    scale: 1.0,
                };
                let g = || Geo {
                    dp: d.div_ceil(32) * 32,
                    dvp: dv.div_ceil(16) * 16,
                    qmul: 1.0,
                };
                let run = |scalar: bool| {
                    SCALAR_PACK.with(|c| c.set(scalar));
                    let p = pack((&kv.0, &kv.1), &s, g(), 1..heads).unwrap();
                    SCALAR_PACK.with(|c| c.set(false));
                    let (kn, vn) = ((heads - 1) * p.k_head, (heads - 1) * p.v_head);
                    (p.k.slice::<u32>(kn).to_vec(), p.v.slice::<u32>(vn).to_vec())
                };
                let (fast, scalar) = (run(false), run(true));
                assert!(fast.0.iter().any(|&x| x != 0), "{lk} {d} {dv}");
                assert_eq!(
                    fast, scalar,
                    "lk {lk} d {d} dv {dv} transposed {transposed}"
                );
            }
        }
    }
}
