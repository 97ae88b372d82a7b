//! Times every forced Xpu matmul kernel on one shape, to compare kernels on the adapter at hand:
//! `cargo run --release -p xpu-lab --example matmul_variants -- M K N [f32|f16|bf16] [bt] [coop]`
//! (`bt`: B is the transposed view of an `[N, K]` weight, the nn Linear layout; `coop`: only the
//! cooperative-matrix kernel). Each kernel runs once to compile and warm up, then the median of
//! 5 timed calls (each synchronised) is printed.

use std::time::Instant;

use xpu::{DType, Device, MatmulKernel, Tensor, TileConfig};

fn main() -> xpu::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let sizes: Vec<usize> = args.iter().filter_map(|a| a.parse().ok()).collect();
    let (m, k, n) = match sizes[..] {
        [m, k, n] => (m, k, n),
        _ => (512, 768, 1024),
    };
    let dtype = if args.iter().any(|a| a == "f16") {
        DType::F16
    } else if args.iter().any(|a| a == "bf16") {
        DType::BF16
    } else {
        DType::F32
    };
    let transposed_b = args.iter().any(|a| a == "bt");
    let a = Tensor::randn(&[m, k], dtype, Device::Xpu, 1)?;
    let b = if transposed_b {
        Tensor::randn(&[n, k], dtype, Device::Xpu, 2)?.transpose(0, 1)?
    } else {
        Tensor::randn(&[k, n], dtype, Device::Xpu, 2)?
    };
    println!(
        "{m}x{k}x{n} {dtype}, B {}",
        if transposed_b {
            "transposed"
        } else {
            "row-major"
        }
    );
    let kernels = [
        MatmulKernel::Auto,
        MatmulKernel::Simple,
        MatmulKernel::Tiled(TileConfig::LargeVec4),
        MatmulKernel::Tiled(TileConfig::MediumVec4),
        MatmulKernel::Tiled(TileConfig::Skinny),
        MatmulKernel::Tiled(TileConfig::Gemv),
        MatmulKernel::CoopMatrix,
    ];
    // `coop`: only the cooperative-matrix kernel.
    let only_coop = args.iter().any(|a| a == "coop");
    for kernel in kernels {
        if only_coop && kernel != MatmulKernel::CoopMatrix {
            continue;
        }
        let run = || -> xpu::Result<()> {
            drop(a.matmul_fused(&b).kernel(kernel).run()?);
            xpu::synchronize()
        };
        if let Err(e) = run() {
            println!("{kernel:?}: {e}");
            continue;
        }
        let mut times = Vec::new();
        for _ in 0..5 {
            let t = Instant::now();
            run()?;
            times.push(t.elapsed().as_secs_f64());
        }
        times.sort_by(f64::total_cmp);
        let s = times[times.len() / 2];
        println!(
            "{kernel:?}: {:.3} ms, {:.2} GFLOP/s",
            s * 1e3,
            2.0 * (m * n * k) as f64 / s / 1e9
        );
    }
    Ok(())
}
