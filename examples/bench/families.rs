//! The GFLOP/s and GB/s families: elementwise, reduce, matmul, conv and the GEGLU FFN.

use super::{time, Op, Opts, Row};
use xpu::{DType, Device, Tensor};

pub(super) fn elementwise(
    o: &Opts,
    device: Device,
    dtype: DType,
    peak_bw: f64,
    rows: &mut Vec<Row>,
) -> xpu::Result<()> {
    let sizes: &[usize] = if o.quick {
        &[1 << 20]
    } else {
        &[1 << 20, 1 << 24]
    };
    for &n in sizes {
        let x = Tensor::randn(&[n], dtype, device, 1)?;
        let y = Tensor::randn(&[n], dtype, device, 2)?;
        let bias = Tensor::randn(&[1024], dtype, device, 3)?;
        let x2 = x.reshape(&[n / 1024, 1024])?;
        let mask = x.gt(&y)?;
        let planes = x.reshape(&[1, n / 4096, 64, 64])?;
        let nchw = x.reshape(&[n >> 18, 64, 64, 64])?;
        // Channels-last operands: their sum is channels-last, read and written in storage order.
        let cl = xpu::MemoryFormat::ChannelsLast;
        let cl_x = nchw.to_memory_format(cl)?;
        let cl_y = y.reshape(&[n >> 18, 64, 64, 64])?.to_memory_format(cl)?;
        let ids = Tensor::arange(0.0, (n / 1024) as f64, 1.0, DType::I32, device)?;
        let b = dtype.size_in_bytes() as f64 * n as f64;
        // u8 results and masks: one byte per element.
        let m = n as f64;
        let cases: Vec<(&str, f64, Op)> = vec![
            ("exp", 2.0 * b, Box::new(|| x.exp())),
            ("gelu", 2.0 * b, Box::new(|| x.gelu())),
            ("add", 3.0 * b, Box::new(|| x.add(&y))),
            ("add_bias_broadcast", 2.0 * b, Box::new(|| x2.add(&bias))),
            ("add_channels_last", 3.0 * b, Box::new(|| cl_x.add(&cl_y))),
            ("affine", 2.0 * b, Box::new(|| x.affine(2.0, 1.0))),
            ("transpose_copy", 2.0 * b, Box::new(|| x2.t()?.contiguous())),
            // NCHW -> NHWC: 64 channels of 64x64 planes.
            (
                "to_channels_last_copy",
                2.0 * b,
                Box::new(|| nchw.permute(&[0, 2, 3, 1])?.contiguous()),
            ),
            ("gt", 2.0 * b + m, Box::new(|| x.gt(&y))),
            (
                "where_cond",
                3.0 * b + m,
                Box::new(|| mask.where_cond(&x, &y)),
            ),
            (
                "index_select_rows",
                2.0 * b,
                Box::new(|| x2.index_select(0, &ids)),
            ),
            // 3x3 windows, stride 2: every element read, a quarter written.
            (
                "max_pool2d_3x3_s2",
                1.25 * b,
                Box::new(|| planes.max_pool2d((3, 3), (2, 2), (1, 1))),
            ),
            (
                "avg_pool2d_2x2_s2",
                1.25 * b,
                Box::new(|| planes.avg_pool2d((2, 2), (2, 2), (0, 0), true)),
            ),
        ];
        for (name, bytes, f) in cases {
            let ms = time(device, o.quick, f)?;
            rows.push(Row::bytes(
                name,
                "contiguous",
                device,
                dtype,
                vec![n],
                ms,
                bytes,
                peak_bw,
            ));
        }
    }
    Ok(())
}

