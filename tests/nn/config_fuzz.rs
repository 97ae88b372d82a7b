//! Malformed UNet and scheduler configs never panic: seeded mutations of the fixtures' real
//! `config.json` files (every key set to odd values: negative, huge, fractional, wrong types,
//! nested or empty lists, null) give either an `Error` or a config whose parameter list can be
//! built, and for small enough configs a model that runs one forward on the Cpu or errors.

use crate::common;
use common::rng::Rng;
use serde_json::{json, Map, Value};
use xpu::models::unet::{UNet2DConditionModel, UNetConfig};
use xpu::schedulers::{DdimScheduler, EulerDiscreteScheduler, SchedulerConfig};
use xpu::{DType, Device, Tensor};

/// Odd values for a key that held `v`.
fn odd_values(v: &Value) -> Vec<Value> {
    let mut out = vec![
        Value::Null,
        json!(0),
        json!(-1),
        json!(1),
        json!(3),
        json!(2.5),
        json!(1e300),
        json!(u64::MAX),
        json!("x"),
        json!(true),
        json!([]),
        json!([[1, 2], [3]]),
        json!({"a": 1}),
    ];
    if let Value::Array(a) = v {
        let mut shorter = a.clone();
        shorter.pop();
        out.push(Value::Array(shorter));
        let mut longer = a.clone();
        longer.extend(a.iter().cloned());
        out.push(Value::Array(longer));
        out.push(Value::Array(a.iter().map(|_| json!(0)).collect()));
    }
    out
}

fn fixture_map(path: &str) -> Map<String, Value> {
    let text = std::fs::read_to_string(common::repo_root().join(path)).unwrap();
    match serde_json::from_str(&text).unwrap() {
        Value::Object(m) => m,
        _ => panic!("{path}: not an object"),
    }
}

/// Builds the parameter list of an accepted config; runs a tiny one.
fn exercise(c: &UNetConfig) {
    let params = UNet2DConditionModel::parameter_shapes(c).unwrap();
    let total = params
        .iter()
        .map(|(_, s)| s.iter().fold(1usize, |a, &d| a.saturating_mul(d)))
        .fold(0usize, usize::saturating_add);
    if total > 2_000_000 {
        return;
    }
    let Ok(unet) = UNet2DConditionModel::random(c, DType::F32, Device::Cpu, 1) else {
        return;
    };
    let cpu = Device::Cpu;
    let sample = Tensor::zeros(&[1, c.in_channels, 8, 8], DType::F32, cpu).unwrap();
    let ehs = Tensor::zeros(&[1, 3, c.encoder_states_dim()], DType::F32, cpu).unwrap();
    let t = Tensor::from_vec(vec![10f32], &[1], cpu).unwrap();
    // Models that need extra conditions answer with an error; others run.
    let _ = unet.forward(&sample, &t, &ehs);
}

#[test]
fn mutated_unet_configs_give_errors_or_working_models() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let fixtures = [
        "tests/fixtures/unet_sd1/config.json",
        "tests/fixtures/unet_sd2/config.json",
        "tests/fixtures/unet_sdxl/config.json",
        "tests/fixtures/unet_embeds/config.json",
        "tests/fixtures/unet_sproj/config.json",
    ];
    let mut accepted = 0;
    let mut runs = 0;
    for path in fixtures {
        let base = fixture_map(path);
        let keys: Vec<String> = base.keys().cloned().collect();
        for _ in 0..300 {
            let mut map = base.clone();
            // One to three keys changed at once.
            for _ in 0..=rng.below(3) {
                let key = &keys[rng.below(keys.len())];
                let choices = odd_values(&base[key]);
                map.insert(key.clone(), choices[rng.below(choices.len())].clone());
            }
            let text = Value::Object(map).to_string();
            runs += 1;
            if let Ok(c) = UNetConfig::from_json_str(&text) {
                accepted += 1;
                exercise(&c);
            }
        }
    }
    // Both outcomes occur (the mutations are neither all fatal nor all harmless).
    assert!(
        accepted > 0 && accepted < runs,
        "{accepted} of {runs} accepted"
    );
}

#[test]
fn mutated_scheduler_configs_give_errors_or_working_schedulers() {
    let mut rng = Rng(0x5851_f42d_4c95_7f2d);
    let dir = common::repo_root().join("tests/fixtures/schedulers");
    let mut runs = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path().join("scheduler_config.json");
        if !path.is_file() {
            continue;
        }
        let base = fixture_map(
            path.strip_prefix(common::repo_root())
                .unwrap()
                .to_str()
                .unwrap(),
        );
        let keys: Vec<String> = base.keys().cloned().collect();
        for _ in 0..200 {
            let mut map = base.clone();
            let key = &keys[rng.below(keys.len())];
            let choices = odd_values(&base[key]);
            map.insert(key.clone(), choices[rng.below(choices.len())].clone());
            let text = Value::Object(map).to_string();
            runs += 1;
            for defaults in [
                SchedulerConfig::ddim_defaults(),
                SchedulerConfig::euler_defaults(),
            ] {
                if let Ok(c) = SchedulerConfig::from_json_str(&text, defaults) {
                    for steps in [1, 7] {
                        let _ = DdimScheduler::new(c.clone(), steps);
                        let _ = EulerDiscreteScheduler::new(c.clone(), steps);
                    }
                }
            }
        }
    }
    assert!(runs > 0);
}
