//! AVX2 packing of a row-major A into the 6-row micro-panels of the AVX2 kernel.
//!
//! Why: the generic packer ([`super::pack::pack_a_f32`]) copies each row run and then scatters
//! it with stride 6, one scalar store per element. Here six rows are turned unit-major by 8×8
//! register transposes (two zero rows), eight units per step: f32 rows are read in place,
//! 16-bit rows are widened into an L1 buffer 64 units at a time first. Measured (perf, one
//! thread, Zen 3): packing fell from 5.8% to 1.9% of a 1024³ product and from about 9% to 3.5%
//! of a 2×320×64×64 Winograd layer.
//!
//! Invariants: writes exactly `6 · (u1 − u0)` floats of `dst`, each once with its final value
//! (the 8-lane stores of consecutive units overlap by two lanes, in ascending order, and a
//! store that would pass the end of `dst` writes six lanes only); reads only the six rows'
//! runs `u0..u1` of the validated view. Same values as the generic packer, bit for bit.

use super::avx2::MR;
use super::pack::{SrcKind, ToF32};
use super::MatRef;
use std::arch::x86_64::*;

/// Units widened into the L1 buffer per step.
const CHUNK: usize = 64;

// The transposes below handle exactly six rows (two zero rows make up the 8×8 block).
const _: () = assert!(MR == 6);

/// Packs the 6 rows `row0..row0 + 6` of `a` (`a.col_stride == 1`, all rows inside M), units
/// `u0..u1`, into `dst` (`6 · (u1 − u0)` floats, unit-major).
///
/// # Safety
/// The CPU must have AVX2 (the AVX2 kernel's constructor checks it); `a` must be validated
/// and the rows and units inside it.
pub(crate) unsafe fn pack_a6_rows<S: ToF32>(
    a: &MatRef<S>,
    row0: usize,
    u0: usize,
    u1: usize,
    dst: &mut [f32],
) {
    let kc = u1 - u0;
    let dst = &mut dst[..MR * kc];
    let run = |r: usize, k: usize, n: usize| {
        let start = a.offset + (row0 + r) * a.row_stride + u0 + k;
        &a.data[start..start + n]
    };
    if S::KIND == SrcKind::F32 {
        // f32 rows are read in place (no copy into the buffer).
        let rows: [&[S]; MR] = std::array::from_fn(|r| run(r, 0, kc));
        // SAFETY: `KIND == F32` only for `S = f32` (the trait is implemented for f32, f16
        // and bf16 alone), so each run is a valid `[f32]` of the same length.
        let rows = rows.map(|x| std::slice::from_raw_parts(x.as_ptr() as *const f32, x.len()));
        return transpose(rows, kc, dst);
    }
    let mut tmp = [[0f32; CHUNK]; MR];
    let mut k = 0;
    while k < kc {
        let n = CHUNK.min(kc - k);
        for (r, t) in tmp.iter_mut().enumerate() {
            S::convert(run(r, k, n), &mut t[..n]);
        }
        let rows = [&tmp[0][..], &tmp[1], &tmp[2], &tmp[3], &tmp[4], &tmp[5]];
        transpose(rows, n, &mut dst[MR * k..MR * (k + n)]);
        k += n;
    }
}

/// Writes units `0..n` of the six rows unit-major into `dst` (`6 · n` floats).
#[target_feature(enable = "avx2")]
unsafe fn transpose(tmp: [&[f32]; MR], n: usize, dst: &mut [f32]) {
    if tmp.iter().any(|r| r.len() < n) || dst.len() < MR * n {
        return; // unreachable: the callers pass n-unit rows and a 6·n panel
    }
    let dst = &mut dst[..MR * n];
    let len = dst.len();
    let out = dst.as_mut_ptr();
    let six = _mm256_setr_epi32(-1, -1, -1, -1, -1, -1, 0, 0);
    let full = n / 8 * 8;
    for g in (0..full).step_by(8) {
        // SAFETY: g + 8 <= n <= every row's length.
        let rows = [
            _mm256_loadu_ps(tmp[0].as_ptr().add(g)),
            _mm256_loadu_ps(tmp[1].as_ptr().add(g)),
            _mm256_loadu_ps(tmp[2].as_ptr().add(g)),
            _mm256_loadu_ps(tmp[3].as_ptr().add(g)),
            _mm256_loadu_ps(tmp[4].as_ptr().add(g)),
            _mm256_loadu_ps(tmp[5].as_ptr().add(g)),
        ];
        let cols = transpose6x8(&rows);
        for (j, c) in cols.into_iter().enumerate() {
            let at = (g + j) * MR;
            if at + 8 <= len {
                // SAFETY: inside dst; lanes 6..8 are rewritten by the next unit's store.
                _mm256_storeu_ps(out.add(at), c);
            } else {
                // SAFETY: at + 6 <= len (at = 6·unit, unit < n).
                _mm256_maskstore_ps(out.add(at), six, c);
            }
        }
    }
    for u in full..n {
        for (r, t) in tmp.iter().enumerate() {
            dst[u * MR + r] = t[u];
        }
    }
}

