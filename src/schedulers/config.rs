//! [`SchedulerConfig`]: the training noise schedule and inference spacing the schedulers share,
//! and each scheduler's own options (one field per diffusers config key), built in code or read
//! from a diffusers `scheduler/scheduler_config.json` (`config_json.rs`, `file.rs`).
//!
//! Invariants: ᾱ is computed as diffusers computes it (f32 betas from PyTorch's `linspace`
//! formula, or `betas_for_alpha_bar`'s cosine in f64 rounded to f32, or the stored
//! `trained_betas`; then PyTorch's cumulative product of the f32 `1 − β`: an f64 running
//! product rounded to f32 at every step) and only then widened;
//! inference timesteps follow diffusers' `set_timesteps` for each spacing, with NumPy's
//! round-half-to-even; `validate` bounds every size and value a scheduler's constructor uses.

use crate::{Error, Result};

/// How inference timesteps are spread over the training range (diffusers' `timestep_spacing`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimestepSpacing {
    /// `arange(0, n) * (T / n)` reversed, plus `steps_offset` (SD 1.x / 2.x default).
    Leading,
    /// `linspace(0, T − 1, n)` reversed (rounded to integers by DDIM).
    Linspace,
    /// `round(arange(T, 0, −T / n)) − 1`.
    Trailing,
}

/// What the model predicts (diffusers' `prediction_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prediction {
    /// The added noise ε (SD 1.x, SD 2.x base).
    Epsilon,
    /// The velocity `v = √ᾱ·ε − √(1−ᾱ)·x₀` (SD 2.x 768).
    VPrediction,
    /// The clean sample x₀ itself (`"sample"`).
    Sample,
}

/// How the training betas are laid out (diffusers' `beta_schedule`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BetaSchedule {
    /// `linspace(β_start, β_end, T)`.
    Linear,
    /// `linspace(√β_start, √β_end, T)²` (Stable Diffusion's).
    ScaledLinear,
    /// `squaredcos_cap_v2`: the cosine ᾱ of improved DDPM, betas capped at 0.999.
    SquaredCosCapV2,
}

/// The σ after the last step of a σ schedule (diffusers' `final_sigmas_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FinalSigma {
    /// σ = 0: the last step lands on the clean sample (`"zero"`).
    Zero,
    /// σ of training step 0, `√((1 − ᾱ₀)/ᾱ₀)` (`"sigma_min"`).
    SigmaMin,
}

/// DPM-Solver's second-order formula (diffusers' `solver_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SolverType {
    /// The midpoint rule (`"midpoint"`, diffusers' default).
    Midpoint,
    /// Heun's rule (`"heun"`).
    Heun,
}

