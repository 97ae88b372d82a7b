//! Peak-throughput probes: what the FMA and `vdpbf16ps` units of this machine can do.
//!
//! Invariants: each probe runs `threads` OS threads (not the rayon pool) concurrently for about
//! 100 ms of tight loops over 24 independent accumulator chains, and reports total flops over
//! the wall time of the whole run. Flop counts: an f32 FMA on 16 lanes is 32 flops; a
//! `vdpbf16ps` is 16 lanes × 2 pair-products × 2 = 64 flops. Without AVX-512 the FMA probe runs
//! 12 chains of 8-lane AVX2 FMAs (16 flops each), without AVX2 a portable loop; the bf16
//! probes return 0 without their instructions.

use super::layout::PackKind;
use std::time::{Duration, Instant};

const RUN: Duration = Duration::from_millis(100);
const CHAINS: usize = 24;

/// Runs `block()` (returning flops done) on `threads` threads for ~100 ms; GFLOP/s overall.
fn probe(threads: usize, block: fn() -> f64) -> f64 {
    let threads = threads.max(1);
    let start = Instant::now();
    let total: f64 = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|_| {
                s.spawn(move || {
                    let t0 = Instant::now();
                    let mut flops = 0.0;
                    while t0.elapsed() < RUN {
                        flops += block();
                    }
                    flops
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or(0.0)).sum()
    });
    total / start.elapsed().as_secs_f64() / 1e9
}

const ITERS: usize = 20_000;

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{CHAINS, ITERS};
    use std::arch::x86_64::*;
    use std::hint::black_box;

    /// # Safety
    /// avx512f must be available.
    pub(super) unsafe fn fma_block() -> f64 {
        fma_iters(ITERS)
    }

    /// # Safety
    /// avx512f and avx512bf16 must be available.
    pub(super) unsafe fn bf16_block() -> f64 {
        bf16_iters(ITERS)
    }

    /// True on an AMD CPU (CPUID vendor string "AuthenticAMD").
    pub(super) fn is_amd() -> bool {
        // SAFETY: CPUID leaf 0 exists on every x86-64 CPU (`__cpuid` is a safe function on
        // newer toolchains, hence the allow).
        #[allow(unused_unsafe)]
        let id = unsafe { __cpuid(0) };
        let mut vendor = [0u8; 12];
        vendor[..4].copy_from_slice(&id.ebx.to_le_bytes());
        vendor[4..8].copy_from_slice(&id.edx.to_le_bytes());
        vendor[8..].copy_from_slice(&id.ecx.to_le_bytes());
        &vendor == b"AuthenticAMD"
    }

    /// `iters` rounds of 24 independent FMA chains; returns the flops done.
    #[target_feature(enable = "avx512f")]
    pub(super) fn fma_iters(iters: usize) -> f64 {
        let x = _mm512_set1_ps(black_box(0.999_999));
        let y = _mm512_set1_ps(black_box(1e-7));
        let mut acc = [_mm512_set1_ps(black_box(1.0)); CHAINS];
        for _ in 0..iters {
            for a in acc.iter_mut() {
                *a = _mm512_fmadd_ps(*a, x, y);
            }
        }
        let s = acc
            .iter()
            .fold(_mm512_setzero_ps(), |s, &a| _mm512_add_ps(s, a));
        black_box(_mm512_reduce_add_ps(s));
        (iters * CHAINS * 32) as f64
    }

    /// # Safety
    /// avx2 and fma must be available.
    pub(super) unsafe fn fma256_block() -> f64 {
        fma256_iters(ITERS)
    }

    /// `iters` rounds of 12 independent 8-lane FMA chains (AVX2 has 16 registers); returns
    /// the flops done.
    #[target_feature(enable = "avx2,fma")]
    pub(super) fn fma256_iters(iters: usize) -> f64 {
        let x = _mm256_set1_ps(black_box(0.999_999));
        let y = _mm256_set1_ps(black_box(1e-7));
        let mut acc = [_mm256_set1_ps(black_box(1.0)); CHAINS / 2];
        for _ in 0..iters {
            for a in acc.iter_mut() {
                *a = _mm256_fmadd_ps(*a, x, y);
            }
        }
        let s = acc
            .iter()
            .fold(_mm256_setzero_ps(), |s, &a| _mm256_add_ps(s, a));
        let mut lanes = [0f32; 8];
        // SAFETY: lanes holds 8 floats.
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), s) };
        black_box(lanes);
        (iters * CHAINS / 2 * 16) as f64
    }

    /// `iters` rounds of 24 independent `vdpbf16ps` chains; returns the flops done.
    #[target_feature(enable = "avx512f,avx512bf16")]
    pub(super) fn bf16_iters(iters: usize) -> f64 {
        // SAFETY: __m512i and __m512bh are both 512 plain bits.
        let x: __m512bh = unsafe { std::mem::transmute(_mm512_set1_epi32(black_box(0x3f80_3f80))) };
        let y: __m512bh = unsafe { std::mem::transmute(_mm512_set1_epi32(black_box(0x3380_3380))) };
        let mut acc = [_mm512_set1_ps(black_box(1.0)); CHAINS];
        for _ in 0..iters {
            for a in acc.iter_mut() {
                *a = _mm512_dpbf16_ps(*a, x, y);
            }
        }
        let s = acc
            .iter()
            .fold(_mm512_setzero_ps(), |s, &a| _mm512_add_ps(s, a));
        black_box(_mm512_reduce_add_ps(s));
        (iters * CHAINS * 64) as f64
    }
}

