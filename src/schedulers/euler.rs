//! diffusers' `EulerDiscreteScheduler` (no churn), with linear σ interpolation or Karras σs.
//!
//! Invariants: σs are the training σs interpolated at the (fractional, f32) timesteps, or
//! Karras σs between the ends of those (or the config's `sigma_min`/`sigma_max`) with
//! timesteps inverted from them, then the final σ (0 or σ₀), all stored as f32 like diffusers;
//! `init_noise_sigma` is the largest σ (`√(σ²+1)` of it for leading spacing); a step is one
//! Euler step of the probability-flow ODE from σᵢ to σᵢ₊₁; no state between steps.

use super::config::{FinalSigma, Prediction, SchedulerConfig, TimestepSpacing};
use super::kind::SchedulerKind;
use super::sigmas::{interp, karras, log_sigmas, sigma_alphas_cumprod, sigma_to_t, train_sigmas};
use super::update::{check_index, check_operand, combine, narrow_to, noise_for_step, widen};
use super::Scheduler;
use crate::{Result, Tensor};

/// diffusers' `EulerDiscreteScheduler` (no churn, linear σ interpolation or Karras σs).
#[derive(Clone, Debug)]
pub struct EulerDiscreteScheduler {
    config: SchedulerConfig,
    timesteps: Vec<f64>,
    sigmas: Vec<f64>,
}

impl EulerDiscreteScheduler {
    /// An Euler scheduler visiting `steps` timesteps.
    pub fn new(config: SchedulerConfig, steps: usize) -> Result<EulerDiscreteScheduler> {
        let mut timesteps = config.timesteps(steps, false)?;
        let train = train_sigmas(&sigma_alphas_cumprod(&config));
        let mut sigmas = interp(&timesteps, &train);
        if config.use_karras_sigmas {
            let lo = config.sigma_min.unwrap_or(sigmas[sigmas.len() - 1]);
            let hi = config.sigma_max.unwrap_or(sigmas[0]);
            sigmas = karras(lo, hi, steps);
            let logs = log_sigmas(&train);
            timesteps = sigmas
                .iter()
                .map(|&s| sigma_to_t(s, &logs) as f32 as f64)
                .collect();
        }
        sigmas.push(final_sigma(config.final_sigma, &train));
        let sigmas = sigmas.into_iter().map(|s| s as f32 as f64).collect();
        Ok(EulerDiscreteScheduler {
            config,
            timesteps,
            sigmas,
        })
    }

    /// σ for each step, followed by the final σ.
    pub fn sigmas(&self) -> &[f64] {
        &self.sigmas
    }

    /// The sample after step `index`, given the model's output for it (Euler without churn
    /// takes no noise and keeps no history, so this needs no `&mut`).
    pub fn step(&self, model_output: &Tensor, index: usize, sample: &Tensor) -> Result<Tensor> {
        const OP: &str = "EulerDiscreteScheduler.step";
        check_index(OP, index, self.timesteps.len())?;
        check_operand(OP, sample, model_output, "model output")?;
        let (x, out) = (widen(sample)?, widen(model_output)?);
        let (sigma, next) = (self.sigmas[index], self.sigmas[index + 1]);
        let dt = next - sigma;
        // x̂₀ = c_s·sample + c_o·output; derivative = (sample − x̂₀)/σ; x_next = sample + derivative·dt.
        let (c_s, c_o) = x0_coefficients(self.config.prediction, sigma);
        let (d_s, d_o) = ((1.0 - c_s) / sigma, -c_o / sigma);
        let y = combine(&[(&x, 1.0 + d_s * dt), (&out, d_o * dt)])?;
        narrow_to(y, sample.dtype())
    }
}

/// The σ after the last step.
pub(crate) fn final_sigma(kind: FinalSigma, train: &[f32]) -> f64 {
    match kind {
        FinalSigma::Zero => 0.0,
        FinalSigma::SigmaMin => f64::from(train[0]),
    }
}

/// x̂₀ = c_s·sample + c_o·output at σ, for the Euler family's prediction types.
pub(crate) fn x0_coefficients(prediction: Prediction, sigma: f64) -> (f64, f64) {
    match prediction {
        Prediction::Epsilon => (1.0, -sigma),
        Prediction::VPrediction => {
            let s2 = sigma * sigma + 1.0;
            (1.0 / s2, -sigma / s2.sqrt())
        }
        Prediction::Sample => (0.0, 1.0),
    }
}

/// The Euler family's initial noise σ: the largest σ, or `√(σ²+1)` of it for leading spacing.
pub(crate) fn euler_init_noise_sigma(sigmas: &[f64], spacing: TimestepSpacing) -> f64 {
    let max = sigmas.iter().cloned().fold(0.0, f64::max);
    match spacing {
        TimestepSpacing::Linspace | TimestepSpacing::Trailing => max,
        TimestepSpacing::Leading => (max * max + 1.0).sqrt(),
    }
}

/// The Euler family's model input: `sample / √(σ²+1)`.
pub(crate) fn euler_scale(sample: &Tensor, sigma: f64) -> Result<Tensor> {
    sample.mul_scalar(1.0 / (sigma * sigma + 1.0).sqrt())
}

/// The Euler family's `add_noise`: `x + σ·ε`.
pub(crate) fn euler_add_noise(
    op: &'static str,
    original: &Tensor,
    noise: &Tensor,
    sigma: f64,
) -> Result<Tensor> {
    check_operand(op, original, noise, "noise")?;
    let y = combine(&[(&widen(original)?, 1.0), (&widen(noise)?, sigma)])?;
    narrow_to(y, original.dtype())
}

impl Scheduler for EulerDiscreteScheduler {
    fn kind(&self) -> SchedulerKind {
        SchedulerKind::EulerDiscrete
    }

    fn timesteps(&self) -> &[f64] {
        &self.timesteps
    }

    fn inference_steps(&self) -> usize {
        self.timesteps.len()
    }

    fn sigmas(&self) -> Option<&[f64]> {
        Some(&self.sigmas)
    }

    fn init_noise_sigma(&self) -> f64 {
        euler_init_noise_sigma(&self.sigmas, self.config.spacing)
    }

    fn scale_model_input(&self, sample: &Tensor, index: usize) -> Result<Tensor> {
        check_index(
            "EulerDiscreteScheduler.scale_model_input",
            index,
            self.timesteps.len(),
        )?;
        euler_scale(sample, self.sigmas[index])
    }

    fn step(
        &mut self,
        model_output: &Tensor,
        index: usize,
        sample: &Tensor,
        noise: Option<&Tensor>,
    ) -> Result<Tensor> {
        noise_for_step("EulerDiscreteScheduler.step", false, index, sample, noise)?;
        EulerDiscreteScheduler::step(self, model_output, index, sample)
    }

    fn add_noise(&self, original: &Tensor, noise: &Tensor, index: usize) -> Result<Tensor> {
        const OP: &str = "EulerDiscreteScheduler.add_noise";
        check_index(OP, index, self.timesteps.len())?;
        euler_add_noise(OP, original, noise, self.sigmas[index])
    }

    fn set_begin_index(&mut self, index: usize) -> Result<()> {
        check_index(
            "EulerDiscreteScheduler.set_begin_index",
            index,
            self.timesteps.len(),
        )
    }
}
