//! [`SchedulerFile`]: a pipeline's `scheduler/scheduler_config.json`, and the schedulers built
//! from it, by its own `_class_name` or by a user's [`SchedulerName`].
//!
//! Invariants: building class `C` from the file is diffusers' `C.from_config(file, **kw)`:
//! `C`'s defaults, overwritten by the file's keys that `C` takes (the noise schedule, spacing,
//! prediction, and `C`'s own options), then by the name's overrides `kw`; keys `C` does not
//! take are ignored whatever their value, a value of a key `C` takes that is not supported is
//! an error naming the key. The file's own class matters only when it picks the scheduler.

use std::path::Path;

use serde_json::{Map, Value};

use super::config::SchedulerConfig;
use super::config_json::{apply, parse_object};
use super::kind::{build, SchedulerKind, SchedulerName};
use super::Scheduler;
use crate::{Error, Result};

/// Stable Diffusion 1.5's `scheduler/scheduler_config.json`.
const STABLE_DIFFUSION: &str = r#"{
  "_class_name": "PNDMScheduler",
  "beta_end": 0.012,
  "beta_schedule": "scaled_linear",
  "beta_start": 0.00085,
  "clip_sample": false,
  "num_train_timesteps": 1000,
  "set_alpha_to_one": false,
  "skip_prk_steps": true,
  "steps_offset": 1,
  "trained_betas": null
}"#;

/// A diffusers scheduler config file: its keys, parsed but not yet judged.
#[derive(Clone, Debug)]
pub struct SchedulerFile {
    file: String,
    keys: Map<String, Value>,
}

impl SchedulerFile {
    /// Reads a `scheduler_config.json`.
    pub fn read(path: impl AsRef<Path>) -> Result<SchedulerFile> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
            context: format!("reading scheduler config {}", path.display()),
            source,
        })?;
        SchedulerFile::parse_named(&text, &path.display().to_string())
    }

    /// Parses the text of a `scheduler_config.json`.
    pub fn parse(text: &str) -> Result<SchedulerFile> {
        SchedulerFile::parse_named(text, "scheduler_config.json")
    }

    fn parse_named(text: &str, file: &str) -> Result<SchedulerFile> {
        let keys = parse_object(text).map_err(|msg| Error::InvalidFile {
            file: file.to_string(),
            msg,
        })?;
        Ok(SchedulerFile {
            file: file.to_string(),
            keys,
        })
    }

    /// Stable Diffusion 1.5's scheduler config (PNDM with `skip_prk_steps`, scaled-linear
    /// betas 0.00085–0.012, leading spacing with offset 1): the schedule to use when a
    /// pipeline ships none.
    pub fn stable_diffusion() -> SchedulerFile {
        match SchedulerFile::parse(STABLE_DIFFUSION) {
            Ok(f) => f,
            // The constant is valid JSON.
            Err(_) => SchedulerFile {
                file: "stable_diffusion".into(),
                keys: Map::new(),
            },
        }
    }

    /// The file's `_class_name`, if it has one.
    pub fn class_name(&self) -> Option<&str> {
        self.keys.get("_class_name").and_then(Value::as_str)
    }

    /// The class the file names; an error where it names none or an unsupported one.
    pub fn kind(&self) -> Result<SchedulerKind> {
        match self.class_name() {
            Some(name) => SchedulerKind::from_class_name(name),
            None => Err(Error::Config {
                key: "_class_name".into(),
                msg: format!(
                    "{} names no scheduler class; supported: {}",
                    self.file,
                    SchedulerKind::ALL.map(|k| k.class_name()).join(", ")
                ),
            }),
        }
    }

    /// The config class `kind` gets from this file (`kind.from_config(file)`).
    pub fn config_for(&self, kind: SchedulerKind) -> Result<SchedulerConfig> {
        self.config_with(kind, &Map::new())
    }

    fn config_with(
        &self,
        kind: SchedulerKind,
        overrides: &Map<String, Value>,
    ) -> Result<SchedulerConfig> {
        let mut keys: Map<String, Value> = self
            .keys
            .iter()
            .filter(|(k, _)| kind.reads_key(k))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        keys.extend(overrides.iter().map(|(k, v)| (k.clone(), v.clone())));
        let mut config = kind.defaults();
        apply(&mut config, &keys)?;
        config.validate()?;
        Ok(config)
    }

    /// The scheduler the file names (`_class_name`), visiting `steps` inference steps.
    pub fn scheduler(&self, steps: usize) -> Result<Box<dyn Scheduler>> {
        let kind = self.kind()?;
        build(kind, self.config_for(kind)?, steps)
    }

    /// The scheduler `name` picks, on this file's noise schedule (`--scheduler NAME`).
    pub fn scheduler_for(&self, name: SchedulerName, steps: usize) -> Result<Box<dyn Scheduler>> {
        let kind = name.kind();
        build(kind, self.config_with(kind, &name.overrides())?, steps)
    }

    /// [`SchedulerFile::scheduler_for`] by the name as users write it (`pndm`, `ddim`,
    /// `euler`, `euler-a`, `dpm++2m`, `dpm++2m-karras`, `lcm`); an unknown name is an error
    /// listing these.
    pub fn scheduler_named(&self, name: &str, steps: usize) -> Result<Box<dyn Scheduler>> {
        self.scheduler_for(name.parse()?, steps)
    }
}