pub(super) fn reduce(
    o: &Opts,
    device: Device,
    dtype: DType,
    peak_bw: f64,
    rows: &mut Vec<Row>,
) -> xpu::Result<()> {
    let (r, c) = if o.quick { (1024, 1024) } else { (4096, 4096) };
    let x = Tensor::randn(&[r, c], dtype, device, 5)?;
    let b = (dtype.size_in_bytes() * r * c) as f64;
    let cases: Vec<(&str, &str, f64, Op)> = vec![
        ("sum", "last_dim", b, Box::new(|| x.sum(-1, false))),
        ("sum", "first_dim", b, Box::new(|| x.sum(0, false))),
        ("max", "last_dim", b, Box::new(|| x.max(-1, false))),
        ("argmax", "last_dim", b, Box::new(|| x.argmax(-1, false))),
        ("softmax", "last_dim", 2.0 * b, Box::new(|| x.softmax(-1))),
    ];
    for (name, variant, bytes, f) in cases {
        let ms = time(device, o.quick, f)?;
        rows.push(Row::bytes(
            name,
            variant,
            device,
            dtype,
            vec![r, c],
            ms,
            bytes,
            peak_bw,
        ));
    }
    Ok(())
}

pub(super) fn matmul(
    o: &Opts,
    device: Device,
    dtype: DType,
    peak_flops: Option<f64>,
    rows: &mut Vec<Row>,
) -> xpu::Result<()> {
    let shapes: Vec<(usize, usize, usize)> = if !o.shapes.is_empty() {
        o.shapes.clone()
    } else if o.quick {
        vec![(256, 256, 256), (512, 512, 512)]
    } else {
        vec![
            (256, 256, 256),
            (512, 512, 512),
            (1024, 1024, 1024),
            (2048, 2048, 2048),
            (4096, 4096, 4096),
            (8192, 320, 320),
            (8192, 320, 1280),
            (8192, 640, 640),
            (154, 768, 320),
        ]
    };
    for (m, k, n) in shapes {
        let a = Tensor::randn(&[m, k], dtype, device, 1)?;
        let b = Tensor::randn(&[k, n], dtype, device, 2)?;
        let row = |variant: &str, ms: f64| {
            let flops = 2.0 * (m * n * k) as f64;
            Row::flops(
                "matmul",
                variant,
                device,
                dtype,
                vec![m, k, n],
                ms,
                flops,
                peak_flops,
            )
        };
        let ms = time(device, o.quick, || a.matmul(&b))?;
        rows.push(row("default", ms));
        if device == Device::Xpu && m > 32 && o.shapes.is_empty() {
            xpu_tile_forms(o, dtype, (m, k, n), (&a, &b), peak_flops, rows)?;
        }
        // The cooperative-matrix kernel where the adapter has one (forced: Auto does not pick it).
        let coop = xpu::xpu_features().is_ok_and(|f| {
            f.subgroup && (f.coop_f32_8x8 || (dtype == DType::F16 && f.coop_f16_16x16))
        });
        if device == Device::Xpu && coop {
            use xpu::MatmulKernel::CoopMatrix;
            // B as given, and as the transposed view of a [n, k] weight (the nn Linear layout).
            let bt = Tensor::randn(&[n, k], dtype, device, 3)?.transpose(0, 1)?;
            for (variant, rhs) in [("coop_matrix", &b), ("coop_matrix_bt", &bt)] {
                match time(device, o.quick, || {
                    a.matmul_fused(rhs).kernel(CoopMatrix).run()
                }) {
                    Ok(ms) => rows.push(row(variant, ms)),
                    Err(e) => eprintln!("bench: {variant} {m}x{k}x{n} {dtype}: {e}"),
                }
            }
        }
    }
    Ok(())
}

