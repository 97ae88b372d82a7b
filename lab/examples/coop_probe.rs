//! Probes the cooperative-matrix matmul kernels on the adapter at hand: prints what the driver
//! reports, runs the forced `MatmulKernel::CoopMatrix` path for each float dtype on a small
//! product and compares it with the Cpu (a kernel that fails xpu's once-per-process self-check
//! shows as an error naming it), and prints wgpu's warnings and errors as they come.
//! `cargo run --release -p xpu-lab --example coop_probe`

use xpu::{DType, Device, MatmulKernel, Tensor};

/// Prints wgpu's own warnings and errors (driver messages about pipelines end up here).
struct StderrLog;

impl log::Log for StderrLog {
    fn enabled(&self, m: &log::Metadata) -> bool {
        m.level() <= log::Level::Warn
    }
    fn log(&self, r: &log::Record) {
        if self.enabled(r.metadata()) {
            eprintln!("[{} {}] {}", r.level(), r.target(), r.args());
        }
    }
    fn flush(&self) {}
}

static LOGGER: StderrLog = StderrLog;

fn main() -> xpu::Result<()> {
    let _ = log::set_logger(&LOGGER).map(|()| log::set_max_level(log::LevelFilter::Warn));
    let a = xpu::xpu_adapter()?;
    println!(
        "{} ({}): {:?}",
        a.name, a.backend, a.cooperative_matrix_configs
    );
    println!("features: {:?}", xpu::xpu_features()?);
    for dtype in [DType::F32, DType::F16, DType::BF16] {
        for (m, k, n) in [(16, 16, 16), (64, 32, 48), (257, 65, 129)] {
            let x = Tensor::randn(&[m, k], dtype, Device::Cpu, 1)?;
            let w = Tensor::randn(&[k, n], dtype, Device::Cpu, 2)?;
            let want = x.matmul(&w)?.to_dtype(DType::F32)?.to_vec::<f32>()?;
            let (xg, wg) = (x.to(Device::Xpu)?, w.to(Device::Xpu)?);
            let got = xg
                .matmul_fused(&wg)
                .kernel(MatmulKernel::CoopMatrix)
                .run()
                .and_then(|t| t.to_dtype(DType::F32)?.to_vec::<f32>());
            let sync = xpu::synchronize();
            match got {
                Ok(v) if m == 16 && dtype == DType::F16 => {
                    // The whole 16x16 result, for working out what a broken driver computed.
                    let (a, b) = (x.to_dtype(DType::F32)?, w.to_dtype(DType::F32)?);
                    println!("{dtype} 16x16x16 got {v:?}\nwant {want:?}");
                    println!("a {:?}\nb {:?}", a.to_vec::<f32>()?, b.to_vec::<f32>()?);
                }
                Ok(v) => {
                    let err = v
                        .iter()
                        .zip(&want)
                        .map(|(a, b)| (a - b).abs())
                        .fold(0.0f32, f32::max);
                    println!(
                        "{dtype} {m}x{k}x{n}: first {:?} want {:?}, max |err| {err:.3e}, sync {sync:?}",
                        &v[..3],
                        &want[..3]
                    );
                }
                Err(e) => println!("{dtype} {m}x{k}x{n}: error {e}; sync {sync:?}"),
            }
        }
    }
    Ok(())
}
