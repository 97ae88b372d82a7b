//! Reading a diffusers `scheduler/scheduler_config.json` into a [`SchedulerConfig`].
//!
//! Invariants: every key a supported scheduler reads is parsed (a missing one keeps the value
//! of the `defaults` given, as `XScheduler.from_config` keeps the class's default); a value
//! that no scheduler here computes as diffusers does (`thresholding`, exponential/beta/lu/flow
//! sigmas, other interpolations, continuous timesteps, another DPM-Solver algorithm, a
//! clipped λ) is an error naming the key; keys of no supported scheduler (`_class_name`,
//! `_diffusers_version`, thresholding ratios, ...) are ignored. Python's `NaN`/`Infinity`
//! tokens, which diffusers writes (`"lambda_min_clipped": -Infinity`), parse. Which keys a
//! given scheduler class reads is `SchedulerKind`'s business (`file.rs`).

use std::path::Path;

use serde_json::{Map, Value};

use super::config::MAX_TRAIN_TIMESTEPS;
use super::config::{
    BetaSchedule, FinalSigma, Prediction, SchedulerConfig, SolverType, TimestepSpacing,
};
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

/// `null` or a finite number.
fn optional_f64(key: &str, v: &Value) -> Result<Option<f64>> {
    match v {
        Value::Null => Ok(None),
        _ => as_f64(key, v).map(Some),
    }
}

/// The text with Python's non-JSON number tokens (`NaN`, `Infinity`, `-Infinity`, which
/// diffusers writes for e.g. `lambda_min_clipped`) outside strings turned into strings, so
/// the file parses and the key that holds one can judge it.
pub(crate) fn quote_python_numbers(text: &str) -> std::borrow::Cow<'_, str> {
    const TOKENS: [&str; 3] = ["-Infinity", "Infinity", "NaN"];
    if !TOKENS.iter().any(|t| text.contains(t)) {
        return text.into();
    }
    let mut out = String::with_capacity(text.len() + 8);
    let (mut in_string, mut escaped) = (false, false);
    let mut rest = text;
    while let Some(ch) = rest.chars().next() {
        if !in_string {
            if let Some(t) = TOKENS.iter().find(|t| rest.starts_with(**t)) {
                out.push('"');
                out.push_str(t);
                out.push('"');
                rest = &rest[t.len()..];
                continue;
            }
        }
        if in_string {
            if escaped {
                escaped = false;
            } else if ch == '\\' {
                escaped = true;
            } else if ch == '"' {
                in_string = false;
            }
        } else if ch == '"' {
            in_string = true;
        }
        out.push(ch);
        rest = &rest[ch.len_utf8()..];
    }
    out.into()
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
        let map = parse_object(text).map_err(invalid)?;
        let mut c = defaults;
        apply(&mut c, &map)?;
        c.validate()?;
        Ok(c)
    }
}

/// The top-level object of a scheduler config (Python's `-Infinity` and friends allowed).
pub(crate) fn parse_object(text: &str) -> std::result::Result<Map<String, Value>, String> {
    let value: Value = serde_json::from_str(&quote_python_numbers(text))
        .map_err(|e| format!("not valid JSON: {e}"))?;
    match value {
        Value::Object(map) => Ok(map),
        _ => Err("expected a JSON object at the top level".into()),
    }
}

/// Sets the fields of `c` that `map`'s keys name (see the module docs).
pub(crate) fn apply(c: &mut SchedulerConfig, map: &Map<String, Value>) -> Result<()> {
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
            "use_karras_sigmas" => c.use_karras_sigmas = !v.is_null() && as_bool(k, v)?,
            "sigma_min" => c.sigma_min = optional_f64(k, v)?,
            "sigma_max" => c.sigma_max = optional_f64(k, v)?,
            "final_sigmas_type" => {
                c.final_sigma = match only(k, v, &["zero", "sigma_min"])? {
                    "zero" => FinalSigma::Zero,
                    _ => FinalSigma::SigmaMin,
                }
            }
            "skip_prk_steps" => c.skip_prk_steps = as_bool(k, v)?,
            "solver_order" => c.solver_order = as_usize(k, v)?,
            // diffusers maps the UniPC/DEIS names to the midpoint rule.
            "solver_type" => {
                c.solver_type = match only(k, v, &["midpoint", "heun", "logrho", "bh1", "bh2"])? {
                    "heun" => SolverType::Heun,
                    _ => SolverType::Midpoint,
                }
            }
            // "deis" is diffusers' alias for dpmsolver++.
            "algorithm_type" => {
                only(k, v, &["dpmsolver++", "deis"])?;
            }
            "lower_order_final" => c.lower_order_final = as_bool(k, v)?,
            "euler_at_final" => c.euler_at_final = as_bool(k, v)?,
            "original_inference_steps" => c.original_inference_steps = as_usize(k, v)?,
            "timestep_scaling" => c.timestep_scaling = as_f64(k, v)?,
            "lambda_min_clipped" if !(v.is_null() || v.as_str() == Some("-Infinity")) => {
                return Err(key_err(k, format!("only -Infinity is supported, got {v}")));
            }
            "variance_type" if !v.is_null() => {
                return Err(key_err(k, format!("only null is supported, got {v}")));
            }
            "thresholding"
            | "use_exponential_sigmas"
            | "use_beta_sigmas"
            | "use_lu_lambdas"
            | "use_flow_sigmas"
            | "use_dynamic_shifting"
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
            // Other schedulers' options (PNDM's skip_prk_steps, DPM-Solver's solver_order, ...)
            // and bookkeeping (`_class_name`, `_diffusers_version`).
            _ => {}
        }
    }
    c.clip_sample = clip.then_some(clip_range);
    Ok(())
}
