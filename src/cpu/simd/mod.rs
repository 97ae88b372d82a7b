//! Contiguous `f32` slice kernels with run-time SIMD dispatch (AVX-512 or portable fallback).
//!
//! Invariants:
//! - Every kernel takes plain slices and processes the common prefix of its arguments
//!   (`min` of the lengths); none of them panics or reads/writes outside its slices.
//! - The AVX-512 path is only ever selected when the CPU reports `avx512f`, `avx512bw`,
//!   `avx512dq`, `avx512vl`, `fma` and `f16c`, the AVX2 level when it reports `avx2`, `fma` and
//!   `f16c`; an override asking for more than the hardware has gets the best level below it
//!   (that is what keeps the `unsafe` calls sound). At the AVX2 level the slice kernels here
//!   run the portable code compiled for AVX2 (`simd/avx2.rs`); the GEMM, convolution and attention
//!   have hand-written AVX2 kernels.
//! - Both paths implement the same semantics: the scalar references `UnaryOp::apply` /
//!   `BinaryOp::apply` rounded to `f32` within a few ulps (transcendentals ~1e-6 relative or
//!   1e-6 absolute near zero). Reductions accumulate sums in `f64`; max/min propagate NaN.
//! - The level is chosen per call by [`simd_level`]: a scoped thread-local override
//!   ([`with_simd_level`]) wins over the global one ([`set_simd_override`]), which wins over the
//!   `XPU_CPU_SIMD` environment variable (`fallback` forces the portable path, `avx2` caps at
//!   AVX2), read once.
//!   Multi-threaded callers resolve the level once on the calling thread ([`Kernels::current`])
//!   and hand the [`Kernels`] value to their workers.

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2_math;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "x86_64")]
mod avx512_convert;
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512_math;
#[cfg(target_arch = "x86_64")]
mod avx512_norm;
pub(crate) mod fallback;

use crate::config::CpuIsa;
use crate::desc::kinds::{BinaryOp, UnaryOp};
use half::{bf16, f16};
use std::cell::Cell;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::OnceLock;

/// Instruction-set level of the CPU kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SimdLevel {
    /// Portable Rust (scalar or compiler auto-vectorised), available everywhere.
    Fallback,
    /// AVX2 + FMA (x86-64 without AVX-512: AMD Zen 1–3, older Intel). The GEMM, convolution
    /// and attention kernels have AVX2 versions; the slice kernels here run the portable code
    /// compiled for AVX2.
    Avx2,
    /// Hand-written AVX-512 kernels (x86-64 with AVX-512F/BW/DQ/VL, FMA and F16C).
    Avx512,
}

static OVERRIDE: AtomicU8 = AtomicU8::new(0);
static HARDWARE: OnceLock<SimdLevel> = OnceLock::new();

thread_local! {
    static LOCAL_OVERRIDE: Cell<Option<SimdLevel>> = const { Cell::new(None) };
}

fn encode(level: Option<SimdLevel>) -> u8 {
    match level {
        None => 0,
        Some(SimdLevel::Fallback) => 1,
        Some(SimdLevel::Avx512) => 2,
        Some(SimdLevel::Avx2) => 3,
    }
}

fn decode(v: u8) -> Option<SimdLevel> {
    match v {
        1 => Some(SimdLevel::Fallback),
        2 => Some(SimdLevel::Avx512),
        3 => Some(SimdLevel::Avx2),
        _ => None,
    }
}

/// The best level this CPU supports (detected once, ignores every override).
pub fn hardware_simd_level() -> SimdLevel {
    *HARDWARE.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            if is_x86_feature_detected!("avx512f")
                && is_x86_feature_detected!("avx512bw")
                && is_x86_feature_detected!("avx512dq")
                && is_x86_feature_detected!("avx512vl")
                && is_x86_feature_detected!("fma")
                && is_x86_feature_detected!("f16c")
            {
                return SimdLevel::Avx512;
            }
            if is_x86_feature_detected!("avx2")
                && is_x86_feature_detected!("fma")
                && is_x86_feature_detected!("f16c")
            {
                return SimdLevel::Avx2;
            }
        }
        SimdLevel::Fallback
    })
}

/// The level the configuration's instruction set cap allows (`config::CpuConfig::isa`).
fn configured_level() -> SimdLevel {
    match crate::config::with(|c| c.cpu.isa) {
        CpuIsa::Portable => SimdLevel::Fallback,
        CpuIsa::Avx2 => clamp_to_hardware(SimdLevel::Avx2),
        CpuIsa::Auto => hardware_simd_level(),
    }
}

