//! The tuner's rules on toy candidates (each test uses its own device name, so the process-wide
//! table is shared without interference), and the cache files.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use super::*;
use crate::config::{scoped, AutotuneMode};

fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("xpu-autotune-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// Runs `body` under `mode` with `dir` as the cache folder.
fn with_mode<R>(mode: AutotuneMode, dir: Option<PathBuf>, body: impl FnOnce() -> R) -> R {
    scoped(
        |c| {
            c.autotune.mode = mode;
            c.autotune.cache_dir = dir;
            c.autotune.force.clear();
        },
        body,
    )
}

const NAMES: [&str; 3] = ["slow", "fast", "medium"];

/// Candidate `i` sleeps `[6, 1, 3][i]` ms and returns `i * 0 + 7` (all agree).
fn sleepy(i: usize) -> crate::Result<u32> {
    std::thread::sleep(Duration::from_millis([6, 1, 3][i]));
    Ok(7)
}

/// Candidate `i` sleeps `[1, 6, 3][i]` ms: the rule's (0) is the fastest.
fn rule_fastest(i: usize) -> crate::Result<u32> {
    std::thread::sleep(Duration::from_millis([1, 6, 3][i]));
    Ok(7)
}

/// The candidate `decide` answers to run (`usize::MAX` when it measured and the rule won, the
/// call's result then given), and whether that was `Done`.
fn decide_index(key: &Key, run: &mut dyn FnMut(usize) -> crate::Result<u32>) -> (usize, bool) {
    match decide(key, &NAMES, 0, run, &|a, b| a == b, &|| 0.0).expect("decide") {
        Decision::Run(i) => (i, false),
        Decision::Done(v) => {
            assert_eq!(v, 7);
            (usize::MAX, true)
        }
    }
}

#[test]
fn off_takes_the_rule_and_tune_measures_once_then_remembers() {
    let key = Key::new("test-remember", "toy", "n=1");
    let off = with_mode(AutotuneMode::Off, None, || decide_index(&key, &mut sleepy));
    assert_eq!(off, (0, false));
    let cached = with_mode(AutotuneMode::Cached, None, || {
        decide_index(&key, &mut sleepy)
    });
    assert_eq!(cached, (0, false), "cached mode never measures");
    let runs = AtomicUsize::new(0);
    let mut counting = |i| {
        runs.fetch_add(1, Ordering::Relaxed);
        sleepy(i)
    };
    let first = with_mode(AutotuneMode::Tune, None, || {
        decide_index(&key, &mut counting)
    });
    let measured_runs = runs.load(Ordering::Relaxed);
    assert!(
        measured_runs >= 3,
        "the first call measures every candidate"
    );
    // The call measured, and gave the winner's output.
    assert!(first.1, "the first call measures");
    let (second, measured) = with_mode(AutotuneMode::Tune, None, || {
        decide_index(&key, &mut counting)
    });
    assert!(!measured);
    assert_eq!(runs.load(Ordering::Relaxed), measured_runs, "measured once");
    assert_eq!(NAMES[second], "fast");
    let rec = report()
        .into_iter()
        .find(|r| r.device == "test-remember")
        .expect("the key is reported");
    assert_eq!(rec.winner, "fast");
    assert_eq!(rec.origin, Origin::Measured);
    assert!(rec.candidates.iter().all(|c| c.ms.is_some()));
    assert!(rec.to_string().contains("*fast"), "{rec}");
    assert!(tuning_seconds() > 0.0);
    // Off still takes the rule for a known key.
    let off = with_mode(AutotuneMode::Off, None, || decide_index(&key, &mut sleepy));
    assert_eq!(off, (0, false));
}

/// One-time setup a run counts (on the GPU: creating its pipelines) is left out of its time:
/// "fast" spends 40 ms in setup on its first run and 1 ms working, and still beats the rule's
/// 6 ms.
#[test]
fn setup_seconds_are_left_out_of_candidate_times() {
    let key = Key::new("test-setup", "toy", "n=1");
    let setup = std::cell::Cell::new(0.0f64);
    let mut first = true;
    let mut run = |i: usize| {
        if i == 1 && first {
            first = false;
            let t = std::time::Instant::now();
            std::thread::sleep(Duration::from_millis(40));
            setup.set(setup.get() + t.elapsed().as_secs_f64());
        }
        sleepy(i)
    };
    let chosen = with_mode(AutotuneMode::Tune, None, || {
        decide(&key, &NAMES, 0, &mut run, &|a, b| a == b, &|| setup.get()).map(|d| match d {
            Decision::Run(i) => Some(i),
            Decision::Done(_) => None,
        })
    });
    assert_eq!(chosen.expect("decide"), None, "the call measured");
    let rec = report()
        .into_iter()
        .find(|r| r.device == "test-setup")
        .expect("reported");
    assert_eq!(rec.winner, "fast", "{rec}");
    assert!(rec.candidates[1].ms.is_some_and(|ms| ms < 20.0), "{rec}");
}

#[test]
fn failing_and_disagreeing_candidates_never_win() {
    let key = Key::new("test-failures", "toy", "n=1");
    let mut run = |i: usize| -> crate::Result<u32> {
        match i {
            0 => {
                std::thread::sleep(Duration::from_millis(5));
                Ok(7)
            }
            1 => Err(crate::Error::invalid(
                "toy",
                "this driver refuses the shader",
            )),
            _ => Ok(8), // fast but wrong
        }
    };
    let (_, measured) = with_mode(AutotuneMode::Tune, None, || decide_index(&key, &mut run));
    assert!(measured);
    let (i, _) = with_mode(AutotuneMode::Tune, None, || decide_index(&key, &mut run));
    assert_eq!(i, 0);
    let rec = report()
        .into_iter()
        .find(|r| r.device == "test-failures")
        .expect("reported");
    assert!(rec.candidates[1]
        .failure
        .as_deref()
        .is_some_and(|f| f.contains("refuses")));
    assert!(rec.candidates[2]
        .failure
        .as_deref()
        .is_some_and(|f| f.contains("differs")));
}

#[test]
fn the_measuring_call_returns_the_winners_output() {
    let key = Key::new("test-winner-output", "toy", "n=1");
    // Close enough to agree, different enough to tell apart.
    let mut run = |i: usize| -> crate::Result<u32> {
        std::thread::sleep(Duration::from_millis([6, 1, 3][i]));
        Ok([100, 101, 102][i])
    };
    let agree = |a: &u32, b: &u32| a.abs_diff(*b) <= 2;
    let (first, chosen) = trace(|| {
        with_mode(AutotuneMode::Tune, None, || {
            match decide(&key, &NAMES, 0, &mut run, &agree, &|| 0.0).expect("decide") {
                Decision::Done(v) => v,
                Decision::Run(_) => panic!("not measured"),
            }
        })
    });
    assert_eq!(first, 101, "the fast candidate's own output");
    assert_eq!(chosen[0].candidate, "fast");
}

#[test]
fn the_rule_failing_is_the_calls_error() {
    let key = Key::new("test-rule-fails", "toy", "n=1");
    let mut run = |_: usize| -> crate::Result<u32> { Err(crate::Error::invalid("toy", "no")) };
    let r = with_mode(AutotuneMode::Tune, None, || {
        decide(&key, &NAMES, 0, &mut run, &|a, b| a == b, &|| 0.0).map(|_| ())
    });
    assert!(r.is_err());
    assert!(!report().iter().any(|r| r.device == "test-rule-fails"));
}

#[test]
fn forced_candidates_run_where_valid_and_are_traced() {
    let key = Key::new("test-forced", "toy_forced", "n=1");
    let ((), chosen) = trace(|| {
        scoped(
            |c| {
                c.autotune.mode = AutotuneMode::Tune;
                c.autotune.cache_dir = None;
                c.autotune.force("toy_forced", "medium");
            },
            || assert_eq!(decide_index(&key, &mut sleepy), (2, false)),
        );
        // A forced candidate that is not valid here: the rule.
        scoped(
            |c| {
                c.autotune.mode = AutotuneMode::Off;
                c.autotune.force("toy_forced", "absent");
            },
            || assert_eq!(decide_index(&key, &mut sleepy), (0, false)),
        );
    });
    let names: Vec<&str> = chosen.iter().map(|c| c.candidate.as_str()).collect();
    assert_eq!(names, ["medium", "slow"]);
    assert!(!report().iter().any(|r| r.device == "test-forced"));
}

#[test]
fn nested_tunable_ops_do_not_tune_while_a_candidate_is_measured() {
    let outer = Key::new("test-nested", "toy_outer", "n=1");
    let inner = Key::new("test-nested", "toy_inner", "n=1");
    let mut run = |i: usize| -> crate::Result<u32> {
        let (j, measured) = decide_index(&inner, &mut sleepy);
        assert!(!measured, "the inner op tuned inside a measurement");
        assert_eq!(j, 0);
        sleepy(i)
    };
    with_mode(AutotuneMode::Tune, None, || decide_index(&outer, &mut run));
    assert!(!report().iter().any(|r| r.op == "toy_inner"));
}

#[test]
fn threads_share_one_measurement() {
    let key = Key::new("test-threads", "toy", "n=1");
    let measured = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                with_mode(AutotuneMode::Tune, None, || {
                    if decide_index(&key, &mut rule_fastest).1 {
                        measured.fetch_add(1, Ordering::Relaxed);
                    }
                })
            });
        }
    });
    assert_eq!(measured.load(Ordering::Relaxed), 1);
}

