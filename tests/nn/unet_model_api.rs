//! UNet2DConditionModel beyond diffusers parity: seeded random models (the same values on every
//! run and device), the SD 1.5 / SD 2.1 / SDXL parameter lists against diffusers' counts, and
//! forward's handling of strided, broadcast and bad inputs.

use crate::common;
use common::unet_fixture::assert_rel;
use common::{values, xpu};
use xpu::models::unet::{UNet2DConditionModel, UNetConfig};
use xpu::{DType, Device, Tensor};

#[test]
fn random_tiny_model_is_seeded_and_agrees_across_devices() {
    let cfg = UNetConfig::tiny();
    let m = UNet2DConditionModel::random(&cfg, DType::F32, Device::Cpu, 7).unwrap();
    let x = Tensor::randn(&[1, 4, 8, 8], DType::F32, Device::Cpu, 1).unwrap();
    let ctx = Tensor::randn(&[1, 5, 32], DType::F32, Device::Cpu, 2).unwrap();
    let t = Tensor::from_vec(vec![500i32], &[], Device::Cpu).unwrap();
    let y = m.forward(&x, &t, &ctx).unwrap();
    assert_eq!(y.shape(), &[1, 4, 8, 8]);
    let again = UNet2DConditionModel::random(&cfg, DType::F32, Device::Cpu, 7).unwrap();
    assert_eq!(values(&again.forward(&x, &t, &ctx).unwrap()), values(&y));
    let other = UNet2DConditionModel::random(&cfg, DType::F32, Device::Cpu, 8).unwrap();
    assert_ne!(values(&other.forward(&x, &t, &ctx).unwrap()), values(&y));
    let scale = values(&y).iter().fold(0f64, |m, v| m.max(v.abs()));
    assert!(
        scale > 1e-3 && scale.is_finite(),
        "random model output scale {scale}"
    );
    if xpu() {
        let mx = UNet2DConditionModel::random(&cfg, DType::F32, Device::Xpu, 7).unwrap();
        let dev = |t: &Tensor| t.to(Device::Xpu).unwrap();
        let yx = mx.forward(&dev(&x), &dev(&t), &dev(&ctx)).unwrap();
        assert_rel("random tiny Xpu vs Cpu", &yx, &y, 1e-4);
    }
}

#[test]
fn sd15_architecture_has_diffusers_parameters() {
    // Counts from diffusers 0.42 (`UNet2DConditionModel(**config).state_dict()`).
    for (cfg, params) in [
        (UNetConfig::sd15(), 859_520_964usize),
        (UNetConfig::sd21(), 865_910_724),
    ] {
        let shapes = UNet2DConditionModel::parameter_shapes(&cfg).unwrap();
        assert_eq!(shapes.len(), 686);
        let total: usize = shapes
            .iter()
            .map(|(_, s)| s.iter().product::<usize>())
            .sum();
        assert_eq!(total, params);
        let names: std::collections::HashSet<_> = shapes.iter().map(|(n, _)| n).collect();
        assert_eq!(names.len(), shapes.len(), "duplicate parameter names");
    }
    // SDXL base: per-level transformer depths and the text_time add_embedding.
    let shapes = UNet2DConditionModel::parameter_shapes(&UNetConfig::sdxl()).unwrap();
    assert_eq!(shapes.len(), 1680);
    let total: usize = shapes
        .iter()
        .map(|(_, s)| s.iter().product::<usize>())
        .sum();
    assert_eq!(total, 2_567_463_684);
    let find = |n: &str| shapes.iter().find(|(k, _)| k == n).map(|(_, s)| s.clone());
    assert_eq!(
        find("add_embedding.linear_1.weight"),
        Some(vec![1280, 2816])
    );
    assert_eq!(
        find("down_blocks.2.attentions.1.transformer_blocks.9.attn2.to_k.weight"),
        Some(vec![1280, 2048])
    );
    let shapes = UNet2DConditionModel::parameter_shapes(&UNetConfig::sd15()).unwrap();
    let find = |n: &str| shapes.iter().find(|(k, _)| k == n).map(|(_, s)| s.clone());
    assert_eq!(
        find("down_blocks.0.attentions.0.transformer_blocks.0.attn2.to_k.weight"),
        Some(vec![320, 768])
    );
    assert_eq!(
        find("up_blocks.3.resnets.0.conv_shortcut.weight"),
        Some(vec![320, 960, 1, 1])
    );
    assert_eq!(
        find("mid_block.attentions.0.proj_in.weight"),
        Some(vec![1280, 1280, 1, 1])
    );
}