/// `level`, or the best level below it that the hardware has (AVX-512 → AVX2 → fallback).
fn clamp_to_hardware(level: SimdLevel) -> SimdLevel {
    match (level, hardware_simd_level()) {
        (SimdLevel::Avx512, SimdLevel::Avx512) => SimdLevel::Avx512,
        (SimdLevel::Avx512 | SimdLevel::Avx2, SimdLevel::Avx512 | SimdLevel::Avx2) => {
            SimdLevel::Avx2
        }
        _ => SimdLevel::Fallback,
    }
}

/// The level the CPU kernels use on this thread right now (overrides applied, clamped to what
/// the hardware supports).
pub fn simd_level() -> SimdLevel {
    let requested = LOCAL_OVERRIDE
        .with(|c| c.get())
        .or_else(|| decode(OVERRIDE.load(Ordering::Relaxed)))
        .unwrap_or_else(configured_level);
    clamp_to_hardware(requested)
}

/// Sets (or with `None` clears) the process-wide level override. Asking for a level the CPU
/// lacks gives the best one below it.
pub fn set_simd_override(level: Option<SimdLevel>) {
    OVERRIDE.store(encode(level), Ordering::Relaxed);
}

/// Runs `f` with the level forced to `level` on the current thread only (restored afterwards,
/// also when `f` unwinds). Work that the CPU backend spreads over worker threads inherits the
/// level, because each operation resolves it once on the calling thread.
pub fn with_simd_level<R>(level: SimdLevel, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<SimdLevel>);
    impl Drop for Restore {
        fn drop(&mut self) {
            LOCAL_OVERRIDE.with(|c| c.set(self.0));
        }
    }
    let _restore = Restore(LOCAL_OVERRIDE.with(|c| c.replace(Some(level))));
    f()
}

/// A resolved kernel set; cheap to copy and to send to worker threads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Kernels {
    level: SimdLevel,
}

macro_rules! dispatch {
    ($self:ident, $name:ident ( $($arg:expr),* )) => {{
        #[cfg(target_arch = "x86_64")]
        {
            if $self.level == SimdLevel::Avx512 {
                // SAFETY: `level` is Avx512 only when the CPU supports every feature the
                // avx512 module enables (see `clamp_to_hardware`).
                #[allow(unused_unsafe)]
                return unsafe { avx512::$name($($arg),*) };
            }
            if $self.level == SimdLevel::Avx2 {
                // SAFETY: `level` is Avx2 only when the CPU has AVX2, FMA and F16C (see
                // `clamp_to_hardware`).
                return unsafe { avx2::$name($($arg),*) };
            }
        }
        fallback::$name($($arg),*)
    }};
}

impl Kernels {
    /// Kernels for `level`, clamped to what the hardware supports.
    pub fn new(level: SimdLevel) -> Kernels {
        Kernels {
            level: clamp_to_hardware(level),
        }
    }

    /// Kernels for [`simd_level`] on the calling thread.
    pub fn current() -> Kernels {
        Kernels {
            level: simd_level(),
        }
    }

    /// The level these kernels run at.
    pub fn level(self) -> SimdLevel {
        self.level
    }

    /// `dst[i] = op(src[i])`.
    pub fn unary_f32(self, op: UnaryOp, src: &[f32], dst: &mut [f32]) {
        dispatch!(self, unary(op, src, dst))
    }

    /// `dst[i] = op(a[i], b[i])`.
    pub fn binary_f32(self, op: BinaryOp, a: &[f32], b: &[f32], dst: &mut [f32]) {
        dispatch!(self, binary(op, a, b, dst))
    }

    /// `dst[i] = op(a[i], s)`.
    pub fn binary_f32_scalar_rhs(self, op: BinaryOp, a: &[f32], s: f32, dst: &mut [f32]) {
        dispatch!(self, binary_scalar_rhs(op, a, s, dst))
    }

    /// `dst[i] = op(s, b[i])`.
    pub fn binary_f32_scalar_lhs(self, op: BinaryOp, s: f32, b: &[f32], dst: &mut [f32]) {
        dispatch!(self, binary_scalar_lhs(op, s, b, dst))
    }

    /// Sum accumulated in `f64` (0 for an empty slice).
    pub fn sum_f32(self, x: &[f32]) -> f64 {
        dispatch!(self, sum(x))
    }

    /// Maximum; NaN if any element is NaN; `-inf` for an empty slice.
    pub fn max_f32(self, x: &[f32]) -> f32 {
        dispatch!(self, max(x))
    }

    /// Minimum; NaN if any element is NaN; `+inf` for an empty slice.
    pub fn min_f32(self, x: &[f32]) -> f32 {
        dispatch!(self, min(x))
    }

    /// Index of the first maximum (of the first NaN if there is one); `None` when empty.
    pub fn argmax_f32(self, x: &[f32]) -> Option<usize> {
        dispatch!(self, argmax(x))
    }

