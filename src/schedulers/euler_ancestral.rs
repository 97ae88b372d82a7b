//! diffusers' `EulerAncestralDiscreteScheduler`: an Euler step down to σ_down, then fresh
//! noise of σ_up, with σ_down² + σ_up² = σᵢ₊₁².
//!
//! Invariants: σs are the training σs linearly interpolated at the (f32) timesteps, then 0,
//! stored as f32; σ_up, σ_down and the step size are computed in f32 as diffusers does on
//! its 0-d f32 tensors; every step takes noise (the last one too, where σ_up = 0, because
//! diffusers draws it there as well); ε- and v-prediction only (diffusers has no x₀ form);
//! no state between steps.

use super::config::{Prediction, SchedulerConfig};
use super::euler::{euler_add_noise, euler_init_noise_sigma, euler_scale, x0_coefficients};
use super::kind::SchedulerKind;
use super::sigmas::{interp, sigma_alphas_cumprod, train_sigmas};
use super::update::{check_index, check_operand, combine, narrow_to, noise_for_step, widen};
use super::Scheduler;
use crate::{Error, Result, Tensor};

/// diffusers' `EulerAncestralDiscreteScheduler`.
#[derive(Clone, Debug)]
pub struct EulerAncestralScheduler {
    config: SchedulerConfig,
    timesteps: Vec<f64>,
    sigmas: Vec<f64>,
}

impl EulerAncestralScheduler {
    /// An Euler ancestral scheduler visiting `steps` timesteps (ε- or v-prediction).
    pub fn new(config: SchedulerConfig, steps: usize) -> Result<EulerAncestralScheduler> {
        if config.prediction == Prediction::Sample {
            return Err(Error::Config {
                key: "prediction_type".into(),
                msg: "EulerAncestralDiscreteScheduler supports epsilon and v_prediction, \
                      not sample"
                    .into(),
            });
        }
        let timesteps = config.timesteps(steps, false)?;
        let train = train_sigmas(&sigma_alphas_cumprod(&config));
        let mut sigmas = interp(&timesteps, &train);
        sigmas.push(0.0);
        let sigmas = sigmas.into_iter().map(|s| s as f32 as f64).collect();
        Ok(EulerAncestralScheduler {
            config,
            timesteps,
            sigmas,
        })
    }

    /// σ for each step, followed by the final 0.
    pub fn sigmas(&self) -> &[f64] {
        &self.sigmas
    }
}

/// σ_up, σ_down from σ_from to σ_to, in f32 as diffusers computes them.
fn ancestral_sigmas(from: f64, to: f64) -> (f32, f32) {
    let (from, to) = (from as f32, to as f32);
    let (f2, t2) = (from * from, to * to);
    let up = (t2 * (f2 - t2) / f2).sqrt();
    let down = (t2 - up * up).sqrt();
    (up, down)
}

impl Scheduler for EulerAncestralScheduler {
    fn kind(&self) -> SchedulerKind {
        SchedulerKind::EulerAncestral
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
            "EulerAncestralDiscreteScheduler.scale_model_input",
            index,
            self.timesteps.len(),
        )?;
        euler_scale(sample, self.sigmas[index])
    }

    fn needs_noise(&self, index: usize) -> bool {
        index < self.timesteps.len()
    }

    fn step(
        &mut self,
        model_output: &Tensor,
        index: usize,
        sample: &Tensor,
        noise: Option<&Tensor>,
    ) -> Result<Tensor> {
        const OP: &str = "EulerAncestralDiscreteScheduler.step";
        check_index(OP, index, self.timesteps.len())?;
        check_operand(OP, sample, model_output, "model output")?;
        let noise = noise_for_step(OP, true, index, sample, noise)?;
        let noise = noise.ok_or_else(|| Error::invalid(OP, "noise missing"))?;
        let (x, out) = (widen(sample)?, widen(model_output)?);
        let sigma = self.sigmas[index];
        let (up, down) = ancestral_sigmas(sigma, self.sigmas[index + 1]);
        let dt = f64::from(down - sigma as f32);
        // x̂₀ = c_s·x + c_o·out; x_next = x + dt·(x − x̂₀)/σ + σ_up·noise.
        let (c_s, c_o) = x0_coefficients(self.config.prediction, sigma);
        let (d_s, d_o) = ((1.0 - c_s) / sigma, -c_o / sigma);
        let y = combine(&[
            (&x, 1.0 + d_s * dt),
            (&out, d_o * dt),
            (&noise, f64::from(up)),
        ])?;
        narrow_to(y, sample.dtype())
    }

    fn add_noise(&self, original: &Tensor, noise: &Tensor, index: usize) -> Result<Tensor> {
        const OP: &str = "EulerAncestralDiscreteScheduler.add_noise";
        check_index(OP, index, self.timesteps.len())?;
        euler_add_noise(OP, original, noise, self.sigmas[index])
    }

    fn set_begin_index(&mut self, index: usize) -> Result<()> {
        check_index(
            "EulerAncestralDiscreteScheduler.set_begin_index",
            index,
            self.timesteps.len(),
        )
    }
}
