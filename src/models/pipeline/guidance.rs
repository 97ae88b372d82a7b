//! Guidance arithmetic of diffusers' pipelines: classifier-free guidance's combination, its
//! rescaling ([`rescale_noise_cfg`], "Common Diffusion Noise Schedules and Sample Steps are
//! Flawed" §3.4) and LCM's guidance embedding ([`guidance_scale_embedding`]).
//!
//! Invariants: everything runs in f32; the combination is `uncond + g · (text − uncond)` in
//! diffusers' operation order; standard deviations are unbiased (PyTorch's default) over every
//! dim but the batch; the embedding is computed on the host in f32 with diffusers' order of
//! operations (`w · 1000`, frequencies `exp(−i · ln(10000) / (half − 1))`, sines then cosines,
//! a zero column when the width is odd).

use crate::{Device, Error, Result, Tensor};

/// Classifier-free guidance of a UNet output `[2B, ...]` holding the unconditional half first:
/// `uncond + guidance · (text − uncond)`, rescaled by `rescale` where `rescale > 0`.
pub(crate) fn guide(output: &Tensor, guidance: f64, rescale: f64) -> Result<Tensor> {
    let halves = output.chunk(2, 0)?;
    let [uncond, text] = halves.as_slice() else {
        return Err(Error::invalid(
            "guidance",
            "internal: expected an unconditional and a text half",
        ));
    };
    let guided = uncond.add(&text.sub(uncond)?.mul_scalar(guidance)?)?;
    if rescale > 0.0 {
        rescale_noise_cfg(&guided, text, rescale)
    } else {
        Ok(guided)
    }
}

/// diffusers' `rescale_noise_cfg`: `noise_cfg` rescaled to the standard deviation of
/// `noise_pred_text` (per sample), mixed back by `rescale`:
/// `rescale · noise_cfg · (std_text / std_cfg) + (1 − rescale) · noise_cfg`.
pub fn rescale_noise_cfg(
    noise_cfg: &Tensor,
    noise_pred_text: &Tensor,
    rescale: f64,
) -> Result<Tensor> {
    let dims: Vec<isize> = (1..noise_cfg.rank() as isize).collect();
    let std_text = noise_pred_text.std_dims(&dims, 1.0, true)?;
    let std_cfg = noise_cfg.std_dims(&dims, 1.0, true)?;
    let rescaled = noise_cfg.mul(&std_text.div(&std_cfg)?)?;
    rescaled
        .mul_scalar(rescale)?
        .add(&noise_cfg.mul_scalar(1.0 - rescale)?)
}

/// diffusers' `get_guidance_scale_embedding` of `w` (LCM pipelines pass `guidance − 1`) for a
/// batch of `batch`: `[batch, dim]` f32 on the Cpu.
pub fn guidance_scale_embedding(w: f64, dim: usize, batch: usize) -> Result<Tensor> {
    let half = dim / 2;
    if half < 2 {
        return Err(Error::invalid(
            "guidance_scale_embedding",
            format!("the embedding needs a width of at least 4, got {dim}"),
        ));
    }
    let w = (w as f32) * 1000.0;
    let step = 10000f32.ln() / (half - 1) as f32;
    let mut row = vec![0f32; dim];
    for i in 0..half {
        let arg = w * (i as f32 * -step).exp();
        row[i] = arg.sin();
        row[half + i] = arg.cos();
    }
    let data: Vec<f32> = (0..batch).flat_map(|_| row.iter().copied()).collect();
    Tensor::from_vec(data, &[batch, dim], Device::Cpu)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedding_of_zero_is_sin0_cos0() -> Result<()> {
        let e = guidance_scale_embedding(0.0, 9, 2)?;
        assert_eq!(e.shape(), &[2, 9]);
        let v = e.to_vec::<f32>()?;
        assert_eq!(&v[..4], &[0.0; 4]);
        assert_eq!(&v[4..8], &[1.0; 4]);
        assert_eq!(v[8], 0.0);
        Ok(())
    }

    #[test]
    fn guide_combines_halves() -> Result<()> {
        let out = Tensor::from_vec(vec![1f32, 2.0, 3.0, 5.0], &[2, 2], Device::Cpu)?;
        let g = guide(&out, 2.0, 0.0)?.to_vec::<f32>()?;
        assert_eq!(g, vec![5.0, 8.0]);
        Ok(())
    }
}