    /// Index of the first minimum (of the first NaN if there is one); `None` when empty.
    pub fn argmin_f32(self, x: &[f32]) -> Option<usize> {
        dispatch!(self, argmin(x))
    }

    /// `acc[i] += x[i] as f64` (column accumulation for reductions).
    pub fn add_assign_f64_f32(self, acc: &mut [f64], x: &[f32]) {
        dispatch!(self, add_assign_f64(acc, x))
    }

    /// Fused `dst = act((x - mean) · scale + shift)` over whole rows of `mean.len()` channels
    /// (per-channel `mean`, `scale`, `shift`; `act` SiLU when `silu`), bit for bit the slice
    /// kernels' `Sub`, `Mul`, `Add` and `Silu` in turn. Returns `false`, having written
    /// nothing, below the AVX-512 level (callers then run those slice kernels).
    pub(crate) fn channel_affine_f32(
        self,
        x: &[f32],
        mean_scale_shift: (&[f32], &[f32], &[f32]),
        silu: bool,
        dst: &mut [f32],
    ) -> bool {
        #[cfg(target_arch = "x86_64")]
        if self.level == SimdLevel::Avx512 {
            // SAFETY: `level` is Avx512 only when the CPU supports every feature the module
            // enables (see `clamp_to_hardware`).
            unsafe { avx512_norm::channel_affine(x, mean_scale_shift, silu, dst) };
            return true;
        }
        let _ = (x, mean_scale_shift, silu, dst);
        false
    }

    /// Fused `acc[j] += ((x[r·c + j] - mean[j])²) as f64` over whole rows of `c = mean.len()`,
    /// bit for bit the slice kernels' `Sub`, `Mul` and [`Self::add_assign_f64_f32`] per row.
    /// Returns `false`, having written nothing, below the AVX-512 level.
    pub(crate) fn add_sq_dev_f64_f32(self, acc: &mut [f64], x: &[f32], mean: &[f32]) -> bool {
        #[cfg(target_arch = "x86_64")]
        if self.level == SimdLevel::Avx512 {
            // SAFETY: as in `channel_affine_f32`.
            unsafe { avx512_norm::add_sq_dev_f64(acc, x, mean) };
            return true;
        }
        let _ = (acc, x, mean);
        false
    }

    /// `acc[i] = max(acc[i], x[i])`, NaN-propagating.
    pub fn max_assign_f32(self, acc: &mut [f32], x: &[f32]) {
        dispatch!(self, max_assign(acc, x))
    }

    /// `acc[i] = min(acc[i], x[i])`, NaN-propagating.
    pub fn min_assign_f32(self, acc: &mut [f32], x: &[f32]) {
        dispatch!(self, min_assign(acc, x))
    }

    /// Numerically stable softmax of one row: `dst = exp(src - max) / sum`.
    pub fn softmax_row_f32(self, src: &[f32], dst: &mut [f32]) {
        dispatch!(self, softmax_row(src, dst))
    }

    /// Exact widening `f16 -> f32`.
    pub fn f16_to_f32(self, src: &[f16], dst: &mut [f32]) {
        dispatch!(self, f16_to_f32(src, dst))
    }

    /// `f32 -> f16`, round to nearest even (as `half::f16::from_f32`).
    pub fn f32_to_f16(self, src: &[f32], dst: &mut [f16]) {
        dispatch!(self, f32_to_f16(src, dst))
    }

    /// Exact widening `bf16 -> f32`.
    pub fn bf16_to_f32(self, src: &[bf16], dst: &mut [f32]) {
        dispatch!(self, bf16_to_f32(src, dst))
    }

    /// `f32 -> bf16`, round to nearest even; NaN stays a quiet NaN; subnormals are kept.
    pub fn f32_to_bf16(self, src: &[f32], dst: &mut [bf16]) {
        dispatch!(self, f32_to_bf16(src, dst))
    }

    /// One output tile of a matrix product: for `i < mr` (at most [`MATMUL_MR`]) and
    /// `j < nc` (at most [`MATMUL_NR`]),
    /// `c[i*ldc + j] = sum_p a[i*rsa + p*csa] * b[p*ldb + j]` over `p < k`.
    /// Does nothing if the slices are too short for the requested tile.
    #[allow(clippy::too_many_arguments)]
    pub fn matmul_tile_f32(
        self,
        a: &[f32],
        (rsa, csa): (usize, usize),
        b: &[f32],
        ldb: usize,
        c: &mut [f32],
        ldc: usize,
        (mr, nc, k): (usize, usize, usize),
    ) {
        if !tile_fits(a.len(), rsa, csa, b.len(), ldb, c.len(), ldc, mr, nc, k) {
            return;
        }
        dispatch!(
            self,
            matmul_tile(a, (rsa, csa), b, ldb, c, ldc, (mr, nc, k))
        )
    }
}

