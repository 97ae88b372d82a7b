//! Where image-to-image denoising starts: diffusers' `StableDiffusionImg2ImgPipeline.get_timesteps`.
//!
//! Invariant: for `steps` inference steps and a strength `s ∈ [0, 1]`, the run keeps
//! `min(⌊steps·s⌋, steps)` steps and starts at index `(steps − kept)·order` of the scheduler's
//! timesteps (for PNDM, whose list has an extra entry, that leaves one more timestep to visit,
//! as in diffusers); a strength that keeps no step is an error, as it leaves nothing to denoise.

use crate::{Error, Result};

/// The index of the first timestep an img2img run visits for `strength` (diffusers'
/// `t_start * scheduler.order`); the image is noised to that step's level.
pub fn img2img_begin_index(steps: usize, strength: f64, order: usize) -> Result<usize> {
    const OP: &str = "img2img";
    if !(strength.is_finite() && (0.0..=1.0).contains(&strength)) {
        return Err(Error::invalid(
            OP,
            format!("expected a strength in [0, 1], got {strength}"),
        ));
    }
    let kept = ((steps as f64 * strength) as usize).min(steps);
    if kept == 0 {
        return Err(Error::invalid(
            OP,
            format!(
                "strength {strength} keeps none of the {steps} steps (at least 1/{steps} is \
                 needed)"
            ),
        ));
    }
    Ok((steps - kept) * order)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn begin_index_follows_get_timesteps() {
        assert_eq!(img2img_begin_index(50, 0.75, 1).unwrap(), 13);
        assert_eq!(img2img_begin_index(50, 1.0, 1).unwrap(), 0);
        assert_eq!(img2img_begin_index(4, 0.3, 1).unwrap(), 3);
        assert_eq!(img2img_begin_index(4, 0.5, 2).unwrap(), 4);
        assert!(img2img_begin_index(1, 0.3, 1).is_err());
        assert!(img2img_begin_index(10, 1.5, 1).is_err());
        assert!(img2img_begin_index(10, f64::NAN, 1).is_err());
    }
}
