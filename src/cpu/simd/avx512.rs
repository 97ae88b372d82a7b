//! AVX-512 kernels over contiguous slices: 16 `f32` lanes per step, remainders with masked
//! loads/stores (no scalar tail), reductions accumulating sums in `f64`.
//!
//! Invariants: every function works on the common prefix of its slices (it never touches memory
//! outside them) and is `unsafe` only because the caller must have checked that the CPU has
//! AVX-512F/BW/DQ/VL, FMA and F16C (`super::Kernels` guarantees it). Semantics equal the
//! portable `fallback` module's.

use super::avx512_math as m;
use super::MATMUL_NR;
use crate::desc::kinds::{BinaryOp, UnaryOp};
use std::arch::x86_64::*;

/// `roundscale` modes of the rounding ops (exceptions suppressed).
const FLOOR: i32 = _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC;
const CEIL: i32 = _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC;
const ROUND_EVEN: i32 = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
const TRUNC: i32 = _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC;

pub(super) use super::avx512_convert::{bf16_to_f32, f16_to_f32, f32_to_bf16, f32_to_f16};

/// Mask of the low `rem` lanes (`rem < 16`).
#[inline]
pub(super) fn tail_mask(rem: usize) -> __mmask16 {
    ((1u32 << rem) - 1) as __mmask16
}

/// Applies `$body` (an expression of `$v: __m512`) to every element from `$src` into `$dst`.
macro_rules! map_ps {
    ($n:expr, $src:expr, $dst:expr, |$v:ident| $body:expr) => {{
        let (n, s, d) = ($n, $src, $dst);
        let mut i = 0usize;
        while i + 16 <= n {
            let $v = _mm512_loadu_ps(s.add(i));
            _mm512_storeu_ps(d.add(i), $body);
            i += 16;
        }
        if i < n {
            let k = tail_mask(n - i);
            let $v = _mm512_maskz_loadu_ps(k, s.add(i));
            _mm512_mask_storeu_ps(d.add(i), k, $body);
        }
    }};
}

/// `max` propagating NaN (PyTorch's `maximum`/`clamp`/`relu`): `max_ps` returns `b` when either
/// is NaN, so a NaN `a` is put back explicitly.
#[inline]
#[target_feature(enable = "avx512f,avx512dq,fma")]
unsafe fn maxnum(a: __m512, b: __m512) -> __m512 {
    let r = _mm512_max_ps(a, b);
    _mm512_mask_mov_ps(r, _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(a, a), a)
}

/// `min` propagating NaN.
#[inline]
#[target_feature(enable = "avx512f,avx512dq,fma")]
unsafe fn minnum(a: __m512, b: __m512) -> __m512 {
    let r = _mm512_min_ps(a, b);
    _mm512_mask_mov_ps(r, _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(a, a), a)
}

