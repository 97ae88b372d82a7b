//! `retain_freed_host_memory`: the allocator keeps freed memory in the process, and tensors
//! made afterwards from that reused (dirty) memory still hold exactly their values. A test
//! binary of its own, because the setting is process-wide.

use xpu::{DType, Device, Tensor};

#[test]
fn retained_memory_is_reused_with_exact_contents() {
    let taken = xpu::retain_freed_host_memory();
    if cfg!(all(target_os = "linux", target_env = "gnu")) {
        assert!(taken, "glibc takes the settings");
    } else {
        assert!(!taken, "nothing changes on other C libraries");
    }
    // Large buffers (far above the pool's smallest, below the heap limit) written with
    // non-zero values and freed, then zeros and other sizes made from the same memory.
    for round in 0..3 {
        let n = (3 << 20) + 17 * round;
        let dirty = Tensor::full(7.5, &[n], DType::F32, Device::Cpu).unwrap();
        let sum = dirty.sum_all().unwrap().to_vec::<f32>().unwrap()[0];
        assert_eq!(sum, 7.5 * n as f32);
        drop(dirty);
        let zeros = Tensor::zeros(&[n + 1000], DType::F32, Device::Cpu).unwrap();
        assert!(zeros.to_vec::<f32>().unwrap().iter().all(|&v| v == 0.0));
        let halves = Tensor::zeros(&[2 * n], DType::BF16, Device::Cpu).unwrap();
        let halves = halves
            .to_dtype(DType::F32)
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
        assert!(halves.iter().all(|&v| v == 0.0));
        let ramp = Tensor::arange(0.0, 4096.0, 1.0, DType::F32, Device::Cpu).unwrap();
        let big = ramp
            .reshape(&[1, 4096])
            .unwrap()
            .broadcast_to(&[1024, 4096])
            .unwrap();
        let big = big.add_scalar(1.0).unwrap().contiguous().unwrap();
        let row = big.narrow(0, 1000, 1).unwrap().to_vec::<f32>().unwrap();
        assert_eq!(row, (1..=4096).map(|v| v as f32).collect::<Vec<_>>());
    }
}
