//! The CPU matrix engine: BLIS-style packed GEMM with AVX-512 microkernels and fused epilogues.
//!
//! `C (M × N, row-major, leading dimension ldc) = epilogue(A (M × K) @ B (K × N))`, with A and B
//! arbitrary strided views ([`MatRef`]), f32 accumulation for every input dtype, and the
//! epilogue ([`Epilogue`]: alpha/beta, bias, activation, residual, or GLU gating) applied while
//! the last K block of each C tile is stored.
//!
//! Invariants:
//! - Every public entry point validates all views, `ldc`, the bias length and the residual
//!   shape before any unchecked access, and reports problems as [`crate::Error`]; nothing here
//!   panics on bad input.
//! - Paths: [`GemmPath::Avx512`] (14×32 f32 FMA kernel; for bf16 Intel AMX tiles when the CPU
//!   and OS allow them, else `vdpbf16ps` or widening, see [`bf16_method`]; f16 widened with
//!   F16C while packing), [`GemmPath::Avx2`] (6×32 f32 FMA kernel for CPUs without AVX-512;
//!   bf16 and f16 widened while packing) and [`GemmPath::Fallback`] (portable Rust over the same
//!   packed layouts). The path is chosen per call from the CPU features, `XPU_CPU_SIMD`
//!   (`fallback` or `avx2`, read once) and [`set_gemm_override`]; a path the CPU cannot run
//!   degrades to the next one down (AVX-512 → AVX2 → fallback).
//! - Packed B layouts do not depend on the path, so a [`PackedB`] works under any path.
//! - Small products run on the calling thread; larger ones split over rayon's pool.

mod act;
#[cfg(target_arch = "x86_64")]
mod amx;
#[cfg(target_arch = "x86_64")]
mod amx_gather;
mod amx_pack;
#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx2_ep;
#[cfg(target_arch = "x86_64")]
mod avx2_pack;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "x86_64")]
mod avx512_ep;
#[cfg(target_arch = "x86_64")]
mod avx512_ep_fast;
#[cfg(target_arch = "x86_64")]
mod avx512_fill;
#[cfg(target_arch = "x86_64")]
mod avx512_pack;
mod caller_first;
mod driver;
mod gather;
#[cfg(target_arch = "x86_64")]
mod gather_dot;
mod layout;
mod lazy_zeroed;
mod pack;
mod panels;
mod peak;
mod portable;
mod runner;
mod scratch;
#[cfg(test)]
pub(crate) mod tests;
mod types;

#[cfg(target_arch = "x86_64")]
pub(crate) use amx::{load_config as amx_load_config, release as amx_release};
#[cfg(target_arch = "x86_64")]
pub(crate) use amx_gather::gemm_gather_amx;
pub use amx_pack::{amx_unavailable_reason, bf16_method, Bf16Method};
#[cfg(target_arch = "x86_64")]
pub(crate) use avx2_pack::load8;
#[cfg(target_arch = "x86_64")]
pub(crate) use avx512_pack::transpose16;
pub(crate) use driver::sequential;
pub(crate) use gather::{gemm_gather, RowSource, GATHER_KCU};
#[cfg(target_arch = "x86_64")]
pub(crate) use gather_dot::gemm_gather_dot;
pub(crate) use layout::{BLayout, PackKind, NR};
pub use layout::{PackElem, PackedB};
#[cfg(test)]
pub(crate) use layout::{KCU_BF16, KCU_F32};
pub(crate) use pack::{SrcKind, ToF32};
pub(crate) use peak::{bf16_kind, bf16_kinds};
pub use peak::{measure_amx_peak_gflops, measure_bf16_dp_peak_gflops, measure_fma_peak_gflops};
pub use types::{Epilogue, MatRef};
// `Half` is named by the x86 epilogues and by tests on every target.
#[cfg_attr(not(target_arch = "x86_64"), allow(unused_imports))]
pub(crate) use types::{Half, Out16, Residual};

use crate::config::CpuIsa;
use crate::{DType, Error, Result};
use driver::EpCtx;
use half::{bf16, f16};
use runner::{BPack, Runner};
pub(crate) use scratch::{clear_spare, with_partial_sums, AlignedBuf};
use scratch::{with_scratch, Slot};
use std::sync::atomic::{AtomicU8, Ordering};

/// Which implementation a GEMM call runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GemmPath {
    /// AVX-512 microkernels (x86-64 with AVX-512F; AVX512_BF16 for bf16).
    Avx512,
    /// The AVX2 + FMA microkernel (x86-64 with AVX2, FMA and F16C; every float dtype widened
    /// to f32 while packing).
    Avx2,
    /// Portable Rust kernels (always available).
    Fallback,
}

static OVERRIDE: AtomicU8 = AtomicU8::new(0);

/// Forces every later GEMM call (process-wide) onto `path`, or restores automatic selection
/// with `None`. A forced path the CPU cannot run degrades to the next one down (AVX-512 →
/// AVX2 → fallback).
pub fn set_gemm_override(path: Option<GemmPath>) {
    let v = match path {
        None => 0,
        Some(GemmPath::Avx512) => 1,
        Some(GemmPath::Fallback) => 2,
        Some(GemmPath::Avx2) => 3,
    };
    OVERRIDE.store(v, Ordering::Relaxed);
}

