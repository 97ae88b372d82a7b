//! Diffusion schedulers for the denoising loop, as diffusers computes them: `PNDMScheduler`
//! (PLMS, Stable Diffusion 1.x's), `DDIMScheduler` (η = 0), `EulerDiscreteScheduler`,
//! `EulerAncestralDiscreteScheduler`, `DPMSolverMultistepScheduler` (DPM-Solver++, "DPM++ 2M"
//! with or without Karras σs) and `LCMScheduler`, on a [`SchedulerConfig`] (Stable Diffusion's,
//! or a pipeline's `scheduler/scheduler_config.json` through [`SchedulerFile`]).
//!
//! Invariants: the noise schedule (betas, ᾱ, σ, timesteps) is computed once on the host from
//! the config, exactly as diffusers builds it, in the same f32/f64 precision at each stage;
//! the per-step update is a few elementwise ops on the sample's own device, so a step never
//! moves latents between devices (16-bit latents are updated in f32 and rounded back once).
//! Steps are addressed by index (`0..timesteps().len()`), not by timestep value, so no lookup
//! can be ambiguous; a multistep scheduler (PNDM, DPM-Solver) keeps the history of its run and
//! asks that steps come in order. Randomness is never drawn here: a scheduler that adds noise
//! on a step says so through [`Scheduler::needs_noise`] and takes it as an argument, so a
//! pipeline draws it from its own generator where diffusers draws it. Parity with diffusers is
//! tested against fixtures made by `tests/fixtures/make_op_fixtures.py` (SD's schedule) and
//! `tests/fixtures/make_scheduler_fixtures.py` (every scheduler on several pipelines' configs).
//!
//! A denoising loop:
//!
//! ```
//! use xpu::schedulers::{SchedulerFile, Scheduler};
//! use xpu::{DType, Device, Tensor};
//! # fn main() -> xpu::Result<()> {
//! let file = SchedulerFile::parse(r#"{"_class_name": "PNDMScheduler", "beta_start": 0.00085,
//!     "beta_end": 0.012, "beta_schedule": "scaled_linear", "skip_prk_steps": true,
//!     "set_alpha_to_one": false, "steps_offset": 1}"#)?;
//! let mut scheduler = file.scheduler_named("dpm++2m-karras", 20)?;
//! let mut x = Tensor::randn(&[1, 4, 8, 8], DType::F32, Device::Cpu, 0)?
//!     .mul_scalar(scheduler.init_noise_sigma())?;
//! for i in 0..scheduler.timesteps().len() {
//!     let input = scheduler.scale_model_input(&x, i)?;
//!     let eps = input.mul_scalar(0.1)?; // the UNet at timestep scheduler.timesteps()[i]
//!     let noise = match scheduler.needs_noise(i) {
//!         true => Some(Tensor::randn(x.shape(), DType::F32, Device::Cpu, i as u64)?),
//!         false => None,
//!     };
//!     x = scheduler.step(&eps, i, &x, noise.as_ref())?;
//! }
//! # Ok(())
//! # }
//! ```

mod config;
mod config_json;
mod ddim;
mod dpm_solver;
mod euler;
mod euler_ancestral;
mod file;
mod img2img;
mod kind;
mod lcm;
mod pndm;
mod sigmas;
mod update;

pub use config::{
    BetaSchedule, FinalSigma, Prediction, SchedulerConfig, SolverType, TimestepSpacing,
};
pub use ddim::DdimScheduler;
pub use dpm_solver::DpmSolverMultistepScheduler;
pub use euler::EulerDiscreteScheduler;
pub use euler_ancestral::EulerAncestralScheduler;
pub use file::SchedulerFile;
pub use img2img::img2img_begin_index;
pub use kind::{build, SchedulerKind, SchedulerName};
pub use lcm::LcmScheduler;
pub use pndm::PndmScheduler;

use crate::{Result, Tensor};

/// A denoising scheduler: which timesteps to visit and how to step the sample.
///
/// A run visits `index = begin..timesteps().len()` in order: `scale_model_input(x, index)`
/// goes into the model with timestep `timesteps()[index]`, and `step(output, index, x, noise)`
/// gives the next `x`.
pub trait Scheduler {
    /// Which diffusers class this is.
    fn kind(&self) -> SchedulerKind;
    /// Timesteps to pass to the model, in visiting order (PNDM's PLMS list repeats one).
    fn timesteps(&self) -> &[f64];
    /// The number of inference steps asked for (`timesteps().len()` but for PNDM's extra ones).
    fn inference_steps(&self) -> usize;
    /// diffusers' `scheduler.order`: model evaluations per inference step (1 for all here).
    fn order(&self) -> usize {
        1
    }
    /// The σ schedule (σ per step, then the final σ) for the σ-based schedulers (Euler, Euler
    /// ancestral, DPM-Solver); `None` for the others.
    fn sigmas(&self) -> Option<&[f64]> {
        None
    }
    /// Standard deviation of the initial noise (multiply unit Gaussian latents by it).
    fn init_noise_sigma(&self) -> f64;
    /// Scales the sample before it goes into the model at step `index`.
    fn scale_model_input(&self, sample: &Tensor, index: usize) -> Result<Tensor>;
    /// Whether `step(.., index, ..)` takes noise: a standard normal tensor shaped like the
    /// sample, drawn where diffusers draws it (after the model's call for that step).
    fn needs_noise(&self, index: usize) -> bool {
        let _ = index;
        false
    }
    /// The sample after step `index`, given the model's output for it; `noise` must be given
    /// exactly when [`Scheduler::needs_noise`] says so. Multistep schedulers record the
    /// output, so steps must come in order (see [`Scheduler::set_begin_index`]).
    fn step(
        &mut self,
        model_output: &Tensor,
        index: usize,
        sample: &Tensor,
        noise: Option<&Tensor>,
    ) -> Result<Tensor>;
    /// diffusers' `add_noise`: `original` noised to the level of step `index` (img2img's
    /// start, see [`Scheduler::begin_img2img`]).
    fn add_noise(&self, original: &Tensor, noise: &Tensor, index: usize) -> Result<Tensor>;
    /// diffusers' `set_begin_index`: the run starts at `index`; clears a multistep history.
    /// Without it, a fresh scheduler's first step may be at any index.
    fn set_begin_index(&mut self, index: usize) -> Result<()>;
    /// Where img2img starts for `strength` in `[0, 1]`, as diffusers'
    /// `StableDiffusionImg2ImgPipeline.get_timesteps` computes it (see [`img2img_begin_index`]);
    /// sets the begin index there. Noise the image with `add_noise(.., begin)` and run
    /// `begin..timesteps().len()`.
    fn begin_img2img(&mut self, strength: f64) -> Result<usize> {
        let begin = img2img_begin_index(self.inference_steps(), strength, self.order())?;
        self.set_begin_index(begin)?;
        Ok(begin)
    }
}
