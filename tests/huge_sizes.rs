//! Sizes past what memory can hold are clear errors on every device, never an aborted process,
//! a wrapped element count, or an op that runs on a shape its storage does not have.
//!
//! The refused requests are all of at least 2^50 bytes, past any 64-bit system's address
//! space, so they fail however the host overcommits memory.

mod common;

use xpu::{Conv2dParams, DType, Device, Error, Tensor};

/// 2^40: two of these multiply past `usize`.
const HUGE: usize = 1 << 40;

/// Asserts a size error (and that the message names `op` when it is an out-of-memory error).
fn refused(what: &str, r: xpu::Result<Tensor>) {
    match r {
        Err(Error::CpuOutOfMemory { requested, .. }) => {
            assert!(requested >= 1 << 50, "{what}: {requested} bytes")
        }
        Err(Error::MemoryExceeded { needed, .. }) => {
            assert!(needed >= 1 << 40, "{what}: {needed} bytes")
        }
        Err(
            Error::OutOfMemory { .. } | Error::InvalidArgument { .. } | Error::ShapeMismatch { .. },
        ) => {}
        Err(e) => panic!("{what}: a size error expected, got {e}"),
        Ok(t) => panic!(
            "{what}: a size error expected, got a tensor of {:?}",
            t.shape()
        ),
    }
}

#[test]
fn creating_tensors_past_memory_is_an_error() {
    for dev in common::devices() {
        let pb4 = [1 << 20, 1 << 20, 1 << 10];
        let e = Tensor::zeros(&pb4, DType::F32, dev).unwrap_err();
        if dev == Device::Cpu {
            assert!(
                matches!(e, Error::CpuOutOfMemory { op: "zeros", .. }),
                "{e}"
            );
            assert!(e.to_string().contains(&(1u64 << 52).to_string()), "{e}");
        }
        refused("zeros", Tensor::zeros(&pb4, DType::F32, dev));
        refused(
            "zeros overflow",
            Tensor::zeros(&[HUGE, HUGE], DType::F32, dev),
        );
        refused("full", Tensor::full(1.0, &pb4, DType::BF16, dev));
        refused(
            "ones overflow",
            Tensor::ones(&[HUGE, HUGE, 3], DType::U8, dev),
        );
        refused("randn", Tensor::randn(&pb4, DType::F32, dev, 0));
        refused(
            "rand overflow",
            Tensor::rand(&[HUGE, HUGE], DType::F16, dev, 0),
        );
        refused("arange", Tensor::arange(0.0, 1e18, 1.0, DType::F32, dev));
        // An element count that wraps to zero must not pass for an empty tensor.
        let wraps = [1usize << 32, 1 << 32];
        refused("from_vec", Tensor::from_vec(Vec::<f32>::new(), &wraps, dev));
        let empty = Tensor::zeros(&[0], DType::F32, dev).unwrap();
        refused("reshape", empty.reshape(&wraps));
        let still_empty = empty.reshape(&[0, HUGE, HUGE]).unwrap();
        assert_eq!(still_empty.numel(), 0);
    }
}

#[test]
fn ops_whose_output_exceeds_memory_are_errors() {
    for dev in common::devices() {
        let one = Tensor::ones(&[1, 1], DType::F32, dev).unwrap();
        // 2^50 elements: a view (no memory), as `expand` is in PyTorch.
        let wide = one.broadcast_to(&[HUGE, 1 << 10]).unwrap();
        refused("contiguous", wide.contiguous());
        refused("exp", wide.exp());
        refused("add", wide.add(&one));
        refused(
            "mul broadcast",
            one.broadcast_to(&[HUGE, 1])
                .unwrap()
                .mul(&one.broadcast_to(&[1, 1 << 10]).unwrap()),
        );
        refused("to_dtype", wide.to_dtype(DType::F16));
        refused(
            "sum",
            one.broadcast_to(&[1 << 50, 2]).unwrap().sum(1, false),
        );
        refused("softmax", wide.softmax(1));
        let square = one.broadcast_to(&[1 << 10, 1 << 10]).unwrap();
        refused("matmul", wide.matmul(&square));
        let big = one.broadcast_to(&[1 << 63, 1]).unwrap();
        refused("cat", Tensor::cat(&[&big, &big], 0));
        let img = Tensor::ones(&[1, 1, 2, 2], DType::F32, dev).unwrap();
        refused("upsample", img.upsample_nearest2d(1 << 62));
        refused("upsample 2^50", img.upsample_nearest2d(1 << 25));
        refused("interpolate", img.interpolate_nearest(&[HUGE, HUGE]));
        refused("pad", img.pad(&[1 << 50, 0], 0.0));
        refused("pad overflow", img.pad(&[1 << 62, 1 << 62], 0.0));
        let w = Tensor::ones(&[1, 1, 1, 1], DType::F32, dev).unwrap();
        let wrap = Conv2dParams {
            padding: (usize::MAX / 2, 0),
            ..Default::default()
        };
        refused("conv2d padding overflow", img.conv2d(&w, None, wrap));
        let wide_pad = Conv2dParams {
            padding: (1 << 24, 1 << 24),
            ..Default::default()
        };
        refused("conv2d output", img.conv2d(&w, None, wide_pad));
        let t = Tensor::ones(&[2], DType::F32, dev).unwrap();
        refused(
            "timestep_embedding",
            t.timestep_embedding(1 << 50, true, 0.0, DType::F32),
        );
        // The device still works afterwards.
        let s = img.sum(3, false).unwrap().to_vec_f32();
        assert_eq!(s, vec![2.0, 2.0], "{dev:?}");
    }
}

