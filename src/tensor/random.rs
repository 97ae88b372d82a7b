//! Seeded, device-independent random numbers: element `i` of a tensor made with seed `s` is a
//! pure function of `(s, i)` (a SplitMix64-style hash), so `randn` gives the same values on every
//! device and for every dtype (up to the dtype's rounding), independent of thread count.

/// A 64-bit mix of `(seed, index)` (SplitMix64 finaliser over a Weyl sequence).
fn mix(seed: u64, index: u64) -> u64 {
    let mut z = seed
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(index.wrapping_add(1).wrapping_mul(0xBF58_476D_1CE4_E5B9));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Uniform in [0, 1) with 53 random bits.
fn unit(seed: u64, index: u64) -> f64 {
    (mix(seed, index) >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// `n` values `f(i)`, filled in parallel chunks (each value depends only on its index, so the
/// result does not depend on the thread count); an error naming `op` when the host will not
/// allocate them.
fn fill(op: &'static str, n: usize, f: impl Fn(u64) -> f32 + Sync) -> crate::Result<Vec<f32>> {
    use rayon::prelude::*;
    let mut out = crate::backend::alloc::zeroed::<f32>(op, n)?;
    out.par_chunks_mut(1 << 16)
        .enumerate()
        .for_each(|(c, chunk)| {
            let base = (c << 16) as u64;
            for (j, v) in chunk.iter_mut().enumerate() {
                *v = f(base + j as u64);
            }
        });
    Ok(out)
}

/// `n` uniform values in [0, 1).
pub(crate) fn uniform(seed: u64, n: usize) -> crate::Result<Vec<f32>> {
    fill("rand", n, |i| unit(seed, i) as f32)
}

/// `n` standard normal values (Box–Muller on two independent uniforms per element).
pub(crate) fn normal(seed: u64, n: usize) -> crate::Result<Vec<f32>> {
    fill("randn", n, |i| {
        let u1 = 1.0 - unit(seed, 2 * i); // (0, 1]
        let u2 = unit(seed, 2 * i + 1);
        ((-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos()) as f32
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn normal_has_unit_moments() {
        let v = super::normal(7, 200_000).unwrap();
        let mean = v.iter().map(|&x| x as f64).sum::<f64>() / v.len() as f64;
        let var = v.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / v.len() as f64;
        assert!(
            mean.abs() < 0.01 && (var - 1.0).abs() < 0.02,
            "{mean} {var}"
        );
        assert_eq!(super::normal(7, 5).unwrap(), super::normal(7, 5).unwrap());
        assert_ne!(super::normal(7, 5).unwrap(), super::normal(8, 5).unwrap());
    }
}
