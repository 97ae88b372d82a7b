//! [`AutoencoderKl`]: diffusers' `AutoencoderKL`, the Stable Diffusion VAE, configured by a
//! [`VaeConfig`] and loaded from a diffusers `vae/` folder by diffusers' parameter names (or
//! built with seeded random weights).
//!
//! `encode` maps images `[B, in_channels, H, W]` (values in `[-1, 1]`) through the encoder and
//! `quant_conv` to a [`DiagonalGaussian`] over latents `[B, latent_channels, H/f, W/f]`
//! (`f = 2^(levels-1)`, 8 for SD); `decode` maps latents through `post_quant_conv` and the
//! decoder to images (the raw decoder output, roughly in `[-1, 1]`). Pipelines scale latents
//! for the diffusion model with [`AutoencoderKl::scale_latents`] and back with
//! [`AutoencoderKl::unscale_latents`]; large inputs can go tile by tile ([`VaeTiling`]).
//!
//! Invariants:
//! - The structure and names follow `diffusers/models/autoencoders/{autoencoder_kl,vae}.py`
//!   (0.42); loading checks the whole file against the model's parameter list before reading
//!   any data (one [`Error::Weights`] names every missing, unexpected and mis-shaped tensor).
//! - All parameters have the model's dtype and live on its device; inputs are checked against
//!   both, and against the config's channels, before any work.
//! - Activations stay in [`AutoencoderKl::activation_format`] from the first convolution to the
//!   last; outputs come back in the input's memory format.
//! - `force_upcast` is only reported ([`VaeConfig::force_upcast`]): the caller picks the dtype.

mod attention;
mod config;
mod decoder;
mod encoder;
mod gaussian;
mod loading;
mod mid;
mod resnet;
mod tiling;

use std::path::Path;

pub use config::{VaeConfig, VaeDownBlockType, VaeUpBlockType};
pub use gaussian::DiagonalGaussian;
pub use tiling::VaeTiling;

use crate::nn::layers::{Conv, MapFn};
use crate::nn::weights::{ParamSource, RandomSource, Recorder, StoreSource, WeightStore};
use crate::{DType, Device, Error, MemoryFormat, Result, Tensor};
use decoder::VaeDecoder;
use encoder::VaeEncoder;
use tiling::{run_tiled, TileGeometry};

/// diffusers' `AutoencoderKL`; see the module docs.
#[derive(Clone, Debug)]
pub struct AutoencoderKl {
    config: VaeConfig,
    dtype: DType,
    device: Device,
    encoder: VaeEncoder,
    quant_conv: Option<Conv>,
    post_quant_conv: Option<Conv>,
    decoder: VaeDecoder,
}

fn check_float(op: &'static str, dtype: DType, device: Device) -> Result<()> {
    if dtype.is_float() {
        Ok(())
    } else {
        Err(Error::UnsupportedDType {
            op,
            dtype,
            device,
            hint: "; models run in f32, f16 or bf16".into(),
        })
    }
}

impl AutoencoderKl {
    /// The architecture of `config` with seeded random weights (uniform in ±`1/sqrt(fan_in)`;
    /// norm scales 1, biases 0): the same values on every device, so a pipeline runs with no
    /// download.
    pub fn random(config: &VaeConfig, dtype: DType, device: Device, seed: u64) -> Result<Self> {
        config.validate()?;
        check_float("AutoencoderKl::random", dtype, device)?;
        let mut src = RandomSource {
            dtype,
            device,
            seed,
        };
        Self::build(config, &mut src, dtype, device)
    }

    /// Loads the weights of `config` from a diffusers `diffusion_pytorch_model.safetensors`, or
    /// from a sharded checkpoint given by its `*.safetensors.index.json` (f32, f16 or bf16 on
    /// disk), converted once to `dtype` on `device`. The mid blocks' attention may use
    /// diffusers' legacy names (`query`, `key`, `value`, `proj_attn`).
    pub fn from_safetensors(
        config: &VaeConfig,
        path: impl AsRef<Path>,
        dtype: DType,
        device: Device,
    ) -> Result<Self> {
        config.validate()?;
        check_float("AutoencoderKl::from_safetensors", dtype, device)?;
        let store = WeightStore::open(path)?;
        let expected = Self::parameter_shapes(config)?;
        let names = loading::stored_names(&store, &expected);
        store.check(&loading::as_stored(&expected, &names))?;
        let inner = StoreSource {
            store: &store,
            dtype,
            device,
        };
        let mut src = loading::RenamedSource { inner, names };
        Self::build(config, &mut src, dtype, device)
    }