/// A size error (at least 2^40 bytes where it says) in under a second.
#[track_caller]
fn refused_fast(what: &str, f: impl FnOnce() -> xpu::Result<Tensor>) {
    let start = std::time::Instant::now();
    let r = f();
    let took = start.elapsed();
    match r {
        Err(
            Error::CpuOutOfMemory { requested: n, .. } | Error::MemoryExceeded { needed: n, .. },
        ) => {
            assert!(n >= 1 << 40, "{what}: {n} bytes")
        }
        Err(
            Error::OutOfMemory { .. } | Error::InvalidArgument { .. } | Error::ShapeMismatch { .. },
        ) => {}
        Err(e) => panic!("{what}: a size error expected, got {e}"),
        Ok(t) => panic!(
            "{what}: a size error expected, got a tensor of {:?}",
            t.shape()
        ),
    }
    assert!(took.as_secs_f64() < 1.0, "{what}: refused after {took:?}");
}

/// A view of `shape` whose every element is 1 (no memory of its own).
fn ones_view(shape: &[usize], dev: Device) -> Tensor {
    Tensor::ones(&vec![1; shape.len()], DType::F32, dev)
        .unwrap()
        .broadcast_to(shape)
        .unwrap()
}

/// Every public entry point that allocates refuses sizes past any machine's memory in under a
/// second, and the device works afterwards: the layers and the UNet as well as the ops.
#[test]
fn every_entry_point_refuses_absurd_sizes_quickly() {
    use xpu::models::unet::{UNet2DConditionModel, UNetConfig};
    for dev in common::devices() {
        // 2^50 elements of 4 bytes each, as views holding nothing.
        let img = ones_view(&[1, 1 << 10, 1 << 20, 1 << 20], dev);
        let w = Tensor::randn(&[4, 1 << 10, 3, 3], DType::F32, dev, 1).unwrap();
        let p = Conv2dParams {
            padding: (1, 1),
            ..Default::default()
        };
        refused_fast("conv2d", || img.conv2d(&w, None, p));
        let layer = xpu::nn::Conv2d::new(w.clone(), None, p).unwrap();
        refused_fast("nn::Conv2d", || layer.forward(&img));
        let wt = Tensor::randn(&[1 << 10, 4, 4, 4], DType::F32, dev, 2).unwrap();
        let up = xpu::ConvTranspose2dParams {
            stride: (2, 2),
            padding: (1, 1),
            ..Default::default()
        };
        refused_fast("conv_transpose2d", || img.conv_transpose2d(&wt, None, up));
        refused_fast("group_norm", || img.group_norm(32, None, None, 1e-5));
        refused_fast("layer_norm", || img.layer_norm(None, None, 1e-5));
        refused_fast("group_norm_silu", || {
            img.group_norm_silu(32, None, None, 1e-5)
        });
        let small = Tensor::ones(&[1, 4, 8, 8], DType::F32, dev).unwrap();
        refused_fast("interpolate_bilinear", || {
            small.interpolate_bilinear([1 << 24, 1 << 24], false)
        });
        refused_fast("interpolate_nearest", || {
            small.interpolate_nearest(&[1 << 24, 1 << 24])
        });
        // Attention whose output is 2^50 elements, and whose keys are 2^40.
        let q = ones_view(&[1 << 10, 16, 1 << 20, 64], dev);
        let kv = Tensor::randn(&[1 << 10, 16, 8, 64], DType::F32, dev, 3)
            .map(|t| {
                t.narrow(0, 0, 1)
                    .unwrap()
                    .broadcast_to(&[1 << 10, 16, 8, 64])
                    .unwrap()
            })
            .unwrap();
        refused_fast("attention output", || {
            q.scaled_dot_product_attention(&kv, &kv, None, None)
        });
        let q1 = Tensor::randn(&[1, 1, 4, 64], DType::F32, dev, 4).unwrap();
        let keys = ones_view(&[1, 1, 1 << 34, 64], dev);
        if dev == Device::Cpu {
            // The Cpu packs the keys (2^42 bytes); the Xpu would read them in place for hours.
            refused_fast("attention keys", || {
                q1.scaled_dot_product_attention(&keys, &keys, None, None)
            });
        }
        let a = ones_view(&[1 << 25, 1 << 25], dev);
        refused_fast("matmul", || a.matmul(&a));
        refused_fast("matmul_fused", || a.matmul_fused(&a).run());
        refused_fast("cat", || Tensor::cat(&[&img, &img], 0));
        refused_fast("zeros", || {
            Tensor::zeros(&[1 << 25, 1 << 25], DType::F32, dev)
        });
        refused_fast("randn", || {
            Tensor::randn(&[1 << 25, 1 << 25], DType::F16, dev, 0)
        });
        refused_fast("full", || {
            Tensor::full(2.0, &[1 << 25, 1 << 25], DType::BF16, dev)
        });
        refused_fast("linear", || {
            let lin =
                xpu::nn::Linear::new(Tensor::randn(&[8, 1 << 10], DType::F32, dev, 5)?, None)?;
            lin.forward(&ones_view(&[1 << 40, 1 << 10], dev))
        });
        // The UNet at an absurd latent size (a view as the sample: nothing allocated first).
        let unet = UNet2DConditionModel::random(&UNetConfig::tiny(), DType::F32, dev, 0).unwrap();
        let c = unet.config();
        let sample = ones_view(&[2, c.in_channels, 1 << 20, 1 << 20], dev);
        let t = Tensor::full(500.0, &[2], DType::F32, dev).unwrap();
        let ctx = Tensor::randn(&[2, 7, c.encoder_states_dim()], DType::F32, dev, 6).unwrap();
        refused_fast("UNet forward", || unet.forward(&sample, &t, &ctx));
        // Everything still works, the UNet included.
        let x = Tensor::randn(&[2, c.in_channels, 8, 8], DType::F32, dev, 7).unwrap();
        assert_eq!(
            unet.forward(&x, &t, &ctx).unwrap().shape(),
            [2, c.out_channels, 8, 8]
        );
        let s = small.sum(3, false).unwrap().to_vec_f32();
        assert_eq!(s, vec![8.0; 32], "{dev:?}");
    }
}