/// Rows per matmul micro-tile.
pub const MATMUL_MR: usize = 6;
/// Columns per matmul micro-tile.
pub const MATMUL_NR: usize = 32;

#[allow(clippy::too_many_arguments)]
fn tile_fits(
    alen: usize,
    rsa: usize,
    csa: usize,
    blen: usize,
    ldb: usize,
    clen: usize,
    ldc: usize,
    mr: usize,
    nc: usize,
    k: usize,
) -> bool {
    if mr == 0 || nc == 0 || mr > MATMUL_MR || nc > MATMUL_NR {
        return false;
    }
    let last = |rows: usize, rs: usize, cols: usize, cs: usize| -> Option<usize> {
        (rows - 1)
            .checked_mul(rs)?
            .checked_add((cols - 1).checked_mul(cs)?)
    };
    let c_ok = last(mr, ldc, nc, 1).is_some_and(|l| l < clen);
    if k == 0 {
        return c_ok;
    }
    let a_ok = last(mr, rsa, k, csa).is_some_and(|l| l < alen);
    let b_ok = last(k, ldb, nc, 1).is_some_and(|l| l < blen);
    a_ok && b_ok && c_ok
}

/// `dst[i] = op(src[i])` at the current level.
pub fn unary_f32(op: UnaryOp, src: &[f32], dst: &mut [f32]) {
    Kernels::current().unary_f32(op, src, dst)
}

/// `dst[i] = op(a[i], b[i])` at the current level.
pub fn binary_f32(op: BinaryOp, a: &[f32], b: &[f32], dst: &mut [f32]) {
    Kernels::current().binary_f32(op, a, b, dst)
}

/// `dst[i] = op(a[i], s)` at the current level.
pub fn binary_f32_scalar_rhs(op: BinaryOp, a: &[f32], s: f32, dst: &mut [f32]) {
    Kernels::current().binary_f32_scalar_rhs(op, a, s, dst)
}

/// `dst[i] = op(s, b[i])` at the current level.
pub fn binary_f32_scalar_lhs(op: BinaryOp, s: f32, b: &[f32], dst: &mut [f32]) {
    Kernels::current().binary_f32_scalar_lhs(op, s, b, dst)
}

/// Sum accumulated in `f64` at the current level.
pub fn sum_f32(x: &[f32]) -> f64 {
    Kernels::current().sum_f32(x)
}

/// NaN-propagating maximum (`-inf` when empty) at the current level.
pub fn max_f32(x: &[f32]) -> f32 {
    Kernels::current().max_f32(x)
}

/// NaN-propagating minimum (`+inf` when empty) at the current level.
pub fn min_f32(x: &[f32]) -> f32 {
    Kernels::current().min_f32(x)
}

/// Index of the first maximum (first NaN wins) at the current level.
pub fn argmax_f32(x: &[f32]) -> Option<usize> {
    Kernels::current().argmax_f32(x)
}

/// Index of the first minimum (first NaN wins) at the current level.
pub fn argmin_f32(x: &[f32]) -> Option<usize> {
    Kernels::current().argmin_f32(x)
}

/// Stable softmax of one row at the current level.
pub fn softmax_row_f32(src: &[f32], dst: &mut [f32]) {
    Kernels::current().softmax_row_f32(src, dst)
}

/// Bulk exact `f16 -> f32` at the current level.
pub fn f16_to_f32(src: &[f16], dst: &mut [f32]) {
    Kernels::current().f16_to_f32(src, dst)
}

/// Bulk `f32 -> f16` (round to nearest even) at the current level.
pub fn f32_to_f16(src: &[f32], dst: &mut [f16]) {
    Kernels::current().f32_to_f16(src, dst)
}

/// Bulk exact `bf16 -> f32` at the current level.
pub fn bf16_to_f32(src: &[bf16], dst: &mut [f32]) {
    Kernels::current().bf16_to_f32(src, dst)
}

/// Bulk `f32 -> bf16` (round to nearest even) at the current level.
pub fn f32_to_bf16(src: &[f32], dst: &mut [bf16]) {
    Kernels::current().f32_to_bf16(src, dst)
}

/// Scalar `f32 -> bf16` with round-to-nearest-even, NaN made quiet (bit-identical to
/// `half::bf16::from_f32`).
#[inline(always)]
pub fn bf16_from_f32_rne(x: f32) -> bf16 {
    let b = x.to_bits();
    if x.is_nan() {
        return bf16::from_bits(((b >> 16) | 0x40) as u16);
    }
    let rounded = b.wrapping_add(0x7fff + ((b >> 16) & 1)) >> 16;
    bf16::from_bits(rounded as u16)
}
