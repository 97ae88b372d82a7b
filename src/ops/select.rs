//! Comparisons and selection: [`Tensor::cmp`] (and `eq`, `ne`, `lt`, `le`, `gt`, `ge`,
//! [`Tensor::cmp_scalar`]), [`Tensor::where_cond`] and [`Tensor::masked_fill`].
//!
//! Semantics follow PyTorch with `u8` standing for `bool` (as candle does): a comparison gives
//! a `u8` tensor of 0/1 in the operands' broadcast shape; `mask.where_cond(a, b)` is
//! `torch.where(mask, a, b)` for a `u8` mask (nonzero picks `a`) broadcast with both values;
//! `x.masked_fill(mask, v)` is `torch.Tensor.masked_fill` (the mask broadcasts to `x`'s shape).
//!
//! Invariants: every op here is exact on both devices (values are compared or copied bit for
//! bit, never computed: `-0.0`, infinities and NaN payloads come through unchanged); operands
//! share one device; compared operands and selected values share one dtype (any dtype; floats
//! compare by IEEE rules: NaN is unordered, `-0 == +0`); outputs are contiguous; broadcast
//! operands are read through zero strides, never materialised on the Xpu.

use crate::desc::kinds::CmpOp;
use crate::layout::broadcast_shapes;
use crate::ops::elementwise::elementwise_layouts;
use crate::{DType, Error, Layout, Result, Tensor};

