//! The cache files that keep tuning results between runs: one per device in the cache folder,
//! named after a hash of the device's key text.
//!
//! Format (text, tab-separated): a header line
//! `xpu-autotune <format> <crate version> <kernel source hash> <device>`, then one line per key:
//! `<op> <problem> <winner> <candidate>=<ms>|failed,...`.
//!
//! Invariants: a file is used only when its header names this format, crate version, kernel
//! source hash and device, and every line parses; anything else is ignored as a whole, with one
//! warning per file and process, and replaced by the next save. Saves merge with what is on disk
//! under an advisory lock (keys another process tuned meanwhile survive), write a temporary
//! file in the same folder and rename it over the old one, so a reader sees either file whole; a failed save warns once and
//! is otherwise ignored — the cache never fails an op.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use super::table::{CandidateTime, Origin, TuneRecord};

const MAGIC: &str = "xpu-autotune";
const FORMAT: &str = "1";

/// The cache file of `device` in `dir`.
pub(crate) fn path(dir: &Path, device: &str) -> PathBuf {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in device.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    dir.join(format!("autotune-{h:016x}.tsv"))
}

fn header(device: &str) -> String {
    format!(
        "{MAGIC}\t{FORMAT}\t{}\t{}\t{device}",
        env!("CARGO_PKG_VERSION"),
        super::source_hash()
    )
}

/// Warns once per file and process.
fn warn(file: &Path, what: &str) {
    static WARNED: Mutex<BTreeSet<PathBuf>> = Mutex::new(BTreeSet::new());
    let mut w = WARNED.lock().unwrap_or_else(|p| p.into_inner());
    if w.insert(file.to_path_buf()) {
        eprintln!(
            "xpu: autotune cache {}: {what}; it is ignored and will be rewritten",
            file.display()
        );
    }
}

/// Parses a file's text: `Err(why)` unless the header matches and every line parses.
pub(crate) fn parse(text: &str, device: &str) -> Result<Vec<TuneRecord>, String> {
    let mut lines = text.lines();
    let head = lines.next().unwrap_or("");
    if head != header(device) {
        let written_by: Vec<&str> = head.split('\t').collect();
        return Err(match written_by.as_slice() {
            [MAGIC, FORMAT, version, hash, dev] if *dev == device => format!(
                "written by another build (version {version}, kernels {hash}; this is {} {})",
                env!("CARGO_PKG_VERSION"),
                super::source_hash()
            ),
            [MAGIC, ..] => "written for another device or format".into(),
            _ => "not an xpu autotune cache".into(),
        });
    }
    let mut records = Vec::new();
    for (n, line) in lines.enumerate() {
        if line.is_empty() {
            continue;
        }
        let bad = || format!("line {} does not parse", n + 2);
        let fields: Vec<&str> = line.split('\t').collect();
        let [op, problem, winner, times] = fields.as_slice() else {
            return Err(bad());
        };
        let mut candidates = Vec::new();
        for item in times.split(',') {
            let (name, value) = item.split_once('=').ok_or_else(bad)?;
            let ms = match value {
                "failed" => None,
                v => match v.parse::<f64>() {
                    Ok(ms) if ms.is_finite() && ms >= 0.0 => Some(ms),
                    _ => return Err(bad()),
                },
            };
            candidates.push(CandidateTime {
                name: name.to_string(),
                ms,
                runs: 0,
                failure: ms.is_none().then(|| "failed or not measured".to_string()),
            });
        }
        let winner_ok = candidates
            .iter()
            .any(|c| c.name == *winner && c.ms.is_some());
        if op.is_empty() || !winner_ok {
            return Err(bad());
        }
        records.push(TuneRecord {
            device: device.to_string(),
            op: op.to_string(),
            problem: problem.to_string(),
            candidates,
            winner: winner.to_string(),
            origin: Origin::CacheFile,
            tuning_s: 0.0,
        });
    }
    Ok(records)
}

/// The text of a file holding `records` (those of `device`).
pub(crate) fn to_text(device: &str, records: &[TuneRecord]) -> String {
    let mut out = header(device);
    out.push('\n');
    for r in records.iter().filter(|r| r.device == device) {
        let times: Vec<String> = r
            .candidates
            .iter()
            .map(|c| match c.ms {
                Some(ms) => format!("{}={ms:.4}", c.name),
                None => format!("{}=failed", c.name),
            })
            .collect();
        out.push_str(&format!(
            "{}\t{}\t{}\t{}\n",
            r.op,
            r.problem,
            r.winner,
            times.join(",")
        ));
    }
    out
}

/// The records of `device`'s file in `dir`; none (with a warning, unless the file does not
/// exist) when it cannot be used.
pub(crate) fn load(dir: &Path, device: &str) -> Vec<TuneRecord> {
    let file = path(dir, device);
    match std::fs::read(&file) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => {
            warn(&file, &format!("cannot be read ({e})"));
            Vec::new()
        }
        Ok(bytes) => match String::from_utf8(bytes)
            .map_err(|_| "not text".to_string())
            .and_then(|t| parse(&t, device))
        {
            Ok(records) => records,
            Err(why) => {
                warn(&file, &why);
                Vec::new()
            }
        },
    }
}

/// Writes `records` (this process's for `device`) merged with the usable records on disk.
pub(crate) fn save(dir: &Path, device: &str, records: &[TuneRecord]) {
    let file = path(dir, device);
    // Read, merge and replace under an advisory lock, so no writer's keys are lost; where
    // the folder or its file system refuses the lock, saving goes on without it (the rename
    // still keeps the file whole).
    let _lock = lock(dir, &file);
    let on_disk = std::fs::read_to_string(&file)
        .ok()
        .and_then(|t| parse(&t, device).ok())
        .unwrap_or_default();
    let mut merged: BTreeMap<(String, String), TuneRecord> = BTreeMap::new();
    for r in on_disk.into_iter().chain(records.iter().cloned()) {
        merged.insert((r.op.clone(), r.problem.clone()), r);
    }
    let all: Vec<TuneRecord> = merged.into_values().collect();
    if let Err(e) = write_atomically(dir, &file, to_text(device, &all).as_bytes()) {
        warn(&file, &format!("cannot be written ({e})"));
    }
}

/// An exclusive advisory lock on the lock file beside `file`, held until the value drops.
fn lock(dir: &Path, file: &Path) -> Option<std::fs::File> {
    std::fs::create_dir_all(dir).ok()?;
    let name = file.file_name()?.to_str()?;
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join(format!(".{name}.lock")))
        .ok()?;
    f.lock().ok()?;
    Some(f)
}

fn write_atomically(dir: &Path, file: &Path, bytes: &[u8]) -> std::io::Result<()> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    std::fs::create_dir_all(dir)?;
    let name = file
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("autotune.tsv");
    let tmp = dir.join(format!(
        ".{name}.{}.{}.tmp",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let result = std::fs::write(&tmp, bytes).and_then(|()| std::fs::rename(&tmp, file));
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}
