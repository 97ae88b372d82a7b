//! Seeded mutations of a real diffusers UNet folder (the SD 1.x fixture): bytes of the
//! safetensors header replaced by JSON-significant characters and digits, and values of
//! `config.json` replaced by other JSON values. Every outcome must be a model or an
//! `xpu::Error`: no panic, no abort, no runaway allocation (the process would be killed).

use crate::common;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;

use common::rng::Rng;
use serde_json::Value;
use xpu::models::unet::{UNet2DConditionModel, UNetConfig};
use xpu::nn::WeightStore;
use xpu::{DType, Device};

fn fixture_dir() -> PathBuf {
    common::repo_root().join("tests/fixtures/unet_sd1")
}

/// A scratch folder unique to this process and test, removed when dropped.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("xpu-fuzz-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn mutated_safetensors_headers_never_panic() {
    let full = std::fs::read(fixture_dir().join("diffusion_pytorch_model.safetensors")).unwrap();
    let config = UNetConfig::from_file(fixture_dir().join("config.json")).unwrap();
    let header = u64::from_le_bytes(full[..8].try_into().unwrap()) as usize;
    let dir = Scratch::new("header");
    let path = dir.0.join("w.safetensors");
    let alphabet = b"0123456789{}[]\":,-.eE +FUIB1684_";
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let (mut opened, mut loaded) = (0, 0);
    for case in 0..1000 {
        let mut bytes = full.clone();
        for _ in 0..1 + rng.below(3) {
            let at = rng.below(8 + header);
            bytes[at] = alphabet[rng.below(alphabet.len())];
        }
        std::fs::write(&path, &bytes).unwrap();
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            let store = WeightStore::open(&path).is_ok();
            let model =
                UNet2DConditionModel::from_safetensors(&config, &path, DType::F32, Device::Cpu)
                    .is_ok();
            (store, model)
        }));
        match outcome {
            Ok((store, model)) => {
                opened += usize::from(store);
                loaded += usize::from(model);
            }
            Err(_) => panic!("case {case} panicked"),
        }
    }
    eprintln!("{opened} of 1000 mutated files opened, {loaded} loaded");
    // Most single-byte changes break the header; some (a digit inside a name) still load.
    assert!(opened < 1000, "every mutation opened ({opened})");
    assert!(loaded <= opened, "{loaded} loaded of {opened} opened");
}

/// A number near `n`: one more or less, doubled or halved.
fn near(rng: &mut Rng, n: i64) -> Value {
    let v = [n + 1, n - 1, n * 2, n / 2][rng.below(4)];
    serde_json::json!(v)
}

/// A JSON value unlike `old`: half the time a nearby one (a number or one element of a list of
/// numbers moved a little, which a config check must catch by arithmetic), else another type,
/// an extreme number, or an odd string or list.
fn other_value(rng: &mut Rng, old: &Value) -> Value {
    if rng.below(2) == 0 {
        match old {
            Value::Number(n) if n.as_i64().is_some() => return near(rng, n.as_i64().unwrap()),
            Value::Array(items) if !items.is_empty() && items.iter().all(|v| v.is_i64()) => {
                let mut items = items.clone();
                let i = rng.below(items.len());
                items[i] = near(rng, items[i].as_i64().unwrap());
                return Value::Array(items);
            }
            _ => {}
        }
    }
    let choices = [
        Value::Null,
        Value::Bool(true),
        serde_json::json!(0),
        serde_json::json!(-1),
        serde_json::json!(1),
        serde_json::json!(3),
        serde_json::json!(1e30),
        serde_json::json!(u64::MAX),
        serde_json::json!(0.5),
        serde_json::json!("silu"),
        serde_json::json!("nonsense"),
        serde_json::json!([]),
        serde_json::json!([0]),
        serde_json::json!([32, 64, 0]),
        serde_json::json!([1, 2, 3, 4, 5, 6, 7, 8]),
        serde_json::json!({}),
    ];
    loop {
        let v = choices[rng.below(choices.len())].clone();
        if &v != old {
            return v;
        }
    }
}

#[test]
fn mutated_configs_never_panic() {
    let text = std::fs::read_to_string(fixture_dir().join("config.json")).unwrap();
    let base: serde_json::Map<String, Value> = serde_json::from_str(&text).unwrap();
    let keys: Vec<String> = base.keys().cloned().collect();
    let weights = fixture_dir().join("diffusion_pytorch_model.safetensors");
    let dir = Scratch::new("config");
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let mut parsed = 0;
    for case in 0..1000 {
        let mut json = base.clone();
        for _ in 0..1 + rng.below(2) {
            let key = &keys[rng.below(keys.len())];
            let v = other_value(&mut rng, &json[key]);
            json.insert(key.clone(), v);
        }
        let text = serde_json::to_string(&json).unwrap();
        let outcome = catch_unwind(AssertUnwindSafe(|| {
            let Ok(config) = UNetConfig::from_json_str(&text) else {
                return false;
            };
            // A config that parses must build or fail cleanly: with random weights (at a
            // small size only) and against the fixture's weights.
            let small = config.block_out_channels.iter().all(|&c| c <= 256);
            if small {
                let _ = UNet2DConditionModel::random(&config, DType::F32, Device::Cpu, 1);
            }
            let _ =
                UNet2DConditionModel::from_safetensors(&config, &weights, DType::F32, Device::Cpu);
            true
        }));
        match outcome {
            Ok(ok) => parsed += usize::from(ok),
            Err(_) => {
                let _ = std::fs::write(dir.0.join(format!("case{case}.json")), &text);
                panic!("case {case} panicked: {text}");
            }
        }
    }
    eprintln!("{parsed} of 1000 mutated configs parsed");
    assert!(parsed < 1000, "every mutated config parsed");
}
