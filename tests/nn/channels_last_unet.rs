//! The UNet with channels-last activations (the Cpu default) against the NCHW path on the tiny
//! SD 1.x fixture: same values, the output in the sample's format, and every block keeping the
//! channels-last format of its input (so no convolution transposes), also with GELU and
//! scale-shift ResNets (the `embeds` fixture).

use crate::common;
use common::unet_fixture::{self, assert_rel, Io};
use common::values;
use xpu::models::unet::{AddedCond, UNet2DConditionModel};
use xpu::{DType, Device, MemoryFormat, Tensor};

fn io(key: &str, dtype: DType) -> Tensor {
    Io::open("sd1").get(key, dtype, Device::Cpu)
}

fn fixture_dir() -> std::path::PathBuf {
    unet_fixture::fixture_dir("sd1")
}

fn cl(x: &Tensor) -> Tensor {
    x.to_memory_format(MemoryFormat::ChannelsLast).unwrap()
}

#[test]
fn channels_last_unet_equals_nchw_path() {
    for (dtype, tol) in [(DType::F32, 1e-5), (DType::BF16, 3e-2)] {
        let unet =
            UNet2DConditionModel::from_pretrained(fixture_dir(), dtype, Device::Cpu).unwrap();
        assert_eq!(unet.activation_format(), MemoryFormat::ChannelsLast);
        let (x, t, ehs) = (
            io("sample", dtype),
            io("timestep", dtype),
            io("encoder_hidden_states", dtype),
        );
        let nchw = unet
            .forward_in_format(
                &x,
                &t,
                &ehs,
                &AddedCond::default(),
                MemoryFormat::Contiguous,
            )
            .unwrap();
        let y = unet.forward(&x, &t, &ehs).unwrap();
        assert!(
            y.is_contiguous() && nchw.is_contiguous(),
            "{dtype}: NCHW in, NCHW out"
        );
        assert_rel(&format!("{dtype} channels-last vs NCHW"), &y, &nchw, tol);
        assert_rel(
            &format!("{dtype} vs diffusers"),
            &y,
            &io("out", DType::F32),
            1e-3f64.max(tol),
        );
        // A channels-last sample gives a channels-last output with the same values.
        let y_cl = unet.forward(&cl(&x), &t, &ehs).unwrap();
        assert_eq!(y_cl.memory_format(), MemoryFormat::ChannelsLast, "{dtype}");
        assert_eq!(values(&y_cl), values(&y), "{dtype}");
    }
}

#[test]
fn channels_last_unet_odd_sizes() {
    // 9x7 latents: odd downsampling and forwarded upsample sizes (interpolation) on both paths.
    let unet =
        UNet2DConditionModel::from_pretrained(fixture_dir(), DType::F32, Device::Cpu).unwrap();
    let x = Tensor::randn(&[2, 4, 9, 7], DType::F32, Device::Cpu, 1).unwrap();
    let ehs = Tensor::randn(&[2, 5, 32], DType::F32, Device::Cpu, 2).unwrap();
    let t = Tensor::from_vec(vec![10f32, 900.0], &[2], Device::Cpu).unwrap();
    let y = unet.forward(&x, &t, &ehs).unwrap();
    let nchw = unet
        .forward_in_format(
            &x,
            &t,
            &ehs,
            &AddedCond::default(),
            MemoryFormat::Contiguous,
        )
        .unwrap();
    assert_rel("9x7 channels-last vs NCHW", &y, &nchw, 1e-5);
}

/// Every block of fixture `name` keeps a channels-last input channels-last (SD 1.x's SiLU
/// blocks; `embeds`' GELU and scale-shift ResNets and its single-ResNet mid block).
fn check_blocks_keep_channels_last(name: &str) {
    let unet = UNet2DConditionModel::from_pretrained(
        unet_fixture::fixture_dir(name),
        DType::F32,
        Device::Cpu,
    )
    .unwrap();
    let is_cl = |what: &str, t: &Tensor| {
        assert_eq!(
            t.memory_format(),
            MemoryFormat::ChannelsLast,
            "{name} {what}"
        );
        assert!(
            t.is_contiguous_for(MemoryFormat::ChannelsLast),
            "{name} {what}"
        );
    };
    let fixture = Io::open(name);
    let get = |k: &str| fixture.get(k, DType::F32, Device::Cpu);
    // The blocks see the text states after encoder_hid_proj where the model has one.
    let ehs = if fixture.has("encoder_hid_proj.out") {
        get("encoder_hid_proj.out")
    } else {
        get("encoder_hidden_states")
    };
    let temb = get("temb");
    let b = ehs.shape()[0];
    let c0 = unet.config().block_out_channels[0];
    let mut h = cl(&Tensor::randn(&[b, c0, 8, 8], DType::F32, Device::Cpu, 3).unwrap());
    let mut skips = vec![h.clone()];
    for (i, block) in unet.down_blocks().iter().enumerate() {
        if let Some(attn) = block.attentions().first() {
            let nchw = h.contiguous().unwrap();
            let y = attn.forward(&h, &ehs).unwrap();
            is_cl(&format!("down {i} attention"), &y);
            assert_rel("attention", &y, &attn.forward(&nchw, &ehs).unwrap(), 1e-5);
        }
        let r = block.resnets()[0].forward(&h, &temb).unwrap();
        is_cl(&format!("down {i} resnet"), &r);
        let want = block.resnets()[0]
            .forward(&h.contiguous().unwrap(), &temb)
            .unwrap();
        assert_rel("resnet", &r, &want, 1e-5);
        let (out, s) = block.forward(&h, &temb, Some(&ehs)).unwrap();
        is_cl(&format!("down {i}"), &out);
        for (j, t) in s.iter().enumerate() {
            is_cl(&format!("down {i} skip {j}"), t);
        }
        skips.extend(s);
        h = out;
    }
    let mid = unet.mid_block().unwrap();
    h = mid.forward(&h, &temb, &ehs).unwrap();
    is_cl("mid", &h);
    for (i, block) in unet.up_blocks().iter().enumerate() {
        let rest = skips.len() - block.resnets().len();
        let res = skips.split_off(rest);
        h = block.forward(&h, &res, &temb, Some(&ehs), None).unwrap();
        is_cl(&format!("up {i}"), &h);
    }
}

#[test]
fn blocks_keep_channels_last() {
    check_blocks_keep_channels_last("sd1");
    check_blocks_keep_channels_last("embeds");
}
