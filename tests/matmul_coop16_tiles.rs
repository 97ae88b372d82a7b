//! The tensor-core product with a run-time tile shape (`XPU_COOP16_TILES`,
//! `shaders/matmul_coop16_tiles.wgsl`): for several shapes, in child processes (the variable is
//! read once per process) with the kernel profiler on, f16 products over edge sizes, transposes
//! (B staged both ways), odd K (the element-wise staging), broadcast batches, every epilogue and
//! a split-K product, and channels-last convolutions (the gather), each against the Cpu and each
//! checked for the kernel that served it.
//! Where the adapter has f16 cooperative matrices the tiles kernel must serve all but GEGLU
//! products (those stay on mm_coop16); elsewhere (lavapipe 22 in CI) the FMA kernels serve and
//! the test covers the routing. On lavapipe 26 (`benches/lavapipe_coop/run.sh`) the shapes'
//! numbers are checked. A shape the adapter cannot hold is an error at the product.

mod common;

use common::coop16::{
    channels_last_conv_kernels, coop_kernel, products_match_the_cpu, split_k_kernels, tensor_cores,
};
use common::randn;
use xpu::ops::conv::Conv2dParams;
use xpu::{DType, Device, MatmulKernel, MemoryFormat, Tensor};

const NAME: &str = "tile_shapes_match_the_cpu_where_they_serve";
const TILES: &str = "matmul_coop16_tiles.wgsl";
const SINGLE: &str = "matmul_coop16.wgsl";

/// Shapes covering one and two tile pairs, K steps of 16, 32 and 64, subgroup tiles from 2x2 to
/// 4x4, workgroups of 128 to 512 invocations, and 16 slots (their epilogue in two rounds).
const SHAPES: [&str; 6] = [
    "4x2:2x4:32",
    "2x2:4x4:32:2",
    "4x4:2x2:32:2",
    "4x2:4x2:16:2",
    "1x4:4x4:32",
    "2x2:2x2:64:2",
];

fn child() {
    let (coop, kernel) = coop_kernel();
    // [m, k, n, transposes (bit 0 A, bit 1 B), batch layout (0 none, 1 A batched, 2 B)]
    let cases = [
        [257, 65, 129, 0, 0],
        [129, 258, 257, 2, 1],
        [300, 1000, 130, 1, 2],
        [1, 17, 3, 3, 0],
        [65, 64, 257, 2, 1],
        [128, 96, 256, 0, 0],
        [200, 150, 96, 2, 0],
        [63, 7, 65, 0, 0],
    ];
    products_match_the_cpu(&cases, kernel, |what, e, kernels| {
        let ran = |file: &str| kernels.iter().any(|k| k.starts_with(file));
        assert_eq!(ran(TILES), coop && e != 5, "{what}: {kernels:?}");
        assert_eq!(ran(SINGLE), coop && e == 5, "{what}: {kernels:?}");
    });
    // Few output tiles and a long K: Auto splits K into f32 partial products.
    let kernels = split_k_kernels(true);
    let partials = kernels
        .iter()
        .any(|k| k.starts_with(TILES) && k.contains("->F32"));
    assert_eq!(partials, coop, "split K: {kernels:?}");
    // Channels-last convolutions (the gather): 3x3 padded with bias, 3x3 stride 2 on 32
    // channels, and 1x1.
    for (ci, case) in [
        [16, 24, 13, 11, 3, 1, 1],
        [32, 40, 9, 17, 3, 2, 1],
        [34, 8, 7, 5, 1, 1, 0],
    ]
    .into_iter()
    .enumerate()
    {
        let kernels = channels_last_conv_kernels(case, 60 + 3 * ci as u64);
        let ran = kernels.iter().any(|k| k.starts_with(TILES));
        assert_eq!(ran, coop, "conv {ci}: {kernels:?}");
    }
}

#[test]
fn tile_shapes_match_the_cpu_where_they_serve() {
    if !common::xpu() {
        return;
    }
    if std::env::var_os("XPU_TEST_TILES_CHILD").is_some() {
        child();
        return;
    }
    for shape in SHAPES {
        common::rerun_profiled(
            NAME,
            &[
                ("XPU_TEST_TILES_CHILD", "1".as_ref()),
                ("XPU_COOP16_TILES", shape.as_ref()),
            ],
        );
    }
}

/// A shape beyond the adapter's workgroup memory is an error naming the variable, never a
/// different kernel, and so is a convolution whose invocations would gather more than 16 rows
/// (products with that shape still run); without tensor cores the tiles kernel is never asked
/// for.
#[test]
fn shapes_the_kernel_cannot_run_are_errors() {
    const NAME: &str = "shapes_the_kernel_cannot_run_are_errors";
    if !common::xpu() {
        return;
    }
    let a = randn(&[512, 512], DType::F16, 1).to(Device::Xpu).unwrap();
    let kernel = if tensor_cores() {
        MatmulKernel::CoopMatrix
    } else {
        MatmulKernel::Auto
    };
    let says = |r: xpu::Result<Tensor>, what: &str| {
        if tensor_cores() {
            let e = r.expect_err(what).to_string();
            assert!(e.contains("XPU_COOP16_TILES"), "{what}: {e}");
        }
    };
    match std::env::var("XPU_TEST_TILES_ERROR").as_deref() {
        Ok("memory") => {
            let r = a.matmul_fused(&a).kernel(kernel).run();
            says(r, "a 78 KiB shape");
        }
        Ok("rows") => {
            let r = a.matmul_fused(&a).kernel(kernel).run();
            assert!(r.is_ok(), "products need no gathered rows: {:?}", r.err());
            let x = randn(&[1, 64, 16, 16], DType::F16, 2)
                .to(Device::Xpu)
                .unwrap();
            let x = x.to_memory_format(MemoryFormat::ChannelsLast).unwrap();
            let w = randn(&[64, 64, 3, 3], DType::F16, 3)
                .to(Device::Xpu)
                .unwrap();
            let p = Conv2dParams {
                padding: (1, 1),
                ..Conv2dParams::default()
            };
            says(x.conv2d(&w, None, p), "32 gathered rows per invocation");
        }
        _ => {
            for (case, shape) in [("memory", "4x2:4x4:64:2"), ("rows", "2x1:2x2:64")] {
                common::rerun_with_env(
                    NAME,
                    &[
                        ("XPU_TEST_TILES_ERROR", case.as_ref()),
                        ("XPU_COOP16_TILES", shape.as_ref()),
                    ],
                );
            }
        }
    }
}
