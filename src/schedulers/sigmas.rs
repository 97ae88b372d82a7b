//! σ schedules of the σ-based schedulers (Euler, Euler ancestral, DPM-Solver), computed as
//! diffusers computes them with NumPy and PyTorch.
//!
//! Invariants: the training σs `√((1 − ᾱ)/ᾱ)` are f32 (PyTorch's f32 ops on the f32 ᾱ, with
//! ᾱ_T = 2⁻²⁴ under zero-terminal-SNR rescaling); their logs are f32 (NumPy's `log` on an f32
//! array); interpolation (`np.interp`), the Karras ramp (`np.linspace`, `**`) and the σ → t
//! inversion (`_sigma_to_t`) run in f64 with NumPy's mixed f32/f64 promotions; the schedulers
//! round the results to f32 where diffusers stores them.

use super::config::SchedulerConfig;

/// ᾱ as the σ-based schedulers hold it: ᾱ_T = 2⁻²⁴ instead of 0 under zero-terminal-SNR
/// rescaling, so the first σ is finite.
pub(crate) fn sigma_alphas_cumprod(config: &SchedulerConfig) -> Vec<f64> {
    let mut alphas_cumprod = config.alphas_cumprod();
    if config.rescale_betas_zero_snr {
        if let Some(last) = alphas_cumprod.last_mut() {
            *last = 2f64.powi(-24);
        }
    }
    alphas_cumprod
}

/// The training σ of every training step, in f32.
pub(crate) fn train_sigmas(alphas_cumprod: &[f64]) -> Vec<f32> {
    alphas_cumprod
        .iter()
        .map(|&a| {
            let a = a as f32;
            ((1.0 - a) / a).sqrt()
        })
        .collect()
}

/// NumPy's `log` of the f32 training σs (an f32 result).
pub(crate) fn log_sigmas(train: &[f32]) -> Vec<f32> {
    train.iter().map(|&s| (f64::from(s)).ln() as f32).collect()
}

/// `np.interp(t, arange(len), train)` for each `t` (in f64).
pub(crate) fn interp(timesteps: &[f64], train: &[f32]) -> Vec<f64> {
    let last = train.len().saturating_sub(1);
    timesteps
        .iter()
        .map(|&t| {
            if t <= 0.0 {
                return f64::from(train[0]);
            }
            if t >= last as f64 {
                return f64::from(train[last]);
            }
            let lo = t.floor() as usize;
            let (a, b) = (f64::from(train[lo]), f64::from(train[lo + 1]));
            (b - a) * (t - lo as f64) + a
        })
        .collect()
}

/// NumPy's `linspace(start, stop, n)` (endpoint included): `start + i·step`, the last value
/// exactly `stop`.
pub(crate) fn linspace(start: f64, stop: f64, n: usize) -> Vec<f64> {
    if n == 1 {
        return vec![start];
    }
    let step = (stop - start) / (n - 1) as f64;
    (0..n)
        .map(|i| {
            if i + 1 == n {
                stop
            } else {
                i as f64 * step + start
            }
        })
        .collect()
}

/// Karras et al.'s σs: `n` values from `sigma_max` down to `sigma_min`, evenly spaced in
/// `σ^(1/7)` (diffusers' `_convert_to_karras`).
pub(crate) fn karras(sigma_min: f64, sigma_max: f64, n: usize) -> Vec<f64> {
    const RHO: f64 = 7.0;
    let (min_inv, max_inv) = (sigma_min.powf(1.0 / RHO), sigma_max.powf(1.0 / RHO));
    linspace(0.0, 1.0, n)
        .into_iter()
        .map(|r| (max_inv + r * (min_inv - max_inv)).powf(RHO))
        .collect()
}

/// diffusers' `_sigma_to_t`: the fractional training step whose log-σ interpolates to
/// `log σ` (clamped to the table's ends).
pub(crate) fn sigma_to_t(sigma: f64, log_sigmas: &[f32]) -> f64 {
    if log_sigmas.len() < 2 {
        return 0.0;
    }
    let log_sigma = sigma.max(1e-10).ln();
    // The last index whose log-σ is ≤ log σ (0 when none is), at most len − 2.
    let low = log_sigmas
        .iter()
        .rposition(|&l| log_sigma - f64::from(l) >= 0.0)
        .unwrap_or(0)
        .min(log_sigmas.len() - 2);
    let (lo, hi) = (log_sigmas[low], log_sigmas[low + 1]);
    // NumPy: (f32 − f64) / (f32 − f32): the denominator is an f32 difference.
    let w = ((f64::from(lo) - log_sigma) / f64::from(lo - hi)).clamp(0.0, 1.0);
    (1.0 - w) * low as f64 + w * (low + 1) as f64
}
