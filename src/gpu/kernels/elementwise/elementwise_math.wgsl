// elementwise_math.wgsl: the accurate f32 functions of the unary and binary ops (composed
// before elementwise.wgsl): sin/cos, pow, log and erf as the CPU kernels compute them, where
// WGSL's builtins promise only loose absolute bounds. Each is exact in its special values (see
// each function), so Xpu and Cpu agree to a few ulp.

// sin and cos with Cody-Waite reduction by pi/2 and minimax polynomials on [-pi/4, pi/4]:
// accurate to a few ulp for |x| < 1e5 (the GPU builtins promise only 2^-11 absolute).
fn sincos_reduced(x: f32, want_cos: bool) -> f32 {
    let q = round(x * 0.63661977236758134);
    var r = x - q * 1.5703125;
    r = r - q * 4.8375129699707031e-4;
    r = r - q * 7.5497899548918821e-8;
    var k = i32(q);
    if (want_cos) {
        k = k + 1;
    }
    let r2 = r * r;
    let s = r + r * r2 * (-1.6666654611e-1 + r2 * (8.3321608736e-3 + r2 * -1.9515295891e-4));
    let c = 1.0 - 0.5 * r2 + r2 * r2 * (4.166664568298827e-2 + r2 * (-1.388731625493765e-3
        + r2 * 2.443315711809948e-5));
    let quadrant = k & 3;
    var v = s;
    if (quadrant == 1 || quadrant == 3) {
        v = c;
    }
    if (quadrant == 2 || quadrant == 3) {
        v = -v;
    }
    return v;
}

fn powf(x: f32, y: f32) -> f32 {
    if (y == 0.0) {
        return 1.0;
    }
    if (is_nan(x) || is_nan(y)) {
        return nan();
    }
    if (x == 0.0) {
        return select(0.0, inf(), y < 0.0);
    }
    let odd_int = fract(y) == 0.0 && fract(y * 0.5) != 0.0;
    if (x == -inf()) {
        if (y < 0.0) {
            return select(0.0, -0.0, odd_int);
        }
        return select(inf(), -inf(), odd_int);
    }
    var r = exp2(y * log2(abs(x)));
    if (x < 0.0) {
        if (fract(y) != 0.0) {
            return nan();
        }
        if (odd_int) {
            r = -r;
        }
    }
    return r;
}

// Natural logarithm of a positive x (UnaryOp::Log) with the CPU's polynomial (cephes `logf` on
// [sqrt(1/2), sqrt 2), src/cpu/simd/avx512_math.rs): WGSL's log is only accurate to 2^-21
// absolute near 1, i.e. to ~1e-4 relative for results near zero. inf and NaN pass through.
fn log_accurate(x: f32) -> f32 {
    if (!(x < inf())) {
        return x;
    }
    let parts = frexp(x);
    var m = parts.fract;
    var e = f32(parts.exp);
    if (m < 0.70710678118654752) {
        m = m + m;
        e = e - 1.0;
    }
    let f = m - 1.0;
    let z = f * f;
    let p = 3.3333331174e-1 + f * (-2.4999993993e-1 + f * (2.0000714765e-1 + f * (-1.6668057665e-1
        + f * (1.4249322787e-1 + f * (-1.2420140846e-1 + f * (1.1676998740e-1
        + f * (-1.1514610310e-1 + f * 7.0376836292e-2)))))));
    var y = p * f * z;
    y = fma(e, -2.12194440e-4, y);
    y = y - 0.5 * z;
    return fma(e, 0.693359375, f + y);
}

// erf(z) (UnaryOp::Erf) with the CPU's polynomials (src/cpu/simd/fallback.rs): z P(2z^2 - 1)
// for |z| < 1 (common.wgsl's `erf_small`), else +-(1 - e^{-z^2} Q(2/|z| - 1) / |z|), closer
// to the CPU than common.wgsl's `erf_approx` (used by the fused GELU epilogues).
fn erf_accurate(z: f32) -> f32 {
    let a = abs(z);
    if (!(a >= 1.0)) {
        return erf_small(z);
    }
    let t = 1.0 / a;
    let v = 2.0 * t - 1.0;
    let q = 5.107913613e-1 + v * (-8.360549062e-2 + v * (-9.158377536e-3 + v * (1.486996748e-2
        + v * (-6.795550697e-3 + v * (1.329960534e-3 + v * (6.223237142e-4 + v * (-8.161224541e-4
        + v * (5.148762721e-4 + v * (-1.805442298e-4 + v * (-5.434532068e-5 + v * (9.923084872e-5
        + v * -3.370535705e-5)))))))))));
    let ac = min(a, 10.0);
    let hi = ac * ac;
    let lo = fma(ac, ac, -hi);
    let erfc = exp(-hi) * (1.0 - lo) * t * q;
    return select(1.0 - erfc, erfc - 1.0, z < 0.0);
}

