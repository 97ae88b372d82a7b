//! diffusers' `LCMScheduler` (latent consistency models): each step predicts the clean sample
//! through the consistency boundary conditions, then re-noises it to the next timestep.
//!
//! Invariants: timesteps are `n` picks, evenly spaced by index, from the distillation
//! schedule `k·i − 1` (`k = T / original_inference_steps`, `i = 1..=original·strength`),
//! descending; the config's spacing and offset do not apply, as in diffusers. A step's
//! denoised sample is `c_out·x̂₀ + c_skip·x` with `c_skip = σ_d²/((s·t)² + σ_d²)`,
//! `c_out = s·t/√((s·t)² + σ_d²)` (σ_d = 0.5, `s = timestep_scaling`), in f32; every step but
//! the last then takes noise: `√ᾱ_prev·denoised + √(1−ᾱ_prev)·noise`; the last returns the
//! denoised sample (what LCM pipelines decode). No state between steps.
//!
//! Guidance: LCM pipelines do not run classifier-free guidance on two batches; the distilled
//! UNet takes the guidance scale `w` as `timestep_cond`, the embedding diffusers'
//! `get_guidance_scale_embedding(w − 1)` makes (sinusoidal, `time_cond_proj_dim` wide), once
//! per run. LCM's img2img pipeline builds its timesteps with the strength
//! ([`LcmScheduler::with_strength`], running all of them); Stable Diffusion's img2img pipeline
//! with an LCM scheduler starts part-way instead ([`Scheduler::begin_img2img`]).

use super::config::{Prediction, SchedulerConfig};
use super::ddim::{add_noise_at_alpha, train_index};
use super::kind::SchedulerKind;
use super::update::{check_index, check_operand, combine, narrow_to, noise_for_step, widen};
use super::Scheduler;
use crate::{Error, Result, Tensor};

/// diffusers' `LCMScheduler`.
#[derive(Clone, Debug)]
pub struct LcmScheduler {
    config: SchedulerConfig,
    alphas_cumprod: Vec<f64>,
    final_alpha: f64,
    timesteps: Vec<f64>,
}

impl LcmScheduler {
    /// An LCM scheduler visiting `steps` timesteps of the distillation schedule.
    pub fn new(config: SchedulerConfig, steps: usize) -> Result<LcmScheduler> {
        LcmScheduler::with_strength(config, steps, 1.0)
    }

    /// An LCM scheduler whose `steps` timesteps come from the first `strength` part of the
    /// distillation schedule (diffusers' `set_timesteps(.., strength=)`, what LCM's img2img
    /// pipeline runs; `strength` in `(0, 1]`).
    pub fn with_strength(
        config: SchedulerConfig,
        steps: usize,
        strength: f64,
    ) -> Result<LcmScheduler> {
        const OP: &str = "LCMScheduler";
        config.validate()?;
        if !(strength.is_finite() && (0.0..=1.0).contains(&strength)) {
            return Err(Error::invalid(
                OP,
                format!("expected a strength in [0, 1], got {strength}"),
            ));
        }
        let total = config.num_train_timesteps;
        let original = config.original_inference_steps;
        let k = total / original;
        let count = (original as f64 * strength) as usize;
        if steps == 0 || steps > total {
            return Err(Error::invalid(
                OP,
                format!("expected 1..={total} inference steps, got {steps}"),
            ));
        }
        if count / steps < 1 {
            return Err(Error::invalid(
                OP,
                format!(
                    "original_inference_steps × strength ({original} × {strength}) is smaller \
                     than the {steps} inference steps"
                ),
            ));
        }
        if steps > original {
            return Err(Error::invalid(
                OP,
                format!(
                    "expected at most original_inference_steps ({original}) inference steps, \
                     got {steps}"
                ),
            ));
        }
        // The distillation schedule, descending, picked at floor(i·count/steps).
        let origin: Vec<usize> = (1..=count).rev().map(|i| i * k - 1).collect();
        let step = count as f64 / steps as f64;
        let timesteps = (0..steps)
            .map(|i| origin[((i as f64 * step).floor() as usize).min(count - 1)] as f64)
            .collect();
        let alphas_cumprod = config.alphas_cumprod();
        let final_alpha = if config.set_alpha_to_one {
            1.0
        } else {
            alphas_cumprod[0]
        };
        Ok(LcmScheduler {
            config,
            alphas_cumprod,
            final_alpha,
            timesteps,
        })
    }

