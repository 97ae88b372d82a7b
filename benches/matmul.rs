//! Criterion benchmarks for regressions: matmul on each device, plain and fused, f32 and bf16.
//! `cargo bench --bench matmul`. The user-facing tool with peaks is `examples/bench/`.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use xpu::{Activation, DType, Device, Tensor};

fn bench(c: &mut Criterion) {
    let mut devices = vec![Device::Cpu];
    if xpu::xpu_available() {
        devices.push(Device::Xpu);
    }
    for device in devices {
        for dtype in [DType::F32, DType::BF16] {
            for &(m, k, n) in &[(512, 512, 512), (8192, 320, 320), (154, 768, 320)] {
                let a = Tensor::randn(&[m, k], dtype, device, 1).unwrap();
                let b = Tensor::randn(&[k, n], dtype, device, 2).unwrap();
                let bias = Tensor::randn(&[n], dtype, device, 3).unwrap();
                let mut g = c.benchmark_group(format!("matmul/{device}/{dtype}/{m}x{k}x{n}"));
                g.sample_size(10);
                g.throughput(Throughput::Elements((2 * m * n * k) as u64));
                let sync = |t: Tensor| {
                    if device == Device::Xpu {
                        drop(t);
                        xpu::synchronize().unwrap();
                    }
                };
                g.bench_function("plain", |bch| bch.iter(|| sync(a.matmul(&b).unwrap())));
                g.bench_function("bias_gelu_fused", |bch| {
                    bch.iter(|| {
                        sync(
                            a.matmul_fused(&b)
                                .bias(&bias)
                                .activation(Activation::Gelu)
                                .run()
                                .unwrap(),
                        )
                    })
                });
                g.finish();
            }
        }
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
