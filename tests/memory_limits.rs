//! The library under a small memory limit: every request past it is an `xpu::Error` in well
//! under a second (no panic, no abort, nothing killed), and the same process keeps working
//! afterwards.
//!
//! How: each scenario runs in a child process (this test binary run again on that one test,
//! with an environment variable saying so), which lowers its own address-space limit
//! (`RLIMIT_AS`) to what it already uses plus a little, so an allocation past it fails as it
//! would on a machine without the memory, without risking this machine. The Xpu scenario also
//! sets the Xpu allocator's limit (lavapipe's "device memory" is host memory). Linux only.
#![cfg(target_os = "linux")]

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use xpu::models::unet::{UNet2DConditionModel, UNetConfig};
use xpu::{Conv2dParams, DType, Device, Error, Tensor};

/// Set (to the scenario's name) in the child that runs a scenario.
const CHILD: &str = "XPU_MEMORY_LIMITS_CHILD";

/// Runs `scenario` in a child process (see the module docs) and checks that it finished.
fn in_child(name: &str, scenario: impl FnOnce()) {
    if std::env::var(CHILD).as_deref() == Ok(name) {
        scenario();
        println!("scenario {name} finished");
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let out = Command::new(exe)
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, name)
        .output()
        .unwrap();
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && text.contains(&format!("scenario {name} finished")),
        "the child running {name} failed ({:?}):\n{text}",
        out.status
    );
}

/// This process's address space in use, in bytes (`VmSize`).
fn vm_size() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmSize:")).unwrap();
    let kb: u64 = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kb * 1024
}

/// Lowers the soft address-space limit to what is in use plus `extra` bytes.
fn limit_address_space(extra: u64) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read and write one `rlimit` through valid pointers.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_AS, &mut lim), 0);
        lim.rlim_cur = (vm_size() + extra).min(lim.rlim_max);
        assert_eq!(libc::setrlimit(libc::RLIMIT_AS, &lim), 0);
    }
}

/// `r` is an error that says memory ran out (or would), returned within a second of `start`.
#[track_caller]
fn refused<T>(what: &str, start: Instant, r: xpu::Result<T>) {
    let took = start.elapsed();
    match r {
        Err(
            e @ (Error::CpuOutOfMemory { .. }
            | Error::OutOfMemory { .. }
            | Error::MemoryExceeded { .. }),
        ) => eprintln!("{what}: {e} ({took:?})"),
        Err(e) => panic!("{what}: an out-of-memory error expected, got {e}"),
        Ok(_) => panic!("{what}: an out-of-memory error expected, got a result"),
    }
    assert!(
        took < Duration::from_secs(1),
        "{what}: refused after {took:?}"
    );
}

/// A view of `shape` whose every element is 1: no memory of its own, as `expand` in PyTorch.
fn ones_view(shape: &[usize], device: Device) -> Tensor {
    Tensor::ones(&vec![1; shape.len()], DType::F32, device)
        .unwrap()
        .broadcast_to(shape)
        .unwrap()
}

/// A tiny UNet's inputs for a batch of 2 samples of `h × w` latents.
fn unet_inputs(unet: &UNet2DConditionModel, (h, w): (usize, usize), dev: Device) -> [Tensor; 3] {
    let c = unet.config();
    [
        Tensor::randn(&[2, c.in_channels, h, w], DType::F32, dev, 1).unwrap(),
        Tensor::full(500.0, &[2], DType::F32, dev).unwrap(),
        Tensor::randn(&[2, 7, c.encoder_states_dim()], DType::F32, dev, 2).unwrap(),
    ]
}