/// The training noise schedule and spacing the schedulers share, plus the options of the
/// individual schedulers (each reads only its own; the field docs name who reads what), one
/// field per key of diffusers' `scheduler_config.json`.
#[derive(Clone, Debug, PartialEq)]
pub struct SchedulerConfig {
    /// Diffusion steps the model was trained with (1000 for SD).
    pub num_train_timesteps: usize,
    /// First β of the linear and scaled-linear schedules.
    pub beta_start: f64,
    /// Last β of the linear and scaled-linear schedules.
    pub beta_end: f64,
    /// The beta schedule (unused when `trained_betas` is given).
    pub beta_schedule: BetaSchedule,
    /// Explicit betas, one per training step (diffusers' `trained_betas`).
    pub trained_betas: Option<Vec<f64>>,
    /// `rescale_betas_zero_snr`: betas rescaled so the last step has zero signal (ᾱ_T = 0;
    /// Euler then uses 2⁻²⁴ for it, as diffusers does, so its first σ is finite).
    pub rescale_betas_zero_snr: bool,
    /// Added to every leading-spaced timestep.
    pub steps_offset: usize,
    /// DDIM: whether the step after the last uses ᾱ = 1 (else ᾱ₀).
    pub set_alpha_to_one: bool,
    /// DDIM: clip the predicted x₀ to `±range` (`clip_sample` with `clip_sample_range`).
    pub clip_sample: Option<f64>,
    /// Timestep spacing.
    pub spacing: TimestepSpacing,
    /// The model's prediction type.
    pub prediction: Prediction,
    /// Euler, DPM-Solver: Karras et al.'s σ spacing (`use_karras_sigmas`).
    pub use_karras_sigmas: bool,
    /// Euler: the low end of the Karras σ ramp (`sigma_min`; `None`: the schedule's).
    pub sigma_min: Option<f64>,
    /// Euler: the high end of the Karras σ ramp (`sigma_max`; `None`: the schedule's).
    pub sigma_max: Option<f64>,
    /// Euler, DPM-Solver: the σ after the last step (`final_sigmas_type`).
    pub final_sigma: FinalSigma,
    /// PNDM: PLMS steps only, without the Runge-Kutta warm-up (`skip_prk_steps`).
    pub skip_prk_steps: bool,
    /// DPM-Solver: the multistep order, 1 to 3 (`solver_order`).
    pub solver_order: usize,
    /// DPM-Solver: the second-order formula (`solver_type`).
    pub solver_type: SolverType,
    /// DPM-Solver: first order on the last step (and second on the one before) when fewer
    /// than 15 steps run (`lower_order_final`).
    pub lower_order_final: bool,
    /// DPM-Solver: always an Euler (first-order) last step (`euler_at_final`).
    pub euler_at_final: bool,
    /// LCM: the steps of the schedule the model was distilled on (`original_inference_steps`).
    pub original_inference_steps: usize,
    /// LCM: the timestep multiplier of the boundary conditions (`timestep_scaling`).
    pub timestep_scaling: f64,
}

/// Most training steps a config may name (far above any published model's; bounds the
/// schedule's allocation for a corrupt file).
pub(crate) const MAX_TRAIN_TIMESTEPS: usize = 1 << 20;

impl SchedulerConfig {
    /// Stable Diffusion 1.x's scheduler config (β 0.00085–0.012 scaled-linear over 1000 steps,
    /// leading spacing, offset 1, ε-prediction, no clipping, PLMS without Runge-Kutta steps);
    /// the other schedulers' options keep their diffusers defaults.
    pub fn stable_diffusion() -> SchedulerConfig {
        SchedulerConfig {
            num_train_timesteps: 1000,
            beta_start: 0.00085,
            beta_end: 0.012,
            beta_schedule: BetaSchedule::ScaledLinear,
            trained_betas: None,
            rescale_betas_zero_snr: false,
            steps_offset: 1,
            set_alpha_to_one: false,
            clip_sample: None,
            spacing: TimestepSpacing::Leading,
            prediction: Prediction::Epsilon,
            use_karras_sigmas: false,
            sigma_min: None,
            sigma_max: None,
            final_sigma: FinalSigma::Zero,
            skip_prk_steps: true,
            solver_order: 2,
            solver_type: SolverType::Midpoint,
            lower_order_final: true,
            euler_at_final: false,
            original_inference_steps: 50,
            timestep_scaling: 10.0,
        }
    }

    /// diffusers' `DDIMScheduler()` defaults (linear β 0.0001–0.02, clipping to ±1,
    /// `set_alpha_to_one`, leading spacing, no offset): what a config file's missing keys mean
    /// for DDIM.
    pub fn ddim_defaults() -> SchedulerConfig {
        SchedulerConfig {
            beta_start: 0.0001,
            beta_end: 0.02,
            beta_schedule: BetaSchedule::Linear,
            steps_offset: 0,
            set_alpha_to_one: true,
            clip_sample: Some(1.0),
            ..SchedulerConfig::stable_diffusion()
        }
    }

    /// diffusers' `EulerDiscreteScheduler()` defaults (linear β 0.0001–0.02, linspace spacing,
    /// no offset): what a config file's missing keys mean for Euler.
    pub fn euler_defaults() -> SchedulerConfig {
        SchedulerConfig {
            spacing: TimestepSpacing::Linspace,
            clip_sample: None,
            set_alpha_to_one: false,
            ..SchedulerConfig::ddim_defaults()
        }
    }

