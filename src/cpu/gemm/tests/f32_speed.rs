//! Manual timing probes of the f32 GEMM against the FMA peak (`cargo test --release --lib
//! speed_f32 -- --ignored --nocapture`): never part of the suite; each figure is the best of
//! many short runs.

use super::amx_speed::best_of;
use super::util::{Lay, Owned, Rng};

#[test]
#[ignore = "manual probe: f32 GEMM as a fraction of the FMA peak, 1 and 2 threads (best runs)"]
fn speed_f32_fraction() {
    use crate::cpu::gemm::{gemm_f32, measure_fma_peak_gflops, Epilogue};
    let shapes = [
        (512, 512, 512),
        (1024, 1024, 1024),
        (2048, 2048, 2048),
        (8192, 320, 1280),
        (8192, 640, 640),
        (8192, 320, 320),
    ];
    for threads in [1usize, 2] {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .expect("pool");
        pool.install(|| {
            for (m, k, n) in shapes {
                let mut rng = Rng::new(1);
                let a = Owned::<f32>::random(m, k, Lay::Row, &mut rng);
                let b = Owned::<f32>::random(k, n, Lay::Row, &mut rng);
                let mut c = vec![0f32; m * n];
                let flops = 2.0 * (m * n * k) as f64;
                let reps = ((2e9 / flops) as usize).clamp(3, 40);
                let mut f = || {
                    gemm_f32(a.view(), b.view(), &mut c, n, &Epilogue::default()).expect("gemm")
                };
                f();
                let t = best_of(reps, &mut f);
                let peak = measure_fma_peak_gflops(threads);
                println!(
                    "f32 {threads} thread(s) {m}x{k}x{n}: {:.1} GFLOP/s, {:.0}% of the FMA peak {peak:.0}",
                    flops / t / 1e9,
                    100.0 * flops / t / 1e9 / peak
                );
            }
        });
    }
}

#[test]
#[ignore = "manual probe: single-thread f32 GEMM, best of 60 short runs, as a fraction of the best FMA-loop run"]
fn speed_f32_single_best() {
    use crate::cpu::gemm::{gemm_f32, measure_fma_peak_gflops, Epilogue};
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .expect("pool");
    pool.install(|| {
        let peak = (0..5)
            .map(|_| measure_fma_peak_gflops(1))
            .fold(0.0, f64::max);
        for (m, k, n) in [
            (512, 512, 512),
            (1024, 320, 1280),
            (768, 640, 640),
            (2048, 1024, 256),
        ] {
            let mut rng = Rng::new(1);
            let a = Owned::<f32>::random(m, k, Lay::Row, &mut rng);
            let b = Owned::<f32>::random(k, n, Lay::Row, &mut rng);
            let mut c = vec![0f32; m * n];
            let flops = 2.0 * (m * n * k) as f64;
            let mut f =
                || gemm_f32(a.view(), b.view(), &mut c, n, &Epilogue::default()).expect("gemm");
            f();
            let t = best_of(60, &mut f);
            println!(
                "f32 1 thread {m}x{k}x{n}: {:.1} GFLOP/s = {:.0}% of {peak:.0}",
                flops / t / 1e9,
                100.0 * flops / t / 1e9 / peak
            );
        }
    });
}

#[test]
#[ignore = "manual probe: f32 GEMM with prepacked B of several K-block depths, interleaved best runs (KCU_PROBE=384,256,192)"]
fn speed_f32_kcu() {
    use crate::cpu::gemm::{gemm_prepacked_f32, measure_fma_peak_gflops, Epilogue, PackedB};
    let kcus: Vec<usize> = std::env::var("KCU_PROBE")
        .unwrap_or_else(|_| "384,256,192".into())
        .split(',')
        .filter_map(|x| x.parse().ok())
        .collect();
    for (m, k, n) in [
        (2048, 2048, 2048),
        (8192, 320, 1280),
        (8192, 640, 640),
        (8192, 1280, 320),
        (512, 512, 512),
    ] {
        let mut rng = Rng::new(1);
        let a = Owned::<f32>::random(m, k, Lay::Row, &mut rng);
        let b = Owned::<f32>::random(k, n, Lay::Row, &mut rng);
        let packs: Vec<_> = kcus
            .iter()
            .map(|&kcu| PackedB::new_f32_blocked(b.view(), kcu).expect("pack"))
            .collect();
        let mut c = vec![0f32; m * n];
        let flops = 2.0 * (m * n * k) as f64;
        let mut best = vec![f64::MAX; kcus.len()];
        let t0 = std::time::Instant::now();
        while t0.elapsed().as_secs_f64() < 6.0 {
            for (i, p) in packs.iter().enumerate() {
                let t = std::time::Instant::now();
                gemm_prepacked_f32(a.view(), p, &mut c, n, &Epilogue::default()).expect("gemm");
                best[i] = best[i].min(t.elapsed().as_secs_f64());
            }
        }
        let peak = (0..3)
            .map(|_| measure_fma_peak_gflops(2))
            .fold(0.0, f64::max);
        let line: Vec<String> = kcus
            .iter()
            .zip(&best)
            .map(|(kcu, t)| format!("kcu {kcu}: {:.0}%", 100.0 * flops / t / 1e9 / peak))
            .collect();
        println!("{m}x{k}x{n} (peak {peak:.0}): {}", line.join("  "));
    }
}