#[test]
fn results_survive_in_the_cache_file_and_cached_mode_uses_them() {
    let dir = temp_dir("file");
    let key = Key::new("test-file-device", "toy", "n=2");
    with_mode(AutotuneMode::Tune, Some(dir.clone()), || {
        decide_index(&key, &mut sleepy)
    });
    let file = cache_file::path(&dir, "test-file-device");
    let text = std::fs::read_to_string(&file).expect("cache file written");
    assert!(text.starts_with("xpu-autotune\t1\t"), "{text}");
    assert!(text.contains("toy\tn 2\tfast\t"), "{text}");
    // A new process: memory forgotten, the file read back.
    clear_memory();
    let never = |_: usize| -> crate::Result<u32> { panic!("cached mode measured") };
    let (i, measured) = with_mode(AutotuneMode::Cached, Some(dir.clone()), || {
        decide_index(&key, &mut { never })
    });
    assert_eq!((NAMES[i], measured), ("fast", false));
    let rec = report()
        .into_iter()
        .find(|r| r.device == "test-file-device")
        .expect("reported");
    assert_eq!(rec.origin, Origin::CacheFile);
    let _ = std::fs::remove_dir_all(&dir);
}

fn record(device: &str, problem: &str, winner: &str) -> TuneRecord {
    TuneRecord {
        device: device.into(),
        op: "toy".into(),
        problem: problem.into(),
        candidates: vec![
            CandidateTime {
                name: "a".into(),
                ms: Some(2.0),
                runs: 1,
                failure: None,
            },
            CandidateTime {
                name: "b".into(),
                ms: Some(1.0),
                runs: 1,
                failure: None,
            },
            CandidateTime {
                name: "c".into(),
                ms: None,
                runs: 1,
                failure: Some("x".into()),
            },
        ],
        winner: winner.into(),
        origin: Origin::Measured,
        tuning_s: 0.1,
    }
}

