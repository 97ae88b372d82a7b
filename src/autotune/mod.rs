//! The autotuner: where an op family has more than one kernel, the device that runs it measures
//! the candidates once per problem and remembers the fastest correct one.
//!
//! A family registers, for each call, the **candidates** valid for the problem (the caller's
//! validity check: features, limits, shape, dtype, layout), the one its static rule would take,
//! and a [`Key`] (device, op family, problem bucket). [`decide`] then answers which candidate
//! runs:
//!
//! - a candidate forced in code (`config::AutotuneConfig::force`) wherever it is valid;
//! - under [`AutotuneMode::Off`], or with one candidate, the static rule;
//! - a winner already known (measured in this process, or read from the cache file);
//! - under [`AutotuneMode::Cached`], the static rule for unknown keys;
//! - under [`AutotuneMode::Tune`], the candidates are measured on the real problem: the rule's
//!   candidate first (its result is the reference), then each other one, which must agree
//!   with it to be eligible, and the call returns the winner's output (so every call of a key
//!   comes from one kernel); a candidate that errors (a driver that refuses
//!   its shader, a kernel the CPU lacks) or disagrees is marked failed for the key and never
//!   chosen. Another candidate wins only by being at least [`measure::MARGIN`] faster than the
//!   rule's, so noise does not move a problem off its rule.
//!
//! Invariants: every call of a key in a process gives the result of the same candidate (the
//! measured call included), so repeating a call repeats its bits; tuning runs one key at a time
//! per process (threads asking for a key being tuned wait and share its result); an op called while its thread tunes (a candidate made of other
//! tunable ops) takes known winners or the rule and never tunes itself, so the measured time is
//! the candidate's own; the cache file never fails an op (unreadable, corrupt or foreign files
//! are ignored with one warning; see [`cache_file`]).

pub(crate) mod cache_file;
mod key;
pub(crate) mod measure;
mod table;

use std::cell::{Cell, RefCell};
use std::time::Instant;

pub use crate::config::AutotuneMode;
pub use key::{bucket, Key};
pub use table::{CandidateTime, Origin, TuneRecord};

use crate::{Error, Result};

/// What [`decide`] answered.
pub(crate) enum Decision<T> {
    /// Run the candidate at this index of the list given.
    Run(usize),
    /// The candidates were measured now; this is the call's result (the winner's own output).
    Done(T),
}

/// One choice made on this thread, as [`trace`] records it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Chosen {
    /// The op family.
    pub op: String,
    /// The candidate that produced the result.
    pub candidate: String,
}

thread_local! {
    /// Set while this thread measures candidates (nested tunable ops do not tune).
    static TUNING: Cell<bool> = const { Cell::new(false) };
    /// The choices recorded by an open [`trace`], innermost last.
    static TRACE: RefCell<Option<Vec<Chosen>>> = const { RefCell::new(None) };
}

fn record(op: &str, candidate: &str) {
    TRACE.with(|t| {
        if let Some(list) = t.borrow_mut().as_mut() {
            list.push(Chosen {
                op: op.to_string(),
                candidate: candidate.to_string(),
            });
        }
    });
}

/// Runs `body` and returns, with its result, every autotuned choice made on this thread
/// inside it (the family and the candidate that produced each result), in order. Shows which
/// kernels a call ran; tests use it to prove a forced candidate ran.
pub fn trace<R>(body: impl FnOnce() -> R) -> (R, Vec<Chosen>) {
    let outer = TRACE.with(|t| t.replace(Some(Vec::new())));
    struct Restore(Option<Option<Vec<Chosen>>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            if let Some(outer) = self.0.take() {
                TRACE.with(|t| *t.borrow_mut() = outer);
            }
        }
    }
    let mut restore = Restore(Some(outer));
    let r = body();
    let inner = TRACE.with(|t| t.borrow_mut().take()).unwrap_or_default();
    if let Some(outer) = restore.0.take() {
        TRACE.with(|t| {
            *t.borrow_mut() = outer.map(|mut o| {
                o.extend(inner.iter().cloned());
                o
            })
        });
    }
    (r, inner)
}

