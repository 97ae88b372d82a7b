//! The Xpu Winograd F(2×2, 3×3) convolution (`ConvTile::Winograd`, and `Auto` on wide
//! layers) against the f32 Cpu reference: odd channel counts (16-bit rows padded to even),
//! odd and even output sizes (partial 2×2 tiles, pixel-pair and channel-pair stores), paddings
//! 0, 1 and 2, every dtype, NCHW and channels-last inputs and outputs in every combination,
//! every epilogue, f32 and (forced) 16-bit transformed operands, prepared filters, and the
//! errors of a forced Winograd on other geometries.

use super::common::{self, randn, values, FLOATS};
use super::{check, check_every_dtype_and_layout, gpu_lock, params, Case, Run, EPIS};
use xpu::ops::conv_xpu::{
    conv2d_xpu, set_winograd_sixteen_bit_operands, winograd_filters, ConvTile, ConvXpuArgs,
};
use xpu::{Conv2dParams, DType, Device, Error, Tensor};

#[test]
fn forced_winograd_odd_sizes_every_dtype_layout_and_epilogue() {
    if !common::xpu() {
        return;
    }
    let _g = gpu_lock();
    odd_sizes();
}

/// The same cases with f16/bf16 transformed operands (what f16 takes where tensor cores
/// multiply them; forced here so every adapter runs the 16-bit transforms).
#[test]
fn forced_winograd_with_sixteen_bit_operands() {
    if !common::xpu() {
        return;
    }
    let _g = gpu_lock();
    /// Puts the default back even when a check panics.
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            set_winograd_sixteen_bit_operands(false);
        }
    }
    let _reset = Reset;
    set_winograd_sixteen_bit_operands(true);
    odd_sizes();
}

fn odd_sizes() {
    let case = |n, c, hw, o, pad| Case {
        n,
        c,
        hw,
        o,
        k: (3, 3),
        p: params(1, pad, 1, 1),
    };
    let cases = [
        case(1, 1, (1, 1), 1, 1),
        case(2, 3, (7, 7), 5, 1),
        case(1, 5, (13, 6), 8, 1),
        case(1, 33, (8, 8), 7, 0),
        case(2, 6, (5, 9), 33, 2),
        case(1, 7, (4, 4), 2, 0),
        case(1, 65, (9, 10), 66, 1),
    ];
    check_every_dtype_and_layout(&cases, 5000, |_, _, _| ConvTile::Winograd);
}

/// A layer wide enough for the static rule's Winograd (128+ channels, 128 tiles), on each
/// dtype; the autotuner's `gpu_conv2d` candidates `winograd` and `gemm` forced on a narrow
/// layer. Under the static rules (the autotuner off), so `Auto` is the rule's pick.
#[test]
fn auto_takes_winograd_on_wide_layers() {
    if !common::xpu() {
        return;
    }
    let _g = gpu_lock();
    common::coop16::static_rules(wide_layers);
}

fn wide_layers() {
    let case = Case {
        n: 2,
        c: 128,
        hw: (16, 16),
        o: 136,
        k: (3, 3),
        p: params(1, 1, 1, 1),
    };
    for (i, &dtype) in FLOATS.iter().enumerate() {
        let run = Run {
            dtype,
            nhwc_in: i % 2 == 1,
            nhwc_out: i % 2 == 1,
            epi: EPIS[4],
            tile: ConvTile::Auto,
            w_hwio: false,
            seed: 40 + i as u64,
        };
        check(&case, run);
    }
    // Auto computes exactly what a forced Winograd computes (f32: no tensor-core path), and
    // not what the implicit GEMM computes.
    let gx = |t: Tensor| t.to(Device::Xpu).unwrap();
    let run = |x: &Tensor, w: &Tensor, tile| {
        let args = ConvXpuArgs {
            tile,
            ..Default::default()
        };
        values(&conv2d_xpu(x, w, params(1, 1, 1, 1), &args).unwrap())
    };
    let x = gx(randn(&[2, 128, 16, 16], DType::F32, 1));
    let w = gx(randn(&[136, 128, 3, 3], DType::F32, 2));
    let auto = run(&x, &w, ConvTile::Auto);
    assert_eq!(auto, run(&x, &w, ConvTile::Winograd));
    assert_ne!(auto, run(&x, &w, ConvTile::Medium));
    // Narrow layers stay on the implicit GEMM unless Winograd is forced.
    let x = gx(randn(&[1, 8, 9, 9], DType::F32, 3));
    let w = gx(randn(&[8, 8, 3, 3], DType::F32, 4));
    let (wino, implicit) = (
        run(&x, &w, ConvTile::Winograd),
        run(&x, &w, ConvTile::Medium),
    );
    assert_ne!(wino, implicit);
    assert_eq!(run(&x, &w, ConvTile::Auto), implicit);
    let auto = |kernel| {
        xpu::config::scoped(
            |c| c.autotune.force("gpu_conv2d", kernel),
            || run(&x, &w, ConvTile::Auto),
        )
    };
    let (all, none) = (auto("winograd"), auto("gemm"));
    assert_eq!(all, wino);
    assert_eq!(none, implicit);
}

