//! The caching allocator: steady state creates no buffers, drops return memory, empty_cache
//! releases the cache, and a memory limit gives OutOfMemory without breaking the runtime.
//! One test function, because the statistics are process-wide.

mod common;

use xpu::{DType, Device, Error, Tensor};

fn step(x: &Tensor, w: &Tensor) -> f32 {
    let h = x.matmul(w).unwrap().gelu().unwrap().add(x).unwrap();
    let s = h
        .softmax(-1)
        .unwrap()
        .sum(-1, false)
        .unwrap()
        .to_dtype(DType::F16)
        .unwrap();
    s.to_dtype(DType::F32).unwrap().to_vec::<f32>().unwrap()[0]
}

#[test]
fn caching_allocator_lifecycle() {
    if !common::xpu() {
        return;
    }
    let x = Tensor::randn(&[33, 64], DType::F32, Device::Xpu, 1).unwrap();
    let w = Tensor::randn(&[64, 64], DType::F32, Device::Xpu, 2).unwrap();
    xpu::synchronize().unwrap();
    let baseline = xpu::memory_stats(Device::Xpu).unwrap();

    let first = step(&x, &w);
    let after_first = xpu::memory_stats(Device::Xpu).unwrap();
    for _ in 0..100 {
        assert_eq!(step(&x, &w), first, "the same inputs give the same output");
    }
    let after = xpu::memory_stats(Device::Xpu).unwrap();
    assert_eq!(
        after.buffers_created, after_first.buffers_created,
        "steady state creates no wgpu buffers"
    );
    assert!(after.cache_hits > after_first.cache_hits);
    assert_eq!(
        after.allocated, baseline.allocated,
        "dropping all temporaries returns allocated to baseline"
    );
    assert!(after.peak_allocated > baseline.allocated);
    assert!(
        after.reserved > after.allocated,
        "freed buffers stay cached"
    );

    xpu::empty_cache().unwrap();
    let emptied = xpu::memory_stats(Device::Xpu).unwrap();
    assert_eq!(
        emptied.reserved, emptied.allocated,
        "empty_cache releases every cached buffer"
    );

    // A limit smaller than a request: a clear OutOfMemory, then the runtime keeps working.
    xpu::set_memory_limit(Some(emptied.reserved + (1 << 20))).unwrap();
    match Tensor::zeros(&[4 << 20], DType::F32, Device::Xpu) {
        Err(Error::OutOfMemory {
            requested, limit, ..
        }) => {
            assert_eq!(requested, 16 << 20);
            assert_eq!(limit, emptied.reserved + (1 << 20));
        }
        other => panic!("expected OutOfMemory, got {other:?}"),
    }
    let small = Tensor::ones(&[1000], DType::F32, Device::Xpu).unwrap();
    assert_eq!(small.sum_all().unwrap().to_scalar::<f32>().unwrap(), 1000.0);
    xpu::set_memory_limit(None).unwrap();
    let big = Tensor::zeros(&[4 << 20], DType::F32, Device::Xpu).unwrap();
    assert_eq!(big.sum_all().unwrap().to_scalar::<f32>().unwrap(), 0.0);
    drop(big);
    assert_eq!(step(&x, &w), first);

    // A tensor larger than the adapter's largest buffer is refused up front.
    let max = xpu::xpu_adapter().unwrap().max_buffer_size;
    let elems = (max / 4 + 1024) as usize;
    assert!(matches!(
        Tensor::zeros(&[elems], DType::F32, Device::Xpu),
        Err(Error::OutOfMemory { .. })
    ));

    xpu::reset_peak_memory_stats().unwrap();
    let s = xpu::memory_stats(Device::Xpu).unwrap();
    assert_eq!(s.peak_allocated, s.allocated);
    assert!(
        xpu::memory_stats(Device::Cpu).is_err(),
        "Cpu has no allocator statistics"
    );
    upload_into_a_recycled_buffer_keeps_queue_order();
}

fn upload_into_a_recycled_buffer_keeps_queue_order() {
    // `a` is read by a recorded (unsubmitted) kernel and then dropped; the next upload reuses
    // its buffer. The kernel must still see the old data.
    for i in 0..20 {
        let a = Tensor::full(i as f64, &[4096], DType::F32, Device::Xpu).unwrap();
        let y = a.add_scalar(1.0).unwrap();
        drop(a);
        let b = Tensor::full(-5.0, &[4096], DType::F32, Device::Xpu).unwrap();
        assert_eq!(y.to_vec::<f32>().unwrap()[4095], i as f32 + 1.0);
        assert_eq!(b.to_vec::<f32>().unwrap()[0], -5.0);
    }
}
