//! The output side of the Winograd F(2,3) convolution ([`super::winograd`]): the output
//! transform `Y = Aᵀ M A` of each tile (additions only) written into the NHWC output rows, then
//! the implicit GEMM's epilogue per output pixel (`act(conv + bias) + residual`, in f32).
//!
//! Invariants: a tile row writes exactly the one or two output rows it covers (partial tiles at
//! the right and bottom edges write only the pixels that exist); residual views were validated
//! for every row and column by the caller before any unchecked read.

use super::winograd::{Input, POINTS};
use super::winograd_math::{output_transform, L};
use super::ConvEpilogue;
use crate::cpu::gemm::{Activation, Residual};
use crate::cpu::simd::Kernels;
use crate::ops::conv::ConvGeom;
use crate::ops::kinds::UnaryOp;

/// Output transform of tile row `row` from `m` (per tile, 16 runs of `o` floats) into the
/// NHWC rows `out` (the row's one or two output rows), then the epilogue.
#[allow(clippy::too_many_arguments)]
pub(super) fn finish_row(
    avx2: bool,
    m: &[f32],
    g: &ConvGeom,
    inp: &Input,
    row: usize,
    ep: &ConvEpilogue,
    kernels: Kernels,
    out: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    if avx2 {
        // SAFETY: as in `transform_row`.
        return unsafe { finish_row_avx2(m, g, inp, row, ep, kernels, out) };
    }
    let _ = avx2;
    finish_row_body(m, g, inp, row, ep, kernels, out)
}

/// [`finish_row_body`] built for AVX2.
///
/// # Safety
/// The CPU must have AVX2, FMA and F16C.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn finish_row_avx2(
    m: &[f32],
    g: &ConvGeom,
    inp: &Input,
    row: usize,
    ep: &ConvEpilogue,
    kernels: Kernels,
    out: &mut [f32],
) {
    finish_row_body(m, g, inp, row, ep, kernels, out)
}

#[inline(always)]
fn finish_row_body(
    m: &[f32],
    g: &ConvGeom,
    inp: &Input,
    row: usize,
    ep: &ConvEpilogue,
    kernels: Kernels,
    out: &mut [f32],
) {
    let o = g.o;
    let (b, ty) = (row / inp.tiles_y, row % inp.tiles_y);
    let rows_here = (g.ho - 2 * ty).min(2);
    for (tx, mt) in m.chunks_exact(POINTS * o).enumerate() {
        let cols_here = (g.wo - 2 * tx).min(2);
        let mut o0 = 0;
        while o0 < o {
            let n = L.min(o - o0);
            let mut mm = [[0f32; L]; 16];
            for (k, mk) in mm.iter_mut().enumerate() {
                let src = &mt[k * o + o0..k * o + o0 + n];
                if let Ok(full) = <&[f32; L]>::try_from(src) {
                    *mk = *full;
                } else {
                    mk[..n].copy_from_slice(src);
                }
            }
            let y = output_transform(&mm);
            for i in 0..rows_here {
                for j in 0..cols_here {
                    let at = (i * g.wo + 2 * tx + j) * o + o0;
                    let dst = &mut out[at..at + n];
                    if let Ok(full) = <&mut [f32; L]>::try_from(&mut *dst) {
                        *full = y[i * 2 + j];
                    } else {
                        dst.copy_from_slice(&y[i * 2 + j][..n]);
                    }
                }
            }
            o0 += n;
        }
    }
    // Epilogue per output pixel row: + bias, activation, + residual.
    let act = unary_of(ep.activation);
    let mut scratch = vec![0f32; if act.is_some() { o } else { 0 }];
    for (i, pixels) in out.chunks_exact_mut(g.wo * o).enumerate() {
        let oy = 2 * ty + i;
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
