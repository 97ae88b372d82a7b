//! The op families' kinds, shared by both backends, with their scalar reference semantics.
//!
//! A new elementwise op is one variant here, one line in [`UnaryOp::apply`] (the reference every
//! backend is tested against), one SIMD case on the CPU and one WGSL case in `gpu/kernels/elementwise/elementwise_math.wgsl`.
//! Invariant: `code()` values are part of the WGSL interface (the WGSL kernels switch on them) and
//! must not change without changing the shaders.

/// Elementwise functions of one operand (some carry scalar parameters).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum UnaryOp {
    /// `-x`
    Neg,
    /// `|x|`
    Abs,
    /// `e^x`
    Exp,
    /// natural logarithm
    Log,
    /// square root
    Sqrt,
    /// `1/sqrt(x)`
    Rsqrt,
    /// hyperbolic tangent
    Tanh,
    /// `1/(1+e^-x)`
    Sigmoid,
    /// `max(x, 0)`
    Relu,
    /// `x * Φ(x)` with the exact erf form (PyTorch's `gelu`)
    GeluErf,
    /// the tanh approximation of GELU (PyTorch's `gelu(approximate="tanh")`)
    GeluTanh,
    /// `x * sigmoid(x)`
    Silu,
    /// sine
    Sin,
    /// cosine
    Cos,
    /// `x * mul + add`
    Affine {
        /// multiplier
        mul: f32,
        /// addend
        add: f32,
    },
    /// `x ^ e`
    PowScalar(f32),
    /// `max(x, s)`
    MaxScalar(f32),
    /// `min(x, s)`
    MinScalar(f32),
    /// `1/x`
    Recip,
    /// `x*x`
    Square,
    /// Largest integer not above `x`.
    Floor,
    /// Smallest integer not below `x`.
    Ceil,
    /// Nearest integer, halfway cases to even (PyTorch's `round`).
    Round,
    /// Integer part (rounds toward zero).
    Trunc,
    /// `(x > 0) - (x < 0)`: `-1`, `0` or `1`, and `+0` for `±0` and NaN (as PyTorch computes it).
    Sign,
    /// The error function.
    Erf,
}

impl UnaryOp {
    /// Stable numeric code used by the WGSL shaders.
    pub fn code(self) -> u32 {
        match self {
            UnaryOp::Neg => 0,
            UnaryOp::Abs => 1,
            UnaryOp::Exp => 2,
            UnaryOp::Log => 3,
            UnaryOp::Sqrt => 4,
            UnaryOp::Rsqrt => 5,
            UnaryOp::Tanh => 6,
            UnaryOp::Sigmoid => 7,
            UnaryOp::Relu => 8,
            UnaryOp::GeluErf => 9,
            UnaryOp::GeluTanh => 10,
            UnaryOp::Silu => 11,
            UnaryOp::Sin => 12,
            UnaryOp::Cos => 13,
            UnaryOp::Affine { .. } => 14,
            UnaryOp::PowScalar(_) => 15,
            UnaryOp::MaxScalar(_) => 16,
            UnaryOp::MinScalar(_) => 17,
            UnaryOp::Recip => 18,
            UnaryOp::Square => 19,
            UnaryOp::Floor => 20,
            UnaryOp::Ceil => 21,
            UnaryOp::Round => 22,
            UnaryOp::Trunc => 23,
            UnaryOp::Sign => 24,
            UnaryOp::Erf => 25,
        }
    }

    /// The two scalar parameters passed to kernels (unused ones are 0).
    pub fn params(self) -> [f32; 2] {
        match self {
            UnaryOp::Affine { mul, add } => [mul, add],
            UnaryOp::PowScalar(s) | UnaryOp::MaxScalar(s) | UnaryOp::MinScalar(s) => [s, 0.0],
            _ => [0.0, 0.0],
        }
    }