/// `dst[i] = op(src[i])`.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,fma,f16c")]
pub(super) unsafe fn unary(op: UnaryOp, src: &[f32], dst: &mut [f32]) {
    let n = src.len().min(dst.len());
    let (s, d) = (src.as_ptr(), dst.as_mut_ptr());
    let one = _mm512_set1_ps(1.0);
    match op {
        UnaryOp::Neg => map_ps!(n, s, d, |v| m::neg(v)),
        UnaryOp::Abs => map_ps!(n, s, d, |v| m::abs(v)),
        UnaryOp::Exp => map_ps!(n, s, d, |v| m::exp(v)),
        UnaryOp::Log => map_ps!(n, s, d, |v| m::log(v)),
        UnaryOp::Sqrt => map_ps!(n, s, d, |v| _mm512_sqrt_ps(v)),
        UnaryOp::Rsqrt => map_ps!(n, s, d, |v| _mm512_div_ps(one, _mm512_sqrt_ps(v))),
        UnaryOp::Tanh => map_ps!(n, s, d, |v| m::tanh(v)),
        UnaryOp::Sigmoid => map_ps!(n, s, d, |v| m::sigmoid(v)),
        UnaryOp::Relu => map_ps!(n, s, d, |v| maxnum(v, _mm512_setzero_ps())),
        UnaryOp::GeluErf => map_ps!(n, s, d, |v| m::gelu_erf(v)),
        UnaryOp::GeluTanh => map_ps!(n, s, d, |v| m::gelu_tanh(v)),
        UnaryOp::Silu => map_ps!(n, s, d, |v| m::silu(v)),
        UnaryOp::Sin => map_ps!(n, s, d, |v| m::sin_cos(v, false)),
        UnaryOp::Cos => map_ps!(n, s, d, |v| m::sin_cos(v, true)),
        UnaryOp::Affine { mul, add } => {
            let (mv, av) = (_mm512_set1_ps(mul), _mm512_set1_ps(add));
            map_ps!(n, s, d, |v| _mm512_fmadd_ps(v, mv, av))
        }
        UnaryOp::PowScalar(2.0) => map_ps!(n, s, d, |v| _mm512_mul_ps(v, v)),
        UnaryOp::PowScalar(e) => {
            for (o, &x) in dst.iter_mut().zip(src) {
                *o = x.powf(e);
            }
        }
        UnaryOp::MaxScalar(sc) | UnaryOp::MinScalar(sc) if sc.is_nan() => dst[..n].fill(f32::NAN),
        UnaryOp::MaxScalar(sc) => {
            let sv = _mm512_set1_ps(sc);
            map_ps!(n, s, d, |v| maxnum(v, sv))
        }
        UnaryOp::MinScalar(sc) => {
            let sv = _mm512_set1_ps(sc);
            map_ps!(n, s, d, |v| minnum(v, sv))
        }
        UnaryOp::Recip => map_ps!(n, s, d, |v| _mm512_div_ps(one, v)),
        UnaryOp::Square => map_ps!(n, s, d, |v| _mm512_mul_ps(v, v)),
        UnaryOp::Floor => map_ps!(n, s, d, |v| _mm512_roundscale_ps::<FLOOR>(v)),
        UnaryOp::Ceil => map_ps!(n, s, d, |v| _mm512_roundscale_ps::<CEIL>(v)),
        UnaryOp::Round => map_ps!(n, s, d, |v| _mm512_roundscale_ps::<ROUND_EVEN>(v)),
        UnaryOp::Trunc => map_ps!(n, s, d, |v| _mm512_roundscale_ps::<TRUNC>(v)),
        UnaryOp::Sign => map_ps!(n, s, d, |v| m::sign(v)),
        UnaryOp::Erf => map_ps!(n, s, d, |v| m::erf(v)),
    }
}

/// Applies `$body` (of `$x`, `$y`) over two operands, each either a pointer (`ptr`) or a
/// broadcast vector (`vec`).
macro_rules! map2 {
    ($n:expr, $d:expr, $x:ident = $xs:tt $xa:expr, $y:ident = $ys:tt $ya:expr, $body:expr) => {{
        let (n, d) = ($n, $d);
        let mut i = 0usize;
        while i + 16 <= n {
            let $x = map2!(@load $xs $xa, i, None);
            let $y = map2!(@load $ys $ya, i, None);
            _mm512_storeu_ps(d.add(i), $body);
            i += 16;
        }
        if i < n {
            let k = tail_mask(n - i);
            let $x = map2!(@load $xs $xa, i, Some(k));
            let $y = map2!(@load $ys $ya, i, Some(k));
            _mm512_mask_storeu_ps(d.add(i), k, $body);
        }
    }};
    (@load ptr $p:expr, $i:expr, $k:expr) => {
        match $k {
            None => _mm512_loadu_ps($p.add($i)),
            Some(k) => _mm512_maskz_loadu_ps(k, $p.add($i)),
        }
    };
    (@load vec $v:expr, $i:expr, $k:expr) => {
        $v
    };
}

macro_rules! binary_body {
    ($op:expr, $n:expr, $d:expr, $xs:tt $xa:expr, $ys:tt $ya:expr, $scalar:expr) => {
        match $op {
            BinaryOp::Add => map2!($n, $d, x = $xs $xa, y = $ys $ya, _mm512_add_ps(x, y)),
            BinaryOp::Sub => map2!($n, $d, x = $xs $xa, y = $ys $ya, _mm512_sub_ps(x, y)),
            BinaryOp::Mul => map2!($n, $d, x = $xs $xa, y = $ys $ya, _mm512_mul_ps(x, y)),
            BinaryOp::Div => map2!($n, $d, x = $xs $xa, y = $ys $ya, _mm512_div_ps(x, y)),
            BinaryOp::Maximum => map2!($n, $d, x = $xs $xa, y = $ys $ya, maxnum(x, y)),
            BinaryOp::Minimum => map2!($n, $d, x = $xs $xa, y = $ys $ya, minnum(x, y)),
            BinaryOp::Pow => $scalar,
        }
    };
}

