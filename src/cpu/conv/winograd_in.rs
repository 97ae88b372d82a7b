//! The input side of the Winograd convolutions ([`super::winograd`]): the input transform
//! `V = Bᵀ d B` of every tile of one tile row, read from the channels-last input (any strides,
//! channel stride 1; zeros outside the image) into per-point runs of `C` floats.
//!
//! Invariants: tile `tx` of tile row `row` writes exactly its `(m + 2)²` runs of `c` values
//! (`v[tx·points·c + k·c ..][..c]`); the AVX2 bodies ([`super::winograd_avx2`]) give the same
//! bits as the portable ones and check every run against its slice before reading.

#[cfg(target_arch = "x86_64")]
use super::winograd_avx2::{input_tile8, input_tile8_f4};
use super::winograd_math::{input_transform, input_transform4, Tile, L, MAX_POINTS};
use crate::cpu::gemm::ToF32;
use crate::desc::ConvGeom;

/// The input geometry the transforms need.
#[derive(Clone, Copy)]
pub(super) struct Input {
    /// Element index of `x[0, 0, 0, 0]` and the N, H, W strides (C has stride 1).
    pub base: usize,
    pub sn: usize,
    pub sh: usize,
    pub sw: usize,
    pub tiles_y: usize,
    pub tiles_x: usize,
}

/// Transforms tile row `row` (image `row / tiles_y`) into `v`: per tile, `(T + 2)²` runs of `c`
/// floats, for output tiles of side `T` (2 or 4).
#[inline(always)]
fn transform_row_body<S: ToF32, const AVX2: bool, const T: usize>(
    data: &[S],
    inp: &Input,
    g: &ConvGeom,
    row: usize,
    v: &mut [f32],
) {
    let c = g.c;
    let (b, ty) = (row / inp.tiles_y, row % inp.tiles_y);
    let (ph, pw) = g.p.padding;
    let side = T + 2;
    let points = side * side;
    for (tx, vt) in v.chunks_exact_mut(points * c).enumerate() {
        // The tile's input pixels' first elements (row-major), or None outside the image.
        let mut all_starts = [None; MAX_POINTS];
        for (k, st) in all_starts.iter_mut().take(points).enumerate() {
            let iy = (T * ty + k / side).wrapping_sub(ph);
            let ix = (T * tx + k % side).wrapping_sub(pw);
            if iy < g.h && ix < g.w {
                *st = Some(inp.base + b * inp.sn + iy * inp.sh + ix * inp.sw);
            }
        }
        let starts = &all_starts[..points];
        let mut c0 = 0;
        #[cfg(target_arch = "x86_64")]
        if AVX2 {
            // SAFETY: `AVX2` is true only in `transform_row_avx2`, which runs where the
            // hardware has AVX2, FMA and F16C.
            while c0 + L <= c
                && unsafe {
                    if T == 2 {
                        input_tile8(data, starts, c0, c, vt)
                    } else {
                        input_tile8_f4(data, starts, c0, c, vt)
                    }
                }
            {
                c0 += L;
            }
        }
        while c0 < c {
            let n = L.min(c - c0);
            let mut d = [[0f32; L]; MAX_POINTS];
            for (dk, start) in d.iter_mut().zip(starts) {
                if let Some(s) = start {
                    let run = &data[s + c0..s + c0 + n];
                    if let Ok(full) = <&[S; L]>::try_from(run) {
                        *dk = full.map(S::to_f32);
                    } else {
                        for (x, src) in dk.iter_mut().zip(run) {
                            *x = src.to_f32();
                        }
                    }
                }
            }
            let t = if T == 2 {
                let mut d16 = [[0f32; L]; 16];
                d16.copy_from_slice(&d[..16]);
                let mut t = [[0f32; L]; MAX_POINTS];
                t[..16].copy_from_slice(&input_transform(&d16));
                t
            } else {
                input_transform4(&d)
            };
            for (k, tk) in t.iter().take(points).enumerate() {
                let dst = &mut vt[k * c + c0..k * c + c0 + n];
                if let Ok(full) = <&mut [f32; L]>::try_from(&mut *dst) {
                    *full = *tk;
                } else {
                    dst.copy_from_slice(&tk[..n]);
                }
            }
            c0 += n;
        }
    }
}

/// [`transform_row_body`] built for AVX2 (8-lane vectors, F16C conversions). Named wrappers
/// rather than one closure-taking trampoline: a closure passed to a `#[target_feature]`
/// function is not reliably inlined into it (the output transform's was not, and ran without
/// AVX2), while these bodies are `#[inline(always)]` into the wrappers.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn transform_row_avx2<S: ToF32, const T: usize>(
    data: &[S],
    inp: &Input,
    g: &ConvGeom,
    row: usize,
    v: &mut [f32],
) {
    transform_row_body::<S, true, T>(data, inp, g, row, v)
}

pub(super) fn transform_row<S: ToF32>(
    (avx2, tile): (bool, Tile),
    data: &[S],
    inp: &Input,
    g: &ConvGeom,
    row: usize,
    v: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    if avx2 {
        // SAFETY: `avx2` is set only when the kernels' level is AVX2 or above, which the
        // hardware check guarantees has AVX2, FMA and F16C.
        return unsafe {
            match tile {
                Tile::F2 => transform_row_avx2::<S, 2>(data, inp, g, row, v),
                Tile::F4 => transform_row_avx2::<S, 4>(data, inp, g, row, v),
            }
        };
    }
    let _ = avx2;
    match tile {
        Tile::F2 => transform_row_body::<S, false, 2>(data, inp, g, row, v),
        Tile::F4 => transform_row_body::<S, false, 4>(data, inp, g, row, v),
    }
}