/// Requests past the limit through the UNet and the ops that allocate, then a small UNet step
/// and small ops that must still work.
fn past_the_limit_then_working(dev: Device) {
    let unet = UNet2DConditionModel::random(&UNetConfig::tiny(), DType::F32, dev, 0).unwrap();
    // The small step first (rayon's threads, the Xpu's pipelines), before the limit.
    let [x, t, ctx] = unet_inputs(&unet, (16, 16), dev);
    let small = unet.forward(&x, &t, &ctx).unwrap();
    let mib = 1u64 << 20;
    limit_address_space(384 * mib);
    if dev == Device::Xpu {
        xpu::synchronize().unwrap();
        let used = xpu::memory_stats(dev).unwrap().allocated;
        xpu::set_memory_limit(Some(used + 128 * mib)).unwrap();
    }

    // The UNet at a size whose activations cannot fit: refused before any work.
    let [x, t, ctx] = unet_inputs(&unet, (1024, 1024), dev);
    let start = Instant::now();
    let r = unet.forward(&x, &t, &ctx);
    assert!(
        matches!(
            &r,
            Err(Error::MemoryExceeded {
                op: "UNet2DConditionModel::forward",
                ..
            })
        ),
        "{r:?}"
    );
    refused("UNet forward", start, r);
    drop((x, ctx));

    // A large convolution (1 GiB of output from a view that holds nothing).
    let input = ones_view(&[1, 256, 1024, 1024], dev);
    let w = Tensor::randn(&[256, 256, 3, 3], DType::F32, dev, 3).unwrap();
    let pad = Conv2dParams {
        padding: (1, 1),
        ..Default::default()
    };
    let start = Instant::now();
    refused("conv2d", start, input.conv2d(&w, None, pad));
    let layer = xpu::nn::Conv2d::new(w.clone(), None, pad).unwrap();
    let start = Instant::now();
    refused("nn::Conv2d", start, layer.forward(&input));
    let cl = input.to_memory_format(xpu::MemoryFormat::ChannelsLast);
    if let Ok(cl) = cl {
        let start = Instant::now();
        refused("nn::Conv2d channels-last", start, layer.forward(&cl));
    }
    let wt = Tensor::randn(&[256, 64, 4, 4], DType::F32, dev, 4).unwrap();
    let up = xpu::ConvTranspose2dParams {
        stride: (2, 2),
        padding: (1, 1),
        ..Default::default()
    };
    let start = Instant::now();
    refused(
        "conv_transpose2d",
        start,
        ones_view(&[1, 256, 1024, 1024], dev).conv_transpose2d(&wt, None, up),
    );

    // A product whose output is small but whose packed operand is 1 GiB (the Cpu packs B;
    // the Xpu reads the view in place, slowly on a software adapter, so only the Cpu runs it).
    if dev == Device::Cpu {
        let a = Tensor::randn(&[4, 16384], DType::F32, dev, 5).unwrap();
        let start = Instant::now();
        refused(
            "matmul (packed B)",
            start,
            a.matmul(&ones_view(&[16384, 16384], dev)),
        );
    }
    let start = Instant::now();
    refused(
        "matmul output",
        start,
        ones_view(&[16384, 4], dev).matmul(&ones_view(&[4, 16384], dev)),
    );

    // Attention over 2^22 keys (packed keys and values of 2 GiB on the Cpu; the Xpu reads
    // them in place, slowly on a software adapter, so only the Cpu runs it); a 1 GiB output.
    if dev == Device::Cpu {
        let q = Tensor::randn(&[1, 1, 4, 64], DType::F32, dev, 6).unwrap();
        let kv = ones_view(&[1, 1, 1 << 22, 64], dev);
        let start = Instant::now();
        refused(
            "attention (packed keys)",
            start,
            q.scaled_dot_product_attention(&kv, &kv, None, None),
        );
    }
    let start = Instant::now();
    let wide_q = ones_view(&[1, 16, 1 << 16, 256], dev);
    let small_kv = Tensor::randn(&[1, 16, 8, 256], DType::F32, dev, 7).unwrap();
    refused(
        "attention output",
        start,
        wide_q.scaled_dot_product_attention(&small_kv, &small_kv, None, None),
    );

    // Norms, resizing, concatenation and creation past the limit.
    let big = ones_view(&[1, 64, 2048, 2048], dev);
    let start = Instant::now();
    refused("group_norm", start, big.group_norm(32, None, None, 1e-5));
    let start = Instant::now();
    refused("layer_norm", start, big.layer_norm(None, None, 1e-5));
    let img = Tensor::ones(&[1, 64, 8, 8], DType::F32, dev).unwrap();
    let start = Instant::now();
    refused(
        "interpolate_bilinear",
        start,
        img.interpolate_bilinear([4096, 1024], false),
    );
    let start = Instant::now();
    refused(
        "interpolate_nearest",
        start,
        img.interpolate_nearest(&[4096, 1024]),
    );
    let start = Instant::now();
    refused("upsample_nearest2d", start, img.upsample_nearest2d(256));
    let start = Instant::now();
    refused("cat", start, Tensor::cat(&[&big, &big], 1));
    let start = Instant::now();
    refused("zeros", start, Tensor::zeros(&[1 << 28], DType::F32, dev));
    let start = Instant::now();
    refused(
        "randn",
        start,
        Tensor::randn(&[1 << 28], DType::F32, dev, 0),
    );
    let start = Instant::now();
    refused("contiguous", start, big.contiguous());

    // The same process still works: small ops and the small UNet step, with the same result.
    let m = Tensor::randn(&[8, 8], DType::F32, dev, 8).unwrap();
    assert_eq!(m.matmul(&m).unwrap().shape(), [8, 8]);
    let [x, t, ctx] = unet_inputs(&unet, (16, 16), dev);
    let again = unet.forward(&x, &t, &ctx).unwrap();
    assert_eq!(
        again.to_vec::<f32>().unwrap(),
        small.to_vec::<f32>().unwrap(),
        "the small step after the refusals"
    );
    assert!(format!("{again}").starts_with("tensor([[[["));
}

#[test]
fn past_the_limit_on_the_cpu_then_working() {
    in_child("past_the_limit_on_the_cpu_then_working", || {
        past_the_limit_then_working(Device::Cpu)
    });
}

#[test]
fn past_the_limit_on_the_xpu_then_working() {
    if !common::xpu() {
        return;
    }
    in_child("past_the_limit_on_the_xpu_then_working", || {
        past_the_limit_then_working(Device::Xpu)
    });
}
