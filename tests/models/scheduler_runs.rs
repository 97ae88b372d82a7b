//! Whole denoising runs of every scheduler against diffusers' (tests/fixtures/schedulers/
//! runs.json and runs.safetensors, made by tests/fixtures/make_scheduler_fixtures.py):
//! pipelines' scheduler configs (SD 1.5, SD 2.1 v-prediction, SDXL, LCM, DPM-Solver ones)
//! run by every user-facing name and by the file's own class, at 1, 4, 20 and 50 steps, with a
//! fixed fake model `0.1·x + sin(t/100)` and recorded per-step noise. Checked: timesteps
//! (integers exactly, fractional ones to f32 ulps), σs and init_noise_sigma (to f32 rounding), which steps take noise
//! (exactly), the final sample (to 1e-5 of its scale; 1e-4 for zero-terminal-SNR schedules,
//! see `tolerance`), img2img start indices (exactly), the noised image and an img2img run;
//! runs diffusers refuses must be refused. On Cpu; the Xpu
//! runs are compared with these in tests/scheduler_devices.rs.

use crate::common;
use std::collections::HashMap;
use std::sync::OnceLock;

use common::{assert_close, values};
use serde_json::Value;
use xpu::schedulers::{LcmScheduler, Scheduler, SchedulerFile, SchedulerKind};
use xpu::{Device, Tensor};

struct Fixture {
    json: Value,
    tensors: HashMap<String, Tensor>,
}

fn fixture() -> &'static Fixture {
    static FX: OnceLock<Fixture> = OnceLock::new();
    FX.get_or_init(|| {
        let path = common::repo_root().join("tests/fixtures/schedulers/runs.json");
        let text = std::fs::read_to_string(path).unwrap();
        Fixture {
            json: serde_json::from_str(&text).unwrap(),
            tensors: common::fixtures::load("schedulers/runs.safetensors"),
        }
    })
}

fn runs() -> &'static [Value] {
    fixture().json["runs"].as_array().unwrap()
}

fn tensor(name: &str) -> &'static Tensor {
    fixture()
        .tensors
        .get(name)
        .unwrap_or_else(|| panic!("fixture tensor {name} missing"))
}

fn file(config: &str) -> SchedulerFile {
    let dir = common::repo_root()
        .join("tests/fixtures/schedulers")
        .join(config);
    SchedulerFile::read(dir.join("scheduler_config.json")).unwrap()
}

/// The scheduler a run uses: the file's own class (`auto`) or a user-facing name.
fn scheduler(run: &Value) -> xpu::Result<Box<dyn Scheduler>> {
    let (config, name) = (
        run["config"].as_str().unwrap(),
        run["name"].as_str().unwrap(),
    );
    let steps = run["steps"].as_u64().unwrap() as usize;
    let f = file(config);
    if name == "auto" {
        f.scheduler(steps)
    } else {
        f.scheduler_named(name, steps)
    }
}

/// The fixture's fake model: `0.1·x + sin(t/100)`.
fn fake_model(x: &Tensor, t: f64) -> xpu::Result<Tensor> {
    x.affine(0.1, (t / 100.0).sin())
}

/// Runs `begin..` from `x`, taking step i's noise (where asked) from `bank[i]`.
fn denoise(
    s: &mut dyn Scheduler,
    mut x: Tensor,
    begin: usize,
    bank: &Tensor,
) -> xpu::Result<Tensor> {
    for i in begin..s.timesteps().len() {
        let t = s.timesteps()[i];
        let out = fake_model(&s.scale_model_input(&x, i)?, t)?;
        let noise = match s.needs_noise(i) {
            true => Some(bank.narrow(0, i, 1)?.reshape(x.shape())?),
            false => None,
        };
        x = s.step(&out, i, &x, noise.as_ref())?;
    }
    Ok(x)
}