#[test]
fn forward_takes_strided_inputs_and_rejects_bad_ones() {
    let cfg = UNetConfig::tiny();
    let m = UNet2DConditionModel::random(&cfg, DType::F32, Device::Cpu, 5).unwrap();
    let x = Tensor::randn(&[2, 4, 8, 6], DType::F32, Device::Cpu, 1).unwrap();
    let ctx = Tensor::randn(&[2, 5, 32], DType::F32, Device::Cpu, 2).unwrap();
    let t = Tensor::from_vec(vec![3.5f32, 700.0], &[2], Device::Cpu).unwrap();
    let y = m.forward(&x, &t, &ctx).unwrap();
    // Channels-last sample, transposed context, a [1] timestep broadcast vs. repeated.
    let x_cl = x.to_memory_format(xpu::MemoryFormat::ChannelsLast).unwrap();
    let ctx_t = ctx
        .transpose(1, 2)
        .unwrap()
        .contiguous()
        .unwrap()
        .transpose(1, 2)
        .unwrap();
    assert!(!x_cl.is_contiguous() && !ctx_t.is_contiguous());
    assert_rel(
        "strided inputs",
        &m.forward(&x_cl, &t, &ctx_t).unwrap(),
        &y,
        1e-6,
    );
    let t1 = Tensor::from_vec(vec![42i32], &[1], Device::Cpu).unwrap();
    let t2 = Tensor::from_vec(vec![42i32, 42], &[2], Device::Cpu).unwrap();
    assert_eq!(
        values(&m.forward(&x, &t1, &ctx).unwrap()),
        values(&m.forward(&x, &t2, &ctx).unwrap())
    );
    // Moving to where the model already is keeps it.
    let same = m.to(Device::Cpu).unwrap().to_dtype(DType::F32).unwrap();
    assert_eq!(values(&same.forward(&x, &t, &ctx).unwrap()), values(&y));
    // Bad inputs: clear errors, no panics.
    let bad = [
        (
            Tensor::randn(&[2, 3, 8, 6], DType::F32, Device::Cpu, 1).unwrap(),
            ctx.clone(),
            t.clone(),
        ),
        (x.to_dtype(DType::F16).unwrap(), ctx.clone(), t.clone()),
        (
            x.clone(),
            Tensor::randn(&[2, 5, 16], DType::F32, Device::Cpu, 1).unwrap(),
            t.clone(),
        ),
        (
            x.clone(),
            Tensor::randn(&[1, 5, 32], DType::F32, Device::Cpu, 1).unwrap(),
            t.clone(),
        ),
        (
            x.clone(),
            ctx.clone(),
            Tensor::from_vec(vec![1f32, 2., 3.], &[3], Device::Cpu).unwrap(),
        ),
        (
            x.clone(),
            ctx.clone(),
            Tensor::from_vec(vec![1u8, 2], &[2], Device::Cpu).unwrap(),
        ),
        (x.reshape(&[2, 4, 48]).unwrap(), ctx.clone(), t.clone()),
    ];
    for (i, (x, c, t)) in bad.iter().enumerate() {
        let e = m.forward(x, t, c).unwrap_err();
        assert!(!e.to_string().is_empty(), "case {i}");
    }
    if xpu() {
        let e = m
            .forward(&x.to(Device::Xpu).unwrap(), &t, &ctx)
            .unwrap_err();
        assert!(matches!(e, xpu::Error::DeviceMismatch { .. }), "{e}");
    }
    assert!(UNet2DConditionModel::random(&cfg, DType::I32, Device::Cpu, 0).is_err());
    assert!(m.to_dtype(DType::U8).is_err());
}