/// Under a memory limit that holds the output but not Winograd's temporaries, the automatic
/// choice falls back to the implicit GEMM; a forced Winograd is a clear OutOfMemory. Under the
/// static rules (the autotuner off), so `Auto` is the rule's pick.
#[test]
fn auto_falls_back_when_winograd_temporaries_do_not_fit() {
    if !common::xpu() {
        return;
    }
    let _g = gpu_lock();
    common::coop16::static_rules(winograd_out_of_memory);
}

fn winograd_out_of_memory() {
    /// Lifts the limit even when a check panics.
    struct Unlimit;
    impl Drop for Unlimit {
        fn drop(&mut self) {
            xpu::set_memory_limit(None).unwrap();
        }
    }
    let gx = |t: Tensor| t.to(Device::Xpu).unwrap();
    let x = gx(randn(&[2, 128, 16, 16], DType::F32, 5));
    let w = gx(randn(&[136, 128, 3, 3], DType::F32, 6));
    let run = |tile| {
        let args = ConvXpuArgs {
            tile,
            ..Default::default()
        };
        conv2d_xpu(&x, &w, params(1, 1, 1, 1), &args).and_then(|y| {
            xpu::synchronize()?;
            Ok(y)
        })
    };
    let wino = values(&run(ConvTile::Winograd).unwrap());
    let implicit = values(
        &xpu::config::scoped(
            |c| c.autotune.force("gpu_conv2d", "gemm"),
            || run(ConvTile::Auto),
        )
        .unwrap(),
    );
    assert_eq!(values(&run(ConvTile::Auto).unwrap()), wino);
    xpu::synchronize().unwrap();
    xpu::empty_cache().unwrap();
    let reserved = xpu::memory_stats(Device::Xpu).unwrap().reserved;
    // The output (2·136·16·16 f32, 278,528 B) fits; V (1 MiB) does not.
    let _unlimit = Unlimit;
    xpu::set_memory_limit(Some(reserved + 300_000)).unwrap();
    let e = run(ConvTile::Winograd).unwrap_err();
    assert!(matches!(e, Error::OutOfMemory { .. }), "{e}");
    let y = run(ConvTile::Auto).unwrap();
    drop(_unlimit);
    assert_eq!(values(&y), implicit);
}

/// A residual broadcast from `[1, O, 1, 1]` and a bias read with a stride: Winograd agrees with
/// the implicit GEMM.
#[test]
fn broadcast_residual_and_strided_bias() {
    if !common::xpu() {
        return;
    }
    let _g = gpu_lock();
    let gx = |t: Tensor| t.to(Device::Xpu).unwrap();
    for dtype in FLOATS {
        let x = gx(randn(&[2, 6, 7, 8], dtype, 7));
        let w = gx(randn(&[10, 6, 3, 3], dtype, 8));
        let res = gx(randn(&[1, 10, 1, 1], dtype, 9));
        let bias = gx(randn(&[10, 2], dtype, 10))
            .narrow(1, 1, 1)
            .and_then(|b| b.squeeze(1))
            .unwrap();
        assert_eq!(bias.strides(), &[2]);
        let run = |tile| {
            let args = ConvXpuArgs {
                tile,
                bias: Some(&bias),
                residual: Some(&res),
                activation: xpu::Activation::Silu,
                ..Default::default()
            };
            values(&conv2d_xpu(&x, &w, params(1, 1, 1, 1), &args).unwrap())
        };
        let (wino, implicit) = (run(ConvTile::Winograd), run(ConvTile::Medium));
        let scale = implicit.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        let tol = 8.0 * common::eps(dtype) * scale;
        common::assert_close(&format!("{dtype}"), &wino, &implicit, tol, 0.0);
    }
}

