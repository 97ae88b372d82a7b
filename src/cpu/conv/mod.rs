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
//! - [`PackedConv`] holds B once per group, built once (by `nn::Conv2d`, or per call by
//!   `conv2d`): as the engine's f32 panels (16-bit weights widened exactly), or — for bf16
//!   weights when the bf16 method is AMX — as bf16 AMX panels, so a bf16 convolution runs on
//!   the AMX tiles with its input gathered straight into AMX micro-panels (never widened). AMX
//!   panels serve only bf16 inputs on the AVX-512 path ([`PackedConv::serves`]); any other call
//!   packs f32 panels from the weight tensor instead (the caller's fallback), so a forced
//!   portable path never needs AMX. A 3×3 stride-1 ungrouped layer of at least 16 channels
//!   each way holds instead the Winograd F(4,3) or F(2,3) transform of its filters
//!   ([`winograd`]): built for the layer's padding, refused for any other geometry, serving every input dtype.
//! - The input view must have channel stride 1 (any other strides, any offset); it is checked
//!   against its storage once, before any unchecked read.
//! - Accumulation is f32; 16-bit outputs are rounded once at the end.

#[cfg(test)]
mod tests;
mod transpose;
mod winograd;
#[cfg(target_arch = "x86_64")]
mod winograd_avx2;
mod winograd_in;
mod winograd_math;
mod winograd_out;
mod winograd_pack;
#[cfg(test)]
mod winograd_tests;
mod winograd_use;

pub(crate) use transpose::{nchw_to_nhwc, nhwc_to_nchw};
pub(crate) use winograd::{
    choose_tile as winograd_choose_tile, f4_allowed as winograd_f4_allowed,
    per_call_layer_tile as winograd_per_call_layer_tile,
    per_call_min_pixels as winograd_per_call_min_pixels, suits as winograd_suits,
    Operands as WinogradOperands, Tile as WinogradTile,
};
pub(crate) use winograd_use::WinogradUse;

use super::gemm::{
    self, bf16_method, Bf16Method, Epilogue, GemmPath, MatRef, Out16, PackedB, Residual, RowSource,
    ToF32, GATHER_KCU,
};
use super::storage::CpuStorage;
use crate::desc::Activation;
use crate::desc::ConvGeom;
use crate::layout::Layout;
use crate::{DType, Device, Error, Result};
use half::bf16;

/// The B panels of a [`PackedConv`], one per group.
enum Panels {
    /// The f32 gather engine's panels.
    F32(Vec<PackedB<f32>>),
    /// bf16 panels in the AMX layout, or in the `vdpbf16ps` pair layout where dot products
    /// are the bf16 method.
    Amx(Vec<PackedB<bf16>>),
    /// A 3×3 stride-1 filter bank transformed for Winograd F(2,3) or F(4,3) (see [`winograd`]).
    Winograd(winograd::WinogradWeights),
}

/// The Cpu convolution kernels: the autotuner's candidates for `cpu_conv2d`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ConvKernel {
    /// The implicit GEMM over `[kh·kw·C/G, O/G]` panels (f32, AMX or `vdpbf16ps` pairs).
    ImplicitGemm,
    /// Winograd F(2×2, 3×3).
    WinogradF2,
    /// Winograd F(4×4, 3×3).
    WinogradF4,
}

impl ConvKernel {
    /// The candidate's name (what `config::AutotuneConfig::force` takes).
    pub(crate) fn name(self) -> &'static str {
        match self {
            ConvKernel::ImplicitGemm => "implicit_gemm",
            ConvKernel::WinogradF2 => "winograd_f2",
            ConvKernel::WinogradF4 => "winograd_f4",
        }
    }
}

/// Convolution weights prepacked for the implicit GEMM: per group, B = `[kh·kw·C/G, O/G]`.
pub(crate) struct PackedConv {
    /// `[O, C/G, kh, kw]` of the source weight.
    pub shape: [usize; 4],
    pub groups: usize,
    panels: Panels,
}

/// Checks `w` against `shape` and `groups`; returns `(O/G, K)`.
fn check_weight(len: usize, shape: [usize; 4], groups: usize) -> Result<(usize, usize)> {
    let [o, cg, kh, kw] = shape;
    if groups == 0 || !o.is_multiple_of(groups) || len != o * cg * kh * kw {
        return Err(Error::invalid(
            "conv2d prepack",
            format!("weight {shape:?} with {len} values and groups {groups}"),
        ));
    }
    Ok((o / groups, kh * kw * cg))
}

