//! What the schedulers refuse, each with an error (never a panic) that says what was wrong:
//! unknown classes and names (listing the supported ones), config values a class cannot use,
//! step counts and strengths out of range, step indices past the end or out of order for the
//! multistep schedulers, noise missing or unasked for, operands of the wrong shape or dtype.

use xpu::schedulers::{
    build, DpmSolverMultistepScheduler, LcmScheduler, PndmScheduler, Scheduler, SchedulerConfig,
    SchedulerFile, SchedulerKind, SchedulerName,
};
use xpu::{DType, Device, Error, Tensor};

fn file(text: &str) -> SchedulerFile {
    SchedulerFile::parse(text).unwrap()
}

fn sample() -> Tensor {
    Tensor::randn(&[1, 4, 3, 5], DType::F32, Device::Cpu, 3).unwrap()
}

#[test]
fn unknown_classes_and_names_are_named_with_the_supported_ones() {
    let err = file(r#"{"_class_name": "HeunDiscreteScheduler"}"#)
        .scheduler(4)
        .err()
        .unwrap();
    let msg = err.to_string();
    assert!(
        matches!(&err, Error::Config { key, .. } if key == "_class_name"),
        "{err}"
    );
    assert!(msg.contains("HeunDiscreteScheduler"), "{msg}");
    for kind in SchedulerKind::ALL {
        assert!(msg.contains(kind.class_name()), "{msg}");
    }
    let msg = file("{}").scheduler(4).err().unwrap().to_string();
    assert!(
        msg.contains("names no scheduler class") && msg.contains("LCMScheduler"),
        "{msg}"
    );
    let msg = SchedulerFile::stable_diffusion()
        .scheduler_named("dpm++2m-sde", 4)
        .err()
        .unwrap()
        .to_string();
    assert!(msg.contains("`dpm++2m-sde`"), "{msg}");
    for name in SchedulerName::ALL {
        assert!(msg.contains(name.as_str()), "{msg}");
        assert_eq!(name.as_str().parse::<SchedulerName>().unwrap(), name);
    }
    assert!(SchedulerKind::from_class_name("pndm").is_err());
    // Not JSON, or not an object: a file error.
    for text in ["", "[1]", "{\"a\": }"] {
        assert!(
            matches!(SchedulerFile::parse(text), Err(Error::InvalidFile { .. })),
            "{text}"
        );
    }
    let missing = SchedulerFile::read("/nonexistent/scheduler_config.json");
    assert!(matches!(missing, Err(Error::Io { .. })));
}

#[test]
fn a_class_judges_only_the_keys_it_takes() {
    // DDIM takes `thresholding`; Euler does not (diffusers' from_config drops it).
    let f = file(r#"{"_class_name": "DDIMScheduler", "thresholding": true}"#);
    let err = f.scheduler(4).err().unwrap();
    assert!(
        matches!(&err, Error::Config { key, .. } if key == "thresholding"),
        "{err}"
    );
    assert!(f.scheduler_named("euler", 4).is_ok());
    // A name's overrides replace the file's values: dpm++2m runs DPM-Solver++ of order 2.
    let sde = file(
        r#"{"_class_name": "DPMSolverMultistepScheduler", "algorithm_type": "sde-dpmsolver++",
            "solver_order": 3, "use_karras_sigmas": true}"#,
    );
    assert!(sde.scheduler(4).is_err());
    let plain = sde.scheduler_named("dpm++2m", 4).unwrap();
    let karras = sde.scheduler_named("dpm++2m-karras", 4).unwrap();
    assert_ne!(plain.sigmas(), karras.sigmas());
    // Values a class takes but cannot use.
    for (json, kind, key) in [
        (
            r#"{"solver_order": 4}"#,
            SchedulerKind::DpmSolverMultistep,
            "scheduler config",
        ),
        (
            r#"{"original_inference_steps": 0}"#,
            SchedulerKind::Lcm,
            "scheduler config",
        ),
        (
            r#"{"original_inference_steps": 2000}"#,
            SchedulerKind::Lcm,
            "scheduler config",
        ),
        (
            r#"{"sigma_min": -1.0}"#,
            SchedulerKind::EulerDiscrete,
            "scheduler config",
        ),
        (
            r#"{"prediction_type": "sample"}"#,
            SchedulerKind::Pndm,
            "prediction_type",
        ),
        (
            r#"{"prediction_type": "sample"}"#,
            SchedulerKind::EulerAncestral,
            "prediction_type",
        ),
    ] {
        let f = file(json);
        let err = f
            .config_for(kind)
            .and_then(|c| build(kind, c, 4).map(|_| ()))
            .err()
            .unwrap_or_else(|| panic!("{json} for {kind}: accepted"));
        assert!(err.to_string().contains(key), "{json}: {err}");
    }
}

#[test]
fn step_counts_and_strengths_out_of_range_are_errors() {
    let sd = SchedulerConfig::stable_diffusion();
    for kind in SchedulerKind::ALL {
        assert!(build(kind, sd.clone(), 0).is_err(), "{kind} 0 steps");
        assert!(build(kind, sd.clone(), 1001).is_err(), "{kind} 1001 steps");
    }
    // LCM: at most original_inference_steps; PNDM with Runge-Kutta steps: at least 4.
    assert!(LcmScheduler::new(sd.clone(), 51).is_err());
    assert!(LcmScheduler::with_strength(sd.clone(), 4, 1.5).is_err());
    let prk = SchedulerConfig {
        skip_prk_steps: false,
        ..sd.clone()
    };
    assert!(PndmScheduler::new(prk.clone(), 3).is_err());
    assert_eq!(PndmScheduler::new(prk, 4).unwrap().timesteps().len(), 13);
    // Trailing spacing where diffusers' NumPy arange gives one timestep too many.
    let trailing = SchedulerConfig {
        spacing: xpu::schedulers::TimestepSpacing::Trailing,
        ..sd.clone()
    };
    assert!(DpmSolverMultistepScheduler::new(trailing.clone(), 61).is_err());
    assert!(DpmSolverMultistepScheduler::new(trailing, 60).is_ok());
    let mut s = build(SchedulerKind::EulerDiscrete, sd, 4).unwrap();
    for strength in [-0.1, 1.01, f64::NAN, 0.2] {
        assert!(s.begin_img2img(strength).is_err(), "strength {strength}");
    }
    assert_eq!(s.begin_img2img(0.5).unwrap(), 2);
}

#[test]
fn indices_past_the_end_are_errors_for_every_scheduler() {
    let x = sample();
    for name in SchedulerName::ALL {
        let mut s = SchedulerFile::stable_diffusion()
            .scheduler_for(name, 4)
            .unwrap();
        let n = s.timesteps().len();
        let noise = s.needs_noise(n).then(|| x.clone());
        assert!(!s.needs_noise(n), "{name}");
        assert!(s.step(&x, n, &x, noise.as_ref()).is_err(), "{name} step");
        assert!(s.scale_model_input(&x, n).is_err(), "{name} scale");
        assert!(s.add_noise(&x, &x, n).is_err(), "{name} add_noise");
        assert!(s.set_begin_index(n).is_err(), "{name} begin");
    }
}

#[test]
fn multistep_schedulers_ask_for_steps_in_order() {
    let x = sample();
    for name in [SchedulerName::Pndm, SchedulerName::DpmPlusPlus2M] {
        let mut s = SchedulerFile::stable_diffusion()
            .scheduler_for(name, 10)
            .unwrap();
        s.step(&x, 0, &x, None).unwrap();
        let err = s.step(&x, 2, &x, None).err().unwrap();
        assert!(err.to_string().contains("expected step 1, got 2"), "{err}");
        s.step(&x, 1, &x, None).unwrap();
        // A fresh run from a begin index.
        s.set_begin_index(5).unwrap();
        assert!(s.step(&x, 0, &x, None).is_err());
        s.step(&x, 5, &x, None).unwrap();
    }
}

#[test]
fn noise_comes_exactly_where_asked_and_operands_must_fit() {
    let x = sample();
    let sd = SchedulerFile::stable_diffusion();
    let mut ancestral = sd.scheduler_for(SchedulerName::EulerAncestral, 4).unwrap();
    let err = ancestral.step(&x, 0, &x, None).err().unwrap();
    assert!(err.to_string().contains("adds noise"), "{err}");
    let mut ddim = sd.scheduler_for(SchedulerName::Ddim, 4).unwrap();
    assert!(ddim.step(&x, 0, &x, Some(&x)).is_err());
    let mut lcm = sd.scheduler_for(SchedulerName::Lcm, 4).unwrap();
    assert!(lcm.needs_noise(2) && !lcm.needs_noise(3));
    assert!(lcm.step(&x, 3, &x, Some(&x)).is_err());
    assert!(lcm.step(&x, 3, &x, None).is_ok());
    let small = Tensor::randn(&[1, 4, 3, 4], DType::F32, Device::Cpu, 1).unwrap();
    assert!(matches!(
        ancestral.step(&x, 0, &x, Some(&small)),
        Err(Error::ShapeMismatch { .. })
    ));
    assert!(matches!(
        ddim.step(&small, 0, &x, None),
        Err(Error::ShapeMismatch { .. })
    ));
    assert!(ddim.add_noise(&x, &small, 0).is_err());
    let ints = Tensor::zeros(x.shape(), DType::I32, Device::Cpu).unwrap();
    assert!(ddim.step(&ints, 0, &x, None).is_err());
    assert!(ddim.step(&x, 0, &ints, None).is_err());
}
