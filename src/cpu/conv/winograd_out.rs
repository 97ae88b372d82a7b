//! The output side of the Winograd F(2,3) and F(4,3) convolutions ([`super::winograd`]): the
//! output transform `Y = Aᵀ M A` of each tile written into the NHWC output rows, then the
//! implicit GEMM's epilogue per output pixel (`act(conv + bias) + residual`, in f32).
//!
//! Invariants: a tile row writes exactly the output rows it covers (at most the tile side;
//! partial tiles at the right and bottom edges write only the pixels that exist); residual views were validated
//! for every row and column by the caller before any unchecked read.

use super::winograd::{Input, Tile};
use super::winograd_math::{output_transform, output_transform4, L, MAX_POINTS};
use super::ConvEpilogue;
use crate::cpu::gemm::Residual;
use crate::cpu::simd::Kernels;
use crate::desc::kinds::UnaryOp;
use crate::desc::Activation;
use crate::desc::ConvGeom;
use crate::Result;

/// The point-major products of one block as a tile row's output transform reads them.
pub(super) struct BlockProducts<'a> {
    /// `points` runs of `tiles · o` floats: point `k`, tile `t`, channel `j` at
    /// `m[(k · tiles + t) · o + j]`.
    pub m: &'a [f32],
    /// Tiles in the block.
    pub tiles: usize,
    /// Output channels.
    pub o: usize,
    /// The block's index of the row's first tile.
    pub first_tile: usize,
}

impl BlockProducts<'_> {
    /// Channels `j0..j0 + n` of point `k` of the row's tile `tx`.
    #[inline(always)]
    pub fn run(&self, k: usize, tx: usize, j0: usize, n: usize) -> &[f32] {
        let at = (k * self.tiles + self.first_tile + tx) * self.o + j0;
        &self.m[at..at + n]
    }
}

/// Output transform of tile row `row` from its block's point-major products `m` into the NHWC
/// rows `out` (the output rows the tile row covers), then the epilogue.
#[allow(clippy::too_many_arguments)]
pub(super) fn finish_row(
    (avx2, tile): (bool, Tile),
    m: &BlockProducts,
    g: &ConvGeom,
    inp: &Input,
    row: usize,
    ep: &ConvEpilogue,
    kernels: Kernels,
    out: &mut [f32],
) -> Result<()> {
    #[cfg(target_arch = "x86_64")]
    if avx2 {
        // SAFETY: as in `transform_row`.
        return unsafe {
            match tile {
                Tile::F2 => finish_row_avx2::<2>(m, g, inp, row, ep, kernels, out),
                Tile::F4 => finish_row_avx2::<4>(m, g, inp, row, ep, kernels, out),
            }
        };
    }
    let _ = avx2;
    match tile {
        Tile::F2 => finish_row_body::<2>(m, g, inp, row, ep, kernels, out),
        Tile::F4 => finish_row_body::<4>(m, g, inp, row, ep, kernels, out),
    }
}

/// [`finish_row_body`] built for AVX2.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn finish_row_avx2<const T: usize>(
    m: &BlockProducts,
    g: &ConvGeom,
    inp: &Input,
    row: usize,
    ep: &ConvEpilogue,
    kernels: Kernels,
    out: &mut [f32],
) -> Result<()> {
    finish_row_body::<T>(m, g, inp, row, ep, kernels, out)
}

