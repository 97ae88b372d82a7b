//! The checks and elementwise updates every scheduler's step shares.
//!
//! Invariants: a step's tensors (sample, model output, noise) must agree in shape and device
//! and be floating point, else an error names the operand; 16-bit tensors are widened to f32
//! for the update and the result is rounded once to the sample's dtype; updates are sums of
//! scalar multiples of tensors (`Σ cᵢ·tᵢ`), the scalars computed on the host.

use crate::{DType, Error, Result, Tensor};

/// `index` must address one of `len` steps.
pub(crate) fn check_index(op: &'static str, index: usize, len: usize) -> Result<()> {
    if index >= len {
        return Err(Error::invalid(
            op,
            format!("expected a step index below {len}, got {index}"),
        ));
    }
    Ok(())
}

/// `other` (named `what`) must match `sample` in shape and device; both must be floats.
pub(crate) fn check_operand(
    op: &'static str,
    sample: &Tensor,
    other: &Tensor,
    what: &str,
) -> Result<()> {
    for (t, name) in [(sample, "sample"), (other, what)] {
        if !matches!(t.dtype(), DType::F32 | DType::F16 | DType::BF16) {
            return Err(Error::invalid(
                op,
                format!("expected a floating-point {name}, got {}", t.dtype()),
            ));
        }
    }
    if other.shape() != sample.shape() {
        return Err(Error::ShapeMismatch {
            op,
            expected: format!("{what} shaped like the sample {:?}", sample.shape()),
            got: format!("{:?}", other.shape()),
        });
    }
    if other.device() != sample.device() {
        return Err(Error::DeviceMismatch {
            op,
            lhs: sample.device(),
            rhs: other.device(),
        });
    }
    Ok(())
}

/// The noise argument of a step: present exactly when the step needs it, shaped like the
/// sample; widened to f32.
pub(crate) fn noise_for_step(
    op: &'static str,
    needed: bool,
    index: usize,
    sample: &Tensor,
    noise: Option<&Tensor>,
) -> Result<Option<Tensor>> {
    match (needed, noise) {
        (true, Some(n)) => {
            check_operand(op, sample, n, "noise")?;
            Ok(Some(widen(n)?))
        }
        (false, None) => Ok(None),
        (true, None) => Err(Error::invalid(
            op,
            format!(
                "step {index} adds noise: expected a standard normal tensor shaped like the \
                 sample, got none"
            ),
        )),
        (false, Some(_)) => Err(Error::invalid(
            op,
            format!(
                "step {index} adds no noise (needs_noise is false), yet noise was given; \
                 drawing it would shift the generator's stream"
            ),
        )),
    }
}

/// `t` in f32 (a cheap handle clone when it already is).
pub(crate) fn widen(t: &Tensor) -> Result<Tensor> {
    if t.dtype() == DType::F32 {
        Ok(t.clone())
    } else {
        t.to_dtype(DType::F32)
    }
}

/// `t` rounded to `dtype` (the sample's) where it differs.
pub(crate) fn narrow_to(t: Tensor, dtype: DType) -> Result<Tensor> {
    if t.dtype() == dtype {
        Ok(t)
    } else {
        t.to_dtype(dtype)
    }
}

/// `Σ cᵢ·tᵢ` over `terms` (at least one), on the tensors' device; a coefficient of exactly 1
/// costs no multiplication.
pub(crate) fn combine(terms: &[(&Tensor, f64)]) -> Result<Tensor> {
    let scaled = |(t, c): &(&Tensor, f64)| -> Result<Tensor> {
        if *c == 1.0 {
            Ok((*t).clone())
        } else {
            t.mul_scalar(*c)
        }
    };
    let Some((first, rest)) = terms.split_first() else {
        return Err(Error::invalid("scheduler", "a combination of no tensors"));
    };
    let mut acc = scaled(first)?;
    for term in rest {
        acc = acc.add(&scaled(term)?)?;
    }
    Ok(acc)
}

/// Where a multistep scheduler's run stands: the index its next step must have (`None`: a
/// fresh run, which may start anywhere).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct StepOrder {
    next: Option<usize>,
}

impl StepOrder {
    /// Checks that `index` continues the run.
    pub(crate) fn check(&self, op: &'static str, index: usize) -> Result<()> {
        match self.next {
            Some(n) if n != index => Err(Error::invalid(
                op,
                format!(
                    "this scheduler keeps a multistep history, so steps run in order: expected \
                     step {n}, got {index} (set_begin_index restarts a run)"
                ),
            )),
            _ => Ok(()),
        }
    }

    /// Records that step `index` ran.
    pub(crate) fn advance(&mut self, index: usize) {
        self.next = Some(index + 1);
    }

    /// A run that starts at `index`.
    pub(crate) fn begin_at(index: usize) -> StepOrder {
        StepOrder { next: Some(index) }
    }
}