macro_rules! cmp_methods {
    ($($(#[$doc:meta])* $name:ident => $op:expr),* $(,)?) => {
        impl Tensor {
            $(
                $(#[$doc])*
                pub fn $name(&self, rhs: &Tensor) -> Result<Tensor> {
                    self.cmp(rhs, $op)
                }
            )*
        }
    };
}

cmp_methods! {
    /// `self == rhs` elementwise as `u8` 0/1 (broadcasting).
    eq => CmpOp::Eq,
    /// `self != rhs` elementwise as `u8` 0/1 (broadcasting; NaN != anything).
    ne => CmpOp::Ne,
    /// `self < rhs` elementwise as `u8` 0/1 (broadcasting).
    lt => CmpOp::Lt,
    /// `self <= rhs` elementwise as `u8` 0/1 (broadcasting).
    le => CmpOp::Le,
    /// `self > rhs` elementwise as `u8` 0/1 (broadcasting).
    gt => CmpOp::Gt,
    /// `self >= rhs` elementwise as `u8` 0/1 (broadcasting).
    ge => CmpOp::Ge,
}

impl Tensor {
    /// `op(self, rhs)` elementwise with NumPy broadcasting, as a `u8` tensor of 0/1 (PyTorch's
    /// bool). Operands share device and dtype (any dtype).
    pub fn cmp(&self, rhs: &Tensor, op: CmpOp) -> Result<Tensor> {
        self.same_device(rhs, op.name())?;
        self.same_dtype(rhs, op.name())?;
        let shape = broadcast_shapes(op.name(), self.shape(), rhs.shape())?;
        let (reads, out) = elementwise_layouts(&[self, rhs], &shape)?;
        let s = self
            .storage()
            .cmp(&reads[0], rhs.storage(), &reads[1], op)?;
        Ok(Tensor::from_storage(s, out))
    }

    /// `op(self, value)` elementwise as `u8` 0/1, with PyTorch's promotion of a Python scalar:
    /// a float tensor compares with `value` rounded to its dtype (`x.cmp_scalar(CmpOp::Lt, 0.1)`
    /// on f16 data compares with f16's 0.1); an integer tensor compares with `value` itself
    /// (`i32` data `< 0.5` is `<= 0`; `u8` data `< 300` is all true), exactly.
    pub fn cmp_scalar(&self, op: CmpOp, value: f64) -> Result<Tensor> {
        let value = match self.dtype() {
            DType::I32 => integer_threshold(op, value, f64::from(i32::MIN), f64::from(i32::MAX)),
            DType::U8 => integer_threshold(op, value, 0.0, 255.0),
            _ => Threshold::Compare(op, value),
        };
        match value {
            Threshold::Compare(op, v) => {
                let v = Tensor::full(v, &[], self.dtype(), self.device())?;
                self.cmp(&v, op)
            }
            Threshold::All(b) => Tensor::full(
                f64::from(u8::from(b)),
                self.shape(),
                DType::U8,
                self.device(),
            ),
        }
    }

    /// `self ? on_true : on_false` elementwise for a `u8` mask `self` (nonzero picks
    /// `on_true`), all three broadcast together (`torch.where(mask, on_true, on_false)`). The
    /// values share one dtype (any) and the output has it; values are copied bit for bit.
    pub fn where_cond(&self, on_true: &Tensor, on_false: &Tensor) -> Result<Tensor> {
        self.select_elements("where_cond", on_true, on_false, false)
    }

    /// [`Tensor::where_cond`] for `op`, its result in TensorIterator's memory order (as
    /// `torch.where`) or, with `row_major`, contiguous (as the ops PyTorch builds on a
    /// contiguous clone: `masked_fill`, `tril`, `triu`).
    pub(crate) fn select_elements(
        &self,
        op: &'static str,
        on_true: &Tensor,
        on_false: &Tensor,
        row_major: bool,
    ) -> Result<Tensor> {
        self.same_device(on_true, op)?;
        self.same_device(on_false, op)?;
        if self.dtype() != DType::U8 {
            return Err(Error::invalid(
                op,
                format!(
                    "the mask must be u8 (0 picks on_false, nonzero on_true; comparisons such \
                     as `gt` make one), got {}",
                    self.dtype()
                ),
            ));
        }
        on_true.same_dtype(on_false, op)?;
        let shape = broadcast_shapes(op, self.shape(), on_true.shape())?;
        let shape = broadcast_shapes(op, &shape, on_false.shape())?;
        let (reads, out) = if row_major {
            let reads = [self, on_true, on_false]
                .iter()
                .map(|t| t.layout().broadcast_to(&shape))
                .collect::<Result<Vec<_>>>()?;
            (reads, Layout::contiguous(&shape))
        } else {
            elementwise_layouts(&[self, on_true, on_false], &shape)?
        };
        let s = self.storage().select(
            &reads[0],
            (on_true.storage(), &reads[1]),
            (on_false.storage(), &reads[2]),
        )?;
        Ok(Tensor::from_storage(s, out))
    }

    /// `self` with `value` (converted to `self`'s dtype) wherever the `u8` `mask` is nonzero;
    /// `self` and the mask broadcast together, so the result has their broadcast shape
    /// (`torch.Tensor.masked_fill`, out of place); the result is contiguous, as PyTorch's
    /// (which fills a contiguous clone).
    pub fn masked_fill(&self, mask: &Tensor, value: f64) -> Result<Tensor> {
        let op = "masked_fill";
        broadcast_shapes(op, self.shape(), mask.shape())?;
        let fill = Tensor::full(value, &[], self.dtype(), self.device())?;
        mask.select_elements(op, &fill, self, true)
    }
}

/// A scalar comparison restated for integer data.
enum Threshold {
    /// Compare with this value (representable in the dtype).
    Compare(CmpOp, f64),
    /// The answer for every element.
    All(bool),
}

/// `x op value` for integers `x` in `lo..=hi`, as a comparison with an integer in range or a
/// constant answer: `x < 2.5` is `x < 3`, `x == 2.5` is never true, `x < 1e10` always is.
fn integer_threshold(op: CmpOp, value: f64, lo: f64, hi: f64) -> Threshold {
    if value.is_nan() {
        return Threshold::All(op == CmpOp::Ne);
    }
    let (up, down) = (value.ceil(), value.floor());
    match op {
        // x < v  <=>  x < ceil(v);   x >= v  <=>  x >= ceil(v)
        CmpOp::Lt | CmpOp::Ge if up > hi => Threshold::All(op == CmpOp::Lt),
        CmpOp::Lt | CmpOp::Ge if up <= lo => Threshold::All(op == CmpOp::Ge),
        CmpOp::Lt | CmpOp::Ge => Threshold::Compare(op, up),
        // x <= v  <=>  x <= floor(v); x > v  <=>  x > floor(v)
        CmpOp::Le | CmpOp::Gt if down >= hi => Threshold::All(op == CmpOp::Le),
        CmpOp::Le | CmpOp::Gt if down < lo => Threshold::All(op == CmpOp::Gt),
        CmpOp::Le | CmpOp::Gt => Threshold::Compare(op, down),
        // Equality needs an integer in range.
        CmpOp::Eq | CmpOp::Ne if value != down || value < lo || value > hi => {
            Threshold::All(op == CmpOp::Ne)
        }
        CmpOp::Eq | CmpOp::Ne => Threshold::Compare(op, value),
    }
}