/// The body of [`finish_row`] for output tiles of side `T` (2 or 4).
#[inline(always)]
fn finish_row_body<const T: usize>(
    m: &BlockProducts,
    g: &ConvGeom,
    inp: &Input,
    row: usize,
    ep: &ConvEpilogue,
    kernels: Kernels,
    out: &mut [f32],
) -> Result<()> {
    let o = g.o;
    let (b, ty) = (row / inp.tiles_y, row % inp.tiles_y);
    let points = (T + 2) * (T + 2);
    let rows_here = (g.ho - T * ty).min(T);
    // Gathered once per call, not zeroed per channel chunk: a zeroed `[[f32; L]; 36]` per
    // chunk compiled to a `memset` call that took ~30% of this function's samples in a bf16
    // SD 1.5 step. Each chunk overwrites the `points` runs it reads; lanes past a short
    // chunk's `n` keep an earlier chunk's values, which stay in their own lanes and are never
    // stored.
    let mut mm = [[0f32; L]; MAX_POINTS];
    let mut m16 = [[0f32; L]; 16];
    for tx in 0..inp.tiles_x {
        let cols_here = (g.wo - T * tx).min(T);
        let mut o0 = 0;
        while o0 < o {
            let n = L.min(o - o0);
            for (k, mk) in mm.iter_mut().take(points).enumerate() {
                let src = m.run(k, tx, o0, n);
                if let Ok(full) = <&[f32; L]>::try_from(src) {
                    *mk = *full;
                } else {
                    mk[..n].copy_from_slice(src);
                }
            }
            let at0 = T * tx * o + o0;
            let shape = (rows_here, cols_here, g.wo * o, o, n);
            if T == 2 {
                m16.copy_from_slice(&mm[..16]);
                store_pixels::<T>(&output_transform(&m16), shape, &mut out[at0..]);
            } else {
                store_pixels::<T>(&output_transform4(&mm), shape, &mut out[at0..]);
            }
            o0 += n;
        }
    }
    // Epilogue per output pixel row: + bias, activation, + residual.
    let act = unary_of(ep.activation);
    let mut scratch =
        crate::cpu::alloc::zeroed::<f32>("conv2d", if act.is_some() { o } else { 0 })?;
    for (i, pixels) in out.chunks_exact_mut(g.wo * o).enumerate() {
        let oy = T * ty + i;
        for (ox, r) in pixels.chunks_exact_mut(o).enumerate() {
            if let Some(bias) = ep.bias {
                r.iter_mut().zip(bias).for_each(|(x, b)| *x += b);
            }
            if let Some(op) = act {
                scratch.copy_from_slice(r);
                kernels.unary_f32(op, &scratch, r);
            }
            if let Some(res) = &ep.residual {
                let (res_row, res_view) = match ep.residual_image_stride {
                    Some(st) => (oy * g.wo + ox, res.shifted(b * st, g.ho * g.wo, o)),
                    None => ((b * g.ho + oy) * g.wo + ox, *res),
                };
                add_residual(r, &res_view, res_row);
            }
        }
    }
    Ok(())
}

/// Writes the `rows × cols` output pixels of one tile's channel chunk: pixel `(i, j)` is
/// `y[i·T + j][..n]`, at `out[i·row_len + j·o ..]`.
#[inline(always)]
fn store_pixels<const T: usize>(
    y: &[[f32; L]],
    (rows, cols, row_len, o, n): (usize, usize, usize, usize, usize),
    out: &mut [f32],
) {
    for i in 0..rows {
        for j in 0..cols {
            let at = i * row_len + j * o;
            let dst = &mut out[at..at + n];
            if let Ok(full) = <&mut [f32; L]>::try_from(&mut *dst) {
                *full = y[i * T + j];
            } else {
                dst.copy_from_slice(&y[i * T + j][..n]);
            }
        }
    }
}

/// `r[c] += res[row, c]`.
fn add_residual(r: &mut [f32], res: &Residual, row: usize) {
    if let Residual::F32(m) = res {
        if m.col_stride == 1 {
            let (s, n) = (m.offset + row * m.row_stride, r.len());
            r.iter_mut()
                .zip(&m.data[s..s + n])
                .for_each(|(x, v)| *x += v);
            return;
        }
    }
    for (c, x) in r.iter_mut().enumerate() {
        // SAFETY: the views were validated by `conv_winograd` for all rows and columns.
        *x += unsafe { res.at(row, c) };
    }
}

fn unary_of(a: Activation) -> Option<UnaryOp> {
    match a {
        Activation::None => None,
        Activation::Relu => Some(UnaryOp::Relu),
        Activation::Gelu => Some(UnaryOp::GeluErf),
        Activation::GeluTanh => Some(UnaryOp::GeluTanh),
        Activation::Silu => Some(UnaryOp::Silu),
    }
}
