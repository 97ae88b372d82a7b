//! Diffusion schedulers for the denoising loop: diffusers' `DDIMScheduler` (η = 0) and
//! `EulerDiscreteScheduler`, on a [`SchedulerConfig`] (Stable Diffusion's by default, or a
//! pipeline's `scheduler/scheduler_config.json`).
//!
//! Invariants: the noise schedule (betas, ᾱ, σ) is computed once on the host from the config,
//! exactly as diffusers builds it (`config.rs`); the per-step update is a few elementwise ops
//! on the sample's own device and dtype, so a step never moves latents between devices. Steps
//! are addressed by index (`0..timesteps().len()`), not by timestep value, so no lookup can be
//! ambiguous. Parity with diffusers is tested against fixtures made by
//! `tests/fixtures/make_op_fixtures.py` (SD's schedule) and
//! `tests/fixtures/make_scheduler_fixtures.py` (the other options, read from the config files
//! diffusers writes).

mod config;
mod config_json;

pub use config::{BetaSchedule, Prediction, SchedulerConfig, TimestepSpacing};

use crate::{Error, Result, Tensor};

/// A denoising scheduler: which timesteps to visit and how to step the sample.
pub trait Scheduler {
    /// Timesteps to pass to the model, in visiting order (descending).
    fn timesteps(&self) -> &[f64];
    /// Standard deviation of the initial noise (multiply unit Gaussian latents by it).
    fn init_noise_sigma(&self) -> f64;
    /// Scales the sample before it goes into the model at step `index`.
    fn scale_model_input(&self, sample: &Tensor, index: usize) -> Result<Tensor>;
    /// The sample after step `index`, given the model's output for it.
    fn step(&self, model_output: &Tensor, index: usize, sample: &Tensor) -> Result<Tensor>;
}

fn check_index(index: usize, len: usize) -> Result<()> {
    if index >= len {
        return Err(Error::invalid(
            "scheduler.step",
            format!("expected a step index below {len}, got {index}"),
        ));
    }
    Ok(())
}

/// diffusers' `DDIMScheduler` with η = 0 (deterministic).
#[derive(Clone, Debug)]
pub struct DdimScheduler {
    config: SchedulerConfig,
    alphas_cumprod: Vec<f64>,
    timesteps: Vec<f64>,
}

impl DdimScheduler {
    /// A DDIM scheduler visiting `steps` timesteps.
    pub fn new(config: SchedulerConfig, steps: usize) -> Result<DdimScheduler> {
        let timesteps = config.timesteps(steps, true)?;
        let alphas_cumprod = config.alphas_cumprod();
        Ok(DdimScheduler {
            config,
            alphas_cumprod,
            timesteps,
        })
    }

    fn alpha_at(&self, t: f64) -> f64 {
        let final_alpha = if self.config.set_alpha_to_one {
            1.0
        } else {
            self.alphas_cumprod[0]
        };
        if t < 0.0 {
            return final_alpha;
        }
        let i = (t as usize).min(self.alphas_cumprod.len() - 1);
        self.alphas_cumprod[i]
    }
}

impl Scheduler for DdimScheduler {
    fn timesteps(&self) -> &[f64] {
        &self.timesteps
    }

    fn init_noise_sigma(&self) -> f64 {
        1.0
    }

    fn scale_model_input(&self, sample: &Tensor, index: usize) -> Result<Tensor> {
        check_index(index, self.timesteps.len())?;
        Ok(sample.clone())
    }

    fn step(&self, model_output: &Tensor, index: usize, sample: &Tensor) -> Result<Tensor> {
        check_index(index, self.timesteps.len())?;
        let t = self.timesteps[index];
        let prev_t = t - (self.config.num_train_timesteps / self.timesteps.len()) as f64;
        let (a_t, a_prev) = (self.alpha_at(t), self.alpha_at(prev_t));
        let (sa, sb) = (a_t.sqrt(), (1.0 - a_t).sqrt());
        // x_prev = √ᾱ_prev·x̂₀ + √(1−ᾱ_prev)·ε̂, with x̂₀ and ε̂ linear in (sample, output).
        let (x0_s, x0_o, eps_s, eps_o) = match self.config.prediction {
            Prediction::Epsilon => (1.0 / sa, -sb / sa, 0.0, 1.0),
            Prediction::VPrediction => (sa, -sb, sb, sa),
            Prediction::Sample => (0.0, 1.0, 1.0 / sb, -sa / sb),
        };
        let (ap, bp) = (a_prev.sqrt(), (1.0 - a_prev).sqrt());
        match self.config.clip_sample {
            None => linear_combination(
                sample,
                ap * x0_s + bp * eps_s,
                model_output,
                ap * x0_o + bp * eps_o,
            ),
            // x̂₀ clipped (ε̂ is not recomputed from it, as in diffusers).
            Some(r) => {
                let x0 = linear_combination(sample, x0_s, model_output, x0_o)?.clamp(-r, r)?;
                let eps = linear_combination(sample, eps_s, model_output, eps_o)?;
                linear_combination(&x0, ap, &eps, bp)
            }
        }
    }
}