/// The configured instruction set cap (`config::CpuConfig::isa`) as a path cap.
fn configured_cap() -> Option<GemmPath> {
    match crate::config::with(|c| c.cpu.isa) {
        CpuIsa::Portable => Some(GemmPath::Fallback),
        CpuIsa::Avx2 => Some(GemmPath::Avx2),
        CpuIsa::Auto => None,
    }
}

/// True when the configuration caps the CPU at portable code.
fn configured_portable() -> bool {
    configured_cap() == Some(GemmPath::Fallback)
}

/// True when the CPU can run `path`'s kernels for `dtype` inputs.
fn path_available(path: GemmPath, dtype: DType) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        match (path, dtype) {
            (GemmPath::Fallback, _) => true,
            (GemmPath::Avx512, DType::F32 | DType::F16) => avx512::has_avx512(),
            (GemmPath::Avx512, DType::BF16) => avx512::has_avx512(),
            (GemmPath::Avx2, DType::F32 | DType::F16 | DType::BF16) => avx2::has_avx2(),
            _ => false,
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = dtype;
        path == GemmPath::Fallback
    }
}

/// The path a GEMM on `dtype` inputs would take right now.
pub fn gemm_path(dtype: DType) -> GemmPath {
    let wanted = match OVERRIDE.load(Ordering::Relaxed) {
        1 => GemmPath::Avx512,
        2 => GemmPath::Fallback,
        3 => GemmPath::Avx2,
        _ => configured_cap().unwrap_or(GemmPath::Avx512),
    };
    let order = [GemmPath::Avx512, GemmPath::Avx2, GemmPath::Fallback];
    let from = order.iter().position(|&p| p == wanted).unwrap_or(0);
    order[from..]
        .iter()
        .copied()
        .find(|&p| path_available(p, dtype))
        .unwrap_or(GemmPath::Fallback)
}

/// Where B comes from.
pub(crate) enum BSrc<'a, T: PackElem> {
    /// Pack this view now (`glu`: it is `K × 2N`).
    Raw(MatRef<'a, T>, bool),
    /// Already packed.
    Packed(&'a PackedB<T>),
}

/// Validates everything and builds the kernels' epilogue context.
fn check<'a, T: Copy>(
    op: &'static str,
    a: &MatRef<T>,
    (k, n, glu): (usize, usize, bool),
    c: &[f32],
    ldc: usize,
    ep: &Epilogue<'a>,
) -> Result<EpCtx<'a>> {
    a.validate(op, "a")?;
    if a.cols != k {
        return Err(Error::shape(
            op,
            format!("A with K = {k} columns"),
            &[a.rows, a.cols],
        ));
    }
    check_out(op, a.rows, (n, glu), c, ldc, ep)
}

/// Validates C (`m × n`, `ldc`), the bias and the residual; builds the kernels' epilogue context.
fn check_out<'a>(
    op: &'static str,
    m: usize,
    (n, glu): (usize, bool),
    c: &[f32],
    ldc: usize,
    ep: &Epilogue<'a>,
) -> Result<EpCtx<'a>> {
    if m > 0 && n > 0 {
        if ldc < n {
            return Err(Error::invalid(
                op,
                format!("ldc = {ldc} is smaller than N = {n}"),
            ));
        }
        let need = (m - 1).checked_mul(ldc).and_then(|x| x.checked_add(n));
        if need.is_none_or(|need| c.len() < need) {
            return Err(Error::invalid(
                op,
                format!(
                    "C has {} elements, {m}x{n} with ldc {ldc} needs {need:?}",
                    c.len()
                ),
            ));
        }
    }
    let nb = if glu { 2 * n } else { n };
    if let Some(b) = ep.bias {
        if b.len() != nb {
            return Err(Error::shape(op, format!("bias of length {nb}"), &[b.len()]));
        }
    }
    let residual = match (ep.residual, ep.residual16) {
        (Some(r), None) => Some(Residual::F32(r)),
        (None, Some((r, h))) => Some(Residual::Half(r, h)),
        (None, None) => None,
        (Some(_), Some(_)) => {
            return Err(Error::invalid(op, "internal: two residuals"));
        }
    };
    if let Some(r) = &residual {
        r.validate(op)?;
        let (rows, cols) = r.dims();
        if rows != m || cols != n {
            return Err(Error::shape(
                op,
                format!("residual of shape [{m}, {n}]"),
                &[rows, cols],
            ));
        }
    }
    if let Some(o) = &ep.out16 {
        let need = m
            .checked_sub(1)
            .and_then(|r| r.checked_mul(o.ld))
            .and_then(|x| x.checked_add(n));
        if m > 0 && n > 0 && (o.ld < n || need.is_none_or(|need| o.len < need)) {
            return Err(Error::invalid(
                op,
                format!(
                    "16-bit output of {} elements with row stride {} cannot hold {m}x{n}",
                    o.len, o.ld
                ),
            ));
        }
    }
    if glu && ep.beta != 0.0 {
        return Err(Error::invalid(
            op,
            "beta must be 0 for the GLU (GEGLU) GEMM",
        ));
    }
    Ok(EpCtx {
        alpha: ep.alpha,
        beta: ep.beta,
        bias: ep.bias,
        act: ep.activation,
        residual,
        glu,
        n,
        out16: ep.out16,
    })
}

