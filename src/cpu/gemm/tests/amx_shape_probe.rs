//! Manual probe of an AMX loop shape that streams less from L2 than the library's 2×2 loop
//! (`cargo test --release --lib speed_amx_4x1 -- --ignored --nocapture`; never part of the
//! suite): four accumulators stacked over 64 rows × 16 columns, the four A tiles (L1 resident)
//! loaded in turn into three rotating registers, one B tile per step streaming from L2, so a
//! step's four products take 1 KiB from L2 instead of the 2×2 loop's 2 KiB.
//!
//! What it showed on the AMX machine : 47.9 cycles per
//! step with 8-step panels (A 32 KiB, L1 resident) against 60 for the 2×2 loop with 16-step
//! panels, but 78 from 12 steps on (A no longer fits L1), and half the K per C round trip:
//! not adopted.

use super::amx_speed::{best_of, env_usize};
use crate::cpu::gemm::amx_unavailable_reason;
use std::arch::asm;

#[test]
#[ignore = "manual AMX loop-shape probe"]
fn speed_amx_4x1() {
    if amx_unavailable_reason().is_some() {
        return;
    }
    let steps = env_usize("AMX_PROBE_STEPS", 8);
    let npan = env_usize("AMX_PROBE_NPAN", 24);
    let fill =
        |n: usize| -> Vec<u32> { (0..n).map(|i| 0x3f80_3f80 ^ (i as u32 & 0x0101)).collect() };
    let aligned = |v: &Vec<u32>| (1024 - (v.as_ptr() as usize / 4) % 1024) % 1024;
    // A: [steps][4 tiles][16 rows × 16 pairs]; B: [npan][steps][16 pairs × 16 columns].
    let a_buf = fill(64 * 16 * steps + 2048);
    let b_buf = fill(16 * 16 * steps * npan + 2048);
    let (a, b) = (&a_buf[aligned(&a_buf)..], &b_buf[aligned(&b_buf)..]);
    let reps = 10usize;
    let run = |name: &str, f: &dyn Fn(*const u32, *const u32)| {
        let t = best_of(300, &mut || {
            for _ in 0..reps {
                for p in 0..npan {
                    f(a.as_ptr(), b[p * 256 * steps..].as_ptr());
                }
            }
        });
        let n = (reps * npan * steps) as f64;
        println!(
            "{name} ({steps} steps, {npan} B panels): {:.1} cycles/step at 2.2 GHz, {:.1} GFLOP/s",
            t * 2.2e9 / n,
            n * 4.0 * 16384.0 / t / 1e9
        );
    };
    // SAFETY (all below): AMX granted; loads stay inside a and b.
    unsafe { crate::cpu::gemm::amx::load_config_for_tests() };
    for _ in 0..2 {
        run("4x1, B streaming", &|a, b| unsafe {
            asm!(
                "tilezero tmm0", "tilezero tmm1", "tilezero tmm2", "tilezero tmm3",
                "2:",
                "tileloadd tmm6, [{b} + {s64}*1]",
                "tileloadd tmm4, [{a} + {s64}*1]",
                "tdpbf16ps tmm0, tmm4, tmm6",
                "tileloadd tmm5, [{a} + {s64}*1 + 1024]",
                "tdpbf16ps tmm1, tmm5, tmm6",
                "tileloadd tmm7, [{a} + {s64}*1 + 2048]",
                "tdpbf16ps tmm2, tmm7, tmm6",
                "tileloadd tmm4, [{a} + {s64}*1 + 3072]",
                "tdpbf16ps tmm3, tmm4, tmm6",
                "add {a}, 4096",
                "add {b}, 1024",
                "dec {n}",
                "jnz 2b",
                a = inout(reg) a => _, b = inout(reg) b => _, n = inout(reg) steps => _,
                s64 = in(reg) 64usize,
                out("tmm0") _, out("tmm1") _, out("tmm2") _, out("tmm3") _,
                out("tmm4") _, out("tmm5") _, out("tmm6") _, out("tmm7") _, options(nostack),
            );
        });
        run("4x1, B fixed (A from L1 only)", &|a, b| unsafe {
            asm!(
                "tilezero tmm0", "tilezero tmm1", "tilezero tmm2", "tilezero tmm3",
                "tileloadd tmm6, [{b} + {s64}*1]",
                "2:",
                "tileloadd tmm4, [{a} + {s64}*1]",
                "tdpbf16ps tmm0, tmm4, tmm6",
                "tileloadd tmm5, [{a} + {s64}*1 + 1024]",
                "tdpbf16ps tmm1, tmm5, tmm6",
                "tileloadd tmm7, [{a} + {s64}*1 + 2048]",
                "tdpbf16ps tmm2, tmm7, tmm6",
                "tileloadd tmm4, [{a} + {s64}*1 + 3072]",
                "tdpbf16ps tmm3, tmm4, tmm6",
                "add {a}, 4096",
                "dec {n}",
                "jnz 2b",
                a = inout(reg) a => _, b = inout(reg) b => _, n = inout(reg) steps => _,
                s64 = in(reg) 64usize,
                out("tmm0") _, out("tmm1") _, out("tmm2") _, out("tmm3") _,
                out("tmm4") _, out("tmm5") _, out("tmm6") _, out("tmm7") _, options(nostack),
            );
        });
    }
}
