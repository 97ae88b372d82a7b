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
