//! Measuring the candidates of one problem.
//!
//! A problem whose rule runs in under [`MIN_TUNE_S`] or over [`MAX_TUNE_S`] keeps the rule without
//! measuring the others.
//! Otherwise every valid candidate runs once on the real problem: the static rule's first (its result is
//! the reference), then the others, each checked against the reference and timed. The call's
//! result is the winner's own output, so every call of a key, the measuring one included,
//! comes from the same kernel. Problems that take under [`CHEAP_S`] run again, up to [`RUNS`] times each, while
//! the key has spent under [`BUDGET_S`]; a candidate's time is its fastest run (the first run
//! also pays for warming caches). One-time setup the caller counts (`setup`: on the GPU, the
//! seconds spent compiling pipelines) is left out of every run's time, so a candidate whose
//! pipelines are new is not timed by its compiler. So tuning a problem costs about one run per
//! candidate when the problem is long, and at most [`BUDGET_S`] plus one run each when it is
//! short.

use std::time::Instant;

use super::table::CandidateTime;
use crate::Result;

/// Problems whose rule runs faster than this (seconds) keep the rule unmeasured: their
/// candidates' differences are within timing noise and worth nothing.
pub(crate) const MIN_TUNE_S: f64 = 1e-4;
/// Problems whose rule runs longer than this (seconds) keep the rule unmeasured: each other
/// candidate would cost as much again or more on a first run (the 512×512 f32 VAE decode's
/// convolutions took 1.5–9× their rule's time on the other kernels, 12.7 s in all, to confirm
/// the rule everywhere), which bounds a first run's tuning time. SD 1.5's UNet problems at
/// 512×512 run well under it.
pub(crate) const MAX_TUNE_S: f64 = 0.25;

/// Problems faster than this (seconds) are timed more than once.
pub(crate) const CHEAP_S: f64 = 0.025;
/// The most runs of one candidate.
pub(crate) const RUNS: usize = 3;
/// The time (seconds) repeated runs may spend on one key.
pub(crate) const BUDGET_S: f64 = 0.2;
/// Another candidate replaces the rule's only when its time is below this fraction of the
/// rule's.
pub(crate) const MARGIN: f64 = 0.97;

/// Seconds since `t`, less the setup seconds counted since `s0` (never below zero).
fn elapsed(t: Instant, s0: f64, setup: &dyn Fn() -> f64) -> f64 {
    (t.elapsed().as_secs_f64() - (setup() - s0)).max(0.0)
}

/// Measures `names` (see the module documentation): the time of each, the index of the winner
/// and the winner's result. `setup` counts the caller's one-time setup seconds (left out of
/// the times). Errors only when the rule's own candidate fails (or the winner, run once more
/// where its first result was not kept).
pub(crate) fn measure<T>(
    names: &[&'static str],
    rule: usize,
    run: &mut dyn FnMut(usize) -> Result<T>,
    agree: &dyn Fn(&T, &T) -> bool,
    setup: &dyn Fn() -> f64,
) -> Result<(Vec<CandidateTime>, usize, T)> {
    let start = Instant::now();
    let mut best: Vec<Option<f64>> = vec![None; names.len()];
    let mut failure: Vec<Option<String>> = vec![None; names.len()];
    let mut runs = vec![0usize; names.len()];
    let (t, s0) = (Instant::now(), setup());
    let reference = run(rule)?;
    best[rule] = Some(elapsed(t, s0, setup));
    runs[rule] = 1;
    let outside = |b: f64| {
        if b < MIN_TUNE_S {
            Some("not measured: the problem is too short")
        } else if b > MAX_TUNE_S {
            Some("not measured: the problem is too long")
        } else {
            None
        }
    };
    // Each candidate's time, runs and why it was not chosen.
    let times =
        |best: &[Option<f64>], runs: &[usize], failure: &dyn Fn(usize) -> Option<String>| {
            names
                .iter()
                .enumerate()
                .map(|(i, n)| CandidateTime {
                    name: n.to_string(),
                    ms: best[i].map(|s| s * 1e3),
                    runs: runs[i],
                    failure: failure(i),
                })
                .collect::<Vec<_>>()
        };
    if let Some(why) = best[rule].and_then(outside) {
        let times = times(&best, &runs, &|i| (i != rule).then(|| why.into()));
        return Ok((times, rule, reference));
    }
    // The fastest other candidate's first result (one kept at a time, to bound memory).
    let mut kept: Option<(usize, T)> = None;
    for i in (0..names.len()).filter(|&i| i != rule) {
        let (t, s0) = (Instant::now(), setup());
        match run(i) {
            Ok(r) if agree(&reference, &r) => {
                let time = elapsed(t, s0, setup);
                best[i] = Some(time);
                if kept
                    .as_ref()
                    .is_none_or(|(k, _)| best[*k].is_none_or(|b| time < b))
                {
                    kept = Some((i, r));
                }
            }
            Ok(_) => failure[i] = Some("its result differs from the reference".into()),
            Err(e) => failure[i] = Some(e.to_string()),
        }
        runs[i] = 1;
    }
    for _ in 1..RUNS {
        for i in 0..names.len() {
            let Some(b) = best[i] else { continue };
            if b >= CHEAP_S || start.elapsed().as_secs_f64() >= BUDGET_S {
                continue;
            }
            let (t, s0) = (Instant::now(), setup());
            match run(i) {
                Ok(_) => best[i] = Some(b.min(elapsed(t, s0, setup))),
                Err(e) => {
                    best[i] = None;
                    failure[i] = Some(e.to_string());
                }
            }
            runs[i] += 1;
        }
    }
    let winner = pick(&best, rule);
    let result = if winner == rule {
        reference
    } else {
        match kept {
            Some((k, r)) if k == winner => r,
            _ => {
                drop(kept);
                drop(reference);
                run(winner)?
            }
        }
    };
    let times = times(&best, &runs, &|i| failure[i].clone());
    Ok((times, winner, result))
}

/// The winner among measured times: the fastest, if it beats the rule's time by [`MARGIN`];
/// else the rule (also when the rule's own time is missing, which `measure` never leaves).
pub(crate) fn pick(best: &[Option<f64>], rule: usize) -> usize {
    let Some(rule_time) = best.get(rule).copied().flatten() else {
        return rule;
    };
    let fastest = best
        .iter()
        .enumerate()
        .filter_map(|(i, t)| t.map(|t| (i, t)))
        .min_by(|a, b| a.1.total_cmp(&b.1));
    match fastest {
        Some((i, t)) if i != rule && t < MARGIN * rule_time => i,
        _ => rule,
    }
}