/// Every key tuned or read from a cache file in this process: its candidates, their times and
/// the winner, sorted by device, op and problem.
pub fn report() -> Vec<TuneRecord> {
    table::records()
}

/// True while this thread measures candidates (so a candidate can tell a trial run from the
/// chosen one).
pub(crate) fn measuring() -> bool {
    TUNING.with(|t| t.get())
}

/// The winner known for `key` in this process (measured, or read from a cache file already
/// loaded), if any.
pub(crate) fn known_winner(key: &Key) -> Option<String> {
    table::winner(key, None)
}

/// Seconds this process has spent measuring candidates (0 when everything came from the cache
/// or the static rules).
pub fn tuning_seconds() -> f64 {
    table::tuning_seconds()
}

/// Forgets every result kept in memory (cache files stay; they are read again on next use).
pub fn clear_memory() {
    table::clear();
}

/// The kernel source hash of this build: cache files of other builds are ignored.
pub fn source_hash() -> &'static str {
    env!("XPU_KERNEL_SOURCE_HASH")
}

/// Which of `candidates` (the names of those valid for the problem; at least one) runs for
/// `key`, by the rules in the module documentation. `rule` indexes the static rule's pick;
/// `run` runs a candidate to completion (on the GPU: waits for it) and returns its result;
/// `agree` compares a candidate's result with the reference (the rule's); `setup` counts the
/// caller's one-time setup seconds (GPU pipeline creation), left out of measured times.
pub(crate) fn decide<T>(
    key: &Key,
    candidates: &[&'static str],
    rule: usize,
    run: &mut dyn FnMut(usize) -> Result<T>,
    agree: &dyn Fn(&T, &T) -> bool,
    setup: &dyn Fn() -> f64,
) -> Result<Decision<T>> {
    if rule >= candidates.len() {
        return Err(Error::invalid(
            "autotune",
            format!(
                "the rule's candidate {rule} of {} for {}",
                candidates.len(),
                key.op
            ),
        ));
    }
    let (mode, forced, dir) = crate::config::with(|c| {
        (
            c.autotune.mode,
            c.autotune
                .forced(key.op)
                .and_then(|f| candidates.iter().position(|c| *c == f)),
            c.autotune.cache_dir.clone(),
        )
    });
    let take = |i: usize| {
        record(key.op, candidates[i]);
        Ok(Decision::Run(i))
    };
    if let Some(i) = forced {
        return take(i);
    }
    if candidates.len() == 1 || mode == AutotuneMode::Off {
        return take(rule);
    }
    let known = |k: &Key| {
        table::winner(k, dir.as_deref()).and_then(|w| candidates.iter().position(|c| *c == w))
    };
    if let Some(i) = known(key) {
        return take(i);
    }
    if mode == AutotuneMode::Cached || TUNING.with(|t| t.get()) {
        return take(rule);
    }
    let _one_at_a_time = table::tuning_lock();
    if let Some(i) = known(key) {
        return take(i);
    }
    struct Flag;
    impl Drop for Flag {
        fn drop(&mut self) {
            TUNING.with(|t| t.set(false));
        }
    }
    TUNING.with(|t| t.set(true));
    let _flag = Flag;
    let start = Instant::now();
    let (times, winner, result) = measure::measure(candidates, rule, run, agree, setup)?;
    let spent = start.elapsed().as_secs_f64();
    table::insert(
        key,
        TuneRecord {
            device: key.device.clone(),
            op: key.op.to_string(),
            problem: key.problem.clone(),
            candidates: times,
            winner: candidates[winner].to_string(),
            origin: Origin::Measured,
            tuning_s: spent,
        },
        dir.as_deref(),
    );
    record(key.op, candidates[winner]);
    Ok(Decision::Done(result))
}

#[cfg(test)]
mod tests;
