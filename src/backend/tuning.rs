//! The backend's use of the autotuner (`crate::autotune`): running a family's candidates
//! through it, the devices' key texts, the agreement check of candidate results, and the
//! split-K family the GPU's products and convolutions share (`gpu_split_k`).
//!
//! Invariants: a candidate's result is compared with the reference (the static rule's) as f32
//! values of the same flat buffer, so both must come in the same layout; a NaN agrees only
//! with a NaN. On the GPU a candidate's time runs until the queue has finished its work
//! ([`gpu_wait`]), and results are compared after reading both back.

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
    run_tuned_with_setup(key, names, rule, exec, wait, agree, &|| 0.0)
}

/// [`run_tuned`] for a GPU family: each measured run waits for the queue ([`gpu_wait`]), its
/// pipeline creation is left out of its time, and results agree as [`xpu_agree`] says within
/// `tol`.
pub(crate) fn run_tuned_gpu(
    key: &Key,
    names: &[&'static str],
    rule: usize,
    exec: &mut dyn FnMut(usize) -> Result<XpuStorage>,
    tol: f32,
) -> Result<XpuStorage> {
    run_tuned_with_setup(
        key,
        names,
        rule,
        exec,
        &gpu_wait,
        &|a, b| xpu_agree(a, b, tol),
        &crate::gpu::pipeline_creation_seconds,
    )
}

/// [`run_tuned`], with `setup` counting this thread's one-time setup seconds, which a
/// measurement leaves out of candidate times.
pub(crate) fn run_tuned_with_setup<T>(
    key: &Key,
    names: &[&'static str],
    rule: usize,
    exec: &mut dyn FnMut(usize) -> Result<T>,
    wait: &dyn Fn() -> Result<()>,
    agree: &dyn Fn(&T, &T) -> bool,
    setup: &dyn Fn() -> f64,
) -> Result<T> {
    let mut timed = |i: usize| -> Result<T> {
        let r = exec(i)?;
        wait()?;
        Ok(r)
    };
    match autotune::decide(key, names, rule, &mut timed, agree, setup)? {
        Decision::Run(i) => exec(i),
        Decision::Done(r) => Ok(r),
    }
}

/// [`run_tuned`] for a layer whose candidates each run on their own packs of the layer's
/// weight: `packs(i)` gives candidate `i`'s (the layer's own, or new ones; the time it takes is
/// left out of the candidate's), `run` makes the call on them. Packs made while measuring are
/// set aside, and the winner's are handed to `keep` afterwards, so the layer holds the packs of
/// the kernel it runs from then on.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run_tuned_repacking<P, T>(
    key: &Key,
    names: &[&'static str],
    rule: usize,
    current: &std::sync::Arc<P>,
    packs: &dyn Fn(usize) -> Result<std::sync::Arc<P>>,
    run: &dyn Fn(&P) -> Result<T>,
    agree: &dyn Fn(&T, &T) -> bool,
    keep: &dyn Fn(std::sync::Arc<P>),
) -> Result<T> {
    use std::sync::Arc;
    let made = std::cell::RefCell::new(Vec::<(usize, Arc<P>)>::new());
    let packing_s = std::cell::Cell::new(0.0f64);
    let out = run_tuned_with_setup(
        key,
        names,
        rule,
        &mut |i| {
            let t = std::time::Instant::now();
            let p = packs(i)?;
            packing_s.set(packing_s.get() + t.elapsed().as_secs_f64());
            if autotune::measuring() && !Arc::ptr_eq(&p, current) {
                made.borrow_mut().push((i, Arc::clone(&p)));
            }
            run(&p)
        },
        &|| Ok(()),
        agree,
        &|| packing_s.get(),
    )?;
    let made = made.into_inner();
    if let Some(winner) = (!made.is_empty())
        .then(|| autotune::known_winner(key))
        .flatten()
    {
        if let Some((_, p)) = made.into_iter().find(|(i, _)| names[*i] == winner) {
            keep(p);
        }
    }
    Ok(out)
}

/// A key for a problem of the CPU in this thread's configuration.
pub(crate) fn cpu_key(op: &'static str, problem: &str) -> Key {
    Key::new(&crate::cpu::tuning::device_id(), op, problem)
}

/// A key for a problem of the Xpu adapter in use.
pub(crate) fn gpu_key(op: &'static str, problem: &str) -> Result<Key> {
    Ok(Key::new(&crate::gpu::tuning_device_id()?, op, problem))
}

/// The `wait` of GPU families: until the queued GPU work has finished.
pub(crate) fn gpu_wait() -> Result<()> {
    crate::gpu::synchronize()
}

/// The agreement tolerance of GPU results computed in `dtype` (relative to the reference's
/// largest magnitude): f32 sums in another order, or 16-bit results rounded from them.
pub(crate) fn gpu_tolerance(dtype: DType) -> f32 {
    if dtype == DType::F32 {
        1e-3
    } else {
        3e-2
    }
}

/// Whether two Xpu results agree: both read back as f32 and compared by [`values_agree`]
/// within `tol`; a result that cannot be read back does not agree.
pub(crate) fn xpu_agree(want: &XpuStorage, got: &XpuStorage, tol: f32) -> bool {
    let read = crate::gpu::tuning::values_f32;
    match (read(want), read(got)) {
        (Ok(w), Ok(g)) => values_agree(&w, &g, tol),
        _ => false,
    }
}

/// The autotuner's family of split-K counts on the GPU (see `gpu::kernels::matmul::split_k`).
pub(crate) const GPU_SPLIT_K: &str = "gpu_split_k";

/// The name of a split count (`"1"` whole, `"2"`, ...), for counts up to
/// `split_k::MAX_SPLITS`.
fn split_name(n: usize) -> Option<&'static str> {
    use crate::gpu::kernels::matmul::split_k::MAX_SPLITS;
    static NAMES: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    NAMES
        .get_or_init(|| (0..=MAX_SPLITS).map(|n| n.to_string()).collect())
        .get(n)
        .map(String::as_str)
}

/// Where a GPU product may split K: the kernel's name, its operands' dtype, its output tiles
/// (all batches) and K, and whether the static rule plans splits on it (`split_k::rule`).
pub(crate) struct SplitProblem {
    /// The kernel's name (part of the key: each kernel tunes its own splits).
    pub kernel: &'static str,
    /// The operands' dtype.
    pub dtype: DType,
    /// Output tiles of the kernel, all batches.
    pub tiles: usize,
    /// The product's K.
    pub k: usize,
    /// The static rule plans splits on this kernel.
    pub plans: bool,
}

/// Runs `exec(splits)` for the split count the autotuner picks (family [`GPU_SPLIT_K`]) among
/// the counts worth measuring for `p` (`split_k::counts`; the key names the tiles and K
/// bucketed and the rule's count). A count forced by name runs wherever it splits this K,
/// even when not worth measuring. Results are compared as [`xpu_agree`] does within `tol`.
pub(crate) fn tuned_splits(
    p: &SplitProblem,
    exec: &mut dyn FnMut(usize) -> Result<XpuStorage>,
    tol: f32,
) -> Result<XpuStorage> {
    use crate::autotune::bucket;
    use crate::gpu::kernels::matmul::split_k;
    let k = p.k;
    let (mut counts, rule) = split_k::counts(p.tiles, k, p.plans);
    let forced = crate::config::with(|c| {
        c.autotune
            .forced(GPU_SPLIT_K)
            .and_then(|f| f.trim().parse::<usize>().ok())
    });
    if let Some(n) = forced {
        if !counts.contains(&n) && n <= split_k::MAX_SPLITS && split_k::split(k, n).is_some() {
            counts.push(n);
        }
    }
    let names: Vec<&'static str> = counts.iter().filter_map(|&n| split_name(n)).collect();
    if names.len() != counts.len() {
        return Err(Error::invalid(
            GPU_SPLIT_K,
            format!("split counts up to {}, got {counts:?}", split_k::MAX_SPLITS),
        ));
    }
    let rule_count = counts.get(rule).copied().unwrap_or(1);
    let problem = format!(
        "{} {} tiles {} k {} rule {rule_count}",
        p.kernel,
        p.dtype,
        bucket(p.tiles),
        bucket(k)
    );
    let key = gpu_key(GPU_SPLIT_K, &problem)?;
    run_tuned_gpu(&key, &names, rule, &mut |i| exec(counts[i]), tol)
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