    /// Loads a diffusers VAE folder: a pipeline's `vae/` (`config.json` and
    /// `diffusion_pytorch_model.safetensors`) or the pipeline's root holding it. Where only a
    /// variant was downloaded (`diffusion_pytorch_model.fp16.safetensors`, ...) that file is
    /// read; a sharded checkpoint (`diffusion_pytorch_model.safetensors.index.json`) is read as
    /// one file; PyTorch pickles (`.bin`) are refused with an error that says how to convert
    /// them.
    pub fn from_pretrained(dir: impl AsRef<Path>, dtype: DType, device: Device) -> Result<Self> {
        Self::from_pretrained_variant(dir, None, dtype, device)
    }

    /// [`Self::from_pretrained`] reading the weights of `variant` (diffusers' `variant=`:
    /// `Some("fp16")` reads `diffusion_pytorch_model.fp16.safetensors`, an error if missing).
    pub fn from_pretrained_variant(
        dir: impl AsRef<Path>,
        variant: Option<&str>,
        dtype: DType,
        device: Device,
    ) -> Result<Self> {
        let dir = loading::model_dir(dir.as_ref())?;
        let config = VaeConfig::from_file(dir.join("config.json"))?;
        let weights = loading::weights_file(&dir, variant)?;
        Self::from_safetensors(&config, weights, dtype, device)
    }

    /// Every parameter of the architecture as `(diffusers name, shape)`, in construction order.
    pub fn parameter_shapes(config: &VaeConfig) -> Result<Vec<(String, Vec<usize>)>> {
        config.validate()?;
        let mut rec = Recorder {
            entries: Vec::new(),
        };
        Self::build(config, &mut rec, DType::F32, Device::Cpu)?;
        Ok(rec.entries)
    }

    fn build(
        c: &VaeConfig,
        src: &mut dyn ParamSource,
        dtype: DType,
        device: Device,
    ) -> Result<Self> {
        let encoder = VaeEncoder::load(src, c)?;
        let (l, m) = (c.latent_channels, 2 * c.latent_channels);
        let quant_conv = c
            .use_quant_conv
            .then(|| Conv::load(src, "quant_conv", m, m, 1, 1, 0))
            .transpose()?;
        let post_quant_conv = c
            .use_post_quant_conv
            .then(|| Conv::load(src, "post_quant_conv", l, l, 1, 1, 0))
            .transpose()?;
        let decoder = VaeDecoder::load(src, c)?;
        // The prepacking's scratch buffers are not needed once every layer is built.
        crate::tensor::release_host_cache();
        Ok(AutoencoderKl {
            config: c.clone(),
            dtype,
            device,
            encoder,
            quant_conv,
            post_quant_conv,
            decoder,
        })
    }

    fn map(&self, dtype: DType, device: Device, f: &mut MapFn) -> Result<Self> {
        Ok(AutoencoderKl {
            config: self.config.clone(),
            dtype,
            device,
            encoder: self.encoder.map(f)?,
            quant_conv: self.quant_conv.as_ref().map(|c| c.map(f)).transpose()?,
            post_quant_conv: self
                .post_quant_conv
                .as_ref()
                .map(|c| c.map(f))
                .transpose()?,
            decoder: self.decoder.map(f)?,
        })
    }

    /// The model with every parameter on `device` (prepacked again for Cpu).
    pub fn to(&self, device: Device) -> Result<Self> {
        if device == self.device {
            return Ok(self.clone());
        }
        self.map(self.dtype, device, &mut |t| t.to(device))
    }

