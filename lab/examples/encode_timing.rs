//! Times `encode_prompt` of the SD 1.5 pipeline (seeded random weights) call after call, to
//! tell a first-call cost from the steady cost.
//!
//! `cargo run --release -p xpu-lab --example encode_timing -- [f32|bf16]`

use std::time::Instant;
use xpu::models::pipeline::StableDiffusionPipeline;
use xpu::{DType, Device};

fn main() -> xpu::Result<()> {
    let dtype = match std::env::args().nth(1).as_deref() {
        Some("bf16") => DType::BF16,
        _ => DType::F32,
    };
    let p = StableDiffusionPipeline::random_sd15(Device::Cpu, dtype, 0)?;
    for i in 0..5 {
        let t = Instant::now();
        let e = p.encode_prompt("a photograph of an astronaut riding a horse", None, 1, true)?;
        let _ = e.context.to_vec::<f32>();
        println!("encode {i}: {:.3} s", t.elapsed().as_secs_f64());
    }
    Ok(())
}
