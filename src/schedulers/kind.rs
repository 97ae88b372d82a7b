//! The supported scheduler classes ([`SchedulerKind`], by diffusers' `_class_name`) and the
//! short names users pick them by ([`SchedulerName`], `--scheduler NAME`).
//!
//! Invariants: each class knows its diffusers defaults and the config keys its constructor
//! takes (what `XScheduler.from_config` keeps from another class's config); a name maps to one
//! class plus the keys it sets over the config (`dpm++2m`: DPM-Solver++ of order 2 without
//! Karras σs; `dpm++2m-karras`: with them), as `from_config(config, **overrides)` does; an
//! unknown class or name is an error that names it and lists the supported ones.

use std::fmt;
use std::str::FromStr;

use serde_json::{Map, Value};

use super::config::{BetaSchedule, SchedulerConfig, TimestepSpacing};
use super::{
    DdimScheduler, DpmSolverMultistepScheduler, EulerAncestralScheduler, EulerDiscreteScheduler,
    LcmScheduler, PndmScheduler, Scheduler,
};
use crate::{Error, Result};

/// A diffusers scheduler class this module implements.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SchedulerKind {
    /// `PNDMScheduler`.
    Pndm,
    /// `DDIMScheduler` (η = 0).
    Ddim,
    /// `EulerDiscreteScheduler`.
    EulerDiscrete,
    /// `EulerAncestralDiscreteScheduler`.
    EulerAncestral,
    /// `DPMSolverMultistepScheduler` (DPM-Solver++).
    DpmSolverMultistep,
    /// `LCMScheduler`.
    Lcm,
}

/// The keys every class here takes.
const COMMON_KEYS: [&str; 8] = [
    "num_train_timesteps",
    "beta_start",
    "beta_end",
    "beta_schedule",
    "trained_betas",
    "prediction_type",
    "timestep_spacing",
    "steps_offset",
];

impl SchedulerKind {
    /// Every supported class.
    pub const ALL: [SchedulerKind; 6] = [
        SchedulerKind::Pndm,
        SchedulerKind::Ddim,
        SchedulerKind::EulerDiscrete,
        SchedulerKind::EulerAncestral,
        SchedulerKind::DpmSolverMultistep,
        SchedulerKind::Lcm,
    ];

    /// diffusers' class name (`_class_name` in a scheduler config).
    pub fn class_name(self) -> &'static str {
        match self {
            SchedulerKind::Pndm => "PNDMScheduler",
            SchedulerKind::Ddim => "DDIMScheduler",
            SchedulerKind::EulerDiscrete => "EulerDiscreteScheduler",
            SchedulerKind::EulerAncestral => "EulerAncestralDiscreteScheduler",
            SchedulerKind::DpmSolverMultistep => "DPMSolverMultistepScheduler",
            SchedulerKind::Lcm => "LCMScheduler",
        }
    }

    /// The class a `_class_name` names; an unknown one is an [`Error::Config`] listing the
    /// supported classes.
    pub fn from_class_name(name: &str) -> Result<SchedulerKind> {
        SchedulerKind::ALL
            .into_iter()
            .find(|k| k.class_name() == name)
            .ok_or_else(|| Error::Config {
                key: "_class_name".into(),
                msg: format!(
                    "scheduler class `{name}` is not supported; supported: {}",
                    SchedulerKind::ALL.map(|k| k.class_name()).join(", ")
                ),
            })
    }

    /// The config `XScheduler()` has with no arguments (what a config file's missing keys
    /// mean for this class).
    pub fn defaults(self) -> SchedulerConfig {
        match self {
            SchedulerKind::Pndm => SchedulerConfig {
                skip_prk_steps: false,
                set_alpha_to_one: false,
                clip_sample: None,
                ..SchedulerConfig::ddim_defaults()
            },
            SchedulerKind::Ddim => SchedulerConfig::ddim_defaults(),
            SchedulerKind::EulerDiscrete
            | SchedulerKind::EulerAncestral
            | SchedulerKind::DpmSolverMultistep => SchedulerConfig::euler_defaults(),
            SchedulerKind::Lcm => SchedulerConfig {
                beta_schedule: BetaSchedule::ScaledLinear,
                steps_offset: 0,
                set_alpha_to_one: true,
                clip_sample: None,
                spacing: TimestepSpacing::Leading,
                ..SchedulerConfig::stable_diffusion()
            },
        }
    }

    /// Whether this class's constructor takes `key` (else `from_config` drops it).
    pub(crate) fn reads_key(self, key: &str) -> bool {
        if COMMON_KEYS.contains(&key) {
            return true;
        }
        let own: &[&str] = match self {
            SchedulerKind::Pndm => &["skip_prk_steps", "set_alpha_to_one"],
            SchedulerKind::Ddim => &[
                "clip_sample",
                "set_alpha_to_one",
                "thresholding",
                "dynamic_thresholding_ratio",
                "clip_sample_range",
                "sample_max_value",
                "rescale_betas_zero_snr",
            ],
            SchedulerKind::EulerDiscrete => &[
                "interpolation_type",
                "use_karras_sigmas",
                "use_exponential_sigmas",
                "use_beta_sigmas",
                "sigma_min",
                "sigma_max",
                "timestep_type",
                "rescale_betas_zero_snr",
                "final_sigmas_type",
            ],
            SchedulerKind::EulerAncestral => &["rescale_betas_zero_snr"],
            SchedulerKind::DpmSolverMultistep => &[
                "solver_order",
                "thresholding",
                "dynamic_thresholding_ratio",
                "sample_max_value",
                "algorithm_type",
                "solver_type",
                "lower_order_final",
                "euler_at_final",
                "use_karras_sigmas",
                "use_exponential_sigmas",
                "use_beta_sigmas",
                "use_lu_lambdas",
                "use_flow_sigmas",
                "flow_shift",
                "final_sigmas_type",
                "lambda_min_clipped",
                "variance_type",
                "rescale_betas_zero_snr",
                "use_dynamic_shifting",
                "time_shift_type",
            ],
            SchedulerKind::Lcm => &[
                "original_inference_steps",
                "clip_sample",
                "clip_sample_range",
                "set_alpha_to_one",
                "thresholding",
                "dynamic_thresholding_ratio",
                "sample_max_value",
                "timestep_scaling",
                "rescale_betas_zero_snr",
            ],
        };
        own.contains(&key)
    }
}

