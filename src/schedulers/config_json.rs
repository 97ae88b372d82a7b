//! Reading a diffusers `scheduler/scheduler_config.json` into a [`SchedulerConfig`].
//!
//! Invariants: the keys that set the noise schedule, the spacing and the prediction are parsed
//! (a missing one keeps the value of the `defaults` given, as `XScheduler.from_config` keeps
//! the class's default); a value of theirs that DDIM (η = 0) or Euler would compute differently
//! from diffusers (`thresholding`, Karras/exponential/beta sigmas, other
//! interpolations, continuous timesteps, a `sigma_min` final sigma) is an error naming the key;
//! every other key belongs to another scheduler class (the file may be a PNDM or DPM-Solver
//! config a pipeline ships) and is ignored.

use std::path::Path;

use serde_json::{Map, Value};

use super::config::MAX_TRAIN_TIMESTEPS;
use super::config::{BetaSchedule, Prediction, SchedulerConfig, TimestepSpacing};
use crate::json_values::{as_bool, as_f64, as_usize};
use crate::{Error, Result};

fn key_err(key: &str, msg: impl Into<String>) -> Error {
    Error::Config {
        key: key.to_string(),
        msg: msg.into(),
    }
}

/// `v` must be one of `allowed` (null counts as the first, diffusers' default).
fn only<'a>(key: &str, v: &'a Value, allowed: &[&'a str]) -> Result<&'a str> {
    match v {
        Value::Null => Ok(allowed[0]),
        Value::String(s) if allowed.contains(&s.as_str()) => Ok(s),
        _ => Err(key_err(
            key,
            format!("value {v} is not supported; supported: {allowed:?}"),
        )),
    }
}

impl SchedulerConfig {
    /// Reads a diffusers scheduler config file; missing keys take `defaults`' values (see the
    /// module docs).
    pub fn from_file(path: impl AsRef<Path>, defaults: SchedulerConfig) -> Result<SchedulerConfig> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
            context: format!("reading scheduler config {}", path.display()),
            source,
        })?;
        SchedulerConfig::from_json_str(&text, defaults).map_err(|e| match e {
            Error::InvalidFile { msg, .. } => Error::InvalidFile {
                file: path.display().to_string(),
                msg,
            },
            other => other,
        })
    }

    /// Parses the text of a diffusers scheduler config; missing keys take `defaults`' values.
    pub fn from_json_str(text: &str, defaults: SchedulerConfig) -> Result<SchedulerConfig> {
        let invalid = |msg: String| Error::InvalidFile {
            file: "scheduler_config.json".into(),
            msg,
        };
        let value: Value =
            serde_json::from_str(text).map_err(|e| invalid(format!("not valid JSON: {e}")))?;
        let Value::Object(map) = value else {
            return Err(invalid("expected a JSON object at the top level".into()));
        };
        let mut c = defaults;
        apply(&mut c, &map)?;
        c.validate()?;
        Ok(c)
    }
}

fn apply(c: &mut SchedulerConfig, map: &Map<String, Value>) -> Result<()> {
    let mut clip = c.clip_sample.is_some();
    let mut clip_range = c.clip_sample.unwrap_or(1.0);
    for (key, v) in map {
        let k = key.as_str();
        match k {
            "num_train_timesteps" => {
                c.num_train_timesteps = as_usize(k, v)?;
                if c.num_train_timesteps > MAX_TRAIN_TIMESTEPS {
                    return Err(key_err(k, format!("at most {MAX_TRAIN_TIMESTEPS}")));
                }
            }
            "beta_start" => c.beta_start = as_f64(k, v)?,
            "beta_end" => c.beta_end = as_f64(k, v)?,
            "beta_schedule" => {
                c.beta_schedule =
                    match only(k, v, &["linear", "scaled_linear", "squaredcos_cap_v2"])? {
                        "linear" => BetaSchedule::Linear,
                        "scaled_linear" => BetaSchedule::ScaledLinear,
                        _ => BetaSchedule::SquaredCosCapV2,
                    }
            }
            "trained_betas" => {
                c.trained_betas = match v {
                    Value::Null => None,
                    Value::Array(a) if a.len() <= MAX_TRAIN_TIMESTEPS => {
                        Some(a.iter().map(|x| as_f64(k, x)).collect::<Result<_>>()?)
                    }
                    _ => return Err(key_err(k, "expected null or a list of betas")),
                }
            }
            "steps_offset" => c.steps_offset = as_usize(k, v)?,
            "set_alpha_to_one" => c.set_alpha_to_one = as_bool(k, v)?,
            "clip_sample" => clip = as_bool(k, v)?,
            "clip_sample_range" => clip_range = as_f64(k, v)?,
            "timestep_spacing" => {
                c.spacing = match only(k, v, &["leading", "linspace", "trailing"])? {
                    "leading" => TimestepSpacing::Leading,
                    "linspace" => TimestepSpacing::Linspace,
                    _ => TimestepSpacing::Trailing,
                }
            }
            "prediction_type" => {
                c.prediction = match only(k, v, &["epsilon", "v_prediction", "sample"])? {
                    "epsilon" => Prediction::Epsilon,
                    "v_prediction" => Prediction::VPrediction,
                    _ => Prediction::Sample,
                }
            }
            "rescale_betas_zero_snr" => c.rescale_betas_zero_snr = !v.is_null() && as_bool(k, v)?,
            "thresholding" | "use_karras_sigmas" | "use_exponential_sigmas" | "use_beta_sigmas"
                if !v.is_null() && as_bool(k, v)? =>
            {
                return Err(key_err(k, "true is not supported (false or null)"));
            }
            "interpolation_type" => {
                only(k, v, &["linear"])?;
            }
            "timestep_type" => {
                only(k, v, &["discrete"])?;
            }
            "final_sigmas_type" => {
                only(k, v, &["zero"])?;
            }
            // Other schedulers' options (PNDM's skip_prk_steps, DPM-Solver's solver_order, ...)
            // and bookkeeping (`_class_name`, `_diffusers_version`).
            _ => {}
        }
    }
    c.clip_sample = clip.then_some(clip_range);
    Ok(())
}
