//! diffusers' `DDIMScheduler` with η = 0 (deterministic).
//!
//! Invariants: timesteps follow the config's spacing rounded to integers; the step from `t`
//! goes to `t − T/n` (ᾱ of the final step per `set_alpha_to_one`); x̂₀ is clipped when
//! `clip_sample` asks, with ε̂ not recomputed from it, as in diffusers; the scheduler holds no
//! state between steps.

use super::config::{Prediction, SchedulerConfig};
use super::kind::SchedulerKind;
use super::update::{check_index, check_operand, combine, narrow_to, noise_for_step, widen};
use super::Scheduler;
use crate::{Result, Tensor};

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

    /// The sample after step `index`, given the model's output for it (DDIM takes no noise
    /// and keeps no history, so this needs no `&mut`).
    pub fn step(&self, model_output: &Tensor, index: usize, sample: &Tensor) -> Result<Tensor> {
        const OP: &str = "DDIMScheduler.step";
        check_index(OP, index, self.timesteps.len())?;
        check_operand(OP, sample, model_output, "model output")?;
        let (x, out) = (widen(sample)?, widen(model_output)?);
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
        let next = match self.config.clip_sample {
            None => combine(&[(&x, ap * x0_s + bp * eps_s), (&out, ap * x0_o + bp * eps_o)])?,
            Some(r) => {
                let x0 = combine(&[(&x, x0_s), (&out, x0_o)])?.clamp(-r, r)?;
                let eps = combine(&[(&x, eps_s), (&out, eps_o)])?;
                combine(&[(&x0, ap), (&eps, bp)])?
            }
        };
        narrow_to(next, sample.dtype())
    }
}

/// diffusers' `add_noise` of the ᾱ-based schedulers (DDIM, PNDM, LCM): `√ᾱ_t·x + √(1−ᾱ_t)·ε`
/// at timestep `t`, the square roots taken in f32.
pub(crate) fn add_noise_at_alpha(
    op: &'static str,
    original: &Tensor,
    noise: &Tensor,
    alpha_cumprod: f64,
) -> Result<Tensor> {
    check_operand(op, original, noise, "noise")?;
    let a = alpha_cumprod as f32;
    let (sa, sb) = (a.sqrt(), (1.0 - a).sqrt());
    let y = combine(&[
        (&widen(original)?, f64::from(sa)),
        (&widen(noise)?, f64::from(sb)),
    ])?;
    narrow_to(y, original.dtype())
}

/// The training step a timestep value names (timesteps here are whole numbers in range).
pub(crate) fn train_index(t: f64, alphas_cumprod: &[f64]) -> usize {
    (t.max(0.0) as usize).min(alphas_cumprod.len().saturating_sub(1))
}

impl Scheduler for DdimScheduler {
    fn kind(&self) -> SchedulerKind {
        SchedulerKind::Ddim
    }

    fn timesteps(&self) -> &[f64] {
        &self.timesteps
    }

    fn inference_steps(&self) -> usize {
        self.timesteps.len()
    }

    fn init_noise_sigma(&self) -> f64 {
        1.0
    }

    fn scale_model_input(&self, sample: &Tensor, index: usize) -> Result<Tensor> {
        check_index(
            "DDIMScheduler.scale_model_input",
            index,
            self.timesteps.len(),
        )?;
        Ok(sample.clone())
    }

    fn step(
        &mut self,
        model_output: &Tensor,
        index: usize,
        sample: &Tensor,
        noise: Option<&Tensor>,
    ) -> Result<Tensor> {
        noise_for_step("DDIMScheduler.step", false, index, sample, noise)?;
        DdimScheduler::step(self, model_output, index, sample)
    }

    fn add_noise(&self, original: &Tensor, noise: &Tensor, index: usize) -> Result<Tensor> {
        const OP: &str = "DDIMScheduler.add_noise";
        check_index(OP, index, self.timesteps.len())?;
        let t = train_index(self.timesteps[index], &self.alphas_cumprod);
        add_noise_at_alpha(OP, original, noise, self.alphas_cumprod[t])
    }

    fn set_begin_index(&mut self, index: usize) -> Result<()> {
        check_index("DDIMScheduler.set_begin_index", index, self.timesteps.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leading_timesteps_match_diffusers_rule() -> Result<()> {
        let s = DdimScheduler::new(SchedulerConfig::stable_diffusion(), 4)?;
        assert_eq!(Scheduler::timesteps(&s), &[751.0, 501.0, 251.0, 1.0]);
        assert!(DdimScheduler::new(SchedulerConfig::stable_diffusion(), 0).is_err());
        Ok(())
    }
}