/// diffusers' `EulerDiscreteScheduler` (no churn, linear σ interpolation, final σ = 0).
#[derive(Clone, Debug)]
pub struct EulerDiscreteScheduler {
    config: SchedulerConfig,
    timesteps: Vec<f64>,
    sigmas: Vec<f64>,
}

impl EulerDiscreteScheduler {
    /// An Euler scheduler visiting `steps` timesteps.
    pub fn new(config: SchedulerConfig, steps: usize) -> Result<EulerDiscreteScheduler> {
        let timesteps = config.timesteps(steps, false)?;
        let mut alphas_cumprod = config.alphas_cumprod();
        if config.rescale_betas_zero_snr {
            // diffusers: close to 0 without being 0, so the first σ is finite.
            if let Some(last) = alphas_cumprod.last_mut() {
                *last = 2f64.powi(-24);
            }
        }
        let full: Vec<f64> = alphas_cumprod
            .iter()
            .map(|&a| {
                let a = a as f32;
                ((1.0 - a) / a).sqrt() as f64
            })
            .collect();
        let mut sigmas: Vec<f64> = timesteps
            .iter()
            .map(|&t| {
                let lo = (t.floor().max(0.0) as usize).min(full.len() - 1);
                let hi = (lo + 1).min(full.len() - 1);
                let frac = t - lo as f64;
                (full[lo] + (full[hi] - full[lo]) * frac) as f32 as f64
            })
            .collect();
        sigmas.push(0.0);
        Ok(EulerDiscreteScheduler {
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

impl Scheduler for EulerDiscreteScheduler {
    fn timesteps(&self) -> &[f64] {
        &self.timesteps
    }

    fn init_noise_sigma(&self) -> f64 {
        let max = self.sigmas.iter().cloned().fold(0.0, f64::max);
        match self.config.spacing {
            TimestepSpacing::Linspace | TimestepSpacing::Trailing => max,
            TimestepSpacing::Leading => (max * max + 1.0).sqrt(),
        }
    }

    fn scale_model_input(&self, sample: &Tensor, index: usize) -> Result<Tensor> {
        check_index(index, self.timesteps.len())?;
        let sigma = self.sigmas[index];
        sample.mul_scalar(1.0 / (sigma * sigma + 1.0).sqrt())
    }

    fn step(&self, model_output: &Tensor, index: usize, sample: &Tensor) -> Result<Tensor> {
        check_index(index, self.timesteps.len())?;
        let (sigma, next) = (self.sigmas[index], self.sigmas[index + 1]);
        let dt = next - sigma;
        // x̂₀ = c_s·sample + c_o·output; derivative = (sample − x̂₀)/σ; x_next = sample + derivative·dt.
        let (c_s, c_o) = match self.config.prediction {
            Prediction::Epsilon => (1.0, -sigma),
            Prediction::VPrediction => {
                let s2 = sigma * sigma + 1.0;
                (1.0 / s2, -sigma / s2.sqrt())
            }
            Prediction::Sample => (0.0, 1.0),
        };
        let (d_s, d_o) = ((1.0 - c_s) / sigma, -c_o / sigma);
        linear_combination(sample, 1.0 + d_s * dt, model_output, d_o * dt)
    }
}

/// `a·x + b·y` on the tensors' device (one fused product-free pass per term).
fn linear_combination(x: &Tensor, a: f64, y: &Tensor, b: f64) -> Result<Tensor> {
    x.mul_scalar(a)?.add(&y.mul_scalar(b)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leading_timesteps_match_diffusers_rule() -> Result<()> {
        let s = DdimScheduler::new(SchedulerConfig::stable_diffusion(), 4)?;
        assert_eq!(s.timesteps(), &[751.0, 501.0, 251.0, 1.0]);
        assert!(DdimScheduler::new(SchedulerConfig::stable_diffusion(), 0).is_err());
        Ok(())
    }
}