    /// Checks the sizes and values a schedule needs (run by the schedulers' constructors).
    pub fn validate(&self) -> Result<()> {
        let bad = |msg: String| Err(Error::invalid("scheduler config", msg));
        let t = self.num_train_timesteps;
        if t == 0 || t > MAX_TRAIN_TIMESTEPS {
            return bad(format!(
                "num_train_timesteps must be in 1..={MAX_TRAIN_TIMESTEPS}, got {t}"
            ));
        }
        if self.steps_offset > t {
            return bad(format!(
                "steps_offset {} is past the {t} training steps",
                self.steps_offset
            ));
        }
        if !(self.beta_start.is_finite() && self.beta_end.is_finite()) {
            return bad("beta_start and beta_end must be finite".into());
        }
        if let Some(b) = &self.trained_betas {
            if b.len() != t || b.iter().any(|x| !(0.0..1.0).contains(x)) {
                return bad(format!(
                    "trained_betas must hold {t} values in [0, 1), got {} values",
                    b.len()
                ));
            }
        }
        if let Some(r) = self.clip_sample {
            if !(r.is_finite() && r > 0.0) {
                return bad(format!("clip_sample_range must be finite and > 0, got {r}"));
            }
        }
        for (key, v) in [("sigma_min", self.sigma_min), ("sigma_max", self.sigma_max)] {
            if v.is_some_and(|x| !(x.is_finite() && x > 0.0)) {
                return bad(format!("{key} must be finite and > 0, got {v:?}"));
            }
        }
        if !(1..=3).contains(&self.solver_order) {
            return bad(format!(
                "solver_order must be 1, 2 or 3, got {}",
                self.solver_order
            ));
        }
        if self.original_inference_steps == 0 || self.original_inference_steps > t {
            return bad(format!(
                "original_inference_steps must be in 1..={t}, got {}",
                self.original_inference_steps
            ));
        }
        if !self.timestep_scaling.is_finite() {
            return bad(format!(
                "timestep_scaling must be finite, got {}",
                self.timestep_scaling
            ));
        }
        Ok(())
    }

    /// The training betas in f32, as diffusers stores them (rescaled to zero terminal SNR
    /// where asked).
    fn betas(&self) -> Vec<f32> {
        let betas = self.schedule_betas();
        if self.rescale_betas_zero_snr {
            rescale_zero_terminal_snr(&betas)
        } else {
            betas
        }
    }

    /// The betas of the schedule (or the trained ones), before any rescaling.
    fn schedule_betas(&self) -> Vec<f32> {
        let n = self.num_train_timesteps;
        if let Some(b) = &self.trained_betas {
            return b.iter().map(|&x| x as f32).collect();
        }
        match self.beta_schedule {
            BetaSchedule::Linear => torch_linspace(self.beta_start as f32, self.beta_end as f32, n),
            BetaSchedule::ScaledLinear => {
                let (a, b) = (self.beta_start.sqrt() as f32, self.beta_end.sqrt() as f32);
                torch_linspace(a, b, n).iter().map(|r| r * r).collect()
            }
            BetaSchedule::SquaredCosCapV2 => {
                let alpha_bar = |t: f64| {
                    ((t + 0.008) / 1.008 * std::f64::consts::FRAC_PI_2)
                        .cos()
                        .powi(2)
                };
                (0..n)
                    .map(|i| {
                        let (t1, t2) = (i as f64 / n as f64, (i + 1) as f64 / n as f64);
                        (1.0 - alpha_bar(t2) / alpha_bar(t1)).min(0.999) as f32
                    })
                    .collect()
            }
        }
    }

    /// ᾱ_t for t in `0..num_train_timesteps`, as f32 like diffusers (then widened).
    pub(crate) fn alphas_cumprod(&self) -> Vec<f64> {
        cumprod_one_minus(&self.betas())
            .into_iter()
            .map(f64::from)
            .collect()
    }

