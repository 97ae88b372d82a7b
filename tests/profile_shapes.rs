//! The GPU kernel profiler by problem shape (`XPU_PROFILE=shapes`): each pipeline's time is
//! split by dispatch grid and, for matrix products, by `[m, n, k]`, so two products of one
//! kernel on different shapes are two rows. One test per binary: the switch is read once, when
//! the Xpu context is created.

mod common;

use xpu::{DType, Device, Tensor};

#[test]
fn profile_splits_each_kernel_by_problem_shape() {
    // Before any Xpu use in this process (no other thread runs here yet).
    std::env::set_var("XPU_PROFILE", "shapes");
    // The static rules: a measured first call would run every candidate kernel.
    std::env::set_var("XPU_AUTOTUNE", "off");
    if !common::xpu() {
        return;
    }
    let timestamps = xpu::xpu_features().unwrap().timestamp_query;
    let a = Tensor::randn(&[65, 33], DType::F32, Device::Xpu, 1).unwrap();
    let b = Tensor::randn(&[33, 17], DType::F32, Device::Xpu, 2).unwrap();
    let c = Tensor::randn(&[7, 9], DType::F32, Device::Xpu, 3).unwrap();
    let d = Tensor::randn(&[9, 5], DType::F32, Device::Xpu, 4).unwrap();
    xpu::synchronize().unwrap();
    xpu::xpu_profile().unwrap();
    for _ in 0..2 {
        a.matmul(&b).unwrap();
    }
    c.matmul(&d).unwrap();
    let relu = a.relu().unwrap();
    xpu::synchronize().unwrap();
    let Some(rows) = xpu::xpu_profile().unwrap() else {
        assert!(!timestamps, "profiling was asked for and timestamps exist");
        return;
    };
    let dispatches = |what: &str| -> u64 {
        rows.iter()
            .filter(|r| r.kernel.contains(what))
            .map(|r| r.dispatches)
            .sum()
    };
    // The same products always take the same kernels; each shape is its own row.
    assert_eq!(dispatches(" mnk 65x17x33 grid "), 2, "{rows:?}");
    assert_eq!(dispatches(" mnk 7x5x9 grid "), 1, "{rows:?}");
    let relu_rows: Vec<_> = rows
        .iter()
        .filter(|r| r.kernel.starts_with("elementwise.wgsl"))
        .collect();
    assert_eq!(relu_rows.len(), 1, "{rows:?}");
    assert!(relu_rows[0].kernel.contains(" grid "), "{rows:?}");
    assert!(!relu_rows[0].kernel.contains("mnk"), "{rows:?}");
    drop(relu);
}
