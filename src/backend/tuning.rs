//! The backend's use of the autotuner (`crate::autotune`): running a family's candidates
//! through it, the devices' key texts, and the agreement check of candidate results.
//!
//! Invariant: a candidate's result is compared with the reference (the static rule's) as f32
//! values of the same flat buffer, so both must come in the same layout; a NaN agrees only
//! with a NaN.

use super::*;
use crate::autotune::{self, Decision, Key};

/// Runs the candidate the autotuner picks among `names` (valid for the problem; `rule` the
/// static rule's) for the key `key`. `exec` runs a candidate; while measuring, each run is
/// followed by `wait` (on the GPU: until the queued work is done), so its time is its own.
pub(crate) fn run_tuned<T>(
    key: &Key,
    names: &[&'static str],
    rule: usize,
    exec: &mut dyn FnMut(usize) -> Result<T>,
    wait: &dyn Fn() -> Result<()>,
    agree: &dyn Fn(&T, &T) -> bool,
) -> Result<T> {
    let mut timed = |i: usize| -> Result<T> {
        let r = exec(i)?;
        wait()?;
        Ok(r)
    };
    match autotune::decide(key, names, rule, &mut timed, agree, &|| 0.0)? {
        Decision::Run(i) => exec(i),
        Decision::Done(r) => Ok(r),
    }
}

/// A key for a problem of the CPU in this thread's configuration.
pub(crate) fn cpu_key(op: &'static str, problem: &str) -> Key {
    Key::new(&crate::cpu::tuning::device_id(), op, problem)
}

/// Whether two Cpu results of equal length agree: every value within `tol` times the largest
/// magnitude of the reference `want` (at least `tol` itself).
pub(crate) fn cpu_agree(want: &CpuStorage, got: &CpuStorage, tol: f32) -> bool {
    let flat = |s: &CpuStorage| -> Option<Vec<f32>> {
        let l = Layout::contiguous(&[s.len()]);
        s.cast(&l, DType::F32).ok()?.to_vec::<f32>(&l).ok()
    };
    let (Some(w), Some(g)) = (flat(want), flat(got)) else {
        return false;
    };
    values_agree(&w, &g, tol)
}

/// `got` within `tol` times the largest finite magnitude of `want` (at least `tol`), NaN where
/// `want` is NaN, equal infinities.
pub(crate) fn values_agree(want: &[f32], got: &[f32], tol: f32) -> bool {
    if want.len() != got.len() {
        return false;
    }
    let peak = want
        .iter()
        .filter(|x| x.is_finite())
        .fold(1f32, |m, x| m.max(x.abs()));
    let bound = tol * peak;
    want.iter().zip(got).all(|(w, g)| {
        if w.is_nan() || g.is_nan() {
            w.is_nan() && g.is_nan()
        } else if w.is_infinite() || g.is_infinite() {
            w == g
        } else {
            (w - g).abs() <= bound
        }
    })
}

#[cfg(test)]
mod tests {
    use super::values_agree;

    #[test]
    fn agreement_is_relative_to_the_reference_peak_and_strict_on_nan() {
        assert!(values_agree(&[10.0, 0.0], &[10.05, 0.05], 0.01));
        assert!(!values_agree(&[10.0, 0.0], &[10.0, 0.2], 0.01));
        assert!(values_agree(&[f32::NAN, 1.0], &[f32::NAN, 1.0], 0.0));
        assert!(!values_agree(&[f32::NAN], &[1.0], 0.5));
        assert!(!values_agree(&[1.0], &[f32::NAN], 0.5));
        assert!(values_agree(&[f32::INFINITY], &[f32::INFINITY], 0.0));
        assert!(!values_agree(&[f32::INFINITY], &[f32::NEG_INFINITY], 0.0));
        assert!(!values_agree(&[1.0], &[1.0, 2.0], 0.5));
    }
}
