//! Every scheduler's whole run on Xpu against the same run on Cpu (f32), and with f16 latents
//! on both devices against the f32 run: SD 1.5's and SD 2.1's (v-prediction) pipeline configs
//! under every user-facing name, 20 steps, a 1×4×24×20 latent, a fake model `0.1·x + sin(t/100)`
//! evaluated in the latents' dtype, seeded noise; plus the img2img noising at strength 0.5.
//!
//! Tolerances (relative to the result's largest magnitude; measured worst case in brackets):
//! Xpu f32 against Cpu f32 1e-5 [5e-7] (the elementwise kernels may fuse or order f32
//! operations differently); f16 latents against the f32 run 1e-2 [3e-3]: each step widens to
//! f32, updates, and rounds the sample to f16 (2⁻¹¹ relative), the f16 model output is rounded
//! too, and 20 such roundings feed back through the steps; Xpu f16 against Cpu f16 1e-3 [0]
//! (the same f32 updates; an f16 rounding may still fall the other way).

use crate::common;
use common::{assert_close, devices, values};
use xpu::schedulers::{SchedulerFile, SchedulerName};
use xpu::{DType, Device, Tensor};

const SHAPE: [usize; 4] = [1, 4, 24, 20];
const STEPS: usize = 20;

fn file(config: &str) -> SchedulerFile {
    let dir = common::repo_root()
        .join("tests/fixtures/schedulers")
        .join(config);
    SchedulerFile::read(dir.join("scheduler_config.json")).unwrap()
}

/// The final sample and the noised image of one run, as f64 values.
struct Outcome {
    fin: Vec<f64>,
    noised: Vec<f64>,
}

fn run(config: &str, name: SchedulerName, device: Device, dtype: DType) -> Outcome {
    let on = |t: Tensor| t.to_dtype(dtype).unwrap().to(device).unwrap();
    let latent = on(Tensor::randn(&SHAPE, DType::F32, Device::Cpu, 7).unwrap());
    let mut bank_shape = vec![STEPS];
    bank_shape.extend(SHAPE);
    let bank = on(Tensor::randn(&bank_shape, DType::F32, Device::Cpu, 8).unwrap());
    let mut s = file(config).scheduler_for(name, STEPS).unwrap();
    let mut x = latent.mul_scalar(s.init_noise_sigma()).unwrap();
    for i in 0..s.timesteps().len() {
        let t = s.timesteps()[i];
        let input = s.scale_model_input(&x, i).unwrap();
        let out = input.affine(0.1, (t / 100.0).sin()).unwrap();
        let noise = s
            .needs_noise(i)
            .then(|| bank.narrow(0, i, 1).unwrap().reshape(&SHAPE).unwrap());
        x = s.step(&out, i, &x, noise.as_ref()).unwrap();
        assert_eq!((x.dtype(), x.device()), (dtype, device), "{name} step {i}");
    }
    let begin = s.begin_img2img(0.5).unwrap();
    let noise = bank.narrow(0, 0, 1).unwrap().reshape(&SHAPE).unwrap();
    let noised = s.add_noise(&latent, &noise, begin).unwrap();
    assert_eq!(noised.dtype(), dtype);
    Outcome {
        fin: values(&x),
        noised: values(&noised),
    }
}

fn close(what: &str, got: &[f64], want: &[f64], tol: f64) {
    let scale = want.iter().fold(1e-30f64, |m, x| m.max(x.abs()));
    assert_close(what, got, want, tol * scale, tol);
}

#[test]
fn xpu_runs_match_cpu_runs_in_f32_and_f16() {
    let devices = devices();
    for config in ["sd15_hub", "sd21_hub"] {
        for name in SchedulerName::ALL {
            let reference = run(config, name, Device::Cpu, DType::F32);
            for &device in &devices {
                let tag = format!("{config} {name} {device:?}");
                if device != Device::Cpu {
                    let got = run(config, name, device, DType::F32);
                    close(&format!("{tag} f32"), &got.fin, &reference.fin, 1e-5);
                    close(
                        &format!("{tag} f32 noised"),
                        &got.noised,
                        &reference.noised,
                        1e-5,
                    );
                }
                let half = run(config, name, device, DType::F16);
                close(&format!("{tag} f16"), &half.fin, &reference.fin, 1e-2);
                close(
                    &format!("{tag} f16 noised"),
                    &half.noised,
                    &reference.noised,
                    1e-2,
                );
                if device != Device::Cpu {
                    let cpu_half = run(config, name, Device::Cpu, DType::F16);
                    close(
                        &format!("{tag} f16 vs Cpu f16"),
                        &half.fin,
                        &cpu_half.fin,
                        2e-2,
                    );
                }
            }
        }
    }
}

#[test]
fn a_step_keeps_the_latents_on_their_device() {
    for device in devices() {
        let x = Tensor::randn(&SHAPE, DType::F32, device, 1).unwrap();
        let mut s = SchedulerFile::stable_diffusion()
            .scheduler_for(SchedulerName::DpmPlusPlus2MKarras, 4)
            .unwrap();
        let y = s.step(&x.mul_scalar(0.1).unwrap(), 0, &x, None).unwrap();
        assert_eq!(y.device(), device);
        // A model output on another device is an error, not a silent copy.
        if device != Device::Cpu {
            let cpu = x.to(Device::Cpu).unwrap();
            assert!(s.step(&cpu, 1, &y, None).is_err());
        }
    }
}
