//! Stable Diffusion UNet on `xpu`: a diffusers `UNet2DConditionModel` on the Xpu or the Cpu.
//!
//! Parity mode (`--inputs FILE --output FILE`): one forward on `sample`, `timestep` and
//! `encoder_hidden_states` (and `text_embeds` and `time_ids` for SDXL-style `text_time` models,
//! `class_labels` for models with `num_class_embeds`) from a safetensors file, `out_sample`
//! written to `--output`.
//! Run mode (no `--inputs`): a denoising loop (DDIM or Euler discrete on the pipeline's own
//! noise schedule where its `scheduler/` config is at hand, classifier-free guidance
//! with batch 2) from seeded noise and seeded stand-in text embeddings (and stand-ins for an
//! inpainting or upscaling UNet's extra input channels); prints seconds per step,
//! the median, the device and peak memory, and writes the final latents (safetensors) plus a
//! PNG preview of the latent channels. Without `--unet` the SD 1.5 architecture (SD 2.1's or
//! SDXL base's with `--preset sd21` or `sdxl`) is built with seeded random weights, so it runs
//! on a fresh machine with no download.
//!
//! Every argument is checked before a model is loaded: numbers against the ranges they accept
//! (`examples/common/args.rs`), output paths for writability (the latents and their PNG
//! preview must be different files), and the memory one step needs against what the device
//! can give ([`xpu::memory_budget`]), so a request that cannot run fails in well under a second.
//! A step whose latents are no longer finite stops the run with an error (nothing is written).
//!
//! `cargo run --release --example sd_unet -- --help`

#[path = "../common/args.rs"]
mod args;
mod checks;
mod conditions;
mod io;
mod png;
mod schedule;

use std::path::PathBuf;
use std::time::Instant;