    /// The `n` inference timesteps, descending; `integer` rounds linspace-spaced ones (DDIM's
    /// `.round()`; Euler keeps them fractional). A trailing-spaced `n` for which diffusers'
    /// NumPy arithmetic yields `n + 1` timesteps is an error.
    pub(crate) fn timesteps(&self, n: usize, integer: bool) -> Result<Vec<f64>> {
        self.validate()?;
        let total = self.num_train_timesteps;
        if n == 0 || n > total {
            return Err(Error::invalid(
                "scheduler",
                format!("expected 1..={total} inference steps, got {n}"),
            ));
        }
        Ok(match self.spacing {
            TimestepSpacing::Leading => {
                let ratio = total / n;
                (0..n)
                    .rev()
                    .map(|i| (i * ratio + self.steps_offset) as f64)
                    .collect()
            }
            TimestepSpacing::Linspace => {
                // NumPy's linspace: `i · step` in f64, the last value exactly `T − 1`.
                let last = (total - 1) as f64;
                let step = if n > 1 { last / (n - 1) as f64 } else { 0.0 };
                (0..n)
                    .rev()
                    .map(|i| {
                        let t = if i + 1 == n && n > 1 {
                            last
                        } else {
                            i as f64 * step
                        };
                        if integer {
                            t.round_ties_even()
                        } else {
                            t as f32 as f64
                        }
                    })
                    .collect()
            }
            TimestepSpacing::Trailing => {
                let ratio = total as f64 / n as f64;
                // NumPy's `arange(T, 0, −T/n)` has ⌈T/(T/n)⌉ entries: n + 1 for some n (61,
                // 103, ... of 1000), the extra one a timestep of −1 that diffusers then uses.
                let numpy_len = ((0.0 - total as f64) / -ratio).ceil();
                if numpy_len != n as f64 {
                    return Err(Error::invalid(
                        "scheduler",
                        format!(
                            "trailing spacing with {n} steps over {total} gives diffusers                              {numpy_len} timesteps, the last one −1 (a rounding of NumPy's                              arange); choose another number of steps"
                        ),
                    ));
                }
                (0..n)
                    .map(|i| (total as f64 - i as f64 * ratio).round_ties_even() - 1.0)
                    .collect()
            }
        })
    }
}

/// PyTorch's f32 `linspace(start, end, n)`: `start + i·step` for the first half, `end −
/// (n−1−i)·step` for the rest, with `step = (end − start)/(n − 1)`, all in f32.
fn torch_linspace(start: f32, end: f32, n: usize) -> Vec<f32> {
    if n == 1 {
        return vec![start];
    }
    let step = (end - start) / (n - 1) as f32;
    let half = n / 2;
    (0..n)
        .map(|i| {
            if i < half {
                start + step * i as f32
            } else {
                end - step * (n - 1 - i) as f32
            }
        })
        .collect()
}

/// PyTorch's Cpu `cumprod` of the f32 `1 − β`: an f64 running product rounded to f32 at each
/// step.
fn cumprod_one_minus(betas: &[f32]) -> Vec<f32> {
    let mut acc = 1f64;
    betas
        .iter()
        .map(|b| {
            acc *= f64::from(1.0 - b);
            acc as f32
        })
        .collect()
}

/// diffusers' `rescale_zero_terminal_snr` in f32: √ᾱ shifted so its last value is 0 and scaled
/// so its first is unchanged, then turned back into betas.
fn rescale_zero_terminal_snr(betas: &[f32]) -> Vec<f32> {
    let mut root: Vec<f32> = cumprod_one_minus(betas).iter().map(|a| a.sqrt()).collect();
    let (Some(&first), Some(&last)) = (root.first(), root.last()) else {
        return betas.to_vec();
    };
    let scale = first / (first - last);
    for r in &mut root {
        *r = (*r - last) * scale;
    }
    let bar: Vec<f32> = root.iter().map(|r| r * r).collect();
    (0..bar.len())
        .map(|i| {
            let alpha = if i == 0 { bar[0] } else { bar[i] / bar[i - 1] };
            1.0 - alpha
        })
        .collect()
}