/// The common entry point: validate, pack B if needed, run on `path`.
fn gemm_on<T: Runner>(
    op: &'static str,
    path: GemmPath,
    a: MatRef<T>,
    b: BSrc<T>,
    c: &mut [f32],
    ldc: usize,
    ep: &Epilogue,
) -> Result<()> {
    match b {
        BSrc::Packed(p) => {
            let l = p.layout;
            let ctx = check(op, &a, (l.k, l.n, l.glu), c, ldc, ep)?;
            T::run(path, a, BPack::Packed(&p.buf), l, c, ldc, &ctx)?;
        }
        BSrc::Raw(b, glu) => {
            b.validate(op, "b")?;
            if glu && !b.cols.is_multiple_of(2) {
                return Err(Error::shape(op, "B with 2N columns", &[b.rows, b.cols]));
            }
            let n = if glu { b.cols / 2 } else { b.cols };
            let ctx = check(op, &a, (b.rows, n, glu), c, ldc, ep)?;
            if a.rows == 0 || n == 0 {
                return Ok(());
            }
            let l = BLayout::new(T::kind(), b.rows, n, glu);
            with_scratch(Slot::B, |buf| {
                T::run(path, a, BPack::OnFirstUse(b, buf), l, c, ldc, &ctx)
            })?;
        }
    }
    Ok(())
}

/// A prepacked GEMM of any input element type on an explicit path (the convolutions pass
/// theirs through).
pub(crate) fn gemm_prepacked_on<T: Runner>(
    path: GemmPath,
    a: MatRef<T>,
    b: &PackedB<T>,
    c: &mut [f32],
    ldc: usize,
    ep: &Epilogue,
) -> Result<()> {
    gemm_on("gemm_prepacked", path, a, BSrc::Packed(b), c, ldc, ep)
}

/// Test hook: the same as the public functions but on an explicit path.
#[cfg(test)]
pub(crate) fn gemm_with_path<T: Runner>(
    path: GemmPath,
    a: MatRef<T>,
    b: BSrc<T>,
    c: &mut [f32],
    ldc: usize,
    ep: &Epilogue,
) -> Result<()> {
    gemm_on("gemm", path, a, b, c, ldc, ep)
}

macro_rules! entry_points {
    ($t:ty, $dt:expr, $plain:ident, $glu:ident, $pre:ident, $name:literal) => {
        #[doc = concat!("`C = epilogue(A @ B)` for ", $name, " A (`M × K`) and B (`K × N`), f32 output ")]
        /// (`M × N`, row-major with leading dimension `ldc`). See [`Epilogue`] for the order.
        pub fn $plain(a: MatRef<$t>, b: MatRef<$t>, c: &mut [f32], ldc: usize, ep: &Epilogue) -> Result<()> {
            gemm_on(stringify!($plain), gemm_path($dt), a, BSrc::Raw(b, false), c, ldc, ep)
        }

        #[doc = concat!("GLU GEMM for ", $name, ": B is `K × 2N`; `C = h * act(g) + residual` with ")]
        /// `h`/`g` the products with the first/second N columns of B (plus their halves of the
        /// bias) and `act = ep.activation` (`Gelu` for diffusers' GEGLU). Fused: each tile
        /// computes matching column blocks of both halves at once. `ep.beta` must be 0.
        pub fn $glu(a: MatRef<$t>, b: MatRef<$t>, c: &mut [f32], ldc: usize, ep: &Epilogue) -> Result<()> {
            gemm_on(stringify!($glu), gemm_path($dt), a, BSrc::Raw(b, true), c, ldc, ep)
        }

        #[doc = concat!("`C = epilogue(A @ B)` for ", $name, " with B prepacked by [`PackedB::new`] ")]
        /// (or a GLU GEMM when it was packed by [`PackedB::new_geglu`]).
        pub fn $pre(a: MatRef<$t>, b: &PackedB<$t>, c: &mut [f32], ldc: usize, ep: &Epilogue) -> Result<()> {
            gemm_on(stringify!($pre), gemm_path($dt), a, BSrc::Packed(b), c, ldc, ep)
        }
    };
}

entry_points!(
    f32,
    DType::F32,
    gemm_f32,
    gemm_geglu_f32,
    gemm_prepacked_f32,
    "f32"
);
entry_points!(
    f16,
    DType::F16,
    gemm_f16,
    gemm_geglu_f16,
    gemm_prepacked_f16,
    "f16"
);
entry_points!(
    bf16,
    DType::BF16,
    gemm_bf16,
    gemm_geglu_bf16,
    gemm_prepacked_bf16,
    "bf16"
);
