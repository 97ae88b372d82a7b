//! Autotuning settings: the mode, where tuning results are kept between runs, and the
//! candidates code forces.

use std::path::PathBuf;

use super::parse::{choice, Warnings};

/// How kernel choices are made where an op family has more than one candidate
/// (`XPU_AUTOTUNE`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AutotuneMode {
    /// Measure the candidates of a problem the first time it is met (unless the cache file
    /// already holds it) and use the fastest correct one from then on (`tune`, the default).
    #[default]
    Tune,
    /// Use what is cached (in memory or in the cache file); the static rule for anything
    /// else; never measure (`cached`: for latency-critical services).
    Cached,
    /// Static rules only: reproducible runs (`off`).
    Off,
}

/// Autotuning settings.
#[derive(Clone, Debug, PartialEq)]
pub struct AutotuneConfig {
    /// The mode (`XPU_AUTOTUNE=tune|cached|off`).
    pub mode: AutotuneMode,
    /// The folder of the cache files (`XPU_AUTOTUNE_CACHE=DIR`, or `none` for no file):
    /// by default `$XDG_CACHE_HOME/xpu`, else `$HOME/.cache/xpu`; `None` keeps results in
    /// memory only.
    pub cache_dir: Option<PathBuf>,
    /// Forced candidates, as `(op family, candidate)` pairs (`XPU_AUTOTUNE_FORCE=family=name,...`
    /// or [`Self::force`] in code): a forced candidate runs wherever it is valid for the
    /// problem, without tuning; elsewhere the family decides as usual. Tests cover every
    /// kernel so; `docs/ARCHITECTURE.md` lists the families and their candidates.
    pub force: Vec<(String, String)>,
}

impl Default for AutotuneConfig {
    fn default() -> AutotuneConfig {
        AutotuneConfig {
            mode: AutotuneMode::Tune,
            cache_dir: None,
            force: Vec::new(),
        }
    }
}

impl AutotuneConfig {
    /// Forces `candidate` for the op family `op` (replacing an earlier force of that family).
    pub fn force(&mut self, op: &str, candidate: &str) {
        self.force.retain(|(o, _)| o != op);
        self.force.push((op.to_string(), candidate.to_string()));
    }

    /// The candidate forced for `op`, if any.
    pub fn forced(&self, op: &str) -> Option<&str> {
        self.force
            .iter()
            .find(|(o, _)| o == op)
            .map(|(_, c)| c.as_str())
    }

    pub(super) fn from_lookup(
        lookup: &dyn Fn(&str) -> Option<String>,
        warn: &mut Warnings,
    ) -> AutotuneConfig {
        let mode = choice(
            lookup,
            "XPU_AUTOTUNE",
            &[
                ("tune", AutotuneMode::Tune),
                ("cached", AutotuneMode::Cached),
                ("off", AutotuneMode::Off),
            ],
            warn,
        )
        .unwrap_or_default();
        let nonempty = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
        let cache_dir = match nonempty("XPU_AUTOTUNE_CACHE") {
            Some(v) if matches!(v.trim(), "none" | "off" | "0") => None,
            Some(v) => Some(PathBuf::from(v)),
            None => nonempty("XDG_CACHE_HOME")
                .map(|d| PathBuf::from(d).join("xpu"))
                .or_else(|| nonempty("HOME").map(|h| PathBuf::from(h).join(".cache").join("xpu"))),
        };
        let mut force = Vec::new();
        if let Some(v) = nonempty("XPU_AUTOTUNE_FORCE") {
            for item in v.split(',').map(str::trim).filter(|i| !i.is_empty()) {
                match item.split_once('=') {
                    Some((op, name)) if !op.trim().is_empty() && !name.trim().is_empty() => {
                        force.retain(|(o, _): &(String, String)| o != op.trim());
                        force.push((op.trim().to_string(), name.trim().to_string()));
                    }
                    _ => warn.bad("XPU_AUTOTUNE_FORCE", item, "family=candidate pairs"),
                }
            }
        }
        AutotuneConfig {
            mode,
            cache_dir,
            force,
        }
    }
}
