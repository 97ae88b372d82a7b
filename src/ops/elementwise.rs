//! Unary and binary elementwise ops with NumPy broadcasting, and their scalar forms.
//!
//! Outputs take the memory order PyTorch's `TensorIterator` gives them
//! ([`crate::layout::elementwise_output`]): row-major for row-major operands, channels-last
//! for channels-last ones, a transpose's order for a transpose. The kernels see the operands
//! permuted into that order, so they read in storage order and write one contiguous buffer.

use crate::desc::kinds::{BinaryOp, UnaryOp};
use crate::layout::broadcast_shapes;
use crate::Tensor;
use crate::{Layout, Result};

/// The read layouts of elementwise `operands` (broadcast to `shape`, permuted into the
/// output's storage order) and the output's layout, by PyTorch's rules.
pub(crate) fn elementwise_layouts(
    operands: &[&Tensor],
    shape: &[usize],
) -> Result<(Vec<Layout>, Layout)> {
    let same_shape = operands.iter().all(|t| t.shape() == shape);
    let broadcast = operands
        .iter()
        .map(|t| t.layout().broadcast_to(shape))
        .collect::<Result<Vec<_>>>()?;
    let refs: Vec<&Layout> = broadcast.iter().collect();
    let (order, out) = crate::layout::elementwise_output(&refs, same_shape);
    let reads = broadcast
        .iter()
        .map(|l| l.permute(&order))
        .collect::<Result<Vec<_>>>()?;
    Ok((reads, out))
}

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
        let (reads, out) = elementwise_layouts(&[self], self.shape())?;
        let s = self.storage().unary(&reads[0], op)?;
        Ok(Tensor::from_storage(s, out))
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
        let (reads, out) = elementwise_layouts(&[self, rhs], &shape)?;
        let s = self
            .storage()
            .binary(&reads[0], rhs.storage(), &reads[1], op)?;
        Ok(Tensor::from_storage(s, out))
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