fn portable_block() -> f64 {
    let x = std::hint::black_box(0.999_999f32);
    let mut acc = [std::hint::black_box(1.0f32); CHAINS * 16];
    for _ in 0..ITERS / 16 {
        for a in acc.iter_mut() {
            *a = *a * x + 1e-7;
        }
    }
    std::hint::black_box(&acc);
    ((ITERS / 16) * CHAINS * 16 * 2) as f64
}

/// Peak f32 FMA throughput in GFLOP/s with `threads` threads: independent `_mm512_fmadd_ps`
/// chains, `_mm256_fmadd_ps` chains on CPUs with AVX2 but no AVX-512, or a portable
/// multiply-add loop, for about 100 ms.
pub fn measure_fma_peak_gflops(threads: usize) -> f64 {
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx512f") {
        // SAFETY: the feature was just detected.
        return probe(threads, || unsafe { x86::fma_block() });
    }
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
        // SAFETY: the features were just detected.
        return probe(threads, || unsafe { x86::fma256_block() });
    }
    probe(threads, portable_block)
}

/// Peak AMX bf16 throughput in GFLOP/s with `threads` threads: four independent `tdpbf16ps`
/// on register-resident tiles per round (16 × 16 × 32 × 2 flops each) for about 100 ms. 0 when
/// AMX is unavailable (see [`super::amx_unavailable_reason`]).
pub fn measure_amx_peak_gflops(threads: usize) -> f64 {
    #[cfg(target_arch = "x86_64")]
    if super::amx::amx_status().is_ok() {
        // SAFETY: AMX was checked and granted just above.
        return probe(threads, || unsafe { super::amx::peak_iters(ITERS) });
    }
    let _ = threads;
    0.0
}

/// Peak bf16 dot-product throughput in GFLOP/s with `threads` threads: independent
/// `_mm512_dpbf16_ps` chains for about 100 ms, counting 64 flops per instruction. 0 when the
/// CPU lacks AVX512_BF16.
pub fn measure_bf16_dp_peak_gflops(threads: usize) -> f64 {
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512bf16") {
        // SAFETY: the features were just detected.
        return probe(threads, || unsafe { x86::bf16_block() });
    }
    let _ = threads;
    0.0
}

#[cfg(test)]
thread_local! {
    /// Test hook: forces the bf16 layout on this thread.
    pub(crate) static BF16_KIND: std::cell::Cell<Option<PackKind>> = const { std::cell::Cell::new(None) };
}

