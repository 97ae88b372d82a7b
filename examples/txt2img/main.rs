//! Stable Diffusion on `xpu`: a prompt (and optionally an init image) to PNG pictures, exactly
//! as diffusers makes them.
//!
//! `cargo run --release --example txt2img -- --model DIR --prompt "an astronaut riding a horse"`
//! writes `txt2img.png`. `DIR` is a diffusers pipeline folder (SD 1.x, SD 2.x, SDXL base, SD-Turbo,
//! SDXL-Turbo, LCM); without `--model` the SD 1.5 architecture is built with seeded random
//! weights at a small size, so the example runs on a fresh machine with no download (its
//! pictures are noise, its timings real). Every argument, the output paths, `--latents` and
//! `--init-image` are checked before any model is loaded. A progress bar shows the steps; at the
//! end the time of each phase, the device, the dtype and the peak memory are printed (with
//! `--json` also as one JSON line).
//!
//! `cargo run --release --example txt2img -- --help`

mod checks;
mod outputs;
mod report;

use std::path::PathBuf;
use std::time::Instant;

use clap::{Parser, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use xpu::models::pipeline::{Progress, StableDiffusionPipeline};
use xpu::{DType, Device};

/// Devices the example runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum DeviceArg {
    Cpu,
    Xpu,
}

/// Compute dtypes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum DTypeArg {
    F32,
    F16,
    Bf16,
}

/// Stable Diffusion text-to-image (and image-to-image) on xpu, as diffusers computes it.
#[derive(Parser, Debug, Clone)]
#[command(version)]
struct Args {
    /// A diffusers pipeline folder (model_index.json, tokenizer/, text_encoder/, unet/, vae/,
    /// scheduler/; SDXL also tokenizer_2/ and text_encoder_2/). Without it: the SD 1.5
    /// architecture with seeded random weights at 128×128, 4 steps.
    #[arg(long)]
    model: Option<PathBuf>,
    /// Weights variant to read (e.g. fp16: *.fp16.safetensors; default: the plain files, else
    /// the variant the folder has).
    #[arg(long, requires = "model")]
    variant: Option<String>,
    /// The prompt.
    #[arg(long, default_value = "a photograph of an astronaut riding a horse")]
    prompt: String,
    /// The negative prompt (with guidance > 1).
    #[arg(long)]
    negative_prompt: Option<String>,
    /// Denoising steps (default: diffusers' for the pipeline: 50; LCM 4).
    #[arg(long)]
    steps: Option<usize>,
    /// Guidance scale; ≤ 1 turns classifier-free guidance off (default: 7.5; SDXL 5.0; LCM 8.5).
    #[arg(long, allow_negative_numbers = true)]
    guidance: Option<f64>,
    /// diffusers' guidance_rescale in [0, 1] (0: off).
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    guidance_rescale: f64,
    /// Image height in pixels, a multiple of 8 (default: the UNet's sample size × 8).
    #[arg(long)]
    height: Option<usize>,
    /// Image width in pixels, a multiple of 8 (default: the UNet's sample size × 8).
    #[arg(long)]
    width: Option<usize>,
    /// Seed of torch.Generator("cpu").manual_seed(seed): the initial noise and every later draw.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// A safetensors file holding `latents` [N, 4, H/8, W/8] f32: the initial noise, instead
    /// of drawing it from the seed.
    #[arg(long)]
    latents: Option<PathBuf>,
    /// Scheduler on the folder's noise schedule: pndm, ddim, euler, euler-a, dpm++2m,
    /// dpm++2m-karras, lcm (default: the folder's).
    #[arg(long)]
    scheduler: Option<String>,
    /// Images to make (files NAME-0.png, NAME-1.png, ... when more than one).
    #[arg(long, default_value_t = 1)]
    num_images: usize,
    /// Device (default: xpu when a hardware GPU adapter exists, else cpu).
    #[arg(long, value_enum)]
    device: Option<DeviceArg>,
    /// Compute dtype of the models.
    #[arg(long, value_enum, default_value = "f32")]
    dtype: DTypeArg,
    /// The PNG file to write.
    #[arg(long, default_value = "txt2img.png")]
    output: PathBuf,
    /// Image-to-image: an 8-bit RGB PNG whose size (multiples of 8) is the output's.
    #[arg(long)]
    init_image: Option<PathBuf>,
    /// Image-to-image strength in (0, 1].
    #[arg(long, default_value_t = 0.8, allow_negative_numbers = true)]
    strength: f64,
    /// Also print the timings as one JSON line.
    #[arg(long)]
    json: bool,
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
        // A software adapter (lavapipe) is far slower than the Cpu kernels: a real GPU only.
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
    // Everything that can be checked without the models is checked before loading them.
    let plan = checks::Plan::from_args(&args)?;
    let loading = Instant::now();
    let pipe = match &args.model {
        Some(dir) => StableDiffusionPipeline::from_folder_variant(
            dir,
            args.variant.as_deref(),
            device,
            dtype,
        )?,
        None => StableDiffusionPipeline::random_sd15(device, dtype, 0)?,
    };
    let load_s = loading.elapsed().as_secs_f64();
    // Generation runs phases with different buffer sizes (text encoder, UNet, VAE): from here
    // freed pages are reused instead of faulted in afresh (loading, whose transient buffers
    // are written once, keeps fresh zero pages from the kernel).
    xpu::retain_freed_host_memory();
    let request = plan.request(&pipe);
    let described = outputs::Described::new(&args, &pipe, &request);
    eprintln!(
        "{} on {} in {dtype}, loaded in {load_s:.1} s: {}",
        described.model,
        report::device_name(device),
        described.summary()
    );
    if device == Device::Xpu {
        xpu::reset_peak_memory_stats()?;
    }
    let bar = ProgressBar::new(0);
    bar.set_style(
        ProgressStyle::with_template("{bar:30} {pos}/{len} steps {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut timings = report::Timings::default();
    let start = Instant::now();
    let images = pipe.generate_with(&request, &mut |p| {
        match &p {
            Progress::Warning(w) => bar.println(format!("warning: {w}")),
            Progress::Started { steps } => bar.set_length(*steps as u64),
            Progress::Step {
                timestep, seconds, ..
            } => {
                bar.set_message(format!("t={timestep:.0} {seconds:.2} s"));
                bar.inc(1);
            }
            _ => {}
        }
        timings.record(&p);
    })?;
    bar.finish();
    let written = outputs::write_images(&plan.outputs, &images, &described)?;
    timings.total_s = start.elapsed().as_secs_f64();
    timings.load_s = load_s;
    for path in &written {
        println!("wrote {}", path.display());
    }
    let summary = report::Summary::new(&timings, device, dtype);
    println!("{}", summary.text());
    if args.json {
        println!("{}", summary.json());
    }
    Ok(())
}
