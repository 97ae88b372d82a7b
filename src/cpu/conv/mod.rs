//! CPU convolution: implicit GEMM on channels-last (NHWC) data with prepacked weights.
//!
//! The product is `C [N·Ho·Wo, O] = A [N·Ho·Wo, kh·kw·C/G] @ B [kh·kw·C/G, O]` per group, where a
//! row of A is one output pixel and column `k = (ky·kw + kx)·C/G + c` one (tap, channel) pair:
//! `A[m, k] = x[n, c, oy·sh − ph + ky·dh, ox·sw − pw + kx·dw]` or 0 outside the input. A is never
//! materialised: [`NhwcSource`] hands the GEMM engine's packer one pointer per pixel to the
//! contiguous channel run of a tap (or to zeros), and the engine's f32 microkernels, threading
//! and fused epilogue (bias, activation, residual) do the rest. `C` rows are exactly the NHWC
//! output. A 1×1 stride-1 convolution is therefore a plain GEMM on the NHWC view.
//!
//! Invariants:
//! - [`PackedConv`] holds B as the engine's f32 panels, one [`PackedB`] per group, built once
//!   (by `nn::Conv2d`, or per call by `conv2d`); 16-bit weights are widened exactly.
//! - The input view must have channel stride 1 (any other strides, any offset); it is checked
//!   against its storage once, before any unchecked read.
//! - Accumulation is f32; 16-bit outputs are rounded once at the end.

mod tensor;
#[cfg(test)]
mod tests;
mod transpose;

pub(crate) use tensor::{conv2d_cpu, f32_vec, pack_weight};
pub(crate) use transpose::{nchw_to_nhwc, nhwc_to_nchw};

use super::gemm::{
    self, Activation, Epilogue, GemmPath, MatRef, PackedB, RowSource, ToF32, GATHER_KCU,
};
use super::matmul::narrow;
use super::storage::CpuStorage;
use crate::layout::Layout;
use crate::ops::conv::ConvGeom;
use crate::{DType, Device, Error, Result};

/// Convolution weights prepacked for the implicit GEMM: per group, B = `[kh·kw·C/G, O/G]`.
pub(crate) struct PackedConv {
    /// `[O, C/G, kh, kw]` of the source weight.
    pub shape: [usize; 4],
    pub groups: usize,
    panels: Vec<PackedB<f32>>,
}

impl PackedConv {
    /// Packs a row-major `[O, C/G, kh, kw]` f32 weight.
    pub(crate) fn new(w: &[f32], shape: [usize; 4], groups: usize) -> Result<PackedConv> {
        let [o, cg, kh, kw] = shape;
        if groups == 0 || !o.is_multiple_of(groups) || w.len() != o * cg * kh * kw {
            return Err(Error::invalid(
                "conv2d prepack",
                format!(
                    "weight {shape:?} with {} values and groups {groups}",
                    w.len()
                ),
            ));
        }
        let (og, k) = (o / groups, kh * kw * cg);
        // OIHW -> OHWI, so that k = tap * cg + c runs contiguously along each output channel;
        // B = that matrix transposed (a strided view the packer reads in place).
        let ohwi = if kh * kw > 1 && cg > 1 {
            transpose::transpose(w, 0, (o, cg, kh * kw))
        } else {
            w.to_vec()
        };
        let mut panels = Vec::with_capacity(groups);
        for gi in 0..groups {
            let b = MatRef::new(&ohwi, gi * og * k, k, og, 1, k);
            panels.push(PackedB::new_f32_blocked(b, GATHER_KCU)?);
        }
        super::pool::give(ohwi);
        Ok(PackedConv {
            shape,
            groups,
            panels,
        })
    }
}

/// A rows as pixels of an NHWC view; see the module docs.
struct NhwcSource<'a, S> {
    data: &'a [S],
    /// Index of `x[0, group's first channel, 0, 0]`.
    base: usize,
    /// Strides of N, H, W (C has stride 1).
    sn: usize,
    sh: usize,
    sw: usize,
    /// At least `C/G` zeros.
    zeros: &'a [S],
    g: ConvGeom,
    cg: usize,
}

// SAFETY: `runs` returns pointers into `data` at pixels inside the input (checked by
// `conv2d_nhwc` for the whole view) with `len <= cg - c0` channels left in the group, or into
// `zeros` (at least `cg` long); both outlive the borrow of `self`.
unsafe impl<S: ToF32 + Sync> RowSource for NhwcSource<'_, S> {
    type Elem = S;

    #[inline]
    fn runs(&self, row0: usize, rows: usize, k: usize, ptrs: &mut [*const S]) -> usize {
        let g = &self.g;
        let (tap, c0) = (k / self.cg, k % self.cg);
        let (ky, kx) = (tap / g.kw, tap % g.kw);
        let p = g.p;
        let zero = self.zeros.as_ptr();
        for (r, ptr) in ptrs.iter_mut().enumerate() {
            *ptr = zero;
            if r >= rows {
                continue;
            }
            let m = row0 + r;
            let (ox, t) = (m % g.wo, m / g.wo);
            let (oy, b) = (t % g.ho, t / g.ho);
            let iy = (oy * p.stride.0 + ky * p.dilation.0).wrapping_sub(p.padding.0);
            let ix = (ox * p.stride.1 + kx * p.dilation.1).wrapping_sub(p.padding.1);
            if iy < g.h && ix < g.w {
                let idx = self.base + b * self.sn + iy * self.sh + ix * self.sw + c0;
                // SAFETY: in bounds (see the impl's safety comment).
                *ptr = unsafe { self.data.as_ptr().add(idx) };
            }
        }
        self.cg - c0
    }
}

