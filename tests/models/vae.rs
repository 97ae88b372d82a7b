//! `xpu::models::vae::AutoencoderKl` against diffusers' `AutoencoderKL` (fixtures written by
//! tests/fixtures/make_vae_fixtures.py): decoding (odd latent sizes, a batch of 2), encoding
//! (mean, clamped log-variance, std, a sample from given noise; an image whose sides are not
//! multiples of 8), tiled decoding and encoding with diffusers' `enable_tiling()`; then the Xpu
//! against the Cpu, and 16-bit dtypes against f32.
//!
//! Tolerances (max |error| over max |reference|): f32 3e-5, on the Cpu against diffusers and on
//! the Xpu against the Cpu (measured: up to 4e-6; accumulation order only); f16 5e-3 and bf16
//! 4e-2 against diffusers' f32 on either device (measured: up to 1.7e-3 and 2e-2; every
//! activation is rounded to 11 or 8 significant bits through ~20 layers).

use crate::common;
use std::path::PathBuf;

use xpu::models::vae::{AutoencoderKl, DiagonalGaussian, VaeConfig, VaeTiling};
use xpu::nn::WeightStore;
use xpu::{DType, Device, MemoryFormat, Tensor};

const FIXTURES: [&str; 4] = ["g32", "l2", "shift", "noattn"];

fn fixture_dir(name: &str) -> PathBuf {
    common::repo_root().join("tests/fixtures/vae").join(name)
}

/// A fixture's recorded inputs and outputs.
struct Io(WeightStore);

impl Io {
    fn open(name: &str) -> Io {
        Io(WeightStore::open(fixture_dir(name).join("io.safetensors")).unwrap())
    }

    fn get(&self, key: &str, dtype: DType, device: Device) -> Tensor {
        self.0.tensor(key, dtype, device).unwrap()
    }

    fn f32(&self, key: &str) -> Tensor {
        self.get(key, DType::F32, Device::Cpu)
    }
}

fn load(name: &str, dtype: DType, device: Device) -> AutoencoderKl {
    AutoencoderKl::from_pretrained(fixture_dir(name), dtype, device).unwrap()
}

/// Asserts `max |got - want| <= tol * max |want|` (shapes equal).
fn assert_rel(what: &str, got: &Tensor, want: &Tensor, tol: f64) {
    assert_eq!(got.shape(), want.shape(), "{what}: shape");
    let (g, w) = (common::values(got), common::values(want));
    let scale = w.iter().fold(0f64, |m, x| m.max(x.abs()));
    let err = g
        .iter()
        .zip(&w)
        .fold(0f64, |m, (a, b)| m.max((a - b).abs()));
    assert!(g.iter().all(|x| x.is_finite()), "{what}: non-finite output");
    eprintln!("{what}: max abs error {:.2e} of max |y| {scale:.3}", err);
    assert!(
        err <= tol * scale,
        "{what}: max abs error {err:.3e} > {tol:e} * max |y| {scale:.3e}"
    );
}

/// Everything the fixtures record, computed by `vae` (inputs in its dtype, on its device).
struct Outputs {
    decoded: Tensor,
    posterior: DiagonalGaussian,
    sample: Tensor,
    odd: DiagonalGaussian,
    tiled_decoded: Tensor,
    tiled_posterior: DiagonalGaussian,
}

fn run(vae: &AutoencoderKl, io: &Io) -> Outputs {
    let (dt, dev) = (vae.dtype(), vae.device());
    let x = |k: &str| io.get(k, dt, dev);
    let posterior = vae.encode(&x("encode.image")).unwrap();
    let sample = posterior.sample(&x("encode.noise")).unwrap();
    Outputs {
        decoded: vae.decode(&x("decode.latents")).unwrap(),
        sample,
        posterior,
        odd: vae.encode(&x("odd.image")).unwrap(),
        tiled_decoded: vae
            .decode_with(&x("tiled_decode.latents"), VaeTiling::Auto)
            .unwrap(),
        tiled_posterior: vae
            .encode_with(&x("tiled_encode.image"), VaeTiling::Auto)
            .unwrap(),
    }
}

/// Compares every output of `got` with diffusers' (`io`) or with `want` where given.
fn compare(what: &str, got: &Outputs, io: &Io, want: Option<&Outputs>, tol: f64) {
    let pairs: Vec<(&str, &Tensor, Tensor)> = vec![
        ("decode", &got.decoded, io.f32("decode.image")),
        ("encode mean", got.posterior.mean(), io.f32("encode.mean")),
        (
            "encode logvar",
            got.posterior.logvar(),
            io.f32("encode.logvar"),
        ),
        ("encode std", got.posterior.std(), io.f32("encode.std")),
        ("encode sample", &got.sample, io.f32("encode.sample")),
        ("odd mean", got.odd.mean(), io.f32("odd.mean")),
        ("odd logvar", got.odd.logvar(), io.f32("odd.logvar")),
        (
            "tiled decode",
            &got.tiled_decoded,
            io.f32("tiled_decode.image"),
        ),
        (
            "tiled mean",
            got.tiled_posterior.mean(),
            io.f32("tiled_encode.mean"),
        ),
        (
            "tiled logvar",
            got.tiled_posterior.logvar(),
            io.f32("tiled_encode.logvar"),
        ),
    ];
    for (i, (name, g, reference)) in pairs.into_iter().enumerate() {
        let w = match want {
            None => reference,
            Some(o) => [
                &o.decoded,
                o.posterior.mean(),
                o.posterior.logvar(),
                o.posterior.std(),
                &o.sample,
                o.odd.mean(),
                o.odd.logvar(),
                &o.tiled_decoded,
                o.tiled_posterior.mean(),
                o.tiled_posterior.logvar(),
            ][i]
                .to(Device::Cpu)
                .unwrap()
                .to_dtype(DType::F32)
                .unwrap(),
        };
        assert_rel(&format!("{what} {name}"), g, &w, tol);
    }
}

