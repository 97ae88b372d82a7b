//! Manual probes of bf16 products as the model runs them, rounded to 16 bits in the GEMM store
//! (`cargo test --release --lib speed_out16 -- --ignored --nocapture`, likewise
//! `speed_amx_kcu`): never part of the suite. Every figure is the best of interleaved runs, so
//! the variants of one probe see the same machine.

use super::util::{Lay, Owned, Rng};
use half::bf16;

#[test]
#[ignore = "manual probe: bf16 products rounded by the store (Out16) against f32 output plus a separate rounding pass, interleaved best runs"]
fn speed_out16() {
    use crate::cpu::gemm::{gemm_prepacked_bf16, Epilogue, Out16, PackedB};
    for (m, k, n) in [
        (8192, 320, 1280),
        (8192, 1280, 320),
        (8192, 640, 640),
        (2048, 2048, 2048),
    ] {
        let mut rng = Rng::new(1);
        let a = Owned::<bf16>::random(m, k, Lay::Row, &mut rng);
        let b = Owned::<bf16>::random(k, n, Lay::Row, &mut rng);
        let p = PackedB::new(b.view()).expect("pack");
        let mut c = vec![0f32; m * n];
        let mut o = vec![bf16::ZERO; m * n];
        let flops = 2.0 * (m * n * k) as f64;
        let mut best = [f64::MAX; 3];
        let t0 = std::time::Instant::now();
        while t0.elapsed().as_secs_f64() < 6.0 {
            for (i, b) in best.iter_mut().enumerate() {
                let t = std::time::Instant::now();
                if i == 2 {
                    let ep = Epilogue::default().with_out16(Out16::bf16(&mut o, n));
                    gemm_prepacked_bf16(a.view(), &p, &mut c, n, &ep).expect("gemm");
                } else {
                    gemm_prepacked_bf16(a.view(), &p, &mut c, n, &Epilogue::default())
                        .expect("gemm");
                    if i == 1 {
                        crate::cpu::simd::f32_to_bf16(&c, &mut o);
                    }
                }
                *b = b.min(t.elapsed().as_secs_f64());
            }
        }
        println!(
            "{m}x{k}x{n} GFLOP/s: f32 out {:.0}, f32 out + rounding pass {:.0}, rounded in the store {:.0}",
            flops / best[0] / 1e9,
            flops / best[1] / 1e9,
            flops / best[2] / 1e9
        );
    }
}

#[test]
#[ignore = "manual probe: multi-K-block bf16 products rounded in the store, with their f32 partial sums in a Vec (16 bytes past a line) or on cache lines, interleaved best runs"]
fn speed_out16_c_alignment() {
    use crate::cpu::gemm::{gemm_prepacked_bf16, AlignedBuf, Epilogue, Out16, PackedB};
    for (m, k, n) in [(8192, 2880, 320), (8192, 1280, 320), (2048, 5760, 640)] {
        let mut rng = Rng::new(1);
        let a = Owned::<bf16>::random(m, k, Lay::Row, &mut rng);
        let b = Owned::<bf16>::random(k, n, Lay::Row, &mut rng);
        let p = PackedB::<bf16>::new(b.view()).expect("pack");
        let mut c = vec![0f32; m * n];
        let mut cbuf = AlignedBuf::default();
        let mut o = vec![bf16::ZERO; m * n];
        let flops = 2.0 * (m * n * k) as f64;
        let mut best = [f64::MAX; 2];
        println!("Vec C at {} bytes past a line", c.as_ptr() as usize % 64);
        let t0 = std::time::Instant::now();
        while t0.elapsed().as_secs_f64() < 8.0 {
            for (i, bst) in best.iter_mut().enumerate() {
                let t = std::time::Instant::now();
                let ep = Epilogue::default().with_out16(Out16::bf16(&mut o, n));
                let cc: &mut [f32] = if i == 0 {
                    &mut c
                } else {
                    cbuf.slice_mut::<f32>("test", m * n).expect("scratch")
                };
                gemm_prepacked_bf16(a.view(), &p, cc, n, &ep).expect("gemm");
                *bst = bst.min(t.elapsed().as_secs_f64());
            }
        }
        println!(
            "{m}x{k}x{n}: vec C {:.0}, aligned C {:.0} GFLOP/s",
            flops / best[0] / 1e9,
            flops / best[1] / 1e9
        );
    }
}

#[test]
#[ignore = "manual probe: bf16 products (rounded in the store) with prepacked B of several K-block depths, interleaved best runs (`AMX_KCU_PROBE=256,384`, shapes `AMX_KCU_SHAPES=MxKxN,...`)"]
fn speed_amx_kcu() {
    use crate::cpu::gemm::{gemm_prepacked_bf16, AlignedBuf, Epilogue, Out16, PackedB};
    let list = |key: &str, default: &str| -> Vec<String> {
        let v = std::env::var(key).unwrap_or_else(|_| default.into());
        v.split(',').map(|x| x.trim().to_string()).collect()
    };
    let kcus: Vec<usize> = list("AMX_KCU_PROBE", "256,384")
        .iter()
        .filter_map(|x| x.parse().ok())
        .collect();
    let shapes: Vec<(usize, usize, usize)> =
        list("AMX_KCU_SHAPES", "8192x768x320,2048x640x640,8192x2880x320")
            .iter()
            .filter_map(|x| {
                let d: Vec<usize> = x.split('x').filter_map(|y| y.parse().ok()).collect();
                (d.len() == 3).then(|| (d[0], d[1], d[2]))
            })
            .collect();
    for &(m, k, n) in &shapes {
        let mut rng = Rng::new(1);
        let a = Owned::<bf16>::random(m, k, Lay::Row, &mut rng);
        let b = Owned::<bf16>::random(k, n, Lay::Row, &mut rng);
        let ps: Vec<PackedB<bf16>> = kcus
            .iter()
            .map(|&kc| {
                crate::cpu::gemm::amx_pack::KCU_TEST.with(|c| c.set(Some(kc)));
                PackedB::<bf16>::new(b.view()).expect("pack")
            })
            .collect();
        crate::cpu::gemm::amx_pack::KCU_TEST.with(|c| c.set(None));
        let mut cbuf = AlignedBuf::default();
        let mut o = vec![bf16::ZERO; m * n];
        let flops = 2.0 * (m * n * k) as f64;
        let mut best = vec![f64::MAX; kcus.len()];
        let t0 = std::time::Instant::now();
        while t0.elapsed().as_secs_f64() < 10.0 {
            for (i, bst) in best.iter_mut().enumerate() {
                let t = std::time::Instant::now();
                let ep = Epilogue::default().with_out16(Out16::bf16(&mut o, n));
                let cc = cbuf.slice_mut::<f32>("test", m * n).expect("scratch");
                gemm_prepacked_bf16(a.view(), &ps[i], cc, n, &ep).expect("gemm");
                *bst = bst.min(t.elapsed().as_secs_f64());
            }
        }
        let rates: Vec<(usize, i64)> = kcus
            .iter()
            .zip(&best)
            .map(|(kc, t)| (*kc, (flops / t / 1e9) as i64))
            .collect();
        println!("{m}x{k}x{n}: (max pairs per K block, GFLOP/s) {rates:?}");
    }
}