/// OIHW -> OHWI, so that k = tap * cg + c runs contiguously along each output channel (B is
/// that matrix transposed, a strided view the packer reads in place).
fn to_ohwi<E: super::pool::Recycle + Send + Sync>(
    w: &[E],
    [o, cg, kh, kw]: [usize; 4],
) -> Result<Vec<E>> {
    if kh * kw > 1 && cg > 1 {
        transpose::transpose(w, 0, (o, cg, kh * kw))
    } else {
        super::alloc::copied("conv2d prepack", w)
    }
}

impl PackedConv {
    /// Packs a row-major `[O, C/G, kh, kw]` f32 weight.
    pub(crate) fn new(w: &[f32], shape: [usize; 4], groups: usize) -> Result<PackedConv> {
        let (og, k) = check_weight(w.len(), shape, groups)?;
        let ohwi = to_ohwi(w, shape)?;
        let mut panels = super::alloc::with_capacity("conv2d prepack", groups)?;
        for gi in 0..groups {
            let b = MatRef::new(&ohwi, gi * og * k, k, og, 1, k);
            panels.push(PackedB::new_f32_blocked(b, GATHER_KCU)?);
        }
        super::pool::give(ohwi);
        Ok(PackedConv {
            shape,
            groups,
            panels: Panels::F32(panels),
        })
    }

    /// Packs a row-major `[O, C/G, kh, kw]` bf16 weight for this process's bf16 method: the
    /// AMX layout where AMX is in use, the `vdpbf16ps` pair layout where dot products are;
    /// `None` otherwise (then the weight is packed with [`Self::new`]).
    pub(crate) fn new_amx(
        w: &[bf16],
        shape: [usize; 4],
        groups: usize,
    ) -> Result<Option<PackedConv>> {
        let method = bf16_method();
        if method != Bf16Method::Amx && method != Bf16Method::DotProduct {
            return Ok(None);
        }
        let (og, k) = check_weight(w.len(), shape, groups)?;
        let ohwi = to_ohwi(w, shape)?;
        let mut panels = super::alloc::with_capacity("conv2d prepack", groups)?;
        for gi in 0..groups {
            let b = MatRef::new(&ohwi, gi * og * k, k, og, 1, k);
            let p = PackedB::<bf16>::new(b)?;
            if !(p.is_amx() && method == Bf16Method::Amx
                || p.is_pairs() && method != Bf16Method::Amx)
            {
                return Ok(None);
            }
            panels.push(p);
        }
        super::pool::give(ohwi);
        Ok(Some(PackedConv {
            shape,
            groups,
            panels: Panels::Amx(panels),
        }))
    }

    /// Transforms a row-major `[O, C, 3, 3]` weight (f32, f16 or bf16 values) for Winograd
    /// with the point GEMMs' operand type and the variant chosen by the caller; `params` must be
    /// stride 1, dilation 1, one group ([`winograd_suits`]).
    pub(crate) fn new_winograd_on<S: ToF32>(
        w: &[S],
        shape: [usize; 4],
        params: crate::Conv2dParams,
        operands: winograd::Operands,
        tile: winograd::Tile,
    ) -> Result<PackedConv> {
        let [o, c, kh, kw] = shape;
        if (kh, kw, params.stride, params.dilation, params.groups) != (3, 3, (1, 1), (1, 1), 1) {
            return Err(Error::invalid(
                "conv2d prepack",
                format!("Winograd needs a 3x3 stride-1 undilated ungrouped layer, got {shape:?} {params:?}"),
            ));
        }
        Ok(PackedConv {
            shape,
            groups: 1,
            panels: Panels::Winograd(winograd::WinogradWeights::new(
                w,
                (o, c),
                params,
                operands,
                tile,
            )?),
        })
    }

