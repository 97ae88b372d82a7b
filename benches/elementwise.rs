//! Criterion benchmarks for regressions: elementwise and reduction bandwidth on each device.
//! `cargo bench --bench elementwise`. The user-facing tool with peaks is `examples/bench/`.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use xpu::{DType, Device, Tensor};

fn devices() -> Vec<Device> {
    let mut d = vec![Device::Cpu];
    if xpu::xpu_available() {
        d.push(Device::Xpu);
    }
    d
}

fn run(device: Device, f: impl Fn() -> xpu::Result<Tensor>) {
    let t = f().expect("op failed");
    if device == Device::Xpu {
        drop(t);
        xpu::synchronize().expect("synchronize failed");
    }
}

fn bench(c: &mut Criterion) {
    let n = 1 << 22;
    for device in devices() {
        for dtype in [DType::F32, DType::BF16] {
            let x = Tensor::randn(&[n], dtype, device, 1).unwrap();
            let y = Tensor::randn(&[n], dtype, device, 2).unwrap();
            let m = x.reshape(&[n / 1024, 1024]).unwrap();
            let bytes = (n * dtype.size_in_bytes()) as u64;
            let mut g = c.benchmark_group(format!("{device}/{dtype}"));
            g.sample_size(10);
            g.throughput(Throughput::Bytes(2 * bytes));
            g.bench_function("exp", |b| b.iter(|| run(device, || x.exp())));
            g.bench_function("gelu", |b| b.iter(|| run(device, || x.gelu())));
            g.throughput(Throughput::Bytes(3 * bytes));
            g.bench_function("add", |b| b.iter(|| run(device, || x.add(&y))));
            g.throughput(Throughput::Bytes(bytes));
            g.bench_function("sum_last_dim", |b| {
                b.iter(|| run(device, || m.sum(-1, false)))
            });
            g.throughput(Throughput::Bytes(2 * bytes));
            g.bench_function("softmax_last_dim", |b| {
                b.iter(|| run(device, || m.softmax(-1)))
            });
            g.finish();
        }
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
