//! Split-K products (the autotuner's `gpu_split_k` candidate `n` forced: each output tile's K
//! range cut into `n` f32 partial products, summed by the epilogue pass) against the Cpu: the
//! simple engine and the large and medium FMA tiles (whose static rule never splits, so any
//! adapter runs these paths), the tensor-core kernel where the driver has one, and Auto; edge
//! sizes with K below, at and past the split, broadcast batches, each epilogue (GEGLU included)
//! and each float dtype. A forced candidate is read where a product is dispatched, so each
//! test scopes it to its own thread.

use crate::common;
use common::{assert_close, matmul_tol, randn, values, FLOATS};
use xpu::{Activation, DType, Device, MatmulKernel, Tensor, TileConfig};

/// `f` with three splits forced on this thread.
fn split_in_three(f: impl FnOnce()) {
    xpu::config::scoped(|c| c.autotune.force("gpu_split_k", "3"), f);
}

/// `[batch?, m, k] @ [k, np]` with epilogue `e` under `kernel` on `device`.
fn product(
    (m, k, n): (usize, usize, usize),
    batch: Option<usize>,
    e: usize,
    dtype: DType,
    device: Device,
    kernel: MatmulKernel,
) -> xpu::Result<Tensor> {
    let seed = (m * 31 + k * 17 + n + e) as u64;
    let on = |t: Tensor| t.to(device).unwrap();
    let mut ashape: Vec<usize> = batch.into_iter().collect();
    ashape.extend([m, k]);
    let np = if e == 3 { 2 * n } else { n };
    let a = on(randn(&ashape, dtype, seed));
    // B transposed in storage for odd epilogues (a column-major operand), the view taken on the
    // device.
    let b = if e % 2 == 1 {
        on(randn(&[np, k], dtype, seed + 1)).t().unwrap()
    } else {
        on(randn(&[k, np], dtype, seed + 1))
    };
    let bias = on(randn(&[np], dtype, seed + 2));
    let mut oshape: Vec<usize> = batch.into_iter().collect();
    oshape.extend([m, n]);
    let c = on(randn(&oshape, dtype, seed + 3));
    let f = a.matmul_fused(&b).kernel(kernel);
    match e {
        0 => f.run(),
        1 => f
            .bias(&bias)
            .activation(Activation::Silu)
            .residual(&c)
            .run(),
        2 => f
            .alpha(0.5)
            .add_scaled(-0.25, &c)
            .out_dtype(DType::F32)
            .run(),
        _ => f.bias(&bias).geglu().residual(&c).run(),
    }
}

const SHAPES: [(usize, usize, usize); 6] = [
    (1, 1, 1),
    (7, 33, 63),
    (65, 64, 17),
    (17, 257, 129),
    (63, 1000, 65),
    (130, 96, 257),
];

fn check(kernel: MatmulKernel, dtypes: &[DType]) {
    for (di, &dtype) in dtypes.iter().enumerate() {
        for (i, &mkn) in SHAPES.iter().enumerate() {
            let e = (i + di) % 4;
            let batch = (i % 2 == 1).then_some(2);
            let want = product(mkn, batch, e, dtype, Device::Cpu, MatmulKernel::Auto).unwrap();
            let got = product(mkn, batch, e, dtype, Device::Xpu, kernel).unwrap();
            assert_eq!(got.shape(), want.shape());
            assert_eq!(got.dtype(), want.dtype());
            let t = matmul_tol(dtype, mkn.1);
            let what = format!("split {kernel:?} {dtype} {mkn:?} batch {batch:?} epilogue {e}");
            assert_close(&what, &values(&got), &values(&want), t, t);
        }
    }
}

#[test]
fn simple_engine_split_k_matches_the_cpu() {
    if common::xpu() {
        split_in_three(|| check(MatmulKernel::Simple, &FLOATS));
    }
}

#[test]
fn fma_tiles_split_k_match_the_cpu() {
    if !common::xpu() {
        return;
    }
    split_in_three(|| {
        for tile in [TileConfig::LargeVec4, TileConfig::MediumVec4] {
            check(MatmulKernel::Tiled(tile), &FLOATS);
        }
    });
}

/// The f16 tensor-core kernel (where the driver reports 16x16x16 f16 cooperative matrices) and
/// Auto's f16 choice, both split.
#[test]
fn tensor_core_split_k_matches_the_cpu() {
    if !common::xpu() {
        return;
    }
    split_in_three(|| {
        let f = xpu::xpu_features().unwrap();
        if f.subgroup && f.coop_f16_16x16 {
            check(MatmulKernel::CoopMatrix, &[DType::F16]);
        }
        check(MatmulKernel::Auto, &[DType::F16]);
    });
}