/// The layout (and so the kernel) bf16 GEMMs use: [`PackKind::Amx`] runs AMX tiles,
/// [`PackKind::Bf16`] runs `vdpbf16ps`, [`PackKind::F32`] widens bf16 to f32 while packing and
/// runs the FMA kernel.
///
/// Chosen when weights are packed: [`PackKind::F32`] under an instruction set cap
/// (`config::CpuConfig::isa`); else the configured method (`config::CpuConfig::bf16`) if set;
/// else (measured once per process) [`PackKind::Amx`]
/// when AMX is usable; else widen when the CPU lacks AVX512_BF16; else the dot kernel on AMD
/// CPUs (full-rate `vdpbf16ps` from Zen 4 on); else a ~1 ms calibration comparing the two
/// instructions' flop rates (on the Sapphire Rapids this was written on `vdpbf16ps` delivers
/// about half the flops of the FMA pipes, so widening wins; on CPUs with full-rate
/// `vdpbf16ps` the dot kernel wins).
pub(crate) fn bf16_kind() -> PackKind {
    use crate::config::{CpuBf16, CpuIsa};
    #[cfg(test)]
    if let Some(k) = BF16_KIND.with(|c| c.get()) {
        return k;
    }
    let (isa, method) = crate::config::with(|c| (c.cpu.isa, c.cpu.bf16));
    // The portable and AVX2 paths have no bf16 pair kernels: widen (under an AVX2 cap an AMX
    // or `vdpbf16ps` layout would only meet the portable kernel).
    if isa != CpuIsa::Auto {
        return PackKind::F32;
    }
    match method {
        CpuBf16::Dot => PackKind::Bf16,
        CpuBf16::Widen => PackKind::F32,
        CpuBf16::Auto => {
            static AUTO: std::sync::OnceLock<PackKind> = std::sync::OnceLock::new();
            *AUTO.get_or_init(|| {
                if super::amx_unavailable_reason().is_none() {
                    PackKind::Amx
                } else {
                    calibrate()
                }
            })
        }
    }
}

/// Every layout a bf16 product can take in this process, the rule ([`bf16_kind`]) among them:
/// the autotuner's candidates (`cpu_bf16_product`). Widening always; `vdpbf16ps` pairs where the
/// CPU has AVX512_BF16; AMX tiles where AMX is usable; all only on the AVX-512 path. Under an
/// instruction set cap or a configured method, only the rule.
pub(crate) fn bf16_kinds() -> Vec<PackKind> {
    use crate::config::{CpuBf16, CpuIsa};
    let rule = bf16_kind();
    #[cfg(test)]
    if BF16_KIND.with(|c| c.get()).is_some() {
        return vec![rule];
    }
    let (isa, method) = crate::config::with(|c| (c.cpu.isa, c.cpu.bf16));
    if isa != CpuIsa::Auto
        || method != CpuBf16::Auto
        || super::gemm_path(crate::DType::BF16) != super::GemmPath::Avx512
    {
        return vec![rule];
    }
    let mut kinds = vec![PackKind::F32];
    #[cfg(target_arch = "x86_64")]
    if super::avx512::has_avx512_bf16() {
        kinds.push(PackKind::Bf16);
    }
    if super::amx_unavailable_reason().is_none() {
        kinds.push(PackKind::Amx);
    }
    if !kinds.contains(&rule) {
        kinds.push(rule);
    }
    kinds
}

fn calibrate() -> PackKind {
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512bf16") {
        // AMD's AVX512_BF16 (Zen 4 on) runs `vdpbf16ps` at twice the FMA flop rate (measured
        // 388–464 against 195–229 GFLOP/s on a Zen 4): no timing needed. The
        // timing below once chose widening there while the other core ran AVX-512 work,
        // halving every bf16 product of that process.
        if x86::is_amd() {
            return PackKind::Bf16;
        }
        let time = |f: &dyn Fn() -> f64| {
            let t = Instant::now();
            let flops = f();
            flops / t.elapsed().as_secs_f64().max(1e-9)
        };
        let (mut fma, mut dot) = (0f64, 0f64);
        for _ in 0..5 {
            // SAFETY: features detected above.
            fma = fma.max(time(&|| unsafe { x86::fma_iters(4000) }));
            // SAFETY: as above.
            dot = dot.max(time(&|| unsafe { x86::bf16_iters(4000) }));
        }
        return if dot > 1.1 * fma {
            PackKind::Bf16
        } else {
            PackKind::F32
        };
    }
    PackKind::F32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The calibration's answer is fixed on AMD CPUs with AVX512_BF16 (dot products), never
    /// timing-dependent there; without AVX512_BF16 it is always widening.
    #[test]
    fn calibration_is_deterministic_where_the_answer_is_known() {
        #[cfg(target_arch = "x86_64")]
        {
            let bf16 =
                is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512bf16");
            if !bf16 {
                assert_eq!(calibrate(), PackKind::F32);
            } else if x86::is_amd() {
                for _ in 0..3 {
                    assert_eq!(calibrate(), PackKind::Bf16);
                }
            } else {
                eprintln!("Intel AVX512_BF16 without a fixed answer: calibration timed");
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        assert_eq!(calibrate(), PackKind::F32);
    }
}
