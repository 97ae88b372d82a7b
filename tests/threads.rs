//! Tensors created and used from several threads at once give correct results on both devices.

mod common;

use xpu::{DType, Device, Tensor};

#[test]
fn concurrent_ops_on_every_device() {
    let devices = common::devices();
    let handles: Vec<_> = (0..6)
        .map(|t| {
            let devices = devices.clone();
            std::thread::spawn(move || {
                for device in devices {
                    for i in 0..10 {
                        let seed = (t * 100 + i) as u64;
                        let a = Tensor::randn(&[31, 17], DType::F32, device, seed).unwrap();
                        let b = Tensor::randn(&[17, 9], DType::F32, device, seed + 1).unwrap();
                        let got = a
                            .matmul(&b)
                            .unwrap()
                            .exp()
                            .unwrap()
                            .sum(1, false)
                            .unwrap()
                            .to_vec::<f32>()
                            .unwrap();
                        let (ca, cb) = (a.to(Device::Cpu).unwrap(), b.to(Device::Cpu).unwrap());
                        let want = ca
                            .matmul(&cb)
                            .unwrap()
                            .exp()
                            .unwrap()
                            .sum(1, false)
                            .unwrap()
                            .to_vec::<f32>()
                            .unwrap();
                        for (g, w) in got.iter().zip(&want) {
                            assert!(
                                (g - w).abs() <= 1e-4 * w.abs().max(1.0),
                                "thread {t} {device}: {g} vs {w}"
                            );
                        }
                    }
                }
            })
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}
