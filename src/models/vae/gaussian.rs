//! [`DiagonalGaussian`]: diffusers' `DiagonalGaussianDistribution`, the encoder's posterior
//! over latents.
//!
//! Invariants: built from moments `[B, 2·C, h, w]` (mean first, then log-variance, as
//! `torch.chunk(parameters, 2, dim=1)` splits them); the log-variance is clamped to
//! `[-30, 20]` and `std = exp(0.5 · logvar)`, all in the moments' dtype and on their device.
//! Sampling takes its standard-normal noise from the caller, so the caller chooses the
//! generator (and can reproduce PyTorch's draws).

use crate::{Error, Result, Tensor};

/// A Gaussian with diagonal covariance over latents.
#[derive(Clone, Debug)]
pub struct DiagonalGaussian {
    mean: Tensor,
    logvar: Tensor,
    std: Tensor,
}

impl DiagonalGaussian {
    /// The distribution of `moments` `[B, 2·C, h, w]` (mean, then log-variance).
    pub fn from_moments(moments: &Tensor) -> Result<DiagonalGaussian> {
        let op = "DiagonalGaussian::from_moments";
        if moments.rank() != 4 || !moments.shape()[1].is_multiple_of(2) || moments.shape()[1] == 0 {
            return Err(Error::shape(
                op,
                "moments [B, 2·C, h, w] (mean, then log-variance)",
                moments.shape(),
            ));
        }
        let c = moments.shape()[1] / 2;
        let mean = moments.narrow(1, 0, c)?.contiguous()?;
        let logvar = moments.narrow(1, c, c)?.clamp(-30.0, 20.0)?;
        let std = logvar.mul_scalar(0.5)?.exp()?;
        Ok(DiagonalGaussian { mean, logvar, std })
    }

    /// The mean `[B, C, h, w]`.
    pub fn mean(&self) -> &Tensor {
        &self.mean
    }

    /// The log-variance, clamped to `[-30, 20]`.
    pub fn logvar(&self) -> &Tensor {
        &self.logvar
    }

    /// The standard deviation `exp(0.5 · logvar)`.
    pub fn std(&self) -> &Tensor {
        &self.std
    }

    /// The variance `exp(logvar)`.
    pub fn var(&self) -> Result<Tensor> {
        self.logvar.exp()
    }

    /// The mode (the mean), what pipelines use for `latent_dist.mode()` / `argmax`.
    pub fn mode(&self) -> &Tensor {
        &self.mean
    }

    /// A draw `mean + std · noise` for standard-normal `noise` of the mean's shape, dtype and
    /// device (diffusers' `sample(generator)` with the generator's draw given).
    pub fn sample(&self, noise: &Tensor) -> Result<Tensor> {
        let op = "DiagonalGaussian::sample";
        if noise.shape() != self.mean.shape() {
            return Err(Error::shape(
                op,
                format!("noise of the mean's shape {:?}", self.mean.shape()),
                noise.shape(),
            ));
        }
        self.mean.same_device(noise, op)?;
        self.mean.same_dtype(noise, op)?;
        self.mean.add(&self.std.mul(noise)?)
    }
}
