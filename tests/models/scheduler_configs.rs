//! Schedulers built from the scheduler configs diffusers writes (tests/fixtures/schedulers/,
//! made by tests/fixtures/make_scheduler_fixtures.py): every beta schedule (linear,
//! scaled-linear, cosine, explicit betas), spacing (leading, linspace, trailing with ties),
//! prediction type (ε, v, x₀), DDIM's clipping, zero-terminal-SNR rescaling, and a pipeline's
//! PNDM config read by DDIM and
//! Euler with their own defaults for the keys it lacks. Timesteps must match exactly, sigmas
//! to f32 rounding, steps to f32 tolerance, on every device. Bad values are errors naming the key.

use crate::common;
use std::collections::HashMap;
use std::path::PathBuf;

use common::{assert_close, devices, values};
use xpu::schedulers::{DdimScheduler, EulerDiscreteScheduler, Scheduler, SchedulerConfig};
use xpu::{Device, Error, Tensor};

fn dir() -> PathBuf {
    common::repo_root().join("tests/fixtures/schedulers")
}

/// The fixture's f64 vectors and f32 tensors.
struct Steps {
    f64s: HashMap<String, Vec<f64>>,
    tensors: HashMap<String, Tensor>,
}

fn steps_file() -> Steps {
    let bytes = std::fs::read(dir().join("steps.safetensors")).unwrap();
    let file = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let (mut f64s, mut tensors) = (HashMap::new(), HashMap::new());
    for (name, view) in file.tensors() {
        let data = view.data();
        match view.dtype() {
            safetensors::Dtype::F64 => {
                let v = data
                    .chunks_exact(8)
                    .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
                    .collect();
                f64s.insert(name, v);
            }
            safetensors::Dtype::F32 => {
                let v: Vec<f32> = data
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
                    .collect();
                let t = Tensor::from_vec(v, view.shape(), Device::Cpu).unwrap();
                tensors.insert(name, t);
            }
            other => panic!("{name}: unexpected {other:?}"),
        }
    }
    Steps { f64s, tensors }
}

/// (case, config folder, DDIM (true) or Euler).
const CASES: [(&str, &str, bool); 11] = [
    ("ddim_linspace_v", "ddim_linspace_v", true),
    (
        "ddim_trailing_sample_clip",
        "ddim_trailing_sample_clip",
        true,
    ),
    ("ddim_cosine", "ddim_cosine", true),
    ("ddim_trained", "ddim_trained", true),
    ("euler_trailing_v", "euler_trailing_v", false),
    ("euler_defaults", "euler_defaults", false),
    ("euler_cosine_sample", "euler_cosine_sample", false),
    ("ddim_zero_snr_v", "ddim_zero_snr_v", true),
    ("euler_zero_snr_v", "euler_zero_snr_v", false),
    ("pndm_sd15_as_ddim", "pndm_sd15", true),
    ("pndm_sd15_as_euler", "pndm_sd15", false),
];

fn check(what: &str, got: &Tensor, want: &Tensor) {
    let (g, w) = (values(got), values(want));
    let scale = w.iter().fold(1e-30f64, |m, x| m.max(x.abs()));
    assert_close(what, &g, &w, 2e-5 * scale, 1e-4);
}

#[test]
fn schedulers_from_diffusers_configs_match_diffusers() {
    let fx = steps_file();
    for device in devices() {
        let sample = fx.tensors["sample"].to(device).unwrap();
        let out = fx.tensors["model_out"].to(device).unwrap();
        for (case, config, ddim) in CASES {
            let path = dir().join(config).join("scheduler_config.json");
            let defaults = if ddim {
                SchedulerConfig::ddim_defaults()
            } else {
                SchedulerConfig::euler_defaults()
            };
            let cfg = SchedulerConfig::from_file(&path, defaults).unwrap();
            for steps in [16usize, 7] {
                let tag = format!("{case}_{steps}");
                let mut s: Box<dyn Scheduler> = if ddim {
                    Box::new(DdimScheduler::new(cfg.clone(), steps).unwrap())
                } else {
                    let e = EulerDiscreteScheduler::new(cfg.clone(), steps).unwrap();
                    assert_close(
                        &format!("{tag} sigmas"),
                        e.sigmas(),
                        &fx.f64s[&format!("{tag}.sigmas")],
                        0.0,
                        4e-6,
                    );
                    let init = fx.f64s[&format!("{tag}.init_noise_sigma")][0];
                    assert!(
                        (e.init_noise_sigma() - init).abs() <= 1e-5 * init,
                        "{tag} init sigma"
                    );
                    Box::new(e)
                };
                assert_eq!(
                    s.timesteps(),
                    fx.f64s[&format!("{tag}.timesteps")].as_slice(),
                    "{tag} timesteps"
                );
                for i in [0, 3, steps - 1] {
                    if let Some(want) = fx.tensors.get(&format!("{tag}.scaled{i}")) {
                        let got = s.scale_model_input(&sample, i).unwrap();
                        check(&format!("{tag} {device} scaled {i}"), &got, want);
                    }
                    let got = s.step(&out, i, &sample, None).unwrap();
                    let want = &fx.tensors[&format!("{tag}.step{i}")];
                    check(&format!("{tag} {device} step {i}"), &got, want);
                }
            }
        }
    }
}

