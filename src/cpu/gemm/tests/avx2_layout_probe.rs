//! Manual probe: does the AVX2 kernel lose to the interleaved 32-lane B rows it reads half of
//! per pass? Compares the bare k loop over (a) the shared 32-lane layout and (b) a layout with
//! the two 16-lane halves stored one after the other, on L1/L2-resident panels.

#[cfg(target_arch = "x86_64")]
mod probe {
    use std::arch::x86_64::*;

    /// One 6×16 pass: B rows `stride` floats apart.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn pass(
        kcu: usize,
        a: *const f32,
        b: *const f32,
        stride: usize,
        pf: usize,
        out: &mut [f32; 96],
    ) {
        let mut acc = [[_mm256_setzero_ps(); 2]; 6];
        let mut ap = a;
        let mut bp = b;
        for _ in 0..kcu {
            if pf > 0 {
                _mm_prefetch::<_MM_HINT_T0>(bp.wrapping_add(pf) as *const i8);
            }
            let b0 = _mm256_loadu_ps(bp);
            let b1 = _mm256_loadu_ps(bp.add(8));
            for (r, accr) in acc.iter_mut().enumerate() {
                let av = _mm256_broadcast_ss(&*ap.add(r));
                accr[0] = _mm256_fmadd_ps(av, b0, accr[0]);
                accr[1] = _mm256_fmadd_ps(av, b1, accr[1]);
            }
            ap = ap.add(6);
            bp = bp.add(stride);
        }
        for (r, accr) in acc.iter().enumerate() {
            _mm256_storeu_ps(out.as_mut_ptr().add(16 * r), accr[0]);
            _mm256_storeu_ps(out.as_mut_ptr().add(16 * r + 8), accr[1]);
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[test]
#[ignore = "manual timing probe of AVX2 B layouts (GFLOP per CPU-second); timings never run in the test suite"]
fn speed_avx2_b_layouts() {
    if !(is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")) {
        return;
    }
    let thread_cpu = super::speed::thread_cpu;
    for (kcu, npa, npb) in [
        (384usize, 8usize, 1usize),
        (256, 8, 1),
        (192, 8, 1),
        (384, 1, 8),
        (256, 1, 8),
        (192, 1, 8),
    ] {
        for (name, split, pf) in [
            ("interleaved", false, 1024usize),
            ("interleaved-nopf", false, 0),
            ("split", true, 512),
            ("split-nopf", true, 0),
        ] {
            let a = vec![0.5f32; 6 * kcu * npa];
            let b = vec![0.25f32; 32 * kcu * npb];
            let mut out = [0f32; 96];
            let reps = 40_000_000 / (kcu * npa * npb);
            let c0 = thread_cpu();
            for _ in 0..reps {
                for pa in 0..npa {
                    for pb in 0..npb {
                        let bpan = b[pb * 32 * kcu..].as_ptr();
                        for half in 0..2 {
                            let (start, stride) = if split {
                                (half * 16 * kcu, 16)
                            } else {
                                (half * 16, 32)
                            };
                            // SAFETY: panels sized above; avx2+fma checked.
                            unsafe {
                                probe::pass(
                                    kcu,
                                    a[pa * 6 * kcu..].as_ptr(),
                                    bpan.add(start),
                                    stride,
                                    pf,
                                    &mut out,
                                )
                            };
                        }
                    }
                }
            }
            let s = thread_cpu() - c0;
            println!(
                "kcu {kcu} A {npa} B {npb} {name}: {:.1} GFLOP per CPU-second ({})",
                (reps * npa * npb * kcu * 6 * 32 * 2) as f64 / s / 1e9,
                out[0]
            );
        }
    }
}