    /// Short name for errors and benchmarks.
    pub fn name(self) -> &'static str {
        match self {
            UnaryOp::Neg => "neg",
            UnaryOp::Abs => "abs",
            UnaryOp::Exp => "exp",
            UnaryOp::Log => "log",
            UnaryOp::Sqrt => "sqrt",
            UnaryOp::Rsqrt => "rsqrt",
            UnaryOp::Tanh => "tanh",
            UnaryOp::Sigmoid => "sigmoid",
            UnaryOp::Relu => "relu",
            UnaryOp::GeluErf => "gelu",
            UnaryOp::GeluTanh => "gelu_tanh",
            UnaryOp::Silu => "silu",
            UnaryOp::Sin => "sin",
            UnaryOp::Cos => "cos",
            UnaryOp::Affine { .. } => "affine",
            UnaryOp::PowScalar(_) => "pow_scalar",
            UnaryOp::MaxScalar(_) => "maximum_scalar",
            UnaryOp::MinScalar(_) => "minimum_scalar",
            UnaryOp::Recip => "recip",
            UnaryOp::Square => "square",
            UnaryOp::Floor => "floor",
            UnaryOp::Ceil => "ceil",
            UnaryOp::Round => "round",
            UnaryOp::Trunc => "trunc",
            UnaryOp::Sign => "sign",
            UnaryOp::Erf => "erf",
        }
    }

    /// Reference semantics in `f64` (the plain scalar reference for tests).
    pub fn apply(self, x: f64) -> f64 {
        match self {
            UnaryOp::Neg => -x,
            UnaryOp::Abs => x.abs(),
            UnaryOp::Exp => x.exp(),
            UnaryOp::Log => x.ln(),
            UnaryOp::Sqrt => x.sqrt(),
            UnaryOp::Rsqrt => 1.0 / x.sqrt(),
            UnaryOp::Tanh => x.tanh(),
            UnaryOp::Sigmoid => 1.0 / (1.0 + (-x).exp()),
            UnaryOp::Relu => nan_max(x, 0.0),
            UnaryOp::GeluErf => 0.5 * x * (1.0 + erf_f64(x / std::f64::consts::SQRT_2)),
            UnaryOp::GeluTanh => {
                let c = (2.0 / std::f64::consts::PI).sqrt();
                0.5 * x * (1.0 + (c * (x + 0.044715 * x * x * x)).tanh())
            }
            UnaryOp::Silu => x / (1.0 + (-x).exp()),
            UnaryOp::Sin => x.sin(),
            UnaryOp::Cos => x.cos(),
            UnaryOp::Affine { mul, add } => x * mul as f64 + add as f64,
            UnaryOp::PowScalar(e) => x.powf(e as f64),
            UnaryOp::MaxScalar(s) => nan_max(x, s as f64),
            UnaryOp::MinScalar(s) => nan_min(x, s as f64),
            UnaryOp::Recip => 1.0 / x,
            UnaryOp::Square => x * x,
            UnaryOp::Floor => x.floor(),
            UnaryOp::Ceil => x.ceil(),
            UnaryOp::Round => x.round_ties_even(),
            UnaryOp::Trunc => x.trunc(),
            UnaryOp::Sign => f64::from(u8::from(x > 0.0)) - f64::from(u8::from(x < 0.0)),
            UnaryOp::Erf => erf_f64(x),
        }
    }
}

/// Elementwise functions of two operands (NumPy broadcasting is applied by the Tensor layer).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BinaryOp {
    /// `a + b`
    Add,
    /// `a - b`
    Sub,
    /// `a * b`
    Mul,
    /// `a / b`
    Div,
    /// `max(a, b)`
    Maximum,
    /// `min(a, b)`
    Minimum,
    /// `a ^ b`
    Pow,
}

impl BinaryOp {
    /// Stable numeric code used by the WGSL shaders.
    pub fn code(self) -> u32 {
        self as u32
    }

    /// Short name for errors and benchmarks.
    pub fn name(self) -> &'static str {
        match self {
            BinaryOp::Add => "add",
            BinaryOp::Sub => "sub",
            BinaryOp::Mul => "mul",
            BinaryOp::Div => "div",
            BinaryOp::Maximum => "maximum",
            BinaryOp::Minimum => "minimum",
            BinaryOp::Pow => "pow",
        }
    }

    /// Reference semantics in `f64`.
    pub fn apply(self, a: f64, b: f64) -> f64 {
        match self {
            BinaryOp::Add => a + b,
            BinaryOp::Sub => a - b,
            BinaryOp::Mul => a * b,
            BinaryOp::Div => a / b,
            BinaryOp::Maximum => nan_max(a, b),
            BinaryOp::Minimum => nan_min(a, b),
            BinaryOp::Pow => a.powf(b),
        }
    }

    /// Integer semantics (wrapping; division by zero gives 0, as no panic is allowed).
    pub fn apply_i32(self, a: i32, b: i32) -> i32 {
        match self {
            BinaryOp::Add => a.wrapping_add(b),
            BinaryOp::Sub => a.wrapping_sub(b),
            BinaryOp::Mul => a.wrapping_mul(b),
            BinaryOp::Div => a.checked_div(b).unwrap_or(0),
            BinaryOp::Maximum => a.max(b),
            BinaryOp::Minimum => a.min(b),
            BinaryOp::Pow => {
                if b < 0 {
                    0
                } else {
                    a.wrapping_pow(b as u32)
                }
            }
        }
    }
}