/// `dst[i] = op(a[i], b[i])`.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,fma,f16c")]
pub(super) unsafe fn binary(op: BinaryOp, a: &[f32], b: &[f32], dst: &mut [f32]) {
    let n = a.len().min(b.len()).min(dst.len());
    let (pa, pb, d) = (a.as_ptr(), b.as_ptr(), dst.as_mut_ptr());
    binary_body!(op, n, d, ptr pa, ptr pb, super::fallback::binary(op, a, b, dst))
}

/// `dst[i] = op(a[i], s)`.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,fma,f16c")]
pub(super) unsafe fn binary_scalar_rhs(op: BinaryOp, a: &[f32], s: f32, dst: &mut [f32]) {
    let n = a.len().min(dst.len());
    let (pa, sv, d) = (a.as_ptr(), _mm512_set1_ps(s), dst.as_mut_ptr());
    binary_body!(op, n, d, ptr pa, vec sv, super::fallback::binary_scalar_rhs(op, a, s, dst))
}

/// `dst[i] = op(s, b[i])`.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,fma,f16c")]
pub(super) unsafe fn binary_scalar_lhs(op: BinaryOp, s: f32, b: &[f32], dst: &mut [f32]) {
    let n = b.len().min(dst.len());
    let (sv, pb, d) = (_mm512_set1_ps(s), b.as_ptr(), dst.as_mut_ptr());
    binary_body!(op, n, d, vec sv, ptr pb, super::fallback::binary_scalar_lhs(op, s, b, dst))
}

/// Sum in `f64`: 8 lanes at a time widened with `cvtps_pd`, two accumulators.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,fma,f16c")]
pub(super) unsafe fn sum(x: &[f32]) -> f64 {
    let (n, p) = (x.len(), x.as_ptr());
    let (mut a0, mut a1) = (_mm512_setzero_pd(), _mm512_setzero_pd());
    let mut i = 0;
    while i + 16 <= n {
        a0 = _mm512_add_pd(a0, _mm512_cvtps_pd(_mm256_loadu_ps(p.add(i))));
        a1 = _mm512_add_pd(a1, _mm512_cvtps_pd(_mm256_loadu_ps(p.add(i + 8))));
        i += 16;
    }
    while i < n {
        let k = ((1u32 << (n - i).min(8)) - 1) as __mmask8;
        a0 = _mm512_add_pd(a0, _mm512_cvtps_pd(_mm256_maskz_loadu_ps(k, p.add(i))));
        i += 8;
    }
    _mm512_reduce_add_pd(_mm512_add_pd(a0, a1))
}

/// NaN-propagating max (`MAX = true`) or min over a slice; NaN lanes are tracked separately
/// because `max_ps` drops a NaN in its first operand.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,fma,f16c")]
unsafe fn extreme<const MAX: bool>(x: &[f32]) -> f32 {
    let (n, p) = (x.len(), x.as_ptr());
    let init = if MAX {
        f32::NEG_INFINITY
    } else {
        f32::INFINITY
    };
    let mut acc = _mm512_set1_ps(init);
    let mut nan: __mmask16 = 0;
    let mut i = 0;
    while i < n {
        let k = if i + 16 <= n {
            0xffff
        } else {
            tail_mask(n - i)
        };
        let v = _mm512_maskz_loadu_ps(k, p.add(i));
        nan |= _mm512_mask_cmp_ps_mask::<_CMP_UNORD_Q>(k, v, v);
        acc = if MAX {
            _mm512_mask_max_ps(acc, k, acc, v)
        } else {
            _mm512_mask_min_ps(acc, k, acc, v)
        };
        i += 16;
    }
    if nan != 0 {
        f32::NAN
    } else if MAX {
        _mm512_reduce_max_ps(acc)
    } else {
        _mm512_reduce_min_ps(acc)
    }
}