    /// The weight these panels were packed from, as row-major `[O, C/G, kh, kw]` f32 values
    /// (exactly the packed values: 16-bit weights were widened exactly); `None` for Winograd
    /// panels (transformed filters, from which the weight cannot be recovered bit for bit) or
    /// when the host will not allocate it.
    pub(crate) fn unpack_oihw(&self) -> Option<Vec<f32>> {
        let [o, cg, kh, kw] = self.shape;
        let taps = kh * kw;
        let og = o / self.groups.max(1);
        let ohwi_groups: Vec<Vec<f32>> = match &self.panels {
            Panels::F32(p) => p
                .iter()
                .map(PackedB::unpack_transposed)
                .collect::<Option<_>>()?,
            Panels::Amx(p) => p
                .iter()
                .map(PackedB::unpack_transposed)
                .collect::<Option<_>>()?,
            Panels::Winograd(_) => return None,
        };
        let mut out = super::alloc::zeroed::<f32>("conv2d unpack", o * cg * taps).ok()?;
        for (gi, ohwi) in ohwi_groups.iter().enumerate() {
            // Group `gi`'s B is `[taps·cg, og]` with k = tap·cg + c: given back as `[og][k]`.
            if ohwi.len() != og * taps * cg {
                return None;
            }
            for j in 0..og {
                let row = &ohwi[j * taps * cg..][..taps * cg];
                let oc = gi * og + j;
                for c in 0..cg {
                    for tap in 0..taps {
                        out[(oc * cg + c) * taps + tap] = row[tap * cg + c];
                    }
                }
            }
        }
        Some(out)
    }

    /// True for Winograd panels (either variant).
    pub(crate) fn is_winograd(&self) -> bool {
        matches!(self.panels, Panels::Winograd(_))
    }

    /// The kernel these panels run.
    pub(crate) fn kernel(&self) -> ConvKernel {
        match &self.panels {
            Panels::F32(_) | Panels::Amx(_) => ConvKernel::ImplicitGemm,
            Panels::Winograd(w) if w.tile == winograd::Tile::F4 => ConvKernel::WinogradF4,
            Panels::Winograd(_) => ConvKernel::WinogradF2,
        }
    }

    /// True when these panels can run a convolution of `dtype` inputs right now (AMX panels:
    /// bf16 inputs with AMX usable on the current GEMM path).
    pub(crate) fn serves(&self, dtype: DType) -> bool {
        match self.panels {
            Panels::F32(_) | Panels::Winograd(_) => true,
            Panels::Amx(ref p) => {
                let method = if p.first().is_some_and(|p| p.is_amx()) {
                    Bf16Method::Amx
                } else {
                    Bf16Method::DotProduct
                };
                dtype == DType::BF16
                    && bf16_method() == method
                    && gemm::gemm_path(DType::BF16) == GemmPath::Avx512
            }
        }
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
    /// `[N·Ho·Wo, O]` rows (any strides; f32, or 16-bit read in place); with
    /// `residual_image_stride`, the `[Ho·Wo, O]` rows of image 0, image `b`'s starting
    /// `b · stride` elements later (e.g. a `[N, O, 1, 1]` broadcast: row stride 0), and the
    /// product runs image by image.
    pub residual: Option<Residual<'a>>,
    /// See `residual`.
    pub residual_image_stride: Option<usize>,
    pub out_dtype: DType,
    /// Kernel path (tests force the portable one).
    pub path: GemmPath,
}

/// Input element types of the engine; bf16 can also run on AMX panels.
trait ConvElem: ToF32 + Sync + bytemuck::Zeroable {
    /// Runs the product on AMX panels; `Ok(false)` (C untouched) when this type or this
    /// process cannot.
    fn run_amx(
        _path: GemmPath,
        _src: &NhwcSource<Self>,
        _m: usize,
        _b: &PackedB<bf16>,
        _c: &mut [f32],
        _ldc: usize,
        _e: &Epilogue,
    ) -> Result<bool> {
        Ok(false)
    }
}

impl ConvElem for f32 {}
impl ConvElem for half::f16 {}
impl ConvElem for bf16 {
    fn run_amx(
        path: GemmPath,
        src: &NhwcSource<bf16>,
        m: usize,
        b: &PackedB<bf16>,
        c: &mut [f32],
        ldc: usize,
        e: &Epilogue,
    ) -> Result<bool> {
        #[cfg(target_arch = "x86_64")]
        {
            if b.is_amx() {
                return gemm::gemm_gather_amx(path, src, m, b, c, ldc, e);
            }
            gemm::gemm_gather_dot(path, src, m, b, c, ldc, e)
        }
        // No bf16 dot-product or AMX kernels elsewhere: the widening gather runs instead.
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = (path, src, m, b, c, ldc, e);
            Ok(false)
        }
    }
}