/// Eight source elements at `p` widened to f32 (exact for f16 and bf16).
///
/// # Safety
/// `p` is readable for 8 elements; the CPU has AVX2 and F16C.
#[inline]
#[target_feature(enable = "avx2,f16c")]
pub(crate) unsafe fn load8<S: ToF32>(p: *const S) -> __m256 {
    match S::KIND {
        SrcKind::F32 => _mm256_loadu_ps(p as *const f32),
        SrcKind::F16 => _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i)),
        SrcKind::Bf16 => _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(
            _mm_loadu_si128(p as *const __m128i),
        ))),
    }
}

/// The 8×8 transpose of six 8-lane rows and two zero rows: vector `j` holds element `j` of
/// rows 0..6 in lanes 0..6 (lanes 6 and 7 zero).
///
/// # Safety
/// The CPU has AVX2.
#[inline]
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn transpose6x8(r: &[__m256; MR]) -> [__m256; 8] {
    let z = _mm256_setzero_ps();
    let t0 = _mm256_unpacklo_ps(r[0], r[1]);
    let t1 = _mm256_unpackhi_ps(r[0], r[1]);
    let t2 = _mm256_unpacklo_ps(r[2], r[3]);
    let t3 = _mm256_unpackhi_ps(r[2], r[3]);
    let t4 = _mm256_unpacklo_ps(r[4], r[5]);
    let t5 = _mm256_unpackhi_ps(r[4], r[5]);
    let s0 = _mm256_shuffle_ps::<0x44>(t0, t2);
    let s1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
    let s2 = _mm256_shuffle_ps::<0x44>(t1, t3);
    let s3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
    let s4 = _mm256_shuffle_ps::<0x44>(t4, z);
    let s5 = _mm256_shuffle_ps::<0xEE>(t4, z);
    let s6 = _mm256_shuffle_ps::<0x44>(t5, z);
    let s7 = _mm256_shuffle_ps::<0xEE>(t5, z);
    [
        _mm256_permute2f128_ps::<0x20>(s0, s4),
        _mm256_permute2f128_ps::<0x20>(s1, s5),
        _mm256_permute2f128_ps::<0x20>(s2, s6),
        _mm256_permute2f128_ps::<0x20>(s3, s7),
        _mm256_permute2f128_ps::<0x31>(s0, s4),
        _mm256_permute2f128_ps::<0x31>(s1, s5),
        _mm256_permute2f128_ps::<0x31>(s2, s6),
        _mm256_permute2f128_ps::<0x31>(s3, s7),
    ]
}

#[cfg(test)]
mod tests {
    use super::super::pack::pack_a_f32;
    use super::*;
    use half::{bf16, f16};

    /// Bit-for-bit against the generic packer: unit counts around the chunk and vector sizes,
    /// a K-block offset, a row stride past K and a view offset, each source type.
    fn check<S: ToF32>(make: impl Fn(f32) -> S) {
        if !super::super::avx2::has_avx2() {
            eprintln!("no AVX2: the AVX2 packer is never chosen on this CPU");
            return;
        }
        let (rows, k, stride, offset) = (9, 400, 411, 5);
        let data: Vec<S> = (0..offset + rows * stride)
            .map(|i| make((i as f32 * 0.37).sin() * 3.0))
            .collect();
        let a = MatRef::new(&data, offset, rows, k, stride, 1);
        for (u0, u1) in [
            (0, 1),
            (0, 7),
            (0, 8),
            (3, 66),
            (0, 64),
            (1, 65),
            (0, 129),
            (16, 400),
        ] {
            let n = MR * (u1 - u0);
            let mut want = vec![f32::NAN; n];
            let mut got = vec![f32::NAN; n + 3];
            pack_a_f32(&a, MR, 2, MR, u0, u1, &mut want);
            // SAFETY: AVX2 checked above; rows 2..8 and units u0..u1 lie inside the view.
            unsafe { pack_a6_rows(&a, 2, u0, u1, &mut got) };
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got[..n]), bits(&want), "units {u0}..{u1}");
            assert!(got[n..].iter().all(|x| x.is_nan()), "wrote past the panel");
        }
    }

    #[test]
    fn matches_generic_packer_f32() {
        check(|x| x);
    }

    #[test]
    fn matches_generic_packer_f16() {
        check(f16::from_f32);
    }

    #[test]
    fn matches_generic_packer_bf16() {
        check(bf16::from_f32);
    }
}
