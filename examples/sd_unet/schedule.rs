//! Run mode's scheduler: DDIM or Euler on the model's own noise schedule where the pipeline
//! ships one (`scheduler/scheduler_config.json` beside `unet/`, or `--scheduler-config FILE`),
//! else on Stable Diffusion 1.x's; `--prediction` overrides the prediction type (for a lone
//! `unet/` folder of a v-prediction model such as SD 2.x 768).
//!
//! Invariant: the scheduler that runs is the one `--scheduler` names; the file only sets the
//! schedule (betas, spacing, offset, prediction, DDIM's clipping), with missing keys taking that
//! class's diffusers defaults, as `XScheduler.from_config(pipe.scheduler.config)` does.

use std::path::{Path, PathBuf};

use xpu::schedulers::{
    DdimScheduler, EulerDiscreteScheduler, Prediction, Scheduler, SchedulerConfig,
};

/// Which scheduler runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum SchedulerArg {
    /// diffusers' DDIMScheduler (η = 0).
    Ddim,
    /// diffusers' EulerDiscreteScheduler.
    Euler,
}

/// `--prediction`: what the model predicts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PredictionArg {
    /// The noise ε.
    Epsilon,
    /// The velocity v (SD 2.x 768).
    VPrediction,
    /// The clean sample x₀.
    Sample,
}

/// The scheduler config file of a model folder: `--scheduler-config` where given, else
/// `scheduler/scheduler_config.json` in the pipeline root `unet` names or holds.
pub fn find_config(unet: Option<&Path>, explicit: Option<&Path>) -> Option<PathBuf> {
    if let Some(file) = explicit {
        return Some(file.to_path_buf());
    }
    let dir = unet?;
    let candidates = [
        dir.join("scheduler/scheduler_config.json"),
        dir.join("../scheduler/scheduler_config.json"),
    ];
    candidates.into_iter().find(|p| p.is_file())
}

/// The scheduler `kind` visiting `steps` timesteps on `file`'s schedule (or SD 1.x's), with the
/// prediction type overridden by `prediction`.
pub fn build(
    kind: SchedulerArg,
    file: Option<&Path>,
    prediction: Option<PredictionArg>,
    steps: usize,
) -> xpu::Result<Box<dyn Scheduler>> {
    let mut config = match file {
        Some(path) => {
            let defaults = match kind {
                SchedulerArg::Ddim => SchedulerConfig::ddim_defaults(),
                SchedulerArg::Euler => SchedulerConfig::euler_defaults(),
            };
            SchedulerConfig::from_file(path, defaults)?
        }
        None => SchedulerConfig::stable_diffusion(),
    };
    if let Some(p) = prediction {
        config.prediction = match p {
            PredictionArg::Epsilon => Prediction::Epsilon,
            PredictionArg::VPrediction => Prediction::VPrediction,
            PredictionArg::Sample => Prediction::Sample,
        };
    }
    Ok(match kind {
        SchedulerArg::Ddim => Box::new(DdimScheduler::new(config, steps)?),
        SchedulerArg::Euler => Box::new(EulerDiscreteScheduler::new(config, steps)?),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("xpu-sd-unet-sched-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("unet")).unwrap();
        std::fs::create_dir_all(dir.join("scheduler")).unwrap();
        dir
    }

    #[test]
    fn a_pipelines_scheduler_config_is_found_from_root_or_unet() {
        let dir = scratch("find");
        assert_eq!(find_config(Some(&dir), None), None);
        let file = dir.join("scheduler/scheduler_config.json");
        std::fs::write(&file, r#"{"prediction_type": "v_prediction"}"#).unwrap();
        assert!(find_config(Some(&dir), None).is_some());
        assert!(find_config(Some(&dir.join("unet")), None).is_some());
        let other = dir.join("other.json");
        assert_eq!(find_config(Some(&dir), Some(&other)), Some(other));
        assert_eq!(find_config(None, None), None);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_file_sets_the_schedule_and_the_flag_overrides_the_prediction() {
        let dir = scratch("build");
        let file = dir.join("scheduler/scheduler_config.json");
        // SD 2.1's: DDIM, v-prediction, scaled-linear, leading with offset 1.
        std::fs::write(
            &file,
            r#"{"_class_name": "DDIMScheduler", "beta_end": 0.012, "beta_schedule": "scaled_linear",
                "beta_start": 0.00085, "clip_sample": false, "num_train_timesteps": 1000,
                "prediction_type": "v_prediction", "set_alpha_to_one": false,
                "skip_prk_steps": true, "steps_offset": 1, "trained_betas": null}"#,
        )
        .unwrap();
        let mut s = build(SchedulerArg::Ddim, Some(&file), None, 4).unwrap();
        assert_eq!(s.timesteps(), &[751.0, 501.0, 251.0, 1.0]);
        // The same model output steps differently as ε.
        let x = xpu::Tensor::from_vec(vec![0.5f32; 4], &[1, 4], xpu::Device::Cpu).unwrap();
        let out = xpu::Tensor::from_vec(vec![0.25f32; 4], &[1, 4], xpu::Device::Cpu).unwrap();
        let v: Vec<f32> = s.step(&out, 0, &x, None).unwrap().to_vec().unwrap();
        let mut eps = build(
            SchedulerArg::Ddim,
            Some(&file),
            Some(PredictionArg::Epsilon),
            4,
        )
        .unwrap();
        let e: Vec<f32> = eps.step(&out, 0, &x, None).unwrap().to_vec().unwrap();
        assert_ne!(v, e);
        // A bad file is an error naming the key.
        std::fs::write(&file, r#"{"use_exponential_sigmas": true}"#).unwrap();
        let err = build(SchedulerArg::Euler, Some(&file), None, 4)
            .err()
            .unwrap();
        assert!(err.to_string().contains("use_exponential_sigmas"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
