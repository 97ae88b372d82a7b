//! The one typed configuration of `xpu`, and the only place the library reads its environment.
//!
//! Invariants:
//! - The environment is read once, on the first [`get`] of the process, into a [`Config`]; no
//!   other module of the library calls `std::env::var`. An unparsable value is reported once
//!   on stderr and its default is kept: a setting never fails an op.
//! - Every choice a setting makes is taken where an op is dispatched, on the calling thread, and
//!   passed down to the kernels; kernels (and the worker threads they run on) never read the
//!   configuration themselves. So a scoped override ([`scoped`]) governs exactly the ops called
//!   inside its closure on that thread, and tests can vary a setting in-process without
//!   affecting tests on other threads.
//! - [`set`] replaces the process-wide configuration (what a program does once at start-up); a
//!   scope on the current thread wins over it.
//!
//! The settings and their environment variables are documented on the fields of [`Config`],
//! [`CpuConfig`] and [`GpuConfig`], and in the configuration table of `docs/ARCHITECTURE.md`.

mod autotune;
mod cpu;
pub(crate) mod gpu;
mod parse;

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, RwLock};

pub use autotune::{AutotuneConfig, AutotuneMode};
pub use cpu::{CpuBf16, CpuConfig, CpuIsa};
pub use gpu::GpuConfig;
pub use parse::parse_bytes;

/// How GPU kernels are timed (`XPU_PROFILE`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Profile {
    /// No timing (the default).
    #[default]
    Off,
    /// Timestamp queries around every dispatch, summed per pipeline (`XPU_PROFILE=1`).
    Kernels,
    /// As `Kernels`, with a row per pipeline and problem shape (`XPU_PROFILE=shapes`).
    Shapes,
}

/// Everything a user or a test can set. Build one with [`Config::from_env`] or
/// `Config::default()` (the built-in defaults, ignoring the environment).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Config {
    /// The adapter `Device::Xpu` opens: an index in `xpu::devices()` order or part of its name
    /// (`XPU_ADAPTER`); `None` takes the best adapter type (discrete, then integrated, ...).
    pub adapter: Option<String>,
    /// Most bytes the Xpu allocator may reserve (`XPU_MEMORY_LIMIT`, e.g. `512M`, `2G`).
    pub memory_limit: Option<u64>,
    /// GPU kernel timing (`XPU_PROFILE`).
    pub profile: Profile,
    /// PyTorch's own CPU kernel choice (`ATEN_CPU_CAPABILITY`, read as PyTorch reads it):
    /// `TorchGenerator` draws what a PyTorch started in the same environment draws.
    pub torch_cpu_capability: Option<String>,
    /// Autotuning: its mode, cache folder and forced candidates.
    pub autotune: AutotuneConfig,
    /// CPU backend settings.
    pub cpu: CpuConfig,
    /// GPU backend settings.
    pub gpu: GpuConfig,
}

impl Config {
    /// The configuration the process environment describes (defaults for unset variables).
    pub fn from_env() -> Config {
        #[allow(unused_mut)]
        let mut config = Config::from_lookup(&|name| std::env::var(name).ok());
        // The library's own unit tests never write a cache file (their timings are taken
        // beside each other).
        #[cfg(test)]
        {
            config.autotune.cache_dir = None;
        }
        config
    }

    /// The configuration described by `lookup` (a variable name → its value), for tests and for
    /// programs that keep settings elsewhere.
    pub fn from_lookup(lookup: &dyn Fn(&str) -> Option<String>) -> Config {
        let mut warn = parse::Warnings::default();
        let config = Config {
            adapter: lookup("XPU_ADAPTER").filter(|v| !v.trim().is_empty()),
            memory_limit: lookup("XPU_MEMORY_LIMIT").and_then(|v| {
                let parsed = parse_bytes(&v);
                if parsed.is_none() {
                    warn.bad("XPU_MEMORY_LIMIT", &v, "a size such as 1048576, 512M or 2G");
                }
                parsed
            }),
            profile: match lookup("XPU_PROFILE").as_deref().map(str::trim) {
                None | Some("") | Some("0") => Profile::Off,
                Some("1") => Profile::Kernels,
                Some("shapes") => Profile::Shapes,
                Some(other) => {
                    warn.bad("XPU_PROFILE", other, "0, 1 or shapes");
                    Profile::Off
                }
            },
            torch_cpu_capability: lookup("ATEN_CPU_CAPABILITY"),
            autotune: AutotuneConfig::from_lookup(lookup, &mut warn),
            cpu: CpuConfig::from_lookup(lookup, &mut warn),
            gpu: GpuConfig::from_lookup(lookup, &mut warn),
        };
        warn.print();
        config
    }
}

