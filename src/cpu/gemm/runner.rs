//! The per-element-type runners: which kernel serves a GEMM on each path, and where its packed
//! B panels come from (packed beforehand, packed on first use, or filled by the kernel's tiles
//! from a row-major source: see [`super::panels`]).
//!
//! Invariants: a direct source ([`panels::DirectB`]) is only handed to a kernel that fills
//! from that element type (rows of its own input type, f32, f16 or widened bf16, to the
//! AVX-512 f32 kernel; bf16 rows to the `vdpbf16ps` pair kernel where AVX512BW was detected);
//! every other run packs through its packer.

use super::driver::{self, EpCtx};
use super::layout::sealed::Sealed;
use super::layout::{BLayout, PackElem, PackKind, PackedView, NR};
use super::pack::{self, ToF32};
use super::{amx_pack, panels, portable, AlignedBuf, GemmPath, MatRef};
#[cfg(target_arch = "x86_64")]
use super::{avx2, avx512};
use crate::Result;
use half::{bf16, f16};

/// The op named when the host will not allocate a per-call B pack.
const PACKED_B: &str = "gemm (packed B)";

/// Where a run's packed B comes from.
pub(crate) enum BPack<'a, T> {
    /// Already packed into this buffer.
    Packed(&'a AlignedBuf),
    /// Packed from this (validated) B into this buffer, panel by panel as tasks first need them
    /// (see [`panels`]).
    OnFirstUse(MatRef<'a, T>, &'a mut AlignedBuf),
}

/// Runs the kernels of one element type over a B packed in layout `l`.
pub(crate) trait Runner: PackElem + Sealed {
    fn run(
        path: GemmPath,
        a: MatRef<Self>,
        b: BPack<'_, Self>,
        l: BLayout,
        c: &mut [f32],
        ldc: usize,
        ep: &EpCtx,
    ) -> Result<()>;
}

/// Packs one B panel (see [`pack::pack_b_f32_panel`]).
type PanelPacker<S, P> = fn(&MatRef<S>, &BLayout, (usize, usize), usize, &mut [P]);

/// Runs `kern` over B packed in layout `l` (element `P`), or packed on first use by `pack`
/// (or, for full panels of a `direct` source, filled by the kernel's tiles).
#[allow(clippy::too_many_arguments)]
fn run_on<S: Sync, P: bytemuck::Pod + Send + Sync, K: driver::Kernel<PB = P>, D: Sync>(
    kern: &K,
    b: BPack<'_, S>,
    l: BLayout,
    (pack, direct): (PanelPacker<S, P>, Option<panels::DirectB<'_, D>>),
    c: &mut [f32],
    ldc: usize,
    ep: &EpCtx,
    m: usize,
) -> Result<()> {
    match b {
        BPack::Packed(buf) => {
            let view = PackedView {
                data: buf.slice::<P>(l.len()),
                layout: l,
            };
            driver::run(kern, m, view, c, ldc, ep)
        }
        BPack::OnFirstUse(src, buf) => {
            let width = if l.glu { 2 } else { 1 };
            let flops = 2.0 * m as f64 * (l.n * width) as f64 * l.k.max(1) as f64;
            if flops < driver::PAR_MIN_FLOPS {
                // One thread: nothing to overlap, so pack in place up front and skip the
                // per-call panel states.
                let data = buf.slice_mut::<P>(PACKED_B, l.len())?;
                for bi in 0..l.nblk {
                    let (u0, u1) = l.block(bi);
                    for q in 0..l.npanels {
                        let at = l.panel_offset(bi, q);
                        pack(&src, &l, (u0, u1), q, &mut data[at..at + (u1 - u0) * NR]);
                    }
                }
                let view = PackedView { data, layout: l };
                return driver::run(kern, m, view, c, ldc, ep);
            }
            let packer = |u0, u1, p, ch: &mut [P]| pack(&src, &l, (u0, u1), p, ch);
            let lazy = panels::LazyPanels::new(buf, l, packer)?.with_direct(direct);
            driver::run_panels(kern, m, &lazy, c, ldc, ep)
        }
    }
}

fn run_f32_like<S: ToF32>(
    path: GemmPath,
    a: MatRef<S>,
    b: BPack<'_, S>,
    l: BLayout,
    c: &mut [f32],
    ldc: usize,
    ep: &EpCtx,
) -> Result<()> {
    let pack = pack::pack_b_f32_panel::<S>;
    #[cfg(target_arch = "x86_64")]
    if path == GemmPath::Avx512 {
        if let Some(k) = avx512::AvxF32::new(a) {
            let direct = direct_rows(&b);
            return run_on(&k, b, l, (pack, direct), c, ldc, ep, a.rows);
        }
    }
    #[cfg(target_arch = "x86_64")]
    if path != GemmPath::Fallback {
        if let Some(k) = avx2::Avx2F32::new(a) {
            return run_on(&k, b, l, (pack, NO_DIRECT), c, ldc, ep, a.rows);
        }
    }
    let _ = path;
    run_on(
        &portable::PortF32 { a },
        b,
        l,
        (pack, NO_DIRECT),
        c,
        ldc,
        ep,
        a.rows,
    )
}

/// No direct source: B's panels all go through the packer.
const NO_DIRECT: Option<panels::DirectB<'static, f32>> = None;

/// A per-call bf16 B with unit column stride, as the source the pair kernel's tiles may fill
/// its panels from ([`panels::DirectB`]), where the CPU has the AVX512BW permutes they use.
#[cfg(target_arch = "x86_64")]
fn direct_bf16<'a>(b: &BPack<'a, bf16>) -> Option<panels::DirectB<'a, bf16>> {
    match b {
        BPack::OnFirstUse(src, _)
            if src.col_stride == 1 && is_x86_feature_detected!("avx512bw") =>
        {
            Some(panels::DirectB {
                data: src.data,
                offset: src.offset,
                row_stride: src.row_stride,
            })
        }
        _ => None,
    }
}

