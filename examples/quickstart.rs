//! Quickstart: list devices, move a tensor to the Xpu, compute on it, read back, print timings
//! and memory statistics. Run with `cargo run --release --example quickstart`.

use std::time::Instant;

use xpu::{DType, Device, Tensor};

fn main() -> xpu::Result<()> {
    println!("adapters:");
    for a in xpu::devices() {
        println!(
            "  [{}] {} ({}, {}, driver {}){} features {:?}, max buffer {} MiB",
            a.index,
            a.name,
            a.backend,
            a.device_type,
            a.driver,
            if a.selected { " <- Device::Xpu" } else { "" },
            a.features,
            a.max_buffer_size >> 20
        );
        for (dtype, path) in &a.matmul_paths {
            println!("      matmul {dtype:?}: {path}");
        }
        if !a.cooperative_matrix_configs.is_empty() {
            println!(
                "      cooperative matrices: {:?}, subgroups of {}..{} lanes",
                a.cooperative_matrix_configs, a.subgroup_sizes.0, a.subgroup_sizes.1
            );
        }
    }
    let a = Tensor::randn(&[512, 768], DType::F32, Device::Cpu, 42)?;
    let w = Tensor::randn(&[768, 1024], DType::F32, Device::Cpu, 7)?.mul_scalar(0.036)?;

    let t = Instant::now();
    let cpu = a.matmul(&w)?.gelu()?.softmax(-1)?.sum(-1, false)?;
    let cpu_ms = t.elapsed().as_secs_f64() * 1e3;
    println!("cpu: matmul+gelu+softmax+sum on [512,768]@[768,1024] in {cpu_ms:.2} ms");

    if !xpu::xpu_available() {
        println!(
            "no Xpu adapter: install a Vulkan driver (e.g. apt-get install mesa-vulkan-drivers)"
        );
        return Ok(());
    }
    let (ax, wx) = (a.to(Device::Xpu)?, w.to(Device::Xpu)?);
    let run = || -> xpu::Result<Vec<f32>> {
        ax.matmul(&wx)?
            .gelu()?
            .softmax(-1)?
            .sum(-1, false)?
            .to_vec()
    };
    let t = Instant::now();
    run()?; // first run compiles the pipelines
    let cold_ms = t.elapsed().as_secs_f64() * 1e3;
    let t = Instant::now();
    let host = run()?;
    let xpu_ms = t.elapsed().as_secs_f64() * 1e3;
    println!("xpu: first run (compiles pipelines) {cold_ms:.2} ms");
    let cpu_host: Vec<f32> = cpu.to_vec()?;
    let max_err = host
        .iter()
        .zip(&cpu_host)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    println!(
        "xpu: same chain (compute, read back) in {xpu_ms:.2} ms; max |xpu - cpu| = {max_err:.2e}"
    );
    let half = ax
        .to_dtype(DType::F16)?
        .matmul(&wx.to_dtype(DType::F16)?)?
        .to_dtype(DType::F32)?;
    println!(
        "xpu f16 matmul: first values {:?}",
        &half.to_vec::<f32>()?[..4]
    );
    println!("memory: {:?}", xpu::memory_stats(Device::Xpu)?);
    Ok(())
}