/// The Xpu tile config `Auto` takes for f32 at this shape, forced in its scalar and its vec4
/// form, with B as given (`tiled`, `tiled_vec4`) and as the transposed view of a `[n, k]` weight
/// (`tiled_bt`, `tiled_vec4_bt`, the nn Linear layout): which form is faster on a GPU decides
/// `Auto` (`XPU_MATMUL_VEC4`).
fn xpu_tile_forms(
    o: &Opts,
    dtype: DType,
    (m, k, n): (usize, usize, usize),
    (a, b): (&Tensor, &Tensor),
    peak_flops: Option<f64>,
    rows: &mut Vec<Row>,
) -> xpu::Result<()> {
    use xpu::{MatmulKernel::Tiled, TileConfig};
    let large = m >= 512 && n >= 512;
    let (scalar, vec4) = if large {
        (TileConfig::Large, TileConfig::LargeVec4)
    } else {
        (TileConfig::Medium, TileConfig::MediumVec4)
    };
    let bt = Tensor::randn(&[n, k], dtype, Device::Xpu, 3)?.transpose(0, 1)?;
    let forms = [
        ("tiled", scalar, b),
        ("tiled_vec4", vec4, b),
        ("tiled_bt", scalar, &bt),
        ("tiled_vec4_bt", vec4, &bt),
    ];
    for (variant, tile, rhs) in forms {
        let ms = time(Device::Xpu, o.quick, || {
            a.matmul_fused(rhs).kernel(Tiled(tile)).run()
        })?;
        rows.push(Row::flops(
            "matmul",
            variant,
            Device::Xpu,
            dtype,
            vec![m, k, n],
            ms,
            2.0 * (m * n * k) as f64,
            peak_flops,
        ));
    }
    Ok(())
}

/// SD 1.5's 3x3 convolutions (batch 2, padding 1): 320 ch at 64x64, 640 at 32x32, 1280 at 16x16.
/// Variants: `nchw` and `channels_last` are `conv2d` calls (the Cpu packs the weights per call;
/// NCHW also converts to NHWC and back), `layer_cl` is `nn::Conv2d` (weights prepacked once) on a
/// channels-last input (on the Cpu: Winograd), `layer_cl_fused` adds SiLU and a residual
/// in the same pass, `layer_cl_implicit` is the layer with the implicit GEMM forced (Winograd
/// off on both devices; on the Xpu the tensor-core form for f16 where the adapter has f16
/// cooperative matrices, else the FMA one). The other rows run the autotuner's choice. GFLOP/s count the direct
/// convolution's FLOPs, so Winograd rows can pass 100%.
pub(super) fn conv(
    o: &Opts,
    device: Device,
    dtype: DType,
    peak_flops: Option<f64>,
    rows: &mut Vec<Row>,
) -> xpu::Result<()> {
    use xpu::MemoryFormat::ChannelsLast;
    let shapes: Vec<(usize, usize)> = if o.quick {
        vec![(64, 16)]
    } else {
        vec![(320, 64), (640, 32), (1280, 16)]
    };
    let p = xpu::Conv2dParams {
        padding: (1, 1),
        ..Default::default()
    };
    for (c, hw) in shapes {
        let x = Tensor::randn(&[2, c, hw, hw], dtype, device, 1)?;
        let w = Tensor::randn(&[c, c, 3, 3], dtype, device, 2)?.mul_scalar(0.02)?;
        let b = Tensor::randn(&[c], dtype, device, 3)?;
        let xcl = x.to_memory_format(ChannelsLast)?;
        let res =
            Tensor::randn(&[2, c, hw, hw], dtype, device, 4)?.to_memory_format(ChannelsLast)?;
        let layer = xpu::nn::Conv2d::new(w.clone(), Some(b.clone()), p)?;
        // The implicit GEMM forced on both devices (Winograd off).
        let tensor_cores = dtype == DType::F16
            && device == Device::Xpu
            && xpu::xpu_features().is_ok_and(|f| f.coop_f16_16x16 && f.subgroup);
        let gpu_gemm = if tensor_cores { "coop16" } else { "gemm" };
        let implicit_gemm = |c: &mut xpu::config::Config| {
            c.autotune.force("cpu_conv2d", "implicit_gemm");
            c.autotune.force("gpu_conv2d", gpu_gemm);
        };
        let implicit = xpu::config::scoped(implicit_gemm, || {
            xpu::nn::Conv2d::new(w.clone(), Some(b.clone()), p)
        })?;
        let silu = xpu::Activation::Silu;
        let variants: [(&str, Op); 5] = [
            ("nchw", Box::new(|| x.conv2d(&w, Some(&b), p))),
            ("channels_last", Box::new(|| xcl.conv2d(&w, Some(&b), p))),
            ("layer_cl", Box::new(|| layer.forward(&xcl))),
            (
                "layer_cl_fused",
                Box::new(|| layer.forward_fused(&xcl, Some(&res), silu)),
            ),
            (
                "layer_cl_implicit",
                Box::new(|| xpu::config::scoped(implicit_gemm, || implicit.forward(&xcl))),
            ),
        ];
        for (variant, f) in variants {
            let ms = time(device, o.quick, f)?;
            rows.push(Row::flops(
                "conv2d_3x3",
                variant,
                device,
                dtype,
                vec![2, c, hw, hw],
                ms,
                2.0 * (2 * c * c * 9 * hw * hw) as f64,
                peak_flops,
            ));
        }
        // A 2x upsampling transposed convolution (kernel 4, stride 2, padding 1) of the same
        // input: counted as its useful multiply-adds, 2·N·C·O·16·H·W (the sub-pixel split
        // does those plus ~3% of rows cropped afterwards).
        let wt = Tensor::randn(&[c, c, 4, 4], dtype, device, 5)?.mul_scalar(0.02)?;
        let pt = xpu::ConvTranspose2dParams {
            stride: (2, 2),
            padding: (1, 1),
            ..Default::default()
        };
        // The functional op (weight rearranged per call) and the nn layer (once).
        let ct_layer = xpu::nn::ConvTranspose2d::new(wt.clone(), None, pt)?;
        let ct_variants: [(&str, Op); 2] = [
            (
                "channels_last",
                Box::new(|| xcl.conv_transpose2d(&wt, None, pt)),
            ),
            ("layer_cl", Box::new(|| ct_layer.forward(&xcl))),
        ];
        for (variant, f) in ct_variants {
            let ms = time(device, o.quick, f)?;
            rows.push(Row::flops(
                "conv_transpose2d_4x4_s2",
                variant,
                device,
                dtype,
                vec![2, c, hw, hw],
                ms,
                2.0 * (2 * c * c * 16 * hw * hw) as f64,
                peak_flops,
            ));
        }
    }
    Ok(())
}

