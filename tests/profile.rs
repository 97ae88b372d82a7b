//! The GPU kernel profiler (`XPU_PROFILE=1`): every dispatch is timed and counted under its
//! pipeline, `xpu::xpu_profile()` hands the totals over once, and without timestamp queries it
//! says `None`. This binary holds one test because the switch is read when the Xpu context is
//! created, once per process.

mod common;

use xpu::{DType, Device, Tensor};

#[test]
fn profile_counts_every_dispatch_of_each_kernel() {
    // Before any Xpu use in this process (edition 2021: `set_var` is safe; no other thread
    // runs here yet).
    std::env::set_var("XPU_PROFILE", "1");
    // The static rules: a measured first call would run every candidate kernel.
    std::env::set_var("XPU_AUTOTUNE", "off");
    if !common::xpu() {
        return;
    }
    let timestamps = xpu::xpu_features().unwrap().timestamp_query;
    let a = Tensor::randn(&[65, 33], DType::F32, Device::Xpu, 1).unwrap();
    let b = Tensor::randn(&[33, 17], DType::F32, Device::Xpu, 2).unwrap();
    xpu::synchronize().unwrap();
    // Whatever ran before (uploads, random fills) is dropped here.
    let before = xpu::xpu_profile().unwrap();
    assert_eq!(before.is_some(), timestamps);
    for _ in 0..3 {
        a.matmul(&b).unwrap();
    }
    let relu = a.relu().unwrap();
    // A transposing copy runs as 32x32 tiles (both extents at least 16).
    let t = a.t().unwrap().contiguous().unwrap();
    xpu::synchronize().unwrap();
    let Some(rows) = xpu::xpu_profile().unwrap() else {
        assert!(!timestamps, "profiling was asked for and timestamps exist");
        return;
    };
    let count = |what: &str| -> u64 {
        rows.iter()
            .filter(|r| r.kernel.contains(what))
            .map(|r| r.dispatches)
            .sum()
    };
    assert_eq!(count("matmul"), 3, "{rows:?}");
    assert_eq!(count("elementwise.wgsl"), 2, "{rows:?}");
    assert_eq!(count("copy_transpose"), 1, "{rows:?}");
    assert!(
        rows.iter()
            .all(|r| r.total_ms.is_finite() && r.total_ms >= 0.0),
        "{rows:?}"
    );
    assert!(
        rows.windows(2).all(|w| w[0].total_ms >= w[1].total_ms),
        "longest first: {rows:?}"
    );
    // The totals were handed over: nothing is left until new work runs.
    assert_eq!(xpu::xpu_profile().unwrap(), Some(Vec::new()));
    drop((relu, t));
}
