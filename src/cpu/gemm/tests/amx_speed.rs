//! Manual timing probes of the AMX path (`cargo test --release --lib speed_amx -- --ignored
//! --nocapture`): never part of the suite. On a shared machine each figure is the best of many
//! short runs.
//!
//! What they showed on a Sapphire Rapids VM: `tdpbf16ps` on register tiles runs at
//! ~16 cycles (2.2 TFLOP/s per core). The 2×2-tile loop with A in L1 and B streaming from L2
//! takes ~87 cycles per 32-deep step (64 ideal) when the panels start on cache lines, but
//! 200–440 when they sit 4–16 bytes past one (`AMX_PROBE_SKEW=4`): every tile row then spans
//! two lines, which is why the library keeps every buffer tiles touch on lines. Where a 4 KiB
//! page boundary falls made no difference. Tried on 2026-11-22 and dropped: B-major order of
//! the four products, `tileloaddt1` for B, a 1×3 loop with A double-buffered (all slower). Some
//! runs of any variant come out 2–3× slow at random: the shared machine, not the code.

use super::util::{Lay, Owned, Rng};
use crate::cpu::gemm::amx_unavailable_reason;
use crate::desc::Activation;
use half::bf16;

#[test]
#[ignore = "manual timing probe (best-run GFLOP/s on one thread: AMX kernel, bf16 vs f32 GEMMs); never part of the suite"]
fn speed_amx_single_thread() {
    use crate::cpu::gemm::{gemm_bf16, gemm_f32, gemm_prepacked_bf16, Epilogue, PackedB};
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .expect("pool");
    pool.install(|| {
        #[cfg(target_arch = "x86_64")]
        if amx_unavailable_reason().is_none() {
            kernel_probe();
        }
        if std::env::var("AMX_PROBE_KERNEL_ONLY").is_ok() {
            return;
        }
        let shapes = [(512, 512, 512), (1024, 1024, 1024), (2048, 2048, 2048), (8192, 320, 1280), (8192, 640, 640), (8192, 1280, 320), (154, 768, 320)];
        for (m, k, n) in shapes {
            let mut rng = Rng::new(1);
            let a = Owned::<bf16>::random(m, k, Lay::Row, &mut rng);
            let b = Owned::<bf16>::random(k, n, Lay::Row, &mut rng);
            let af = Owned::<f32>::random(m, k, Lay::Row, &mut rng);
            let bf = Owned::<f32>::random(k, n, Lay::Row, &mut rng);
            let mut c = vec![0f32; m * n];
            let ep = Epilogue::default();
            let flops = 2.0 * (m * n * k) as f64;
            // Best of many short repetitions: on a shared machine the minimum is the run that
            // was not preempted.
            let time = |f: &mut dyn FnMut()| {
                f();
                let reps = ((4e9 / flops) as usize).clamp(3, 200);
                let mut best = f64::MAX;
                for _ in 0..reps {
                    let t0 = std::time::Instant::now();
                    f();
                    best = best.min(t0.elapsed().as_secs_f64());
                }
                flops / best / 1e9
            };
            for kcu in [64, 128, 192, 256, 384, 512, 1024] {
                crate::cpu::gemm::amx_pack::KCU_TEST.with(|c| c.set(Some(kcu)));
                let p = PackedB::new(b.view()).expect("pack");
                let pre = time(&mut || {
                    gemm_prepacked_bf16(a.view(), &p, &mut c, n, &ep).expect("gemm")
                });
                println!("  kcu {kcu}: prepacked {pre:.1}");
            }
            crate::cpu::gemm::amx_pack::KCU_TEST.with(|c| c.set(None));
            let raw = time(&mut || gemm_bf16(a.view(), b.view(), &mut c, n, &ep).expect("gemm"));
            let p = PackedB::new(b.view()).expect("pack");
            let pre = time(&mut || gemm_prepacked_bf16(a.view(), &p, &mut c, n, &ep).expect("gemm"));
            let f32r = time(&mut || gemm_f32(af.view(), bf.view(), &mut c, n, &ep).expect("gemm"));
            println!("{m}x{k}x{n}: bf16 {} raw {raw:.1}, prepacked {pre:.1}; f32 {f32r:.1} GFLOP/s (best run)", crate::cpu::gemm::bf16_method());
        }
    });
}