#[test]
fn prepared_filters_give_the_same_result() {
    if !common::xpu() {
        return;
    }
    let _g = gpu_lock();
    let gx = |t: Tensor| t.to(Device::Xpu).unwrap();
    for (dtype, c) in [(DType::F32, 5), (DType::F16, 7), (DType::BF16, 6)] {
        let x = gx(randn(&[2, c, 9, 7], dtype, 3));
        // A transposed weight view: the transform reads it through its strides.
        let w = gx(randn(&[3, 3, c, 10], dtype, 4))
            .permute(&[3, 2, 0, 1])
            .unwrap();
        let u = winograd_filters(&w).unwrap();
        // f32 filters, or f16 ones (channels padded to even) where tensor cores take them.
        let cp = match u.dtype() {
            DType::F32 => c,
            DType::F16 if dtype == DType::F16 => c.div_ceil(2) * 2,
            other => panic!("{dtype} filters came out in {other}"),
        };
        assert_eq!(u.shape(), &[16, cp, 10]);
        let run = |prepared| {
            let args = ConvXpuArgs {
                tile: ConvTile::Winograd,
                winograd_filters: prepared,
                ..Default::default()
            };
            values(&conv2d_xpu(&x, &w, params(1, 1, 1, 1), &args).unwrap())
        };
        assert_eq!(run(Some(&u)), run(None), "{dtype}");
    }
}

#[test]
fn forced_winograd_errors() {
    if !common::xpu() {
        return;
    }
    let _g = gpu_lock();
    let gx = |t: Tensor| t.to(Device::Xpu).unwrap();
    let x = gx(randn(&[1, 4, 8, 8], DType::F32, 1));
    let forced = ConvXpuArgs {
        tile: ConvTile::Winograd,
        ..Default::default()
    };
    let w3 = gx(randn(&[4, 4, 3, 3], DType::F32, 2));
    let w1 = gx(randn(&[4, 4, 1, 1], DType::F32, 2));
    let wg = gx(randn(&[4, 2, 3, 3], DType::F32, 2));
    let bad = [
        (&w1, params(1, 0, 1, 1)),
        (&w3, params(2, 1, 1, 1)),
        (&w3, params(1, 2, 2, 1)),
        (&wg, params(1, 1, 1, 2)),
        (
            &w3,
            Conv2dParams {
                stride: (1, 2),
                ..params(1, 1, 1, 1)
            },
        ),
    ];
    for (w, p) in bad {
        let e = conv2d_xpu(&x, w, p, &forced).unwrap_err();
        assert!(
            matches!(e, Error::InvalidArgument { .. }) && e.to_string().contains("Winograd"),
            "{p:?}: {e}"
        );
    }
    // Prepared filters of another weight's shape or dtype.
    let other = winograd_filters(&gx(randn(&[5, 4, 3, 3], DType::F32, 3))).unwrap();
    let narrower = winograd_filters(&gx(randn(&[4, 2, 3, 3], DType::F32, 3))).unwrap();
    let bf16 = Tensor::zeros(&[16, 4, 4], DType::BF16, Device::Xpu).unwrap();
    for u in [&other, &narrower, &bf16] {
        let args = ConvXpuArgs {
            winograd_filters: Some(u),
            ..forced
        };
        let e = conv2d_xpu(&x, &w3, params(1, 1, 1, 1), &args).unwrap_err();
        assert!(matches!(e, Error::ShapeMismatch { .. }), "{e}");
    }
    // Filters of a weight that is not 3×3, or not on Xpu.
    assert!(winograd_filters(&w1).is_err());
    assert!(winograd_filters(&randn(&[4, 4, 3, 3], DType::F32, 1)).is_err());
}