    /// The model with every parameter converted to `dtype` (f32, f16 or bf16).
    pub fn to_dtype(&self, dtype: DType) -> Result<Self> {
        check_float("AutoencoderKl::to_dtype", dtype, self.device)?;
        if dtype == self.dtype {
            return Ok(self.clone());
        }
        self.map(dtype, self.device, &mut |t| t.to_dtype(dtype))
    }

    /// The configuration.
    pub fn config(&self) -> &VaeConfig {
        &self.config
    }

    /// The parameters' dtype.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The parameters' device.
    pub fn device(&self) -> Device {
        self.device
    }

    /// The config's `force_upcast`: pipelines run this VAE in f32 (diffusers upcasts SD and
    /// SDXL's VAEs for decoding when the pipeline runs in f16).
    pub fn force_upcast(&self) -> bool {
        self.config.force_upcast
    }

    /// The memory format activations are kept in: channels-last on the Cpu (its convolution
    /// engine works on NHWC, and the attention's tokens are then views), NCHW on the Xpu.
    pub fn activation_format(&self) -> MemoryFormat {
        match self.device {
            Device::Cpu => MemoryFormat::ChannelsLast,
            Device::Xpu => MemoryFormat::Contiguous,
        }
    }

    /// Checks `x` is `[B, channels, H, W]` with `B >= 1` and `H, W >= min_side`, in the model's
    /// dtype and on its device.
    fn check_input(
        &self,
        op: &'static str,
        x: &Tensor,
        what: &str,
        channels: usize,
        min_side: usize,
    ) -> Result<()> {
        if x.device() != self.device {
            return Err(Error::DeviceMismatch {
                op,
                lhs: x.device(),
                rhs: self.device,
            });
        }
        if x.dtype() != self.dtype {
            return Err(Error::DTypeMismatch {
                op,
                expected: self.dtype,
                got: x.dtype(),
            });
        }
        let ok = x.rank() == 4
            && x.shape()[0] > 0
            && x.shape()[1] == channels
            && x.shape()[2] >= min_side
            && x.shape()[3] >= min_side;
        if ok {
            return Ok(());
        }
        Err(Error::shape(
            op,
            format!("{what} [B, {channels}, H, W] with B >= 1 and H, W >= {min_side}"),
            x.shape(),
        ))
    }

    /// Decodes latents `[B, latent_channels, h, w]` (any `h, w >= 1`) into images
    /// `[B, out_channels, h·f, w·f]` (`f = 2^(levels-1)`): `post_quant_conv`, then the decoder,
    /// in one pass. The latents are the VAE's own (see [`Self::unscale_latents`]).
    pub fn decode(&self, latents: &Tensor) -> Result<Tensor> {
        let op = "AutoencoderKl::decode";
        self.check_input(op, latents, "latents", self.config.latent_channels, 1)?;
        self.decode_unchecked(latents)
    }

    fn decode_unchecked(&self, z: &Tensor) -> Result<Tensor> {
        let x = z.to_memory_format(self.activation_format())?;
        let x = match &self.post_quant_conv {
            Some(c) => c.forward(&x)?,
            None => x,
        };
        self.decoder
            .forward(&x)?
            .to_memory_format(z.memory_format())
    }

    /// [`Self::decode`] tile by tile (diffusers' `tiled_decode`, see [`VaeTiling`]): tiles of
    /// `tile_latent_min_size` latents, blended across the seams. Equals diffusers' output
    /// with `enable_tiling()`, which differs from an untiled decode near the seams.
    pub fn decode_tiled(&self, latents: &Tensor) -> Result<Tensor> {
        let op = "AutoencoderKl::decode_tiled";
        self.check_input(op, latents, "latents", self.config.latent_channels, 1)?;
        let c = &self.config;
        let g = TileGeometry::new(op, c.tile_latent_min_size(), c.tile_sample_min_size())?;
        run_tiled(latents, g, |t| self.decode_unchecked(t))?
            .to_memory_format(latents.memory_format())
    }

