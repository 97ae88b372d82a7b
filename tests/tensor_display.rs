//! `Display` and `Debug` of a tensor print its values as PyTorch does (its `repr` with the
//! default print options, from tests/fixtures/make_display_fixtures.py), then the dtype and
//! the device, on every device; huge tensors print summarised without being read whole, and a
//! read that fails prints the shape and the error.

mod common;

use std::sync::Mutex;

use xpu::{DType, Device, Tensor};

/// Tests that change the Xpu allocator's limit run alone.
static XPU_LIMIT: Mutex<()> = Mutex::new(());

/// The bracketed values of a printed tensor (everything up to the last `]`), without the
/// `tensor(` prefix and the suffixes (`dtype=...`), which differ between the libraries.
fn body(printed: &str) -> &str {
    let start = printed.find('(').map_or(0, |i| i + 1);
    let end = printed.rfind(']').map_or(printed.len(), |i| i + 1);
    &printed[start..end]
}

#[test]
fn values_print_as_pytorch_prints_them() {
    let _alone = XPU_LIMIT.lock();
    let tensors = common::fixtures::load("display/tensors.safetensors");
    let path = common::repo_root().join("tests/fixtures/display/reprs.json");
    let reprs: std::collections::BTreeMap<String, String> =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert!(reprs.len() >= 15);
    for dev in common::devices() {
        for (name, want) in &reprs {
            let t = tensors[name].to(dev).unwrap();
            let got = format!("{t}");
            assert_eq!(
                body(&got),
                body(want),
                "{name} on {dev:?}:\n{got}\nwant\n{want}"
            );
            assert!(
                got.ends_with(&format!("dtype={}, device={dev})", t.dtype())),
                "{name}: {got}"
            );
            assert_eq!(format!("{t:?}"), got, "{name}: Debug is Display");
        }
    }
}

#[test]
fn scalars_empty_tensors_and_suffixes() {
    for dev in common::devices() {
        let s = Tensor::full(2.5, &[], DType::F32, dev).unwrap();
        assert_eq!(
            format!("{s}"),
            format!("tensor(2.5000, dtype=f32, device={dev})")
        );
        let e = Tensor::zeros(&[0, 3], DType::F16, dev).unwrap();
        assert_eq!(
            format!("{e}"),
            format!("tensor([], size=(0, 3), dtype=f16, device={dev})")
        );
        let v = Tensor::zeros(&[0], DType::I32, dev).unwrap();
        assert_eq!(
            format!("{v}"),
            format!("tensor([], dtype=i32, device={dev})")
        );
        // A view prints its own elements (strided, offset).
        let t = Tensor::arange(0.0, 12.0, 1.0, DType::F32, dev)
            .unwrap()
            .reshape(&[3, 4])
            .unwrap()
            .t()
            .unwrap()
            .narrow(0, 1, 2)
            .unwrap();
        assert_eq!(
            body(&format!("{t}")),
            "[[ 1.,  5.,  9.],\n        [ 2.,  6., 10.]]"
        );
    }
}

#[test]
fn huge_tensors_print_summarised_without_reading_everything() {
    let _alone = XPU_LIMIT.lock();
    for dev in common::devices() {
        // 2^42 elements as a broadcast view: reading them all would need 16 TiB.
        let one = Tensor::arange(0.0, 8.0, 1.0, DType::F32, dev).unwrap();
        let huge = one
            .reshape(&[1, 8])
            .unwrap()
            .broadcast_to(&[1 << 39, 8])
            .unwrap();
        let t = std::time::Instant::now();
        let printed = format!("{huge}");
        assert!(t.elapsed().as_secs_f64() < 5.0, "{:?}", t.elapsed());
        assert_eq!(
            printed,
            format!(
                "tensor([[0., 1., 2.,  ..., 5., 6., 7.],\n        [0., 1., 2.,  ..., 5., 6., 7.],\n        \
                 [0., 1., 2.,  ..., 5., 6., 7.],\n        ...,\n        [0., 1., 2.,  ..., 5., 6., 7.],\n        \
                 [0., 1., 2.,  ..., 5., 6., 7.],\n        [0., 1., 2.,  ..., 5., 6., 7.]], dtype=f32, device={dev})"
            )
        );
    }
}

#[test]
fn a_failed_read_prints_the_shape_and_the_error() {
    let _alone = XPU_LIMIT.lock();
    if !common::xpu() {
        return;
    }
    let t = Tensor::randn(&[40, 50], DType::F32, Device::Xpu, 1).unwrap();
    xpu::synchronize().unwrap();
    let used = xpu::memory_stats(Device::Xpu).unwrap().allocated;
    // No room for the copies a print makes: the read fails, the print does not.
    xpu::set_memory_limit(Some(used)).unwrap();
    xpu::empty_cache().unwrap();
    let printed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| format!("{t}")));
    xpu::set_memory_limit(None).unwrap();
    let printed = printed.expect("printing never panics");
    assert!(
        printed.starts_with("tensor(<values unavailable: ")
            && printed.contains("size=[40, 50]")
            && printed.contains("out of memory")
            && printed.ends_with("dtype=f32, device=xpu)"),
        "{printed}"
    );
    // The limit lifted, the same tensor prints its values.
    assert!(format!("{t}").starts_with("tensor([["));
}