fn tolerance(dtype: DType) -> f64 {
    match dtype {
        DType::F32 => 3e-5,
        DType::F16 => 5e-3,
        _ => 4e-2,
    }
}

#[test]
fn cpu_f32_matches_diffusers() {
    for name in FIXTURES {
        let io = Io::open(name);
        let vae = load(name, DType::F32, Device::Cpu);
        compare(name, &run(&vae, &io), &io, None, tolerance(DType::F32));
    }
}

#[test]
fn sixteen_bit_dtypes_match_f32_on_every_device() {
    for device in common::devices() {
        for name in FIXTURES {
            let io = Io::open(name);
            for dtype in [DType::F16, DType::BF16] {
                let vae = load(name, dtype, device);
                let what = format!("{name} {device} {dtype}");
                compare(&what, &run(&vae, &io), &io, None, tolerance(dtype));
            }
        }
    }
}

#[test]
fn xpu_f32_matches_cpu() {
    if !common::xpu() {
        return;
    }
    for name in FIXTURES {
        let io = Io::open(name);
        let cpu = run(&load(name, DType::F32, Device::Cpu), &io);
        let xpu = run(&load(name, DType::F32, Device::Xpu), &io);
        compare(
            &format!("{name} xpu"),
            &xpu,
            &io,
            Some(&cpu),
            tolerance(DType::F32),
        );
    }
}

/// SD's 512-channel attention runs on the Xpu in value chunks of 128: a 256-channel mid block
/// (two chunks) against the Cpu's single call.
#[test]
fn xpu_wide_attention_matches_cpu() {
    if !common::xpu() {
        return;
    }
    let config = VaeConfig {
        block_out_channels: vec![32, 256],
        layers_per_block: 1,
        sample_size: 32,
        ..VaeConfig::sd()
    };
    let config = VaeConfig {
        down_block_types: config.down_block_types[..2].to_vec(),
        up_block_types: config.up_block_types[..2].to_vec(),
        ..config
    };
    let cpu = AutoencoderKl::random(&config, DType::F32, Device::Cpu, 5).unwrap();
    let xpu = cpu.to(Device::Xpu).unwrap();
    let z = Tensor::randn(&[1, 4, 6, 5], DType::F32, Device::Cpu, 6).unwrap();
    let want = cpu.decode(&z).unwrap();
    let got = xpu.decode(&z.to(Device::Xpu).unwrap()).unwrap();
    assert_rel("wide attention decode", &got, &want, tolerance(DType::F32));
    let image = Tensor::randn(&[1, 3, 12, 10], DType::F32, Device::Cpu, 7).unwrap();
    let want = cpu.encode(&image).unwrap();
    let got = xpu.encode(&image.to(Device::Xpu).unwrap()).unwrap();
    assert_rel(
        "wide attention mean",
        got.mean(),
        want.mean(),
        tolerance(DType::F32),
    );
}

/// Auto tiles only past the tile size (then equals On); Off never tiles; tiled and untiled
/// decodes differ near the seams, so the choice is visible.
#[test]
fn tiling_choice_follows_the_tile_size() {
    let vae = load("g32", DType::F32, Device::Cpu);
    let io = Io::open("g32");
    let small = io.f32("decode.latents");
    let auto = vae.decode_with(&small, VaeTiling::Auto).unwrap();
    let plain = vae.decode(&small).unwrap();
    assert_eq!(common::values(&auto), common::values(&plain));
    let large = io.f32("tiled_decode.latents");
    let on = vae.decode_with(&large, VaeTiling::On).unwrap();
    let auto = vae.decode_with(&large, VaeTiling::Auto).unwrap();
    let off = vae.decode_with(&large, VaeTiling::Off).unwrap();
    assert_eq!(common::values(&on), common::values(&auto));
    assert_eq!(off.shape(), on.shape());
    assert_ne!(common::values(&off), common::values(&on));
    // A small input decoded tile by tile is one tile: the untiled result.
    let one = vae.decode_tiled(&small).unwrap();
    assert_rel("one tile", &one, &plain, 1e-6);
    let image = io.f32("tiled_encode.image");
    let on = vae.encode_with(&image, VaeTiling::On).unwrap();
    let off = vae.encode_with(&image, VaeTiling::Off).unwrap();
    assert_eq!(on.mean().shape(), off.mean().shape());
    assert_ne!(common::values(on.mean()), common::values(off.mean()));
}