fn global() -> &'static RwLock<Arc<Config>> {
    static GLOBAL: OnceLock<RwLock<Arc<Config>>> = OnceLock::new();
    GLOBAL.get_or_init(|| RwLock::new(Arc::new(Config::from_env())))
}

/// Bumped by every [`set`], so threads know their cached copy of the global is stale.
static GENERATION: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// The innermost [`scoped`] configuration of this thread, if any.
    static SCOPE: RefCell<Option<Arc<Config>>> = const { RefCell::new(None) };
    /// This thread's copy of the process-wide configuration and the generation it was read at:
    /// reading a setting costs a thread-local look-up, with no shared counter touched.
    static CACHED: RefCell<Option<(u64, Arc<Config>)>> = const { RefCell::new(None) };
}

fn read_global() -> Arc<Config> {
    match global().read() {
        Ok(g) => Arc::clone(&g),
        Err(poisoned) => Arc::clone(&poisoned.into_inner()),
    }
}

/// Calls `f` with the configuration in force on this thread: the innermost [`scoped`] one,
/// else the process-wide one (read from the environment on first use). The cheap way to read
/// a setting where an op is dispatched.
pub fn with<R>(f: impl FnOnce(&Config) -> R) -> R {
    let scoped = SCOPE.with(|s| s.borrow().clone());
    if let Some(c) = scoped {
        return f(&c);
    }
    let generation = GENERATION.load(Ordering::Acquire);
    CACHED.with(|c| {
        let stale = !matches!(&*c.borrow(), Some((g, _)) if *g == generation);
        if stale {
            *c.borrow_mut() = Some((generation, read_global()));
        }
        // No reference count is touched here: reading a setting on many threads at once
        // shares no written cache line. (A nested `with` inside `f` borrows again, read-only.)
        match &*c.borrow() {
            Some((_, cfg)) => f(cfg),
            None => f(&read_global()),
        }
    })
}

/// The configuration in force on this thread (see [`with`]).
pub fn get() -> Arc<Config> {
    if let Some(c) = SCOPE.with(|s| s.borrow().clone()) {
        return c;
    }
    read_global()
}

/// Replaces the process-wide configuration (scopes already open keep theirs).
pub fn set(config: Config) {
    let config = Arc::new(config);
    match global().write() {
        Ok(mut g) => *g = config,
        Err(poisoned) => *poisoned.into_inner() = config,
    }
    GENERATION.fetch_add(1, Ordering::AcqRel);
}