/// The fused epilogue of a CPU convolution.
pub(crate) struct ConvEpilogue<'a> {
    /// `[O]`.
    pub bias: Option<&'a [f32]>,
    pub activation: Activation,
    /// `[N·Ho·Wo, O]` rows (any strides).
    pub residual: Option<MatRef<'a, f32>>,
    pub out_dtype: DType,
    /// Kernel path (tests force the portable one).
    pub path: GemmPath,
}

fn conv_typed<S: ToF32 + Sync + bytemuck::Zeroable>(
    data: &[S],
    xl: &Layout,
    w: &PackedConv,
    g: &ConvGeom,
    ep: &ConvEpilogue,
) -> Result<Vec<f32>> {
    let op = "conv2d";
    let s = xl.strides();
    if xl.shape() != [g.n, g.c, g.h, g.w] || s[1] != 1 && g.c > 1 {
        return Err(Error::invalid(
            op,
            format!(
                "internal: expected a channel-stride-1 input {:?}, got {:?} strides {s:?}",
                [g.n, g.c, g.h, g.w],
                xl.shape()
            ),
        ));
    }
    if xl.max_offset() > data.len() {
        return Err(Error::invalid(
            op,
            "internal: input view outside its storage",
        ));
    }
    let groups = g.p.groups;
    let (cg, og) = (g.c / groups, g.o / groups);
    if w.shape != [g.o, cg, g.kh, g.kw] || w.groups != groups {
        return Err(Error::invalid(
            op,
            format!(
                "prepacked weight {:?} (groups {}) does not match this convolution",
                w.shape, w.groups
            ),
        ));
    }
    let m = g.m();
    let mut out = super::pool::take::<f32>(m * g.o);
    let zeros = vec![S::zeroed(); cg.max(1)];
    for (gi, b) in w.panels.iter().enumerate() {
        let src = NhwcSource {
            data,
            base: xl.offset() + gi * cg,
            sn: s[0],
            sh: s[2],
            sw: s[3],
            zeros: &zeros,
            g: *g,
            cg,
        };
        let mut e = Epilogue::new().with_activation(ep.activation);
        if let Some(bias) = ep.bias {
            e = e.with_bias(&bias[gi * og..(gi + 1) * og]);
        }
        if let Some(r) = ep.residual {
            let off = r.offset + gi * og * r.col_stride;
            e = e.with_residual(MatRef::new(
                r.data,
                off,
                r.rows,
                og,
                r.row_stride,
                r.col_stride,
            ));
        }
        gemm::gemm_gather(ep.path, &src, m, b, &mut out[gi * og..], g.o, &e)?;
    }
    Ok(out)
}

/// `act(conv(x, w) + bias) + residual` for an input view `xl` of `[N, C, H, W]` with channel
/// stride 1 (channels-last, or a view of it); returns the `[N, Ho, Wo, O]` rows (NHWC,
/// contiguous) in `ep.out_dtype`.
pub(crate) fn conv2d_nhwc(
    x: &CpuStorage,
    xl: &Layout,
    w: &PackedConv,
    g: &ConvGeom,
    ep: &ConvEpilogue,
) -> Result<CpuStorage> {
    if let Some(b) = ep.bias {
        if b.len() != g.o {
            return Err(Error::shape(
                "conv2d",
                format!("a bias of length {}", g.o),
                &[b.len()],
            ));
        }
    }
    let out = match x {
        CpuStorage::F32(v) => conv_typed(v, xl, w, g, ep)?,
        CpuStorage::F16(v) => conv_typed(v, xl, w, g, ep)?,
        CpuStorage::BF16(v) => conv_typed(v, xl, w, g, ep)?,
        other => {
            return Err(Error::UnsupportedDType {
                op: "conv2d",
                dtype: other.dtype(),
                device: Device::Cpu,
                hint: "; conv2d takes f32, f16 or bf16".into(),
            })
        }
    };
    Ok(match ep.out_dtype {
        DType::F16 => CpuStorage::F16(narrow(out)),
        DType::BF16 => CpuStorage::BF16(narrow(out)),
        _ => CpuStorage::F32(out),
    })
}
