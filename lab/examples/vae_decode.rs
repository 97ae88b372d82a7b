//! Times the SD VAE's decode on the Cpu (seeded random weights, diffusers' SD config) and
//! prints one JSON line with `size`, `tiled`, `dtype`, `decode_s` (best of the runs after the
//! first, which also tunes), `first_s` (that first run) and `peak_bytes` (the process's peak
//! RSS), the keys
//! `benches/diffusers_vae_decode.py` prints:
//!
//! `cargo run --release -p xpu-lab --example vae_decode -- SIZE [f32|bf16] [--tiled]`

use std::time::Instant;
use xpu::models::vae::{AutoencoderKl, VaeConfig, VaeTiling};
use xpu::{DType, Device, Tensor};

fn peak_bytes() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    Some(line.split_whitespace().nth(1)?.parse::<u64>().ok()? * 1024)
}

fn main() -> xpu::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let size: usize = args.first().and_then(|s| s.parse().ok()).unwrap_or(512);
    let dtype = if args.iter().any(|a| a == "bf16") {
        DType::BF16
    } else {
        DType::F32
    };
    let tiled = args.iter().any(|a| a == "--tiled");
    let vae = AutoencoderKl::random(&VaeConfig::sd(), dtype, Device::Cpu, 0)?;
    let latents =
        Tensor::randn(&[1, 4, size / 8, size / 8], DType::F32, Device::Cpu, 1)?.to_dtype(dtype)?;
    let tiling = if tiled {
        VaeTiling::Auto
    } else {
        VaeTiling::Off
    };
    let (mut best, mut first) = (f64::INFINITY, 0.0);
    for i in 0..3 {
        let t = Instant::now();
        let image = vae.decode_with(&latents, tiling)?;
        let _ = image.to_dtype(DType::F32)?.to_vec::<f32>()?;
        if i > 0 {
            best = best.min(t.elapsed().as_secs_f64());
        } else {
            first = t.elapsed().as_secs_f64();
        }
    }
    println!(
        "{{\"size\": {size}, \"tiled\": {tiled}, \"dtype\": \"{dtype}\", \"decode_s\": {best:.4}, \"first_s\": {first:.4}, \"peak_bytes\": {}}}",
        peak_bytes().map_or("null".to_string(), |b| b.to_string())
    );
    Ok(())
}