/// Runs `body` with the configuration changed by `edit`, on this thread only, and restores the
/// previous one afterwards (also when `body` panics). Scopes nest.
///
/// ```
/// let isa = xpu::config::scoped(
///     |c| c.cpu.isa = xpu::config::CpuIsa::Portable,
///     || xpu::config::get().cpu.isa,
/// );
/// assert_eq!(isa, xpu::config::CpuIsa::Portable);
/// ```
pub fn scoped<R>(edit: impl FnOnce(&mut Config), body: impl FnOnce() -> R) -> R {
    let mut next = (*get()).clone();
    edit(&mut next);
    let previous = SCOPE.with(|s| s.replace(Some(Arc::new(next))));
    struct Restore(Option<Option<Arc<Config>>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            if let Some(previous) = self.0.take() {
                SCOPE.with(|s| *s.borrow_mut() = previous);
            }
        }
    }
    let _restore = Restore(Some(previous));
    body()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lookup(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn defaults_without_environment() {
        assert_eq!(Config::from_lookup(&|_| None), Config::default());
    }

    #[test]
    fn parses_settings() {
        let c = Config::from_lookup(&lookup(&[
            ("XPU_MEMORY_LIMIT", "512M"),
            ("XPU_PROFILE", "shapes"),
            ("XPU_ADAPTER", "1"),
        ]));
        assert_eq!(c.memory_limit, Some(512 << 20));
        assert_eq!(c.profile, Profile::Shapes);
        assert_eq!(c.adapter.as_deref(), Some("1"));
    }

    #[test]
    fn parses_autotune_settings() {
        let c = Config::from_lookup(&lookup(&[
            ("XPU_AUTOTUNE", "cached"),
            ("HOME", "/home/u"),
            (
                "XPU_AUTOTUNE_FORCE",
                "cpu_attention=fma_rows, gpu_split_k=4,,bad",
            ),
        ]));
        assert_eq!(c.autotune.mode, AutotuneMode::Cached);
        assert_eq!(
            c.autotune.cache_dir.as_deref(),
            Some(std::path::Path::new("/home/u/.cache/xpu"))
        );
        assert_eq!(c.autotune.forced("cpu_attention"), Some("fma_rows"));
        assert_eq!(c.autotune.forced("gpu_split_k"), Some("4"));
        let c = Config::from_lookup(&lookup(&[
            ("XPU_AUTOTUNE", "sometimes"),
            ("XDG_CACHE_HOME", "/c"),
            ("HOME", "/home/u"),
        ]));
        assert_eq!(c.autotune.mode, AutotuneMode::Tune);
        assert_eq!(
            c.autotune.cache_dir.as_deref(),
            Some(std::path::Path::new("/c/xpu"))
        );
        let c = Config::from_lookup(&lookup(&[
            ("XPU_AUTOTUNE_CACHE", "none"),
            ("HOME", "/home/u"),
        ]));
        assert_eq!(c.autotune.cache_dir, None);
        let mut a = c.autotune.clone();
        a.force("x", "1");
        a.force("x", "2");
        assert_eq!((a.forced("x"), a.force.len()), (Some("2"), 1));
    }

    #[test]
    fn bad_values_keep_defaults() {
        let c = Config::from_lookup(&lookup(&[
            ("XPU_MEMORY_LIMIT", "lots"),
            ("XPU_PROFILE", "x"),
        ]));
        assert_eq!(c.memory_limit, None);
        assert_eq!(c.profile, Profile::Off);
    }

    #[test]
    fn scopes_nest_and_restore() {
        let outer = get();
        scoped(
            |c| c.profile = Profile::Shapes,
            || {
                assert_eq!(get().profile, Profile::Shapes);
                scoped(
                    |c| c.memory_limit = Some(7),
                    || {
                        assert_eq!(get().profile, Profile::Shapes);
                        assert_eq!(get().memory_limit, Some(7));
                    },
                );
                assert_eq!(get().memory_limit, outer.memory_limit);
            },
        );
        assert_eq!(*get(), *outer);
        let caught = std::panic::catch_unwind(|| {
            scoped(|c| c.memory_limit = Some(9), || panic!("inside a scope"))
        });
        assert!(caught.is_err());
        assert_eq!(*get(), *outer);
    }

    #[test]
    fn set_reaches_every_thread() {
        // A field no kernel reads, so the tests running beside this one are unaffected.
        let before = (*get()).clone();
        let mut changed = before.clone();
        changed.torch_cpu_capability = Some("set-test".into());
        assert_eq!(
            with(|c| c.torch_cpu_capability.clone()),
            before.torch_cpu_capability
        );
        set(changed);
        let seen = std::thread::spawn(|| with(|c| c.torch_cpu_capability.clone()))
            .join()
            .ok()
            .flatten();
        let here = with(|c| c.torch_cpu_capability.clone());
        set(before);
        assert_eq!(seen.as_deref(), Some("set-test"));
        assert_eq!(here.as_deref(), Some("set-test"));
    }

    #[test]
    fn scopes_are_per_thread() {
        scoped(
            |c| c.memory_limit = Some(11),
            || {
                let other = std::thread::spawn(|| get().memory_limit)
                    .join()
                    .ok()
                    .flatten();
                assert_ne!(other, Some(11));
            },
        );
    }
}
