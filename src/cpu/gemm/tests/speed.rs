//! Manual probes (`cargo test --release -- --ignored --nocapture speed`): the bare microkernel
//! on L1/L2-resident panels, in GFLOP per CPU-second of this thread.

use crate::cpu::gemm::driver::{EpCtx, Kernel, Tile};
use crate::cpu::gemm::MatRef;
use crate::desc::Activation;

pub(super) fn thread_cpu() -> f64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|s| {
            s.split_whitespace()
                .next()
                .and_then(|x| x.parse::<f64>().ok())
        })
        .unwrap_or(0.0)
        * 1e-9
}

#[cfg(target_arch = "x86_64")]
#[test]
#[ignore = "manual timing probe of the f32 microkernel (prints GFLOP/s); timings never run in the test suite"]
fn speed_kernel_f32() {
    use crate::cpu::gemm::avx512::AvxF32;
    let dummy = [0f32; 1];
    let Some(k) = AvxF32::new(MatRef::row_major(&dummy[..], 1, 1)) else {
        return;
    };
    let ep = EpCtx {
        alpha: 1.0,
        beta: 0.0,
        bias: None,
        act: Activation::None,
        residual: None,
        glu: false,
        n: 32,
        out16: None,
    };
    for (kcu, npan) in [(256usize, 1usize), (256, 12), (128, 12), (384, 12)] {
        let a = vec![0.5f32; 14 * kcu * npan];
        let b = vec![0.25f32; 32 * kcu];
        let mut c = vec![0f32; 14 * 32 * npan];
        let reps = 20_000_000 / (kcu * npan);
        let c0 = thread_cpu();
        for _ in 0..reps {
            for p in 0..npan {
                let t = Tile {
                    c: c[p * 14 * 32..].as_mut_ptr(),
                    ldc: 32,
                    row0: 0,
                    col0: 0,
                    mr: 14,
                    nr: 32,
                    first: true,
                    last: true,
                };
                // SAFETY: panels sized above.
                unsafe { k.tile(kcu, a[p * 14 * kcu..].as_ptr(), b.as_ptr(), &t, &ep) };
            }
        }
        let s = thread_cpu() - c0;
        println!(
            "kcu {kcu} panels {npan}: {:.1} GFLOP per CPU-second",
            (reps * npan * kcu * 14 * 32 * 2) as f64 / s / 1e9
        );
    }
}

#[cfg(target_arch = "x86_64")]
#[test]
#[ignore = "manual timing probe of the AVX2 f32 microkernel (GFLOP per CPU-second); timings never run in the test suite"]
fn speed_kernel_f32_avx2() {
    use crate::cpu::gemm::avx2::{Avx2F32, MR};
    let dummy = [0f32; 1];
    let Some(k) = Avx2F32::new(MatRef::row_major(&dummy[..], 1, 1)) else {
        return;
    };
    let ep = EpCtx {
        alpha: 1.0,
        beta: 0.0,
        bias: None,
        act: Activation::None,
        residual: None,
        glu: false,
        n: 32,
        out16: None,
    };
    // A panels swept against one B panel (B in L1/L2), then one A panel against B panels.
    for (kcu, npa, npb) in [
        (128usize, 8usize, 1usize),
        (384, 8, 1),
        (384, 1, 8),
        (256, 1, 8),
    ] {
        let a = vec![0.5f32; MR * kcu * npa];
        let b = vec![0.25f32; 32 * kcu * npb];
        let mut c = vec![0f32; MR * 32 * npa * npb];
        let reps = 20_000_000 / (kcu * npa * npb);
        let c0 = thread_cpu();
        for _ in 0..reps {
            for pa in 0..npa {
                for pb in 0..npb {
                    let t = Tile {
                        c: c[(pa * npb + pb) * MR * 32..].as_mut_ptr(),
                        ldc: 32,
                        row0: 0,
                        col0: 0,
                        mr: MR,
                        nr: 32,
                        first: true,
                        last: true,
                    };
                    // SAFETY: panels sized above.
                    unsafe {
                        k.tile(
                            kcu,
                            a[pa * MR * kcu..].as_ptr(),
                            b[pb * 32 * kcu..].as_ptr(),
                            &t,
                            &ep,
                        )
                    };
                }
            }
        }
        let s = thread_cpu() - c0;
        println!(
            "avx2 kcu {kcu} A panels {npa} B panels {npb}: {:.1} GFLOP per CPU-second",
            (reps * npa * npb * kcu * MR * 32 * 2) as f64 / s / 1e9
        );
    }
}