use clap::{Parser, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use schedule::{PredictionArg, SchedulerArg};
use xpu::models::unet::{AddedCond, ClassEmbedType, UNet2DConditionModel, UNetConfig};
use xpu::schedulers::Scheduler;
use xpu::{DType, Device, Tensor};

#[derive(Clone, Copy, Debug, ValueEnum)]
enum DeviceArg {
    Cpu,
    Xpu,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum DTypeArg {
    F32,
    F16,
    Bf16,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum Preset {
    /// SD 1.5 architecture at a small latent size and few steps (about a minute on 2 cores).
    Quick,
    /// SD 1.5 at its real size: 512×512 images (64×64 latents), 20 steps.
    Sd15,
    /// The SD 2.1 architecture (linear projections, per-level heads, a 1024-wide text encoder)
    /// at its real size: 768×768 images (96×96 latents), 20 steps.
    Sd21,
    /// The SDXL base architecture (2.6 B parameters; seeded random weights unless --unet) at
    /// its real size: 1024×1024 images (128×128 latents), 20 steps.
    Sdxl,
}

/// Stable Diffusion UNet denoising on xpu (diffusers-compatible).
#[derive(Parser, Debug)]
#[command(version, allow_negative_numbers = true)]
struct Args {
    /// A diffusers UNet folder (config.json + diffusion_pytorch_model.safetensors) or a
    /// pipeline folder holding unet/; without it the SD 1.5 architecture (SD 2.1's or SDXL
    /// base's with --preset sd21 or sdxl) is built with seeded random weights.
    #[arg(long)]
    unet: Option<PathBuf>,
    /// Weights variant to read from --unet (e.g. fp16: diffusion_pytorch_model.fp16.safetensors;
    /// default: the plain file, else the variant the folder has).
    #[arg(long, requires = "unet")]
    variant: Option<String>,
    /// Device (default: xpu when a hardware adapter exists, else cpu; a software Vulkan driver
    /// such as lavapipe is used only when asked for).
    #[arg(long, value_enum)]
    device: Option<DeviceArg>,
    /// Compute dtype of weights and activations.
    #[arg(long, value_enum, default_value = "f32")]
    dtype: DTypeArg,
    /// Parity mode: safetensors with `sample`, `timestep`, `encoder_hidden_states` (plus
    /// `text_embeds` and `time_ids` for SDXL-style models, `class_labels` for class-conditioned
    /// ones such as the x4 upscaler, optionally `timestep_cond` for LCM-style ones).
    #[arg(long)]
    inputs: Option<PathBuf>,
    /// Where to write `out_sample` (parity mode) or the final `latents` (run mode; a PNG preview
    /// is written beside it).
    #[arg(long)]
    output: Option<PathBuf>,
    /// Size preset for run mode (explicit --steps/--height/--width override it).
    #[arg(long, value_enum, default_value = "quick")]
    preset: Preset,
    /// Denoising steps (1 to 1000).
    #[arg(long, value_parser = args::steps)]
    steps: Option<usize>,
    /// Image height in pixels, a multiple of 8 (latents are height/8).
    #[arg(long, value_parser = args::image_side)]
    height: Option<usize>,
    /// Image width in pixels, a multiple of 8 (latents are width/8).
    #[arg(long, value_parser = args::image_side)]
    width: Option<usize>,
    /// Scheduler.
    #[arg(long, value_enum, default_value = "euler")]
    scheduler: SchedulerArg,
    /// A diffusers scheduler_config.json for the noise schedule (default: the pipeline's
    /// scheduler/ folder beside --unet's unet/, else Stable Diffusion 1.x's schedule).
    #[arg(long)]
    scheduler_config: Option<PathBuf>,
    /// What the model predicts, overriding the scheduler config (v-prediction for SD 2.x 768
    /// when only its unet/ folder is at hand).
    #[arg(long, value_enum)]
    prediction: Option<PredictionArg>,
    /// Classifier-free guidance scale (0 to 100).
    #[arg(long, default_value_t = 7.5, value_parser = args::guidance)]
    guidance: f64,
    /// Seed of the initial noise, the stand-in text embeddings and random weights.
    #[arg(long, default_value_t = 0, value_parser = args::seed)]
    seed: u64,
}

fn main() {
    if let Err(e) = run(Args::parse()) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run(args: Args) -> xpu::Result<()> {
    let device = match args.device {
        Some(DeviceArg::Cpu) => Device::Cpu,
        Some(DeviceArg::Xpu) => Device::Xpu,
        // A software adapter (lavapipe) is far slower than the Cpu kernels: default to a real GPU only.
        None => match xpu::xpu_adapter() {
            Ok(a) if a.device_type != "Cpu" => Device::Xpu,
            _ => Device::Cpu,
        },
    };
    let dtype = match args.dtype {
        DTypeArg::F32 => DType::F32,
        DTypeArg::F16 => DType::F16,
        DTypeArg::Bf16 => DType::BF16,
    };
    // Every argument is checked before the model is built (seconds to minutes).
    checks::paths(&args)?;
    let mode = match &args.inputs {
        Some(inputs) => {
            let output = args.output.clone().ok_or_else(|| {
                xpu::Error::invalid("sd_unet", "parity mode (--inputs) needs --output FILE")
            })?;
            Mode::Parity(io::read_tensors(inputs)?, inputs.clone(), output)
        }
        None => Mode::Run(Plan::new(&args)?),
    };
    let config = model_config(&args)?;
    let (batch, latents) = match &mode {
        Mode::Parity(file, ..) => match file.get("sample").map(|s| s.shape().to_vec()) {
            Some(s) if s.len() == 4 => (s[0], (s[2], s[3])),
            _ => (0, (0, 0)),
        },
        Mode::Run(plan) => (2, (plan.height / 8, plan.width / 8)),
    };
    if let Some(config) = &config {
        checks::memory(config, dtype, device, batch, latents)?;
    }
    let t = Instant::now();
    let unet = match &args.unet {
        Some(dir) => UNet2DConditionModel::from_pretrained_variant(
            dir,
            args.variant.as_deref(),
            dtype,
            device,
        )?,
        None => {
            UNet2DConditionModel::random(&preset_config(args.preset), dtype, device, args.seed)?
        }
    };
    eprintln!(
        "UNet {} on {device:?} in {dtype:?}: loaded in {:.1} s",
        args.unet.as_ref().map_or(
            format!(
                "{} architecture, seeded random weights",
                match args.preset {
                    Preset::Sdxl => "SDXL base",
                    Preset::Sd21 => "SD 2.1",
                    Preset::Quick | Preset::Sd15 => "SD 1.5",
                }
            ),
            |d| d.display().to_string()
        ),
        t.elapsed().as_secs_f64()
    );
    match mode {
        Mode::Parity(file, inputs, output) => parity(&unet, &file, &inputs, &output),
        Mode::Run(plan) => denoise(&unet, &args, plan),
    }
}

/// The architecture of each preset (seeded random weights).
fn preset_config(preset: Preset) -> UNetConfig {
    match preset {
        Preset::Sdxl => UNetConfig::sdxl(),
        Preset::Sd21 => UNetConfig::sd21(),
        Preset::Quick | Preset::Sd15 => UNetConfig::sd15(),
    }
}

/// The architecture the run will load, read before the weights: the preset's, or `--unet`'s
/// `config.json` (`None` when the folder has none: loading then reports what is missing).
fn model_config(args: &Args) -> xpu::Result<Option<UNetConfig>> {
    let Some(dir) = &args.unet else {
        return Ok(Some(preset_config(args.preset)));
    };
    let file = [dir.join("unet/config.json"), dir.join("config.json")]
        .into_iter()
        .find(|p| p.is_file());
    file.map(UNetConfig::from_file).transpose()
}

/// What the example does once the model is built.
enum Mode {
    /// One forward: the inputs file's tensors, its path, the output path.
    Parity(std::collections::HashMap<String, Tensor>, PathBuf, PathBuf),
    /// A denoising loop.
    Run(Plan),
}

/// The run mode's validated settings.
struct Plan {
    steps: usize,
    height: usize,
    width: usize,
    scheduler: Box<dyn Scheduler>,
}

impl Plan {
    fn new(args: &Args) -> xpu::Result<Plan> {
        let (steps, size) = match args.preset {
            Preset::Quick => (4, 192),
            Preset::Sd15 => (20, 512),
            Preset::Sd21 => (20, 768),
            Preset::Sdxl => (20, 1024),
        };
        // The parsers checked explicit values (args.rs); the presets' are in range.
        let steps = args.steps.unwrap_or(steps);
        let (height, width) = (args.height.unwrap_or(size), args.width.unwrap_or(size));
        let file = schedule::find_config(args.unet.as_deref(), args.scheduler_config.as_deref());
        let scheduler = schedule::build(args.scheduler, file.as_deref(), args.prediction, steps)?;
        eprintln!(
            "scheduler {:?} on {}",
            args.scheduler,
            file.map_or("Stable Diffusion 1.x's schedule".into(), |f| f
                .display()
                .to_string())
        );
        Ok(Plan {
            steps,
            height,
            width,
            scheduler,
        })
    }
}

/// One forward on the inputs file's tensors; `out_sample` (f32) to `output`.
fn parity(
    unet: &UNet2DConditionModel,
    file: &std::collections::HashMap<String, Tensor>,
    inputs: &std::path::Path,
    output: &std::path::Path,
) -> xpu::Result<()> {
    let (device, dtype) = (unet.device(), unet.dtype());
    let get = |name: &str| {
        file.get(name).ok_or_else(|| {
            xpu::Error::invalid(
                "sd_unet --inputs",
                format!("{} has no tensor `{name}`", inputs.display()),
            )
        })
    };
    let sample = get("sample")?.to_dtype(dtype)?.to(device)?;
    let timestep = get("timestep")?.to_dtype(DType::F32)?.to(device)?;
    let context = get("encoder_hidden_states")?.to_dtype(dtype)?.to(device)?;
    // SDXL-style models (`text_time`) also take `text_embeds` and `time_ids`, models with
    // a class embedding `class_labels`: i32 for `num_class_embeds` (the x4 upscaler), f32
    // timesteps for `"timestep"`, vectors in the model's dtype otherwise (stable unCLIP).
    let config = unet.config();
    let mut added = AddedCond::default();
    if config.addition_embed.is_some() {
        added.text_embeds = Some(get("text_embeds")?.to_dtype(dtype)?.to(device)?);
        added.time_ids = Some(get("time_ids")?.to_dtype(DType::F32)?.to(device)?);
    }
    if config.takes_class_labels() {
        let label_dtype = match config.class_embed_type {
            None => DType::I32,
            Some(ClassEmbedType::Timestep) => DType::F32,
            Some(_) => dtype,
        };
        added.class_labels = Some(get("class_labels")?.to_dtype(label_dtype)?.to(device)?);
    }
    // Optional even where the model takes it (as in diffusers).
    if let Some(cond) = file.get("timestep_cond") {
        added.timestep_cond = Some(cond.to_dtype(dtype)?.to(device)?);
    }
    let t = Instant::now();
    let out = unet
        .forward_with_added_cond(&sample, &timestep, &context, &added)?
        .to_dtype(DType::F32)?;
    let out = out.to(Device::Cpu)?;
    eprintln!(
        "forward {:?} in {:.2} s",
        out.shape(),
        t.elapsed().as_secs_f64()
    );
    io::write_tensors(output, &[("out_sample", &out)])
}

fn denoise(unet: &UNet2DConditionModel, args: &Args, plan: Plan) -> xpu::Result<()> {
    let (device, dtype) = (unet.device(), unet.dtype());
    let Plan {
        steps,
        height,
        width,
        mut scheduler,
    } = plan;
    let config = unet.config();
    let (lh, lw) = (height / 8, width / 8);
    let (channels, _) = conditions::latent_channels(config);
    let image = conditions::image_conditioning(config, (lh, lw), device, args.seed)?;
    let context_dim = config.encoder_states_dim();
    // Stand-ins for CLIP's [uncond, cond] text embeddings (77 tokens).
    let context = Tensor::randn(&[2, 77, context_dim], dtype, device, args.seed ^ 0x7e47)?;
    let added = conditions::for_model(
        config,
        (height, width),
        args.guidance,
        dtype,
        device,
        args.seed,
    )?;
    let mut latents = Tensor::randn(&[1, channels, lh, lw], DType::F32, device, args.seed)?
        .mul_scalar(scheduler.init_noise_sigma())?;
    eprintln!(
        "{steps} steps of {:?} at {height}×{width} (latents {lh}×{lw}), guidance {}",
        args.scheduler, args.guidance
    );
    if device == Device::Xpu {
        xpu::reset_peak_memory_stats()?;
    }
    let bar = ProgressBar::new(steps as u64);
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} step {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut seconds = Vec::with_capacity(steps);
    let timesteps = scheduler.timesteps().to_vec();
    for (i, &t) in timesteps.iter().enumerate() {
        let start = Instant::now();
        let scaled = scheduler.scale_model_input(&latents, i)?;
        let mut input = Tensor::cat(&[&scaled, &scaled], 0)?;
        if let Some(extra) = &image {
            input = Tensor::cat(&[&input, extra], 1)?;
        }
        let input = input.to_dtype(dtype)?;
        let timestep = Tensor::full(t, &[2], DType::F32, device)?;
        let noise = unet
            .forward_with_added_cond(&input, &timestep, &context, &added)?
            .narrow(1, 0, channels)?
            .to_dtype(DType::F32)?;
        let halves = noise.chunk(2, 0)?;
        let guided = halves[0].add(&halves[1].sub(&halves[0])?.mul_scalar(args.guidance)?)?;
        latents = scheduler.step(&guided, i, &latents, None)?;
        checks::finite(&latents, i, t)?;
        if device == Device::Xpu {
            xpu::synchronize()?;
        }
        let s = start.elapsed().as_secs_f64();
        seconds.push(s);
        if device == Device::Xpu && i == 0 {
            // The first step compiles pipelines: leave it out of the kernel profile.
            xpu::xpu_profile()?;
        }
        bar.set_message(format!("t={t} {s:.2} s"));
        bar.inc(1);
    }
    bar.finish();
    let latents = latents.to(Device::Cpu)?;
    let mut sorted = seconds.clone();
    sorted.sort_by(f64::total_cmp);
    let median = sorted.get(sorted.len() / 2).copied().unwrap_or(0.0);
    // The fastest step too: on a shared machine it is the least disturbed one.
    let fastest = sorted.first().copied().unwrap_or(0.0);
    println!(
        "device {device:?} ({}), dtype {dtype:?}: median {median:.3} s/step (fastest {fastest:.3}) over {steps} steps, peak memory {}",
        device_name(device),
        peak_memory(device)
    );
    let measured = xpu::autotune_report()
        .iter()
        .filter(|r| r.origin == xpu::autotune::Origin::Measured)
        .count();
    if measured > 0 {
        println!(
            "first step {:.3} s, of which the autotuner measured {measured} kernel problems for \
             {:.2} s (later runs read its cache)",
            seconds.first().copied().unwrap_or(0.0),
            xpu::autotune::tuning_seconds()
        );
    }
    if device == Device::Xpu {
        print_profile(steps.saturating_sub(1).max(1))?;
    }
    let out = checks::latents_path(args);
    io::write_tensors(&out, &[("latents", &latents)])?;
    let png_path = checks::preview_path(&out);
    let values = latents.to_vec::<f32>()?;
    let (gw, gh, img) = png::latent_grid(&values[..channels * lh * lw], channels, lh, lw);
    io::write_file_atomically(&png_path, &png::encode_gray(gw, gh, &img))?;
    println!("wrote {} and {}", out.display(), png_path.display());
    Ok(())
}

/// Prints the GPU kernel profile per step (`XPU_PROFILE=1`, or `shapes` for a row per kernel
/// and problem shape; steps after the first).
fn print_profile(steps: usize) -> xpu::Result<()> {
    let Some(rows) = xpu::xpu_profile()? else {
        return Ok(());
    };
    let mode = std::env::var("XPU_PROFILE").unwrap_or_default();
    let shown = if mode == "shapes" { 150 } else { 40 };
    let per_step = |ms: f64| ms / steps as f64;
    let total: f64 = rows.iter().map(|r| r.total_ms).sum();
    let dispatches: u64 = rows.iter().map(|r| r.dispatches).sum();
    println!(
        "GPU kernel time per step: {:.2} ms in {} dispatches (XPU_PROFILE={mode}, {steps} steps)",
        per_step(total),
        dispatches / steps as u64
    );
    for r in rows.iter().take(shown) {
        println!(
            "  {:>9.3} ms {:>5.1}% {:>6} x  {}",
            per_step(r.total_ms),
            100.0 * r.total_ms / total.max(1e-12),
            r.dispatches / steps as u64,
            r.kernel
        );
    }
    Ok(())
}

fn device_name(device: Device) -> String {
    match device {
        Device::Xpu => xpu::xpu_adapter().map_or_else(|e| e.to_string(), |a| a.name),
        Device::Cpu => format!("{} threads", rayon::current_num_threads()),
    }
}

fn peak_memory(device: Device) -> String {
    let mib = |b: u64| format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64);
    match device {
        Device::Xpu => xpu::memory_stats(Device::Xpu).map_or_else(
            |e| e.to_string(),
            |s| format!("{} (allocator)", mib(s.peak_allocated)),
        ),
        Device::Cpu => std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("VmHWM:"))
                    .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
            })
            .map_or("unknown".into(), |kb| {
                format!("{} (process peak RSS)", mib(kb * 1024))
            }),
    }
}