/// A per-call B with unit column stride, as the source the f32 kernel's tiles may fill its
/// panels from ([`panels::DirectB`]: f32 rows copied, f16/bf16 rows widened); `None` for B
/// packed beforehand and for other layouts.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
fn direct_rows<'a, S: ToF32>(b: &BPack<'a, S>) -> Option<panels::DirectB<'a, S>> {
    match b {
        BPack::OnFirstUse(src, _) if src.col_stride == 1 => Some(panels::DirectB {
            data: src.data,
            offset: src.offset,
            row_stride: src.row_stride,
        }),
        _ => None,
    }
}

/// f32 and f16 inputs always run the f32 kernels (f16 widened while packing).
macro_rules! f32_like_runner {
    ($($t:ty),*) => {$(
        impl Runner for $t {
            fn run(
                path: GemmPath,
                a: MatRef<$t>,
                b: BPack<'_, $t>,
                l: BLayout,
                c: &mut [f32],
                ldc: usize,
                ep: &EpCtx,
            ) -> Result<()> {
                run_f32_like(path, a, b, l, c, ldc, ep)
            }
        }
    )*};
}

f32_like_runner!(f32, f16);

impl Runner for bf16 {
    fn run(
        path: GemmPath,
        a: MatRef<bf16>,
        b: BPack<'_, bf16>,
        l: BLayout,
        c: &mut [f32],
        ldc: usize,
        ep: &EpCtx,
    ) -> Result<()> {
        if l.kind == PackKind::F32 {
            return run_f32_like(path, a, b, l, c, ldc, ep);
        }
        if l.kind == PackKind::Amx {
            // The AMX layout is packed whole, up front.
            let buf = match b {
                BPack::Packed(buf) => buf,
                BPack::OnFirstUse(src, buf) => {
                    bf16::pack_into(&src, &l, buf)?;
                    &*buf
                }
            };
            let view = PackedView {
                data: buf.slice::<u32>(l.len()),
                layout: l,
            };
            return amx_pack::run(path, a, view, c, ldc, ep);
        }
        #[cfg(target_arch = "x86_64")]
        if path == GemmPath::Avx512 {
            if let Some(k) = avx512::AvxBf16::new(a) {
                let direct = direct_bf16(&b);
                return run_on(
                    &k,
                    b,
                    l,
                    (pack::pack_b_bf16_panel, direct),
                    c,
                    ldc,
                    ep,
                    a.rows,
                );
            }
        }
        let _ = path;
        let pack = pack::pack_b_bf16_panel;
        run_on(
            &portable::PortBf16 { a },
            b,
            l,
            (pack, NO_DIRECT),
            c,
            ldc,
            ep,
            a.rows,
        )
    }
}