/// Latents of any positive size and any batch decode to `f` times their size; channels-last
/// inputs give channels-last outputs with the same values.
#[test]
fn odd_sizes_batches_and_memory_formats() {
    let vae = load("l2", DType::F32, Device::Cpu);
    for (b, h, w) in [(1, 1, 1), (3, 5, 7), (1, 2, 9)] {
        let z = Tensor::randn(&[b, 4, h, w], DType::F32, Device::Cpu, 11).unwrap();
        let y = vae.decode(&z).unwrap();
        assert_eq!(y.shape(), &[b, 3, 4 * h, 4 * w]);
        let each = vae.decode(&z.narrow(0, b - 1, 1).unwrap()).unwrap();
        let last = y.narrow(0, b - 1, 1).unwrap();
        assert_rel("batch item", &last, &each, 1e-5);
        let cl = vae
            .decode(&z.to_memory_format(MemoryFormat::ChannelsLast).unwrap())
            .unwrap();
        assert_eq!(cl.memory_format(), MemoryFormat::ChannelsLast);
        assert_rel("channels-last", &cl, &y, 1e-6);
    }
    let image = Tensor::randn(&[2, 3, 4, 13], DType::F32, Device::Cpu, 12).unwrap();
    assert_eq!(vae.encode(&image).unwrap().mean().shape(), &[2, 4, 1, 3]);
}

/// `scale_latents` / `unscale_latents` are the pipelines' formulas (with and without
/// `shift_factor`), and `decode_latents` decodes the unscaled latents.
#[test]
fn latent_scaling_is_the_pipelines() {
    for (name, scaling, shift) in [("g32", 0.18215, 0.0), ("shift", 1.5305, 0.0609)] {
        let vae = load(name, DType::F32, Device::Cpu);
        assert_eq!(vae.config().scaling_factor, scaling);
        assert_eq!(vae.config().shift_factor.unwrap_or(0.0), shift);
        let z = Tensor::randn(&[1, 4, 3, 2], DType::F32, Device::Cpu, 3).unwrap();
        let zs = common::values(&z);
        let scaled = common::values(&vae.scale_latents(&z).unwrap());
        let unscaled = common::values(&vae.unscale_latents(&z).unwrap());
        for i in 0..zs.len() {
            let x = zs[i] as f32;
            let want_s = (x - shift as f32) * scaling as f32;
            let want_u = x / scaling as f32 + shift as f32;
            assert!((scaled[i] as f32 - want_s).abs() <= 1e-6 * want_s.abs().max(1.0));
            assert!((unscaled[i] as f32 - want_u).abs() <= 1e-6 * want_u.abs().max(1.0));
        }
        let back = vae
            .unscale_latents(&vae.scale_latents(&z).unwrap())
            .unwrap();
        assert_rel("round trip", &back, &z, 1e-6);
        let direct = vae.decode(&vae.unscale_latents(&z).unwrap()).unwrap();
        let piped = vae.decode_latents(&z, VaeTiling::Auto).unwrap();
        assert_eq!(common::values(&direct), common::values(&piped));
    }
}

/// Random weights: the same seed gives the same model on every device and after moves and
/// conversions; another seed gives another model.
#[test]
fn random_models_are_seeded_and_move_between_devices() {
    let config = VaeConfig::from_file(fixture_dir("l2").join("config.json")).unwrap();
    let a = AutoencoderKl::random(&config, DType::F32, Device::Cpu, 1).unwrap();
    let b = AutoencoderKl::random(&config, DType::F32, Device::Cpu, 1).unwrap();
    let c = AutoencoderKl::random(&config, DType::F32, Device::Cpu, 2).unwrap();
    let z = Tensor::randn(&[1, 4, 3, 3], DType::F32, Device::Cpu, 9).unwrap();
    let ya = a.decode(&z).unwrap();
    assert_eq!(common::values(&ya), common::values(&b.decode(&z).unwrap()));
    assert_ne!(common::values(&ya), common::values(&c.decode(&z).unwrap()));
    let round = a
        .to_dtype(DType::BF16)
        .unwrap()
        .to_dtype(DType::F32)
        .unwrap();
    assert_rel("bf16 round trip", &round.decode(&z).unwrap(), &ya, 5e-2);
    for device in common::devices() {
        let d = AutoencoderKl::random(&config, DType::F32, device, 1).unwrap();
        let y = d.decode(&z.to(device).unwrap()).unwrap();
        assert_rel(
            &format!("random on {device}"),
            &y,
            &ya,
            tolerance(DType::F32),
        );
        let moved = d.to(Device::Cpu).unwrap();
        assert_eq!(moved.device(), Device::Cpu);
        assert_rel(
            "moved back",
            &moved.decode(&z).unwrap(),
            &ya,
            tolerance(DType::F32),
        );
    }
}