// i32 unary ops (DT_IN = i32), with the Cpu's semantics (src/cpu/elementwise.rs `unary_i32`):
// neg, abs and square wrap; relu, sign; floor/ceil/round/trunc keep the value; affine is
// round(x * a + b) saturated to i32, for whole-number a and b (the host checks: then the value
// is exact, computed here as a 64-bit integer); maximum/minimum_scalar compare with the f32
// scalar a and round it (ties to even, saturated) where it wins.
fn unary_op_i32(op: u32, x: i32, a: f32, b: f32) -> i32 {
    switch op {
        case 0u: { return -x; }
        case 1u: { return abs(x); }
        case 8u: { return max(x, 0); }
        case 14u: { return affine_i32(x, i32(a), i32(b)); }
        case 16u: { return max_scalar_i32(x, a); }
        case 17u: { return min_scalar_i32(x, a); }
        case 19u: { return x * x; }
        case 24u: { return sign(x); }
        default: { return x; }
    }
}

// round(s) to the nearest i32, ties to even, saturated at the i32 range.
fn round_sat_i32(s: f32) -> i32 {
    if (s >= 2147483648.0) {
        return 2147483647;
    }
    if (s <= -2147483648.0) {
        return -2147483647 - 1;
    }
    return i32(round(s));
}

// round(max(x, s)) as the Cpu computes it in f64 (a NaN s loses): x where x >= s, compared
// exactly through the smallest integer t >= s, else s rounded.
fn max_scalar_i32(x: i32, s: f32) -> i32 {
    if (!(s > -2147483648.0)) {
        return x;
    }
    if (s >= 2147483648.0) {
        return 2147483647;
    }
    return select(round_sat_i32(s), x, x >= i32(ceil(s)));
}

// round(min(x, s)), the mirror of max_scalar_i32.
fn min_scalar_i32(x: i32, s: f32) -> i32 {
    if (!(s < 2147483648.0)) {
        return x;
    }
    if (s < -2147483648.0) {
        return -2147483647 - 1;
    }
    return select(round_sat_i32(s), x, x <= i32(floor(s)));
}

// x * m + c exactly (as a 64-bit two's complement value hi:lo), saturated to i32.
fn affine_i32(x: i32, m: i32, c: i32) -> i32 {
    // |x| * |m| as a 64-bit unsigned (hi, lo) from 16-bit limbs.
    let ax = select(u32(x), 0u - u32(x), x < 0);
    let am = select(u32(m), 0u - u32(m), m < 0);
    let x0 = ax & 0xFFFFu;
    let x1 = ax >> 16u;
    let m0 = am & 0xFFFFu;
    let m1 = am >> 16u;
    let p00 = x0 * m0;
    let p01 = x0 * m1;
    let p10 = x1 * m0;
    let mid = (p00 >> 16u) + (p01 & 0xFFFFu) + (p10 & 0xFFFFu);
    var lo = (p00 & 0xFFFFu) | (mid << 16u);
    var hi = x1 * m1 + (p01 >> 16u) + (p10 >> 16u) + (mid >> 16u);
    if ((x < 0) != (m < 0)) {
        lo = ~lo + 1u;
        hi = ~hi + select(0u, 1u, lo == 0u);
    }
    let sum = lo + u32(c);
    hi = hi + select(0u, 0xFFFFFFFFu, c < 0) + select(0u, 1u, sum < lo);
    // In range when hi is the sign extension of sum.
    if (hi == select(0u, 0xFFFFFFFFu, i32(sum) < 0)) {
        return i32(sum);
    }
    return select(2147483647, -2147483647 - 1, i32(hi) < 0);
}