    /// ᾱ at a timestep value, in f32 (the final ᾱ below 0).
    fn alpha(&self, t: f64) -> f32 {
        if t >= 0.0 {
            self.alphas_cumprod[train_index(t, &self.alphas_cumprod)] as f32
        } else {
            self.final_alpha as f32
        }
    }

    /// The consistency boundary conditions `(c_skip, c_out)` at timestep `t`, in f32.
    fn boundary(&self, t: f64) -> (f32, f32) {
        const SIGMA_DATA2: f32 = 0.25;
        let s = t as f32 * self.config.timestep_scaling as f32;
        let c_skip = SIGMA_DATA2 / (s * s + SIGMA_DATA2);
        let c_out = s / (s * s + SIGMA_DATA2).sqrt();
        (c_skip, c_out)
    }
}

impl Scheduler for LcmScheduler {
    fn kind(&self) -> SchedulerKind {
        SchedulerKind::Lcm
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
            "LCMScheduler.scale_model_input",
            index,
            self.timesteps.len(),
        )?;
        Ok(sample.clone())
    }

    fn needs_noise(&self, index: usize) -> bool {
        index + 1 < self.timesteps.len()
    }

    fn step(
        &mut self,
        model_output: &Tensor,
        index: usize,
        sample: &Tensor,
        noise: Option<&Tensor>,
    ) -> Result<Tensor> {
        const OP: &str = "LCMScheduler.step";
        check_index(OP, index, self.timesteps.len())?;
        check_operand(OP, sample, model_output, "model output")?;
        let noise = noise_for_step(OP, self.needs_noise(index), index, sample, noise)?;
        let (x, out) = (widen(sample)?, widen(model_output)?);
        let t = self.timesteps[index];
        let prev_t = self.timesteps.get(index + 1).copied().unwrap_or(t);
        let (a_t, a_prev) = (self.alpha(t), self.alpha(prev_t));
        let (sa, sb) = (f64::from(a_t.sqrt()), f64::from((1.0 - a_t).sqrt()));
        let x0 = match self.config.prediction {
            Prediction::Epsilon => combine(&[(&x, 1.0 / sa), (&out, -sb / sa)])?,
            Prediction::Sample => out,
            Prediction::VPrediction => combine(&[(&x, sa), (&out, -sb)])?,
        };
        let x0 = match self.config.clip_sample {
            Some(r) => x0.clamp(-r, r)?,
            None => x0,
        };
        let (c_skip, c_out) = self.boundary(t);
        let denoised = combine(&[(&x0, f64::from(c_out)), (&x, f64::from(c_skip))])?;
        let y = match noise {
            Some(n) => combine(&[
                (&denoised, f64::from(a_prev.sqrt())),
                (&n, f64::from((1.0 - a_prev).sqrt())),
            ])?,
            None => denoised,
        };
        narrow_to(y, sample.dtype())
    }

    fn add_noise(&self, original: &Tensor, noise: &Tensor, index: usize) -> Result<Tensor> {
        const OP: &str = "LCMScheduler.add_noise";
        check_index(OP, index, self.timesteps.len())?;
        let t = train_index(self.timesteps[index], &self.alphas_cumprod);
        add_noise_at_alpha(OP, original, noise, self.alphas_cumprod[t])
    }

    fn set_begin_index(&mut self, index: usize) -> Result<()> {
        check_index("LCMScheduler.set_begin_index", index, self.timesteps.len())
    }
}