/// The convolution into the f32 rows `out` (`g.m() * g.o`), or, with `out16`, rounded into
/// those 16-bit rows (`out` then holds only partial sums of K blocks).
fn conv_typed<S: ConvElem>(
    data: &[S],
    xl: &Layout,
    w: &PackedConv,
    g: &ConvGeom,
    ep: &ConvEpilogue,
    (out, out16): (&mut [f32], Option<Out16>),
) -> Result<()> {
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
    if out.len() != g.m() * g.o {
        return Err(Error::invalid(
            op,
            "internal: output rows of the wrong size",
        ));
    }
    if out.is_empty() {
        return Ok(());
    }
    if let Panels::Winograd(wg) = &w.panels {
        // With `out16`, `out` is scratch: final f32 rows, each rounded once to 16 bits.
        return winograd::conv_winograd(ep.path, data, xl, wg, g, ep, (out, out16));
    }
    let zeros = super::alloc::zeroed::<S>(op, cg.max(1))?;
    // Images run together, or one by one when the residual steps per image.
    let (parts, gp) = match ep.residual_image_stride {
        Some(_) if g.n > 1 => (g.n, ConvGeom { n: 1, ..*g }),
        _ => (1, *g),
    };
    let m = gp.m();
    for (part, out) in out.chunks_mut(m * g.o).enumerate().take(parts) {
        for gi in 0..groups {
            let src = NhwcSource {
                data,
                base: xl.offset() + part * s[0] + gi * cg,
                sn: s[0],
                sh: s[2],
                sw: s[3],
                zeros: &zeros,
                g: gp,
                cg,
            };
            let mut e = Epilogue::new().with_activation(ep.activation);
            if let Some(bias) = ep.bias {
                e = e.with_bias(&bias[gi * og..(gi + 1) * og]);
            }
            if let Some(r) = ep.residual {
                let image = ep.residual_image_stride.map_or(0, |st| part * st);
                e = e.with_any_residual(r.shifted(image + gi * og * r.col_stride(), m, og));
            }
            if let Some(o) = out16 {
                e = e.with_out16(o.offset(part * m * g.o + gi * og));
            }
            let c = &mut out[gi * og..];
            match &w.panels {
                Panels::F32(p) => gemm::gemm_gather(ep.path, &src, m, &p[gi], c, g.o, &e)?,
                Panels::Winograd(_) => {
                    return Err(Error::invalid(
                        op,
                        "internal: Winograd weights reached the GEMM loop",
                    ))
                }
                Panels::Amx(p) => {
                    if !S::run_amx(ep.path, &src, m, &p[gi], c, g.o, &e)? {
                        return Err(Error::invalid(
                            op,
                            "internal: AMX-packed weights used where AMX cannot run",
                        ));
                    }
                }
            }
        }
    }
    Ok(())
}

/// The op named in the errors of the convolution engine.
const OP: &str = "conv2d";

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
    let run = |out: &mut [f32], out16: Option<Out16>| match x {
        CpuStorage::F32(v) => conv_typed(v, xl, w, g, ep, (out, out16)),
        CpuStorage::F16(v) => conv_typed(v, xl, w, g, ep, (out, out16)),
        CpuStorage::BF16(v) => conv_typed(v, xl, w, g, ep, (out, out16)),
        other => Err(Error::UnsupportedDType {
            op: "conv2d",
            dtype: other.dtype(),
            device: Device::Cpu,
            hint: "; conv2d takes f32, f16 or bf16".into(),
        }),
    };
    // Every output element is written (16-bit outputs by the engine's rounding store).
    let size = g.m() * g.o;
    Ok(match ep.out_dtype {
        DType::F16 => {
            let mut out = super::pool::take::<half::f16>(OP, size)?;
            let o16 = Out16::f16(&mut out, g.o);
            gemm::with_partial_sums(OP, size, |c| run(c, Some(o16)))?;
            CpuStorage::F16(out)
        }
        DType::BF16 => {
            let mut out = super::pool::take::<bf16>(OP, size)?;
            let o16 = Out16::bf16(&mut out, g.o);
            gemm::with_partial_sums(OP, size, |c| run(c, Some(o16)))?;
            CpuStorage::BF16(out)
        }
        _ => {
            let mut c = super::pool::take::<f32>(OP, size)?;
            run(&mut c, None)?;
            CpuStorage::F32(c)
        }
    })
}