    /// [`Self::decode`] or [`Self::decode_tiled`] as `tiling` chooses.
    pub fn decode_with(&self, latents: &Tensor, tiling: VaeTiling) -> Result<Tensor> {
        let t = self.config.tile_latent_min_size();
        let tiled = match tiling {
            VaeTiling::Off => false,
            VaeTiling::On => true,
            VaeTiling::Auto => latents.shape().iter().skip(2).any(|&s| s > t),
        };
        if tiled {
            self.decode_tiled(latents)
        } else {
            self.decode(latents)
        }
    }

    /// The decoder's input for the diffusion model's latents: `latents / scaling_factor +
    /// shift_factor` (what pipelines compute before `vae.decode`).
    pub fn unscale_latents(&self, latents: &Tensor) -> Result<Tensor> {
        let z = latents.div_scalar(self.config.scaling_factor)?;
        match self.config.shift_factor {
            Some(s) => z.add_scalar(s),
            None => Ok(z),
        }
    }

    /// The diffusion model's latents for encoder latents `z`: `(z - shift_factor) ·
    /// scaling_factor` (what pipelines compute after `vae.encode`).
    pub fn scale_latents(&self, z: &Tensor) -> Result<Tensor> {
        let z = match self.config.shift_factor {
            Some(s) => z.sub_scalar(s)?,
            None => z.clone(),
        };
        z.mul_scalar(self.config.scaling_factor)
    }

    /// Decodes the diffusion model's latents as a pipeline does:
    /// [`Self::unscale_latents`], then [`Self::decode_with`].
    pub fn decode_latents(&self, latents: &Tensor, tiling: VaeTiling) -> Result<Tensor> {
        self.decode_with(&self.unscale_latents(latents)?, tiling)
    }

    /// Encodes images `[B, in_channels, H, W]` (each side at least `f = 2^(levels-1)`; sides
    /// that are multiples of `f` map to exactly `side / f`, others to `⌊side / f⌋`) into the
    /// posterior over latents, in one pass: the encoder, then `quant_conv`.
    pub fn encode(&self, image: &Tensor) -> Result<DiagonalGaussian> {
        let op = "AutoencoderKl::encode";
        let c = &self.config;
        self.check_input(op, image, "an image", c.in_channels, c.downscale())?;
        DiagonalGaussian::from_moments(&self.moments(image)?)
    }

    /// The encoder's and `quant_conv`'s output (mean and log-variance, unclamped).
    fn moments(&self, image: &Tensor) -> Result<Tensor> {
        let x = image.to_memory_format(self.activation_format())?;
        let h = self.encoder.forward(&x)?;
        let h = match &self.quant_conv {
            Some(c) => c.forward(&h)?,
            None => h,
        };
        h.to_memory_format(image.memory_format())
    }

    /// [`Self::encode`] tile by tile (diffusers' `_tiled_encode`, see [`VaeTiling`]): tiles of
    /// `tile_sample_min_size` pixels, their moments blended across the seams.
    pub fn encode_tiled(&self, image: &Tensor) -> Result<DiagonalGaussian> {
        let op = "AutoencoderKl::encode_tiled";
        let c = &self.config;
        self.check_input(op, image, "an image", c.in_channels, c.downscale())?;
        let g = TileGeometry::new(op, c.tile_sample_min_size(), c.tile_latent_min_size())?;
        let moments = run_tiled(image, g, |t| {
            if t.shape()[2] < c.downscale() || t.shape()[3] < c.downscale() {
                return Err(Error::shape(
                    op,
                    format!(
                        "image tiles of at least {0}x{0} pixels (the image's last tile row or \
                         column is thinner)",
                        c.downscale()
                    ),
                    t.shape(),
                ));
            }
            self.moments(t)
        })?;
        DiagonalGaussian::from_moments(&moments)
    }

    /// [`Self::encode`] or [`Self::encode_tiled`] as `tiling` chooses.
    pub fn encode_with(&self, image: &Tensor, tiling: VaeTiling) -> Result<DiagonalGaussian> {
        let t = self.config.tile_sample_min_size();
        let tiled = match tiling {
            VaeTiling::Off => false,
            VaeTiling::On => true,
            VaeTiling::Auto => image.shape().iter().skip(2).any(|&s| s > t),
        };
        if tiled {
            self.encode_tiled(image)
        } else {
            self.encode(image)
        }
    }
}