/// `Tensor` values as f32 on the host.
trait ToVecF32 {
    fn to_vec_f32(&self) -> Vec<f32>;
}

impl ToVecF32 for Tensor {
    fn to_vec_f32(&self) -> Vec<f32> {
        self.to(Device::Cpu).unwrap().to_vec::<f32>().unwrap()
    }
}

/// A stride past the input gives one output along that dim (as in PyTorch), the same values
/// as the smallest such stride, on every device (the Xpu kernels index in 32 bits).
#[test]
fn strides_past_the_input_give_one_output() {
    for dev in common::devices() {
        let x = Tensor::randn(&[2, 3, 7, 6], DType::F32, dev, 3).unwrap();
        let w = Tensor::randn(&[4, 3, 3, 2], DType::F32, dev, 4).unwrap();
        let conv = |stride| {
            let p = Conv2dParams {
                stride,
                padding: (1, 0),
                ..Default::default()
            };
            x.conv2d(&w, None, p).unwrap()
        };
        // Padded 9×6 input, 3×2 kernel: strides from 7 and 5 on give one output.
        let want = conv((7, 5)).to_vec_f32();
        for stride in [
            (usize::MAX, usize::MAX),
            (1 << 40, 5),
            (7, u32::MAX as usize + 1),
        ] {
            let got = conv(stride);
            assert_eq!(got.shape(), [2, 4, 1, 1], "{dev:?} {stride:?}");
            assert_eq!(got.to_vec_f32(), want, "{dev:?} {stride:?}");
        }
        let two = conv((4, usize::MAX));
        assert_eq!(two.shape(), [2, 4, 2, 1], "{dev:?}");
        assert_eq!(two.to_vec_f32(), conv((4, 5)).to_vec_f32(), "{dev:?}");
    }
}