fn config_error(json: &str) -> String {
    match SchedulerConfig::from_json_str(json, SchedulerConfig::euler_defaults()) {
        Err(Error::Config { key, .. }) => key,
        other => panic!("{json}: expected Error::Config, got {other:?}"),
    }
}

#[test]
fn unsupported_scheduler_options_are_errors_naming_the_key() {
    for (json, key) in [
        (r#"{"beta_schedule": "sigmoid"}"#, "beta_schedule"),
        (r#"{"prediction_type": "flow"}"#, "prediction_type"),
        (r#"{"timestep_spacing": "karras"}"#, "timestep_spacing"),
        (r#"{"thresholding": true}"#, "thresholding"),
        (r#"{"rescale_betas_zero_snr": 1}"#, "rescale_betas_zero_snr"),
        (r#"{"use_karras_sigmas": 1}"#, "use_karras_sigmas"),
        (
            r#"{"use_exponential_sigmas": true}"#,
            "use_exponential_sigmas",
        ),
        (r#"{"use_lu_lambdas": true}"#, "use_lu_lambdas"),
        (r#"{"algorithm_type": "sde-dpmsolver++"}"#, "algorithm_type"),
        (r#"{"solver_type": "bogus"}"#, "solver_type"),
        (r#"{"lambda_min_clipped": -5.1}"#, "lambda_min_clipped"),
        (r#"{"variance_type": "learned_range"}"#, "variance_type"),
        (r#"{"sigma_min": NaN}"#, "sigma_min"),
        (r#"{"timestep_scaling": Infinity}"#, "timestep_scaling"),
        (r#"{"skip_prk_steps": null}"#, "skip_prk_steps"),
        (
            r#"{"interpolation_type": "log_linear"}"#,
            "interpolation_type",
        ),
        (r#"{"timestep_type": "continuous"}"#, "timestep_type"),
        (r#"{"final_sigmas_type": "sigma_max"}"#, "final_sigmas_type"),
        (r#"{"num_train_timesteps": -1}"#, "num_train_timesteps"),
        (r#"{"steps_offset": "one"}"#, "steps_offset"),
        (r#"{"trained_betas": "many"}"#, "trained_betas"),
    ] {
        assert_eq!(config_error(json), key, "{json}");
    }
    // Other schedulers' options are not ours to judge; a non-object or bad JSON is a file error.
    let c = SchedulerConfig::from_json_str(
        r#"{"_class_name": "DPMSolverMultistepScheduler", "solver_order": 2}"#,
        SchedulerConfig::euler_defaults(),
    )
    .unwrap();
    assert_eq!(c, SchedulerConfig::euler_defaults());
    for text in ["[1]", "{", ""] {
        let r = SchedulerConfig::from_json_str(text, SchedulerConfig::euler_defaults());
        assert!(matches!(r, Err(Error::InvalidFile { .. })), "{text}");
    }
    // Values the schedule cannot use: errors when the scheduler is built, not panics.
    let bad = SchedulerConfig::from_json_str(
        r#"{"num_train_timesteps": 10, "trained_betas": [0.1, 0.2]}"#,
        SchedulerConfig::ddim_defaults(),
    );
    assert!(bad.is_err());
    let zero = SchedulerConfig {
        num_train_timesteps: 0,
        ..SchedulerConfig::stable_diffusion()
    };
    assert!(DdimScheduler::new(zero.clone(), 1).is_err());
    assert!(EulerDiscreteScheduler::new(zero, 1).is_err());
    assert!(DdimScheduler::new(SchedulerConfig::stable_diffusion(), 1001).is_err());
}
