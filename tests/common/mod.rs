//! Shared test helpers: device selection that never skips silently in CI, comparison with
//! tolerances, and small data builders.
#![allow(dead_code)]

pub mod coop16;
pub mod fixtures;
pub mod rng;
pub mod stride_fixture;
pub mod unet_fixture;

/// The repository root: where the tests were built, or the current directory when that path
/// does not exist (test binaries carried to another machine run from the repository root).
pub fn repo_root() -> std::path::PathBuf {
    let built = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    if built.join("tests").is_dir() {
        built
    } else {
        std::path::PathBuf::from(".")
    }
}

use xpu::{DType, Device, Tensor};

/// True when an Xpu test must not skip (CI, or the user asked for it).
pub fn adapter_required() -> bool {
    std::env::var("CI").is_ok_and(|v| v == "true" || v == "1")
        || std::env::var("XPU_REQUIRE_ADAPTER").is_ok_and(|v| v == "1")
}

/// Whether Xpu tests run here: panics in CI without an adapter, prints why it skips otherwise.
pub fn xpu() -> bool {
    match xpu::xpu_adapter() {
        Ok(_) => true,
        Err(e) if adapter_required() => {
            panic!("an Xpu adapter is required here (CI or XPU_REQUIRE_ADAPTER=1): {e}")
        }
        Err(e) => {
            eprintln!("skipping Xpu part of this test: {e}");
            false
        }
    }
}

/// The devices to run a test on: Cpu, plus Xpu where available (required in CI).
pub fn devices() -> Vec<Device> {
    if xpu() {
        vec![Device::Cpu, Device::Xpu]
    } else {
        vec![Device::Cpu]
    }
}

/// The float dtypes.
pub const FLOATS: [DType; 3] = [DType::F32, DType::F16, DType::BF16];

/// Values of a tensor as f64 (any dtype, any device).
pub fn values(t: &Tensor) -> Vec<f64> {
    let t = t.to(Device::Cpu).unwrap();
    match t.dtype() {
        DType::F32 => t
            .to_vec::<f32>()
            .unwrap()
            .into_iter()
            .map(f64::from)
            .collect(),
        DType::F16 => t
            .to_vec::<half::f16>()
            .unwrap()
            .into_iter()
            .map(|x| x.to_f64())
            .collect(),
        DType::BF16 => t
            .to_vec::<half::bf16>()
            .unwrap()
            .into_iter()
            .map(|x| x.to_f64())
            .collect(),
        DType::I32 => t
            .to_vec::<i32>()
            .unwrap()
            .into_iter()
            .map(f64::from)
            .collect(),
        DType::U8 => t
            .to_vec::<u8>()
            .unwrap()
            .into_iter()
            .map(f64::from)
            .collect(),
    }
}

/// Unit roundoff of a dtype.
pub fn eps(dtype: DType) -> f64 {
    match dtype {
        DType::F32 => 1.2e-7,
        DType::F16 => 9.8e-4,
        DType::BF16 => 7.9e-3,
        _ => 0.0,
    }
}

/// Tolerance of an Xpu product over `k` against the Cpu's: f32 accumulation-order differences
/// growing like sqrt(k), plus two roundings of a 16-bit output.
pub fn matmul_tol(dtype: DType, k: usize) -> f64 {
    let e = if dtype == DType::F32 {
        2e-6
    } else {
        2.0 * eps(dtype)
    };
    e * (k.max(1) as f64).sqrt() * 4.0 + 1e-5
}

/// Asserts |a - b| <= atol + rtol * |b| elementwise (NaNs must match, infinities must be equal).
pub fn assert_close(what: &str, got: &[f64], want: &[f64], atol: f64, rtol: f64) {
    assert_eq!(
        got.len(),
        want.len(),
        "{what}: length {} vs {}",
        got.len(),
        want.len()
    );
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        if w.is_nan() {
            assert!(g.is_nan(), "{what}[{i}]: got {g}, want NaN");
            continue;
        }
        if w.is_infinite() {
            assert_eq!(g, w, "{what}[{i}]");
            continue;
        }
        assert!(
            (g - w).abs() <= atol + rtol * w.abs(),
            "{what}[{i}]: got {g}, want {w} (atol {atol}, rtol {rtol})"
        );
    }
}

/// `x @ wᵀ + b` in f32 (PyTorch's `nn.Linear` on `[out, in]` weights), the reference for
/// `Linear` in any dtype.
pub fn linear_f32(x: &Tensor, w: &Tensor, b: &Tensor) -> Tensor {
    let f = |t: &Tensor| t.to_dtype(DType::F32).unwrap();
    f(x).matmul(&f(w).t().unwrap()).unwrap().add(&f(b)).unwrap()
}

/// Seeded normal tensor on Cpu.
pub fn randn(shape: &[usize], dtype: DType, seed: u64) -> Tensor {
    Tensor::randn(shape, dtype, Device::Cpu, seed).unwrap()
}

/// Runs test `name` again in a child process with the kernel profiler on (`XPU_PROFILE=1`)
/// and `envs`, so the child can tell which kernels served its calls. Where the adapter has no
/// timestamp queries it says so and runs nothing (CI's adapter has them: there it fails).
pub fn rerun_profiled(name: &str, envs: &[(&str, &std::ffi::OsStr)]) {
    if !xpu::xpu_features().unwrap().timestamp_query {
        assert!(
            !adapter_required(),
            "CI's adapter profiles with timestamp queries"
        );
        eprintln!("skipped: no timestamp queries to tell the kernels apart");
        return;
    }
    let mut all = vec![("XPU_PROFILE", std::ffi::OsStr::new("1"))];
    all.extend_from_slice(envs);
    rerun_with_env(name, &all);
}

/// Runs test `name` of this test binary again in a child process with the environment `envs`
/// (for process-wide switches a test cannot set in its own process); fails unless the child
/// ran exactly that test and it passed.
pub fn rerun_with_env(name: &str, envs: &[(&str, &std::ffi::OsStr)]) {
    let exe = std::env::current_exe().unwrap();
    let mut cmd = std::process::Command::new(exe);
    cmd.args([name, "--exact", "--nocapture", "--test-threads=1"]);
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let out = cmd.output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("1 passed"),
        "child run of {name} failed: {text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
