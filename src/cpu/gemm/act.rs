//! Scalar activations in f64, used by the portable kernel's epilogue (and as test references).
//!
//! Invariant: these are accurate to a few f64 ulps (`erf` by its Taylor series below 3 and a
//! continued fraction for `erfc` above; GELU through `erfc`, so its negative tail keeps relative
//! accuracy down to f64's range), so they may serve as the reference the vectorised f32
//! approximations are checked against.
use crate::desc::Activation;

/// The error function.
pub(crate) fn erf(x: f64) -> f64 {
    let ax = x.abs();
    if x.is_nan() {
        return x;
    }
    if ax < 3.0 {
        // erf(x) = 2/sqrt(pi) * sum (-1)^n x^(2n+1) / (n! (2n+1))
        let x2 = x * x;
        let (mut term, mut sum) = (x, x);
        for n in 1..200 {
            term *= -x2 / n as f64;
            let t = term / (2 * n + 1) as f64;
            sum += t;
            if t.abs() < 1e-17 * sum.abs() {
                break;
            }
        }
        sum * std::f64::consts::FRAC_2_SQRT_PI
    } else {
        x.signum() * (1.0 - erfc(ax))
    }
}

/// The complementary error function `1 - erf(x)`, with relative accuracy in the tail (a
/// continued fraction from 3 on, where `1 - erf` would cancel).
pub(crate) fn erfc(x: f64) -> f64 {
    if x.is_nan() {
        return x;
    }
    if x < 0.0 {
        return 2.0 - erfc(-x);
    }
    if x < 3.0 {
        return 1.0 - erf(x);
    }
    // erfc(x) = exp(-x^2) / sqrt(pi) / (x + (1/2) / (x + 1 / (x + (3/2) / (x + ...))))
    let mut t = x;
    for n in (1..=80).rev() {
        t = x + (n as f64 / 2.0) / t;
    }
    (-x * x).exp() * std::f64::consts::FRAC_2_SQRT_PI / 2.0 / t
}

/// Applies `act` to `x`.
pub(crate) fn apply(act: Activation, x: f64) -> f64 {
    match act {
        Activation::None => x,
        Activation::Relu => x.max(0.0),
        // Through erfc for x < 0, so the negative tail keeps its relative accuracy.
        Activation::Gelu => 0.5 * x * erfc(-x * std::f64::consts::FRAC_1_SQRT_2),
        Activation::GeluTanh => {
            let u = (2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x);
            0.5 * x * (1.0 + u.tanh())
        }
        Activation::Silu => x / (1.0 + (-x).exp()),
    }
}