fn f64s(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

/// `got` within `tol` of `want`'s largest magnitude (and `tol` relatively) elementwise.
fn check_sample(what: &str, got: &Tensor, want: &Tensor, tol: f64) {
    let (g, w) = (values(got), values(want));
    let scale = w.iter().fold(1e-30f64, |m, x| m.max(x.abs()));
    assert_close(what, &g, &w, tol * scale, tol);
}

/// The tolerance of a run's samples: 1e-5, but 1e-4 where σ_max > 1000 (zero terminal SNR
/// gives σ_max = 4096: the first Euler step cancels ~12 bits of an f32 sample of that size,
/// so the order of f32 operations shows, in diffusers' results too).
fn tolerance(s: &dyn Scheduler) -> f64 {
    let sigma_max = s
        .sigmas()
        .map_or(0.0, |v| v.iter().cloned().fold(0.0, f64::max));
    if sigma_max > 1000.0 {
        1e-4
    } else {
        1e-5
    }
}

fn run_one(run: &Value) {
    let tag = run["run"].as_str().unwrap();
    let latent = tensor("latent");
    let bank = tensor("noise_bank");
    if run.get("error").is_some() {
        // diffusers refuses: building or running must fail here too.
        let outcome = scheduler(run).and_then(|mut s| {
            let x = latent.mul_scalar(s.init_noise_sigma())?;
            denoise(s.as_mut(), x, 0, bank)
        });
        assert!(outcome.is_err(), "{tag}: diffusers refused, got Ok");
        return;
    }
    let mut s = scheduler(run).unwrap_or_else(|e| panic!("{tag}: {e}"));
    // Integer timesteps exactly; Karras ones (Euler's are fractional) to a few f32 ulps, as
    // NumPy's f32 `log` of the training σs is not correctly rounded and Rust's is.
    let want = f64s(&run["timesteps"]);
    assert_eq!(s.timesteps().len(), want.len(), "{tag} timesteps");
    let whole = want.iter().all(|t| t.fract() == 0.0);
    if whole {
        assert_eq!(s.timesteps(), want.as_slice(), "{tag} timesteps");
    } else {
        assert_close(&format!("{tag} timesteps"), s.timesteps(), &want, 0.0, 1e-6);
    }
    match (s.sigmas(), run.get("sigmas")) {
        (Some(got), Some(want)) => {
            assert_close(&format!("{tag} sigmas"), got, &f64s(want), 0.0, 4e-6)
        }
        (None, None) => {}
        (got, want) => panic!("{tag}: sigmas {got:?} vs {want:?}"),
    }
    let init = run["init_noise_sigma"].as_f64().unwrap();
    assert!(
        (s.init_noise_sigma() - init).abs() <= 1e-5 * init,
        "{tag} init_noise_sigma {} vs {init}",
        s.init_noise_sigma()
    );
    let drawn: Vec<usize> = (0..s.timesteps().len())
        .filter(|&i| s.needs_noise(i))
        .collect();
    let want: Vec<usize> = f64s(&run["noise_steps"])
        .iter()
        .map(|&i| i as usize)
        .collect();
    assert_eq!(drawn, want, "{tag} steps that take noise");
    let tol = tolerance(s.as_ref());
    let x = latent.mul_scalar(s.init_noise_sigma()).unwrap();
    let fin = denoise(s.as_mut(), x, 0, bank).unwrap();
    let want = tensor(&format!("{tag}.final"));
    check_sample(&format!("{tag} final"), &fin, want, tol);
    if let Some(begins) = run.get("img2img_begin") {
        check_img2img(run, begins.as_array().unwrap());
    }
}

fn check_img2img(run: &Value, begins: &[Value]) {
    let tag = run["run"].as_str().unwrap();
    for (strength, want) in [0.3, 0.75, 1.0].into_iter().zip(begins) {
        let mut s = scheduler(run).unwrap();
        let got = s.begin_img2img(strength);
        let Some(begin) = want.as_u64() else {
            assert!(got.is_err(), "{tag} strength {strength}: expected an error");
            continue;
        };
        let begin = begin as usize;
        assert_eq!(got.unwrap(), begin, "{tag} strength {strength} begin");
        let Some(want) = fixture().tensors.get(&format!("{tag}.noised_{strength}")) else {
            continue;
        };
        let tol = tolerance(s.as_ref());
        let noised = s
            .add_noise(tensor("image"), tensor("image_noise"), begin)
            .unwrap();
        check_sample(&format!("{tag} noised {strength}"), &noised, want, tol);
        if strength == 0.75 {
            let fin = denoise(s.as_mut(), noised, begin, tensor("noise_bank")).unwrap();
            let want = tensor(&format!("{tag}.img2img_final"));
            check_sample(&format!("{tag} img2img"), &fin, want, tol);
        }
    }
}

#[test]
fn every_scheduler_runs_as_diffusers_does() {
    let mut by_name: HashMap<&str, usize> = HashMap::new();
    for run in runs() {
        run_one(run);
        *by_name.entry(run["name"].as_str().unwrap()).or_default() += 1;
    }
    // Every user-facing name and the files' own classes were exercised.
    for name in [
        "auto",
        "pndm",
        "ddim",
        "euler",
        "euler-a",
        "dpm++2m",
        "dpm++2m-karras",
        "lcm",
    ] {
        assert!(by_name.get(name).is_some_and(|&n| n >= 8), "{name}");
    }
}

#[test]
fn a_pipelines_own_class_is_the_one_its_file_names() {
    for (config, kind, name) in [
        ("sd15_hub", SchedulerKind::Pndm, "pndm"),
        ("sd21_hub", SchedulerKind::Ddim, "ddim"),
        ("sdxl_hub", SchedulerKind::EulerDiscrete, "euler"),
        ("lcm_hub", SchedulerKind::Lcm, "lcm"),
        (
            "dpm/karras_sigma_min",
            SchedulerKind::DpmSolverMultistep,
            "auto",
        ),
    ] {
        let f = file(config);
        assert_eq!(f.kind().unwrap(), kind, "{config}");
        let steps = if name == "auto" { 20 } else { 50 };
        let mut s = f.scheduler(steps).unwrap();
        assert_eq!(s.kind(), kind);
        let x = tensor("latent").mul_scalar(s.init_noise_sigma()).unwrap();
        let fin = denoise(s.as_mut(), x, 0, tensor("noise_bank")).unwrap();
        let want = tensor(&format!("{config}.{name}.{steps}.final"));
        check_sample(&format!("{config} by class"), &fin, want, 1e-5);
    }
}

#[test]
fn lcm_img2img_timesteps_follow_the_strength() {
    let cases = fixture().json["lcm_strength"].as_array().unwrap();
    let config = file("lcm_hub").config_for(SchedulerKind::Lcm).unwrap();
    for case in cases {
        let steps = case["steps"].as_u64().unwrap() as usize;
        let strength = case["strength"].as_f64().unwrap();
        let got = LcmScheduler::with_strength(config.clone(), steps, strength);
        match case.get("timesteps") {
            Some(want) => {
                let s = got.unwrap();
                assert_eq!(s.timesteps(), f64s(want).as_slice(), "{case}");
                // All of them run: img2img through LCM's pipeline starts at 0.
                assert_eq!(s.inference_steps(), steps);
            }
            None => assert!(got.is_err(), "{case}: expected an error"),
        }
    }
}

#[test]
fn a_multistep_run_restarts_cleanly_at_its_begin_index() {
    // Running twice with the same scheduler (set_begin_index(0) between) gives the same result.
    let run = runs()
        .iter()
        .find(|r| r["run"] == "sd15_hub.dpm++2m-karras.20")
        .unwrap();
    let mut s = scheduler(run).unwrap();
    let x = tensor("latent").mul_scalar(s.init_noise_sigma()).unwrap();
    let a = denoise(s.as_mut(), x.clone(), 0, tensor("noise_bank")).unwrap();
    s.set_begin_index(0).unwrap();
    let b = denoise(s.as_mut(), x, 0, tensor("noise_bank")).unwrap();
    assert_eq!(values(&a), values(&b));
    assert_eq!(a.device(), Device::Cpu);
}