/// NaN-propagating maximum.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,fma,f16c")]
pub(super) unsafe fn max(x: &[f32]) -> f32 {
    extreme::<true>(x)
}

/// NaN-propagating minimum.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,fma,f16c")]
pub(super) unsafe fn min(x: &[f32]) -> f32 {
    extreme::<false>(x)
}

/// First index whose value equals `target` (or is NaN when `target` is NaN).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,fma,f16c")]
unsafe fn find_first(x: &[f32], target: f32) -> Option<usize> {
    let (n, p) = (x.len(), x.as_ptr());
    let t = _mm512_set1_ps(target);
    let mut i = 0;
    while i < n {
        let k = if i + 16 <= n {
            0xffff
        } else {
            tail_mask(n - i)
        };
        let v = _mm512_maskz_loadu_ps(k, p.add(i));
        let hit = if target.is_nan() {
            _mm512_mask_cmp_ps_mask::<_CMP_UNORD_Q>(k, v, v)
        } else {
            _mm512_mask_cmp_ps_mask::<_CMP_EQ_OQ>(k, v, t)
        };
        if hit != 0 {
            return Some(i + hit.trailing_zeros() as usize);
        }
        i += 16;
    }
    None
}

/// First index of the maximum (first NaN wins).
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,fma,f16c")]
pub(super) unsafe fn argmax(x: &[f32]) -> Option<usize> {
    if x.is_empty() {
        return None;
    }
    find_first(x, extreme::<true>(x)).or(Some(0))
}

/// First index of the minimum (first NaN wins).
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,fma,f16c")]
pub(super) unsafe fn argmin(x: &[f32]) -> Option<usize> {
    if x.is_empty() {
        return None;
    }
    find_first(x, extreme::<false>(x)).or(Some(0))
}

/// `acc[i] += x[i]` in `f64`.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,fma,f16c")]
pub(super) unsafe fn add_assign_f64(acc: &mut [f64], x: &[f32]) {
    let n = acc.len().min(x.len());
    let (pa, px) = (acc.as_mut_ptr(), x.as_ptr());
    let mut i = 0;
    while i < n {
        let k = ((1u32 << (n - i).min(8)) - 1) as __mmask8;
        let v = _mm512_cvtps_pd(_mm256_maskz_loadu_ps(k, px.add(i)));
        let a = _mm512_maskz_loadu_pd(k, pa.add(i));
        _mm512_mask_storeu_pd(pa.add(i), k, _mm512_add_pd(a, v));
        i += 8;
    }
}

/// NaN-propagating `acc[i] = max(acc[i], x[i])` (`MAX = false`: min).
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,fma,f16c")]
unsafe fn extreme_assign<const MAX: bool>(acc: &mut [f32], x: &[f32]) {
    let n = acc.len().min(x.len());
    let (pa, px) = (acc.as_mut_ptr(), x.as_ptr());
    let mut i = 0;
    while i < n {
        let k = if i + 16 <= n {
            0xffff
        } else {
            tail_mask(n - i)
        };
        let v = _mm512_maskz_loadu_ps(k, px.add(i));
        let a = _mm512_maskz_loadu_ps(k, pa.add(i));
        // max_ps(v, a) returns `a` when either is NaN; a NaN `v` is then put back explicitly.
        let r = if MAX {
            _mm512_max_ps(v, a)
        } else {
            _mm512_min_ps(v, a)
        };
        let r = _mm512_mask_mov_ps(r, _mm512_cmp_ps_mask::<_CMP_UNORD_Q>(v, v), v);
        _mm512_mask_storeu_ps(pa.add(i), k, r);
        i += 16;
    }
}

/// NaN-propagating elementwise maximum into `acc`.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,fma,f16c")]
pub(super) unsafe fn max_assign(acc: &mut [f32], x: &[f32]) {
    extreme_assign::<true>(acc, x)
}

/// NaN-propagating elementwise minimum into `acc`.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,fma,f16c")]
pub(super) unsafe fn min_assign(acc: &mut [f32], x: &[f32]) {
    extreme_assign::<false>(acc, x)
}