impl fmt::Display for SchedulerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.class_name())
    }
}

/// A scheduler as users name it (`--scheduler NAME`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SchedulerName {
    /// `pndm`: PNDM (PLMS).
    Pndm,
    /// `ddim`: DDIM (η = 0).
    Ddim,
    /// `euler`: Euler.
    Euler,
    /// `euler-a`: Euler ancestral.
    EulerAncestral,
    /// `dpm++2m`: DPM-Solver++ 2M, without Karras σs.
    DpmPlusPlus2M,
    /// `dpm++2m-karras`: DPM-Solver++ 2M with Karras σs.
    DpmPlusPlus2MKarras,
    /// `lcm`: LCM.
    Lcm,
}

impl SchedulerName {
    /// Every name.
    pub const ALL: [SchedulerName; 7] = [
        SchedulerName::Pndm,
        SchedulerName::Ddim,
        SchedulerName::Euler,
        SchedulerName::EulerAncestral,
        SchedulerName::DpmPlusPlus2M,
        SchedulerName::DpmPlusPlus2MKarras,
        SchedulerName::Lcm,
    ];

    /// The name as users write it.
    pub fn as_str(self) -> &'static str {
        match self {
            SchedulerName::Pndm => "pndm",
            SchedulerName::Ddim => "ddim",
            SchedulerName::Euler => "euler",
            SchedulerName::EulerAncestral => "euler-a",
            SchedulerName::DpmPlusPlus2M => "dpm++2m",
            SchedulerName::DpmPlusPlus2MKarras => "dpm++2m-karras",
            SchedulerName::Lcm => "lcm",
        }
    }

    /// The class it runs.
    pub fn kind(self) -> SchedulerKind {
        match self {
            SchedulerName::Pndm => SchedulerKind::Pndm,
            SchedulerName::Ddim => SchedulerKind::Ddim,
            SchedulerName::Euler => SchedulerKind::EulerDiscrete,
            SchedulerName::EulerAncestral => SchedulerKind::EulerAncestral,
            SchedulerName::DpmPlusPlus2M | SchedulerName::DpmPlusPlus2MKarras => {
                SchedulerKind::DpmSolverMultistep
            }
            SchedulerName::Lcm => SchedulerKind::Lcm,
        }
    }

    /// The config keys the name sets over a pipeline's (`from_config`'s keyword arguments).
    pub(crate) fn overrides(self) -> Map<String, Value> {
        let mut map = Map::new();
        if let SchedulerName::DpmPlusPlus2M | SchedulerName::DpmPlusPlus2MKarras = self {
            map.insert("algorithm_type".into(), "dpmsolver++".into());
            map.insert("solver_order".into(), 2.into());
            let karras = self == SchedulerName::DpmPlusPlus2MKarras;
            map.insert("use_karras_sigmas".into(), karras.into());
        }
        map
    }
}

impl FromStr for SchedulerName {
    type Err = Error;

    /// Parses a user-facing name; an unknown one is an error listing the supported names.
    fn from_str(name: &str) -> Result<SchedulerName> {
        SchedulerName::ALL
            .into_iter()
            .find(|n| n.as_str() == name)
            .ok_or_else(|| {
                Error::invalid(
                    "scheduler",
                    format!(
                        "unknown scheduler name `{name}`; supported: {}",
                        SchedulerName::ALL.map(|n| n.as_str()).join(", ")
                    ),
                )
            })
    }
}

impl fmt::Display for SchedulerName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A boxed scheduler of class `kind` on `config`, visiting `steps` inference steps.
pub fn build(
    kind: SchedulerKind,
    config: SchedulerConfig,
    steps: usize,
) -> Result<Box<dyn Scheduler>> {
    Ok(match kind {
        SchedulerKind::Pndm => Box::new(PndmScheduler::new(config, steps)?),
        SchedulerKind::Ddim => Box::new(DdimScheduler::new(config, steps)?),
        SchedulerKind::EulerDiscrete => Box::new(EulerDiscreteScheduler::new(config, steps)?),
        SchedulerKind::EulerAncestral => Box::new(EulerAncestralScheduler::new(config, steps)?),
        SchedulerKind::DpmSolverMultistep => {
            Box::new(DpmSolverMultistepScheduler::new(config, steps)?)
        }
        SchedulerKind::Lcm => Box::new(LcmScheduler::new(config, steps)?),
    })
}