/// SD 1.5's GEGLU feed-forward at 2×4096 tokens, dim 320 (inner 1280), fused and unfused.
pub(super) fn ffn(
    o: &Opts,
    device: Device,
    dtype: DType,
    peak_flops: Option<f64>,
    rows: &mut Vec<Row>,
) -> xpu::Result<()> {
    let (tokens, dim) = if o.quick {
        (2 * 256, 64)
    } else {
        (2 * 4096, 320)
    };
    let inner = 4 * dim;
    let x = Tensor::randn(&[tokens, dim], dtype, device, 1)?;
    let w1 = Tensor::randn(&[2 * inner, dim], dtype, device, 2)?.mul_scalar(0.05)?;
    let b1 = Tensor::randn(&[2 * inner], dtype, device, 3)?;
    let w2 = Tensor::randn(&[dim, inner], dtype, device, 4)?.mul_scalar(0.05)?;
    let b2 = Tensor::randn(&[dim], dtype, device, 5)?;
    let flops = 2.0 * (tokens * dim * 2 * inner + tokens * inner * dim) as f64;
    let fused = time(device, o.quick, || {
        x.ffn_geglu(&w1, Some(&b1), &w2, Some(&b2), Some(&x))
    })?;
    let unfused = time(device, o.quick, || {
        x.ffn_geglu_unfused(&w1, Some(&b1), &w2, Some(&b2), Some(&x))
    })?;
    for (variant, ms) in [("fused", fused), ("unfused", unfused)] {
        rows.push(Row::flops(
            "ffn_geglu",
            variant,
            device,
            dtype,
            vec![tokens, dim, inner],
            ms,
            flops,
            peak_flops,
        ));
    }
    Ok(())
}