/// Stable softmax of one row: max pass, `exp(x - max)` pass (sum in `f64`), scale pass.
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,fma,f16c")]
pub(super) unsafe fn softmax_row(src: &[f32], dst: &mut [f32]) {
    let n = src.len().min(dst.len());
    let src = &src[..n];
    let mx = _mm512_set1_ps(extreme::<true>(src));
    let (s, d) = (src.as_ptr(), dst.as_mut_ptr());
    let (mut a0, mut a1) = (_mm512_setzero_pd(), _mm512_setzero_pd());
    let mut i = 0;
    while i < n {
        let k = if i + 16 <= n {
            0xffff
        } else {
            tail_mask(n - i)
        };
        let e = m::exp(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, s.add(i)), mx));
        let e = _mm512_maskz_mov_ps(k, e);
        _mm512_mask_storeu_ps(d.add(i), k, e);
        a0 = _mm512_add_pd(a0, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
        a1 = _mm512_add_pd(a1, _mm512_cvtps_pd(_mm512_extractf32x8_ps::<1>(e)));
        i += 16;
    }
    let inv = _mm512_set1_ps((1.0 / _mm512_reduce_add_pd(_mm512_add_pd(a0, a1))) as f32);
    map_ps!(n, d as *const f32, d, |v| _mm512_mul_ps(v, inv));
}

/// One `MR x 32` register tile; `nc <= 32` columns via masks. Bounds are checked by the caller.
#[inline]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,fma,f16c")]
#[allow(clippy::too_many_arguments)]
unsafe fn tile<const MR: usize>(
    a: *const f32,
    (rsa, csa): (usize, usize),
    b: *const f32,
    ldb: usize,
    c: *mut f32,
    ldc: usize,
    nc: usize,
    k: usize,
) {
    let k0 = tail_mask(nc.min(16) % 16) | if nc >= 16 { 0xffff } else { 0 };
    let k1 = if nc > 16 {
        tail_mask((nc - 16) % 16) | if nc >= 32 { 0xffff } else { 0 }
    } else {
        0
    };
    let mut acc = [[_mm512_setzero_ps(); 2]; MR];
    for p in 0..k {
        let bp = b.add(p * ldb);
        let b0 = _mm512_maskz_loadu_ps(k0, bp);
        let b1 = _mm512_maskz_loadu_ps(k1, bp.wrapping_add(16));
        let ap = a.add(p * csa);
        for (i, row) in acc.iter_mut().enumerate() {
            let av = _mm512_set1_ps(*ap.add(i * rsa));
            row[0] = _mm512_fmadd_ps(av, b0, row[0]);
            row[1] = _mm512_fmadd_ps(av, b1, row[1]);
        }
    }
    for (i, row) in acc.iter().enumerate() {
        let cp = c.add(i * ldc);
        _mm512_mask_storeu_ps(cp, k0, row[0]);
        _mm512_mask_storeu_ps(cp.wrapping_add(16), k1, row[1]);
    }
}

/// Matmul tile dispatch on the row count (the caller has validated every bound).
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,fma,f16c")]
#[allow(clippy::too_many_arguments)]
pub(super) unsafe fn matmul_tile(
    a: &[f32],
    strides: (usize, usize),
    b: &[f32],
    ldb: usize,
    c: &mut [f32],
    ldc: usize,
    (mr, nc, k): (usize, usize, usize),
) {
    let (pa, pb, pc) = (a.as_ptr(), b.as_ptr(), c.as_mut_ptr());
    let nc = nc.min(MATMUL_NR);
    match mr {
        1 => tile::<1>(pa, strides, pb, ldb, pc, ldc, nc, k),
        2 => tile::<2>(pa, strides, pb, ldb, pc, ldc, nc, k),
        3 => tile::<3>(pa, strides, pb, ldb, pc, ldc, nc, k),
        4 => tile::<4>(pa, strides, pb, ldb, pc, ldc, nc, k),
        5 => tile::<5>(pa, strides, pb, ldb, pc, ldc, nc, k),
        6 => tile::<6>(pa, strides, pb, ldb, pc, ldc, nc, k),
        _ => {}
    }
}