/// The environment variable `k` as a number, `d` when unset or not one.
pub(super) fn env_usize(k: &str, d: usize) -> usize {
    std::env::var(k)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(d)
}

/// `AMX_PROBE_STEPS` (default 16) and `AMX_PROBE_NPAN` (default 12).
fn probe_steps_and_panels() -> (usize, usize) {
    (
        env_usize("AMX_PROBE_STEPS", 16),
        env_usize("AMX_PROBE_NPAN", 12),
    )
}

/// Best-of-N wall time of `f` in seconds.
pub(super) fn best_of(reps: usize, f: &mut dyn FnMut()) -> f64 {
    let mut best = f64::MAX;
    for _ in 0..reps {
        let t0 = std::time::Instant::now();
        f();
        best = best.min(t0.elapsed().as_secs_f64());
    }
    best
}

/// The bare AMX microkernel on cache-resident panels, and the register-only peak.
#[cfg(target_arch = "x86_64")]
fn kernel_probe() {
    use crate::cpu::gemm::amx::AmxBf16;
    use crate::cpu::gemm::driver::{EpCtx, Kernel, Tile};
    use crate::cpu::gemm::MatRef;
    // SAFETY: AMX granted (checked by the caller).
    let t = best_of(50, &mut || unsafe {
        crate::cpu::gemm::amx::peak_iters(20_000);
    });
    println!(
        "amx register peak: {:.1} GFLOP/s",
        (20_000 * 4 * 16 * 16 * 32 * 2) as f64 / t / 1e9
    );
    let dummy = [bf16::ZERO; 1];
    let Some(k) = AmxBf16::new(MatRef::row_major(&dummy[..], 1, 1)) else {
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
    for (kcu, npan) in [
        (64usize, 1usize),
        (256, 1),
        (64, 12),
        (128, 12),
        (256, 12),
        (512, 12),
    ] {
        let mut rng = Rng::new(3);
        let mut val = || {
            let x = bf16::from_f32(rng.next()).to_bits() as u32;
            x | ((bf16::from_f32(rng.next()).to_bits() as u32) << 16)
        };
        let a: Vec<u32> = (0..32 * kcu).map(|_| val()).collect();
        let b: Vec<u32> = (0..32 * kcu * npan).map(|_| val()).collect();
        let mut c = vec![0f32; 32 * 32 * npan];
        let reps = (2_000_000 / (kcu * npan)).max(1);
        k.begin();
        let t = best_of(20, &mut || {
            for _ in 0..reps {
                for p in 0..npan {
                    let tile = Tile {
                        c: c[p * 32 * 32..].as_mut_ptr(),
                        ldc: 32,
                        row0: 0,
                        col0: 0,
                        mr: 32,
                        nr: 32,
                        first: true,
                        last: true,
                    };
                    // SAFETY: panels sized above; begin() ran on this thread.
                    unsafe { k.tile(kcu, a.as_ptr(), b[p * 32 * kcu..].as_ptr(), &tile, &ep) };
                }
            }
        });
        k.end();
        println!(
            "amx kernel kcu {kcu} x {npan} B panels: {:.1} GFLOP/s",
            (reps * npan * kcu * 2 * 32 * 32 * 2) as f64 / t / 1e9
        );
    }
}

/// Experimental loop shapes (manual probe only): an A panel (32 KiB) reused over 12 B panels
/// (384 KiB, L2) as the driver does, with and without software prefetch of B.
#[cfg(target_arch = "x86_64")]
#[test]
#[ignore = "manual AMX loop experiments"]
fn speed_amx_loops() {
    use std::arch::asm;
    if amx_unavailable_reason().is_some() {
        return;
    }
    let (steps, npan) = probe_steps_and_panels();
    let mut rng = Rng::new(3);
    let mut val = || {
        let x = bf16::from_f32(rng.next()).to_bits() as u32;
        x | ((bf16::from_f32(rng.next()).to_bits() as u32) << 16)
    };
    let random = std::env::var("AMX_PROBE_RANDOM").is_ok();
    let mut fill = |n: usize| -> Vec<u32> {
        (0..n)
            .map(|_| if random { val() } else { 0x3f80_3f80 })
            .collect()
    };
    // Panels start on 4 KiB pages plus AMX_PROBE_SKEW bytes (a multiple of 4).
    let skew = env_usize("AMX_PROBE_SKEW", 0) / 4;
    let aligned = |v: &Vec<u32>| (1024 - (v.as_ptr() as usize / 4) % 1024) % 1024 + skew;
    let a_buf = fill(32 * 16 * steps + 2048);
    let b_buf = fill(32 * 16 * steps * npan + 2048);
    let (a, b) = (&a_buf[aligned(&a_buf)..], &b_buf[aligned(&b_buf)..]);
    println!("data: {}", if random { "random" } else { "ones" });
    let reps = 10usize;
    let run = |name: &str, f: &dyn Fn(*const u32, *const u32)| {
        let t = best_of(300, &mut || {
            for _ in 0..reps {
                for p in 0..npan {
                    f(a.as_ptr(), b[p * 512 * steps..].as_ptr());
                }
            }
        });
        let n = (reps * npan * steps) as f64;
        println!(
            "{name}: {:.1} cycles/step at 2.2 GHz, {:.1} GFLOP/s",
            t * 2.2e9 / n,
            n * 4.0 * 16384.0 / t / 1e9
        );
    };
    // SAFETY (all below): AMX granted; loads stay inside a and b (prefetches never fault).
    unsafe { crate::cpu::gemm::amx::load_config_for_tests() };
    for _ in 0..2 {
        run("register only (64 cycles/step ideal)", &|_, _| unsafe {
            crate::cpu::gemm::amx::peak_iters(steps);
        });
        // SAFETY: AMX granted (peak_iters released the tiles).
        unsafe { crate::cpu::gemm::amx::load_config_for_tests() };
        run("register only, tiles loaded from data", &|a, b| unsafe {
            asm!(
                "tilezero tmm0", "tilezero tmm1", "tilezero tmm2", "tilezero tmm3",
                "tileloadd tmm4, [{a} + {s64}*1]",
                "tileloadd tmm6, [{b} + {s128}*1]",
                "tileloadd tmm7, [{b} + {s128}*1 + 64]",
                "tileloadd tmm5, [{a} + {s64}*1 + 1024]",
                "2:",
                "tdpbf16ps tmm0, tmm4, tmm6",
                "tdpbf16ps tmm1, tmm4, tmm7",
                "tdpbf16ps tmm2, tmm5, tmm6",
                "tdpbf16ps tmm3, tmm5, tmm7",
                "dec {n}",
                "jnz 2b",
                a = inout(reg) a => _, b = inout(reg) b => _, n = inout(reg) steps => _,
                s64 = in(reg) 64usize, s128 = in(reg) 128usize,
                out("tmm0") _, out("tmm1") _, out("tmm2") _, out("tmm3") _,
                out("tmm4") _, out("tmm5") _, out("tmm6") _, out("tmm7") _, options(nostack),
            );
        });
        run("no prefetch", &|a, b| unsafe {
            asm!(
                "tilezero tmm0", "tilezero tmm1", "tilezero tmm2", "tilezero tmm3",
                "2:",
                "tileloadd tmm4, [{a} + {s64}*1]",
                "tileloadd tmm6, [{b} + {s128}*1]",
                "tdpbf16ps tmm0, tmm4, tmm6",
                "tileloadd tmm7, [{b} + {s128}*1 + 64]",
                "tdpbf16ps tmm1, tmm4, tmm7",
                "tileloadd tmm5, [{a} + {s64}*1 + 1024]",
                "tdpbf16ps tmm2, tmm5, tmm6",
                "tdpbf16ps tmm3, tmm5, tmm7",
                "add {a}, 2048",
                "add {b}, 2048",
                "dec {n}",
                "jnz 2b",
                a = inout(reg) a => _, b = inout(reg) b => _, n = inout(reg) steps => _,
                s64 = in(reg) 64usize, s128 = in(reg) 128usize,
                out("tmm0") _, out("tmm1") _, out("tmm2") _, out("tmm3") _,
                out("tmm4") _, out("tmm5") _, out("tmm6") _, out("tmm7") _, options(nostack),
            );
        });
        for dist in [2048usize, 8192] {
            let name = format!("prefetch B +{dist}");
            run(&name, &|a, b| unsafe {
                asm!(
                    "tilezero tmm0", "tilezero tmm1", "tilezero tmm2", "tilezero tmm3",
                    "2:",
                    "tileloadd tmm4, [{a} + {s64}*1]",
                    "tileloadd tmm6, [{b} + {s128}*1]",
                    "lea {p}, [{b} + {d}]",
                    "prefetcht0 [{p}]", "prefetcht0 [{p} + 64]", "prefetcht0 [{p} + 128]", "prefetcht0 [{p} + 192]",
                    "prefetcht0 [{p} + 256]", "prefetcht0 [{p} + 320]", "prefetcht0 [{p} + 384]", "prefetcht0 [{p} + 448]",
                    "tdpbf16ps tmm0, tmm4, tmm6",
                    "prefetcht0 [{p} + 512]", "prefetcht0 [{p} + 576]", "prefetcht0 [{p} + 640]", "prefetcht0 [{p} + 704]",
                    "prefetcht0 [{p} + 768]", "prefetcht0 [{p} + 832]", "prefetcht0 [{p} + 896]", "prefetcht0 [{p} + 960]",
                    "tileloadd tmm7, [{b} + {s128}*1 + 64]",
                    "tdpbf16ps tmm1, tmm4, tmm7",
                    "prefetcht0 [{p} + 1024]", "prefetcht0 [{p} + 1088]", "prefetcht0 [{p} + 1152]", "prefetcht0 [{p} + 1216]",
                    "prefetcht0 [{p} + 1280]", "prefetcht0 [{p} + 1344]", "prefetcht0 [{p} + 1408]", "prefetcht0 [{p} + 1472]",
                    "tileloadd tmm5, [{a} + {s64}*1 + 1024]",
                    "tdpbf16ps tmm2, tmm5, tmm6",
                    "prefetcht0 [{p} + 1536]", "prefetcht0 [{p} + 1600]", "prefetcht0 [{p} + 1664]", "prefetcht0 [{p} + 1728]",
                    "prefetcht0 [{p} + 1792]", "prefetcht0 [{p} + 1856]", "prefetcht0 [{p} + 1920]", "prefetcht0 [{p} + 1984]",
                    "tdpbf16ps tmm3, tmm5, tmm7",
                    "add {a}, 2048",
                    "add {b}, 2048",
                    "dec {n}",
                    "jnz 2b",
                    a = inout(reg) a => _, b = inout(reg) b => _, n = inout(reg) steps => _, p = out(reg) _,
                    d = in(reg) dist,
                    s64 = in(reg) 64usize, s128 = in(reg) 128usize,
                    out("tmm0") _, out("tmm1") _, out("tmm2") _, out("tmm3") _,
                    out("tmm4") _, out("tmm5") _, out("tmm6") _, out("tmm7") _, options(nostack),
                );
            });
        }
        run("A only (B tiles fixed)", &|a, b| unsafe {
            asm!(
                "tilezero tmm0", "tilezero tmm1", "tilezero tmm2", "tilezero tmm3",
                "tileloadd tmm6, [{b} + {s128}*1]",
                "tileloadd tmm7, [{b} + {s128}*1 + 64]",
                "2:",
                "tileloadd tmm4, [{a} + {s64}*1]",
                "tdpbf16ps tmm0, tmm4, tmm6",
                "tdpbf16ps tmm1, tmm4, tmm7",
                "tileloadd tmm5, [{a} + {s64}*1 + 1024]",
                "tdpbf16ps tmm2, tmm5, tmm6",
                "tdpbf16ps tmm3, tmm5, tmm7",
                "add {a}, 2048",
                "dec {n}",
                "jnz 2b",
                a = inout(reg) a => _, b = inout(reg) b => _, n = inout(reg) steps => _,
                s64 = in(reg) 64usize, s128 = in(reg) 128usize,
                out("tmm0") _, out("tmm1") _, out("tmm2") _, out("tmm3") _,
                out("tmm4") _, out("tmm5") _, out("tmm6") _, out("tmm7") _, options(nostack),
            );
        });
    }
}

#[test]
#[ignore = "manual probe: AMX and FMA peaks on 1 and 2 threads"]
fn speed_amx_peak_threads() {
    use crate::cpu::gemm::{measure_amx_peak_gflops, measure_fma_peak_gflops};
    for _ in 0..3 {
        println!(
            "amx 1 thread {:.0}, 2 threads {:.0}; fma 1 thread {:.0}, 2 threads {:.0} GFLOP/s",
            measure_amx_peak_gflops(1),
            measure_amx_peak_gflops(2),
            measure_fma_peak_gflops(1),
            measure_fma_peak_gflops(2)
        );
    }
}

#[test]
#[ignore = "manual probe for profiling: AMX_PROBE_SHAPE=MxKxN, AMX_PROBE_THREADS, ~3 s of prepacked bf16 GEMMs rounded in the store"]
fn speed_amx_profile_shape() {
    use crate::cpu::gemm::{gemm_prepacked_bf16, with_partial_sums, Epilogue, Out16, PackedB};
    let shape = std::env::var("AMX_PROBE_SHAPE").unwrap_or_else(|_| "8192x320x1280".into());
    let d: Vec<usize> = shape.split('x').filter_map(|x| x.parse().ok()).collect();
    let [m, k, n] = d[..] else {
        panic!("AMX_PROBE_SHAPE must be MxKxN");
    };
    let threads = std::env::var("AMX_PROBE_THREADS")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(2);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .build()
        .expect("pool");
    let mut rng = Rng::new(1);
    let a = Owned::<bf16>::random(m, k, Lay::Row, &mut rng);
    let b = Owned::<bf16>::random(k, n, Lay::Row, &mut rng);
    let p = PackedB::<bf16>::new(b.view()).expect("pack");
    let mut o = vec![bf16::ZERO; m * n];
    let flops = 2.0 * (m * n * k) as f64;
    // As the model runs them: prepacked B, bf16 output rounded in the store. (Whether the
    // output rows start on cache lines made no difference: 472/413, 596/518 GFLOP/s with
    // them 48 bytes past a line / on lines, interleaved, 1 and 2 threads.)
    pool.install(|| {
        let t0 = std::time::Instant::now();
        let mut best = f64::MAX;
        while t0.elapsed().as_secs_f64() < 3.0 {
            let t = std::time::Instant::now();
            let ep = Epilogue::default().with_out16(Out16::bf16(&mut o, n));
            with_partial_sums("test", m * n, |c| {
                gemm_prepacked_bf16(a.view(), &p, c, n, &ep)
            })
            .expect("gemm");
            best = best.min(t.elapsed().as_secs_f64());
        }
        println!(
            "{shape} on {threads} threads: best {:.1} GFLOP/s",
            flops / best / 1e9
        );
    });
}

#[test]
#[ignore = "manual probe: Tensor::matmul (bf16 in, bf16 out) against the raw engine call"]
fn speed_amx_tensor_matmul() {
    use crate::{DType, Device, Tensor};
    let shape = std::env::var("AMX_PROBE_SHAPE").unwrap_or_else(|_| "8192x320x1280".into());
    let d: Vec<usize> = shape.split('x').filter_map(|x| x.parse().ok()).collect();
    let [m, k, n] = d[..] else {
        panic!("AMX_PROBE_SHAPE must be MxKxN");
    };
    let flops = 2.0 * (m * n * k) as f64;
    for dtype in [DType::F32, DType::BF16] {
        let a = Tensor::randn(&[m, k], dtype, Device::Cpu, 1).expect("randn");
        let b = Tensor::randn(&[k, n], dtype, Device::Cpu, 2).expect("randn");
        let mut f = || {
            a.matmul(&b).expect("matmul");
        };
        f();
        let t = best_of(10, &mut f);
        println!(
            "Tensor::matmul {dtype:?} {shape}: best {:.1} GFLOP/s ({:.2} ms)",
            flops / t / 1e9,
            t * 1e3
        );
    }
}

/// The library's tile call on line-aligned panels (A in L1, `AMX_PROBE_NPAN` B panels of
/// `AMX_PROBE_STEPS` steps streaming from L2): zeroed accumulators stored straight to C
/// (`first`), partial sums loaded from and stored to C (middle K blocks), and a last block
/// through the epilogue into a bf16 output; cycles per step at an assumed 2.2 GHz, as
/// [`speed_amx_loops`] prints for the bare loop.
#[cfg(target_arch = "x86_64")]
#[test]
#[ignore = "manual AMX probe: the tile call around the loop"]
fn speed_amx_tile_calls() {
    use crate::cpu::gemm::amx::AmxBf16;
    use crate::cpu::gemm::driver::{EpCtx, Kernel, Tile};
    use crate::cpu::gemm::{MatRef, Out16};
    if amx_unavailable_reason().is_some() {
        return;
    }
    let (steps, npan) = probe_steps_and_panels();
    let kcu = 16 * steps;
    let mut rng = Rng::new(3);
    let mut val = || {
        let x = bf16::from_f32(rng.next()).to_bits() as u32;
        x | ((bf16::from_f32(rng.next()).to_bits() as u32) << 16)
    };
    let line = |v: &[u32]| (16 - (v.as_ptr() as usize / 4) % 16) % 16;
    let a_buf: Vec<u32> = (0..32 * kcu + 16).map(|_| val()).collect();
    let b_buf: Vec<u32> = (0..32 * kcu * npan + 16).map(|_| val()).collect();
    let (a, b) = (&a_buf[line(&a_buf)..], &b_buf[line(&b_buf)..]);
    let mut c_buf = vec![0f32; 32 * 32 * npan + 16];
    let c_off = (16 - (c_buf.as_ptr() as usize / 4) % 16) % 16;
    let mut o_buf = vec![bf16::ZERO; 32 * 32 * npan + 32];
    let o_off = (32 - (o_buf.as_ptr() as usize / 2) % 32) % 32;
    let dummy = [bf16::ZERO; 1];
    let Some(k) = AmxBf16::new(MatRef::row_major(&dummy[..], 1, 1)) else {
        return;
    };
    let ldc = 32 * npan;
    let reps = 20usize;
    for (name, first, last, out16) in [
        ("first block, direct store", true, false, false),
        ("middle block, C loaded and stored", false, false, false),
        ("last block, plain into f32 C", false, true, false),
        ("last block, bf16 output", false, true, true),
    ] {
        let c = c_buf[c_off..].as_mut_ptr();
        let o = &mut o_buf[o_off..];
        let ep = EpCtx {
            out16: out16.then(|| Out16::bf16(&mut *o, ldc)),
            ..super::util::plain_ep(ldc)
        };
        k.begin();
        let t = best_of(200, &mut || {
            for _ in 0..reps {
                for p in 0..npan {
                    let tile = Tile {
                        // SAFETY: inside c_buf (32 rows of ldc).
                        c: unsafe { c.add(32 * p) },
                        ldc,
                        row0: 0,
                        col0: 32 * p,
                        mr: 32,
                        nr: 32,
                        first,
                        last,
                    };
                    // SAFETY: panels sized and aligned above; begin() ran on this thread.
                    unsafe { k.tile(kcu, a.as_ptr(), b[p * 32 * kcu..].as_ptr(), &tile, &ep) };
                }
            }
        });
        k.end();
        let n = (reps * npan * steps) as f64;
        println!(
            "{name}: {:.1} cycles/step at 2.2 GHz, {:.1} GFLOP/s",
            t * 2.2e9 / n,
            n * 4.0 * 16384.0 / t / 1e9
        );
    }
}