/// Elementwise comparisons ([`crate::Tensor::cmp`]): IEEE semantics, so a NaN operand
/// compares false except under `Ne`, and `-0 == +0`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CmpOp {
    /// `a == b`
    Eq,
    /// `a != b`
    Ne,
    /// `a < b`
    Lt,
    /// `a <= b`
    Le,
    /// `a > b`
    Gt,
    /// `a >= b`
    Ge,
}

impl CmpOp {
    /// Every comparison, in code order (useful for tests).
    pub const ALL: [CmpOp; 6] = [
        CmpOp::Eq,
        CmpOp::Ne,
        CmpOp::Lt,
        CmpOp::Le,
        CmpOp::Gt,
        CmpOp::Ge,
    ];

    /// Stable numeric code used by the WGSL shaders.
    pub fn code(self) -> u32 {
        self as u32
    }

    /// Short name for errors (`eq`, `ne`, `lt`, `le`, `gt`, `ge`).
    pub fn name(self) -> &'static str {
        match self {
            CmpOp::Eq => "eq",
            CmpOp::Ne => "ne",
            CmpOp::Lt => "lt",
            CmpOp::Le => "le",
            CmpOp::Gt => "gt",
            CmpOp::Ge => "ge",
        }
    }

    /// Reference semantics (any `PartialOrd` values: floats or integers).
    pub fn apply<T: PartialOrd>(self, a: T, b: T) -> bool {
        match self {
            CmpOp::Eq => a == b,
            CmpOp::Ne => a != b,
            CmpOp::Lt => a < b,
            CmpOp::Le => a <= b,
            CmpOp::Gt => a > b,
            CmpOp::Ge => a >= b,
        }
    }
}

/// Reductions along one dim.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// Sum.
    Sum,
    /// Arithmetic mean.
    Mean,
    /// Maximum.
    Max,
    /// Minimum.
    Min,
    /// Index of the first maximum (output dtype I32).
    ArgMax,
    /// Index of the first minimum (output dtype I32).
    ArgMin,
}

impl ReduceOp {
    /// Stable numeric code used by the WGSL shaders.
    pub fn code(self) -> u32 {
        self as u32
    }

    /// Short name for errors and benchmarks.
    pub fn name(self) -> &'static str {
        match self {
            ReduceOp::Sum => "sum",
            ReduceOp::Mean => "mean",
            ReduceOp::Max => "max",
            ReduceOp::Min => "min",
            ReduceOp::ArgMax => "argmax",
            ReduceOp::ArgMin => "argmin",
        }
    }

    /// True for the index-returning reductions.
    pub fn returns_index(self) -> bool {
        matches!(self, ReduceOp::ArgMax | ReduceOp::ArgMin)
    }
}

/// `max` that propagates NaN (PyTorch's `maximum`, `clamp` and `relu` semantics).
pub fn nan_max(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.max(b)
    }
}

/// `min` that propagates NaN.
pub fn nan_min(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        f64::NAN
    } else {
        a.min(b)
    }
}

/// `erf` in `f64` (Abramowitz–Stegun 7.1.26 refined by one Newton step; |error| < 1e-12),
/// used by the reference semantics only.
pub fn erf_f64(x: f64) -> f64 {
    if x.is_nan() || x == 0.0 {
        return x;
    }
    let sign = x.signum();
    let x = x.abs();
    if x > 6.0 {
        return sign;
    }
    // Series for small x, continued fraction style complement for large x.
    if x < 2.5 {
        let mut sum = x;
        let mut term = x;
        let x2 = x * x;
        let mut n = 0.0;
        loop {
            n += 1.0;
            term *= -x2 / n;
            let add = term / (2.0 * n + 1.0);
            sum += add;
            if add.abs() <= 1e-17 * sum.abs() || n > 200.0 {
                break;
            }
        }
        sign * sum * 2.0 / std::f64::consts::PI.sqrt()
    } else {
        // erfc continued fraction (Lentz), accurate for x >= 2.5.
        let mut f = x;
        let mut c = x;
        let mut d = 0.0;
        for k in 1..200 {
            let a = k as f64 / 2.0;
            d = x + a * d;
            d = if d == 0.0 { 1e-300 } else { 1.0 / d };
            c = x + a / c;
            let delta = c * d;
            f *= delta;
            if (delta - 1.0).abs() < 1e-16 {
                break;
            }
        }
        let erfc = (-x * x).exp() / (f * std::f64::consts::PI.sqrt());
        sign * (1.0 - erfc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn erf_reference_is_accurate() {
        // erf(0.5), erf(1), erf(3) from tables.
        assert!((erf_f64(0.5) - 0.520_499_877_813_046_5).abs() < 1e-14);
        assert!((erf_f64(1.0) - 0.842_700_792_949_714_9).abs() < 1e-14);
        assert!((erf_f64(-3.0) + 0.999_977_909_503_001_4).abs() < 1e-13);
    }
}
