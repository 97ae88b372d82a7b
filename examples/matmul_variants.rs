//! Times every forced Xpu matmul kernel on one shape (`cargo run --release --example
//! matmul_variants -- M K N`), to compare kernels on the adapter at hand.

use std::time::Instant;

use xpu::{DType, Device, MatmulKernel, Tensor, TileConfig};

fn main() -> xpu::Result<()> {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let (m, k, n) = match args[..] {
        [m, k, n] => (m, k, n),
        _ => (512, 768, 1024),
    };
    let a = Tensor::randn(&[m, k], DType::F32, Device::Xpu, 1)?;
    let b = Tensor::randn(&[k, n], DType::F32, Device::Xpu, 2)?;
    let kernels = [
        MatmulKernel::Auto,
        MatmulKernel::Simple,
        MatmulKernel::Tiled(TileConfig::Large),
        MatmulKernel::Tiled(TileConfig::Medium),
        MatmulKernel::Tiled(TileConfig::Skinny),
        MatmulKernel::Tiled(TileConfig::Gemv),
    ];
    for kernel in kernels {
        let run = || {
            a.matmul_fused(&b)
                .kernel(kernel)
                .run()
                .and_then(|t| t.to_vec::<f32>())
        };
        if let Err(e) = run() {
            println!("{kernel:?}: {e}");
            continue;
        }
        let t = Instant::now();
        run()?;
        let s = t.elapsed().as_secs_f64();
        println!(
            "{kernel:?}: {:.1} ms, {:.2} GFLOP/s",
            s * 1e3,
            2.0 * (m * n * k) as f64 / s / 1e9
        );
    }
    Ok(())
}
