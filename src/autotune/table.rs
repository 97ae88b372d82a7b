//! The process-wide table of tuning results, loaded from and saved to the cache files.
//!
//! Invariants: one table per process, behind one lock that is never held while a candidate
//! runs; each device's cache file is read at most once per folder (on the first look-up of a key
//! of that device) and rewritten, merged with what is on disk, after each key it tunes.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, OnceLock};

use super::cache_file;
use super::key::Key;

/// One candidate's measurement.
#[derive(Clone, Debug, PartialEq)]
pub struct CandidateTime {
    /// The candidate's name.
    pub name: String,
    /// Its fastest run in milliseconds; `None` when it failed.
    pub ms: Option<f64>,
    /// Runs it took (0 for results read from a cache file).
    pub runs: usize,
    /// Why it failed (an error, or a result that differs from the reference).
    pub failure: Option<String>,
}

/// Where a result came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// Measured by this process.
    Measured,
    /// Read from a cache file.
    CacheFile,
}

/// One tuned key: its candidates, their times and the winner.
#[derive(Clone, Debug, PartialEq)]
pub struct TuneRecord {
    /// The device (see [`Key::device`]).
    pub device: String,
    /// The op family.
    pub op: String,
    /// The problem (see [`Key::problem`]).
    pub problem: String,
    /// Every candidate that was valid for the problem.
    pub candidates: Vec<CandidateTime>,
    /// The candidate used from now on.
    pub winner: String,
    /// Measured now or read from a cache file.
    pub origin: Origin,
    /// Seconds the measurement took (0 for cached results).
    pub tuning_s: f64,
}

impl std::fmt::Display for TuneRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} [{}]:", self.op, self.problem)?;
        for c in &self.candidates {
            let mark = if c.name == self.winner { "*" } else { "" };
            match c.ms {
                Some(ms) => write!(f, " {mark}{} {ms:.3} ms", c.name)?,
                None => write!(f, " {} failed", c.name)?,
            }
        }
        Ok(())
    }
}

type RecordKey = (String, String, String);

#[derive(Default)]
struct Table {
    records: BTreeMap<RecordKey, TuneRecord>,
    /// (folder, device) pairs whose cache file was read.
    loaded: BTreeSet<(PathBuf, String)>,
    tuning_s: f64,
}

fn table() -> MutexGuard<'static, Table> {
    static TABLE: OnceLock<Mutex<Table>> = OnceLock::new();
    let m = TABLE.get_or_init(|| Mutex::new(Table::default()));
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn record_key(k: &Key) -> RecordKey {
    (k.device.clone(), k.op.to_string(), k.problem.clone())
}

/// Held while one key is measured: tuning runs one key at a time per process.
pub(super) fn tuning_lock() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The known winner for `key`, reading the device's cache file in `dir` first if it was not
/// read yet.
pub(super) fn winner(key: &Key, dir: Option<&Path>) -> Option<String> {
    let mut t = table();
    if let Some(dir) = dir {
        let id = (dir.to_path_buf(), key.device.clone());
        if !t.loaded.contains(&id) {
            t.loaded.insert(id);
            for r in cache_file::load(dir, &key.device) {
                t.records
                    .entry((r.device.clone(), r.op.clone(), r.problem.clone()))
                    .or_insert(r);
            }
        }
    }
    t.records.get(&record_key(key)).map(|r| r.winner.clone())
}

/// Keeps a measured record and, with a folder, rewrites the device's cache file.
pub(super) fn insert(key: &Key, record: TuneRecord, dir: Option<&Path>) {
    let device_records: Vec<TuneRecord> = {
        let mut t = table();
        t.tuning_s += record.tuning_s;
        t.records.insert(record_key(key), record);
        t.records
            .values()
            .filter(|r| r.device == key.device)
            .cloned()
            .collect()
    };
    if let Some(dir) = dir {
        cache_file::save(dir, &key.device, &device_records);
    }
}

pub(super) fn records() -> Vec<TuneRecord> {
    table().records.values().cloned().collect()
}

pub(super) fn tuning_seconds() -> f64 {
    table().tuning_s
}

pub(super) fn clear() {
    let mut t = table();
    t.records.clear();
    t.loaded.clear();
}
