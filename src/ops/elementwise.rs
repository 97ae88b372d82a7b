//! Unary and binary elementwise ops with NumPy broadcasting, and their scalar forms.

use crate::layout::broadcast_shapes;
use crate::ops::kinds::{BinaryOp, UnaryOp};
use crate::Tensor;
use crate::{Layout, Result};

macro_rules! unary_methods {
    ($($(#[$doc:meta])* $name:ident => $op:expr),* $(,)?) => {
        impl Tensor {
            $(
                $(#[$doc])*
                pub fn $name(&self) -> Result<Tensor> {
                    self.unary($op)
                }
            )*
        }
    };
}

unary_methods! {
    /// `-x`
    neg => UnaryOp::Neg,
    /// `|x|`
    abs => UnaryOp::Abs,
    /// `e^x`
    exp => UnaryOp::Exp,
    /// Natural logarithm.
    log => UnaryOp::Log,
    /// Square root.
    sqrt => UnaryOp::Sqrt,
    /// `1/sqrt(x)`
    rsqrt => UnaryOp::Rsqrt,
    /// Hyperbolic tangent.
    tanh => UnaryOp::Tanh,
    /// Logistic sigmoid.
    sigmoid => UnaryOp::Sigmoid,
    /// `max(x, 0)` (NaN stays NaN).
    relu => UnaryOp::Relu,
    /// GELU, exact erf form (PyTorch's default).
    gelu => UnaryOp::GeluErf,
    /// GELU, tanh approximation (PyTorch's `approximate="tanh"`).
    gelu_tanh => UnaryOp::GeluTanh,
    /// SiLU (swish): `x * sigmoid(x)`.
    silu => UnaryOp::Silu,
    /// Sine.
    sin => UnaryOp::Sin,
    /// Cosine.
    cos => UnaryOp::Cos,
    /// `1/x`
    recip => UnaryOp::Recip,
    /// `x*x`
    square => UnaryOp::Square,
    /// Largest integer not above `x` (`torch.floor`).
    floor => UnaryOp::Floor,
    /// Smallest integer not below `x` (`torch.ceil`).
    ceil => UnaryOp::Ceil,
    /// Nearest integer, halfway cases to even (`torch.round`).
    round => UnaryOp::Round,
    /// Integer part, toward zero (`torch.trunc`).
    trunc => UnaryOp::Trunc,
    /// `-1`, `0` or `1` by sign; `+0` for `±0` and NaN (`torch.sign`).
    sign => UnaryOp::Sign,
    /// The error function (`torch.erf`).
    erf => UnaryOp::Erf,
}

impl Tensor {
    /// Applies any [`UnaryOp`].
    pub fn unary(&self, op: UnaryOp) -> Result<Tensor> {
        let s = self.storage().unary(self.layout(), op)?;
        Ok(Tensor::from_storage(s, Layout::contiguous(self.shape())))
    }

    /// `x * mul + add` in one pass.
    pub fn affine(&self, mul: f64, add: f64) -> Result<Tensor> {
        self.unary(UnaryOp::Affine {
            mul: mul as f32,
            add: add as f32,
        })
    }

    /// `x ^ e`
    pub fn powf(&self, e: f64) -> Result<Tensor> {
        self.unary(UnaryOp::PowScalar(e as f32))
    }

    /// Applies any [`BinaryOp`] with NumPy broadcasting. Operands must share device and dtype.
    pub fn binary(&self, rhs: &Tensor, op: BinaryOp) -> Result<Tensor> {
        self.same_device(rhs, op.name())?;
        self.same_dtype(rhs, op.name())?;
        let shape = broadcast_shapes(op.name(), self.shape(), rhs.shape())?;
        let l = self.layout().broadcast_to(&shape)?;
        let r = rhs.layout().broadcast_to(&shape)?;
        let s = self.storage().binary(&l, rhs.storage(), &r, op)?;
        Ok(Tensor::from_storage(s, Layout::contiguous(&shape)))
    }

    /// `self + rhs` (broadcasting).
    pub fn add(&self, rhs: &Tensor) -> Result<Tensor> {
        self.binary(rhs, BinaryOp::Add)
    }

    /// `self - rhs` (broadcasting).
    pub fn sub(&self, rhs: &Tensor) -> Result<Tensor> {
        self.binary(rhs, BinaryOp::Sub)
    }

    /// `self * rhs` (broadcasting).
    pub fn mul(&self, rhs: &Tensor) -> Result<Tensor> {
        self.binary(rhs, BinaryOp::Mul)
    }

    /// `self / rhs` (broadcasting).
    pub fn div(&self, rhs: &Tensor) -> Result<Tensor> {
        self.binary(rhs, BinaryOp::Div)
    }

    /// Elementwise maximum (NaN propagates, like `torch.maximum`).
    pub fn maximum(&self, rhs: &Tensor) -> Result<Tensor> {
        self.binary(rhs, BinaryOp::Maximum)
    }

    /// Elementwise minimum (NaN propagates, like `torch.minimum`).
    pub fn minimum(&self, rhs: &Tensor) -> Result<Tensor> {
        self.binary(rhs, BinaryOp::Minimum)
    }

    /// `self ^ rhs` (broadcasting).
    pub fn pow(&self, rhs: &Tensor) -> Result<Tensor> {
        self.binary(rhs, BinaryOp::Pow)
    }

    /// `self + s`
    pub fn add_scalar(&self, s: f64) -> Result<Tensor> {
        self.affine(1.0, s)
    }

    /// `self - s`
    pub fn sub_scalar(&self, s: f64) -> Result<Tensor> {
        self.affine(1.0, -s)
    }

    /// `self * s`
    pub fn mul_scalar(&self, s: f64) -> Result<Tensor> {
        self.affine(s, 0.0)
    }

    /// `self / s`
    pub fn div_scalar(&self, s: f64) -> Result<Tensor> {
        self.affine(1.0 / s, 0.0)
    }

    /// `max(self, s)` (NaN propagates).
    pub fn maximum_scalar(&self, s: f64) -> Result<Tensor> {
        self.unary(UnaryOp::MaxScalar(s as f32))
    }

    /// `min(self, s)` (NaN propagates).
    pub fn minimum_scalar(&self, s: f64) -> Result<Tensor> {
        self.unary(UnaryOp::MinScalar(s as f32))
    }

    /// `self ^ s`
    pub fn pow_scalar(&self, s: f64) -> Result<Tensor> {
        self.powf(s)
    }

    /// Clamps into `[min, max]`.
    pub fn clamp(&self, min: f64, max: f64) -> Result<Tensor> {
        self.maximum_scalar(min)?.minimum_scalar(max)
    }
}
