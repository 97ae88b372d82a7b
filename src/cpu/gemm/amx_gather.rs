//! AMX implicit GEMM: bf16 A rows from a [`RowSource`] (e.g. a convolution's NHWC input) packed
//! straight into AMX micro-panels, so bf16 convolutions can run on the AMX tiles without an
//! im2col matrix or widening to f32.
//!
//! Invariants:
//! - The A panel layout is exactly [`super::amx_pack::pack_a_amx`]'s (`[kcu / 16][32 rows][16
//!   pairs]`, zeros past K and for rows past M), and the tiles and epilogue are the plain AMX
//!   GEMM's, so a gathered product equals the plain AMX GEMM on the materialised A bit for bit.
//! - Runs are copied element by element position (a run may start at an odd k or cross a
//!   32-element step); nothing is read past a run's length (the [`RowSource`] contract).
//! - [`gemm_gather_amx`] never touches C unless it runs: it answers `Ok(false)` when AMX is not
//!   usable on `path` or `b` is not in the AMX layout, and the caller keeps its widened path.

use super::amx::{self, STEP};
use super::driver::{self, EpCtx, Kernel, Tile};
use super::gather::RowSource;
use super::layout::{PackKind, PackedView};
use super::{check_out, Epilogue, GemmPath, PackedB};
use crate::Result;
use half::bf16;

const MR: usize = amx::MR;

/// The AMX kernel over a gathered A.
struct GatherAmx<'a, R> {
    src: &'a R,
    /// The real K (elements).
    k: usize,
}

impl<R: RowSource<Elem = bf16>> Kernel for GatherAmx<'_, R> {
    type PA = u32;
    type PB = u32;
    const MR: usize = MR;
    const L3_BOUND_B: bool = true;
    fn begin(&self) {
        // SAFETY: the kernel is built only after amx_status() returned Ok.
        unsafe { amx::load_config() }
    }
    fn end(&self) {
        // SAFETY: as above.
        unsafe { amx::release() }
    }
    fn pack_a(&self, row0: usize, rows: usize, u0: usize, u1: usize, dst: &mut [u32]) {
        pack_gathered_amx(self.src, self.k, (row0, rows), (u0, u1), dst);
    }
    unsafe fn tile(&self, kcu: usize, a: *const u32, b: *const u32, t: &Tile, ep: &EpCtx) {
        amx::tile_amx(kcu, a, b, t, ep);
    }
}

/// Packs rows `row0..row0 + rows` and pairs `u0..u1` (whole steps) of the gathered A into one
/// AMX micro-panel `dst` (`32 * (u1 - u0)` values).
fn pack_gathered_amx<R: RowSource<Elem = bf16>>(
    src: &R,
    k: usize,
    (row0, rows): (usize, usize),
    (u0, u1): (usize, usize),
    dst: &mut [u32],
) {
    let (k0, k1) = ((2 * u0).min(k), (2 * u1).min(k));
    if rows < MR || k1 - k0 < 2 * (u1 - u0) {
        dst.fill(0);
    }
    let d16: &mut [u16] = bytemuck::cast_slice_mut(dst);
    let mut ptrs = [std::ptr::null::<bf16>(); MR];
    let mut kk = k0;
    while kk < k1 {
        let len = src.runs(row0, rows, kk, &mut ptrs).clamp(1, k1 - kk);
        for (r, &p) in ptrs.iter().enumerate().take(rows) {
            // SAFETY: the RowSource contract: `p` is readable for `len` elements.
            let run: &[u16] = bytemuck::cast_slice(unsafe { std::slice::from_raw_parts(p, len) });
            let (mut e, mut done) = (kk - k0, 0);
            while done < len {
                let (s, j) = (e / (2 * STEP), e % (2 * STEP));
                let n = (2 * STEP - j).min(len - done);
                let o = (s * MR + r) * 2 * STEP + j;
                d16[o..o + n].copy_from_slice(&run[done..done + n]);
                done += n;
                e += n;
            }
        }
        kk += len;
    }
}

/// `C (m × N) = epilogue(A @ B)` on the AMX tiles with bf16 A (`m × K`) gathered from `src` and
/// B prepacked in the AMX layout (a [`PackedB<bf16>`] built while AMX is in use). Returns
/// `Ok(false)` without touching C when AMX cannot run here (`path` is not
/// [`GemmPath::Avx512`], the CPU/OS/process lacks AMX, or `b` has another layout); validates C,
/// the bias and the residual like the plain entry points.
pub(crate) fn gemm_gather_amx<R: RowSource<Elem = bf16>>(
    path: GemmPath,
    src: &R,
    m: usize,
    b: &PackedB<bf16>,
    c: &mut [f32],
    ldc: usize,
    ep: &Epilogue,
) -> Result<bool> {
    let l = b.layout;
    if path != GemmPath::Avx512 || l.kind != PackKind::Amx || amx::amx_status().is_err() {
        return Ok(false);
    }
    let ctx = check_out("gemm_gather_amx", m, (l.n, l.glu), c, ldc, ep)?;
    let view = PackedView {
        data: b.buf.slice::<u32>(l.len()),
        layout: l,
    };
    driver::run(&GatherAmx { src, k: l.k }, m, view, c, ldc, &ctx)?;
    Ok(true)
}