#[test]
fn cache_text_round_trips() {
    let recs = vec![record("dev", "p 1", "b"), record("dev", "p 2", "a")];
    let text = cache_file::to_text("dev", &recs);
    let back = cache_file::parse(&text, "dev").expect("parses");
    assert_eq!(back.len(), 2);
    assert_eq!(back[0].winner, "b");
    assert_eq!(back[1].problem, "p 2");
    assert_eq!(back[0].candidates[2].ms, None);
    assert_eq!(back[0].origin, Origin::CacheFile);
}

#[test]
fn corrupt_and_foreign_files_are_ignored() {
    let good = cache_file::to_text("dev", &[record("dev", "p", "b")]);
    assert!(
        cache_file::parse(&good, "other-dev").is_err(),
        "another device"
    );
    let other_build = good.replacen(source_hash(), "0000000000000000", 1);
    let err = cache_file::parse(&other_build, "dev").expect_err("another build");
    assert!(err.contains("another build"), "{err}");
    for corrupt in [
        good.replace("b=1.0000", "b=x"),
        good.replace("\tb\t", "\tz\t"),
        good.replace("=", ""),
        format!("{good}just text\n"),
        "garbage".to_string(),
        String::new(),
    ] {
        assert!(cache_file::parse(&corrupt, "dev").is_err(), "{corrupt:?}");
    }
    // On disk: a corrupt file loads as nothing and does not fail a tuning run.
    let dir = temp_dir("corrupt");
    std::fs::create_dir_all(&dir).expect("mkdir");
    let file = cache_file::path(&dir, "test-corrupt");
    std::fs::write(&file, b"\xff\xfe not a cache").expect("write");
    assert!(cache_file::load(&dir, "test-corrupt").is_empty());
    let key = Key::new("test-corrupt", "toy", "n=3");
    let (_, measured) = with_mode(AutotuneMode::Tune, Some(dir.clone()), || {
        decide_index(&key, &mut rule_fastest)
    });
    assert!(measured);
    assert_eq!(cache_file::load(&dir, "test-corrupt").len(), 1, "rewritten");
    // A folder that cannot be made (a file in its place): saving warns, the op goes on.
    let blocked = dir.join("blocked");
    std::fs::write(&blocked, b"a file").expect("write");
    let key = Key::new("test-corrupt-blocked", "toy", "n=3");
    with_mode(AutotuneMode::Tune, Some(blocked), || {
        decide_index(&key, &mut sleepy)
    });
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn saves_from_two_writers_merge_and_never_tear() {
    let dir = temp_dir("writers");
    std::thread::scope(|s| {
        for w in 0..4 {
            let dir = &dir;
            s.spawn(move || {
                for i in 0..25 {
                    let own = vec![record("dev", &format!("w{w} p{i}"), "b")];
                    cache_file::save(dir, "dev", &own);
                    let text = std::fs::read_to_string(cache_file::path(dir, "dev"))
                        .expect("a whole file is always there");
                    cache_file::parse(&text, "dev").expect("never torn");
                }
            });
        }
    });
    // Each writer merged what it found on disk: its own last key is there.
    let all = cache_file::load(&dir, "dev");
    for w in 0..4 {
        assert!(
            all.iter().any(|r| r.problem == format!("w{w} p24")),
            "writer {w}"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// Problems whose rule runs under 0.1 ms or over 0.25 s keep the rule: the other candidates
/// never run, and the report says why.
#[test]
fn too_short_and_too_long_problems_keep_the_rule_unmeasured() {
    for (problem, rule_ms, why) in [("n=short", 0u64, "too short"), ("n=long", 600, "too long")] {
        let key = Key::new("test-bounds", "toy_bounds", problem);
        let mut others = 0;
        let mut run = |i: usize| -> crate::Result<u32> {
            if i == 0 {
                std::thread::sleep(Duration::from_millis(rule_ms));
            } else {
                others += 1;
            }
            Ok(7)
        };
        let (i, measured) = with_mode(AutotuneMode::Tune, None, || decide_index(&key, &mut run));
        assert_eq!(
            (i, measured),
            (usize::MAX, true),
            "{problem}: the rule's result"
        );
        assert_eq!(others, 0, "{problem}: another candidate ran");
        let rec = report()
            .into_iter()
            .find(|r| r.device == "test-bounds" && r.problem == key.problem)
            .expect("reported");
        assert_eq!(rec.winner, NAMES[0]);
        assert!(
            rec.candidates[1..]
                .iter()
                .all(|c| c.failure.as_deref().is_some_and(|f| f.contains(why))),
            "{rec}"
        );
    }
}
