//! The UNet's time embedding: diffusers' `Timesteps` (sinusoidal, via
//! [`Tensor::timestep_embedding`]) followed by `TimestepEmbedding` (`linear_1`, activation,
//! `linear_2`).
//!
//! Invariants: timesteps may be a scalar, `[1]` or `[B]`, of any float dtype or i32, on the
//! model's device; a scalar or `[1]` is broadcast to the batch (diffusers' `expand`). The
//! sinusoid is computed in f32 and cast to the model dtype before `linear_1`, as diffusers does.

use crate::nn::layers::{join, linear_act, load_linear, map_linear, MapFn};
use crate::nn::weights::ParamSource;
use crate::nn::ActFn;
use crate::nn::Linear;
use crate::{DType, Error, Result, Tensor};

/// Conditions some UNets take besides the sample, timestep and text states, as diffusers'
/// `forward` takes them: SDXL's `added_cond_kwargs` (`text_embeds` and `time_ids`, for
/// `addition_embed_type: "text_time"`) and `class_labels` (for `num_class_embeds`, e.g. the
/// x4 upscaler's noise level, or a `class_embed_type`, e.g. stable unCLIP's image embedding).
/// A model requires exactly the ones its config names and refuses the others;
/// `AddedCond::default()` gives none.
#[derive(Clone, Debug, Default)]
pub struct AddedCond {
    /// Pooled text embeddings `[B, D]` (the model's dtype and device).
    pub text_embeds: Option<Tensor>,
    /// Time ids `[B, K]` (f32, f16, bf16 or i32; moved to the model's device): SDXL base's six
    /// are the original height and width, the crop's top and left, and the target height and
    /// width. `D + K * addition_time_embed_dim` must equal `projection_class_embeddings_input_dim`.
    pub time_ids: Option<Tensor>,
    /// Class labels, as the model's class embedding takes them: for `num_class_embeds`, i32
    /// `[B]` (each below `num_class_embeds`; moved to the model's device) or one label (`[]` or
    /// `[1]`) for the whole batch; for `class_embed_type: "timestep"`, timesteps like the
    /// `timestep` argument; for `"identity"` and the projections, vectors `[B, width]` (or one
    /// row for the batch) in the model's dtype on its device (see
    /// [`crate::nn::ClassEmbedType`]).
    pub class_labels: Option<Tensor>,
    /// diffusers' `timestep_cond` `[B, time_cond_proj_dim]` (the model's dtype and device): a
    /// condition projected by `time_embedding.cond_proj` and added to the sinusoid, e.g. LCM's
    /// guidance-scale embedding. Optional even for a model with `time_cond_proj_dim`, as in
    /// diffusers; refused by one without.
    pub timestep_cond: Option<Tensor>,
}

/// diffusers' `TimestepEmbedding` with its `Timesteps` projection.
#[derive(Clone, Debug)]
pub struct TimestepEmbedding {
    /// `cond_proj` (`time_cond_proj_dim` -> `channels`, no bias), where the config has one.
    cond_proj: Option<Linear>,
    linear_1: Linear,
    linear_2: Linear,
    act: ActFn,
    /// `post_act` after `linear_2` (`timestep_post_act` of the model's time embedding).
    post_act: Option<ActFn>,
    /// `time_proj.weight` `[channels / 2]` of a `"fourier"` time projection (else positional).
    fourier: Option<Tensor>,
    channels: usize,
    flip_sin_to_cos: bool,
    freq_shift: f64,
}

/// Shapes and options of the time embedding.
pub(crate) struct TimeDims {
    /// `time_cond_proj_dim`: the width of the condition `cond_proj` takes, if any.
    pub cond_dim: Option<usize>,
    pub channels: usize,
    pub embed_dim: usize,
    pub act: ActFn,
    pub post_act: Option<ActFn>,
    /// The model's `time_proj.weight` where its time projection is `"fourier"`, in f32 in
    /// every model dtype (a 16-bit copy would move `sin(2π t w)` by whole radians).
    pub fourier: Option<Tensor>,
    pub flip_sin_to_cos: bool,
    pub freq_shift: f64,
}

impl TimestepEmbedding {
    pub(crate) fn load(
        src: &mut dyn ParamSource,
        prefix: &str,
        d: TimeDims,
    ) -> Result<TimestepEmbedding> {
        let cond_proj = match d.cond_dim {
            Some(c) => Some(load_linear(
                src,
                &join(prefix, "cond_proj"),
                c,
                d.channels,
                false,
            )?),
            None => None,
        };
        Ok(TimestepEmbedding {
            cond_proj,
            linear_1: load_linear(
                src,
                &join(prefix, "linear_1"),
                d.channels,
                d.embed_dim,
                true,
            )?,
            linear_2: load_linear(
                src,
                &join(prefix, "linear_2"),
                d.embed_dim,
                d.embed_dim,
                true,
            )?,
            act: d.act,
            post_act: d.post_act,
            fourier: d.fourier,
            channels: d.channels,
            flip_sin_to_cos: d.flip_sin_to_cos,
            freq_shift: d.freq_shift,
        })
    }

    pub(crate) fn map(&self, f: &mut MapFn) -> Result<TimestepEmbedding> {
        Ok(TimestepEmbedding {
            cond_proj: match &self.cond_proj {
                Some(l) => Some(map_linear(l, f)?),
                None => None,
            },
            linear_1: map_linear(&self.linear_1, f)?,
            linear_2: map_linear(&self.linear_2, f)?,
            // The frequencies stay f32 (see `TimeDims::fourier`): `f` only says where to.
            fourier: match &self.fourier {
                Some(w) => Some(w.to(f(w)?.device())?),
                None => None,
            },
            ..self.clone()
        })
    }

    /// The projection (`time_proj`: sinusoidal, or Gaussian Fourier for a `"fourier"` model)
    /// of timesteps for a batch of `batch`, in `dtype`: `[batch, channels]`.
    pub fn project(&self, timestep: &Tensor, batch: usize, dtype: DType) -> Result<Tensor> {
        let t = match timestep.shape() {
            [] => timestep.reshape(&[1])?,
            [_] => timestep.clone(),
            s => {
                return Err(Error::shape(
                    "UNet2DConditionModel timestep",
                    format!("a scalar, [1] or [{batch}]"),
                    s,
                ))
            }
        };
        let t = match t.shape()[0] {
            n if n == batch => t,
            1 => t.broadcast_to(&[batch])?,
            _ => {
                return Err(Error::shape(
                    "UNet2DConditionModel timestep",
                    format!("a scalar, [1] or [{batch}] (one per sample)"),
                    timestep.shape(),
                ))
            }
        };
        if !(t.dtype().is_float() || t.dtype() == DType::I32) {
            return Err(Error::UnsupportedDType {
                op: "UNet2DConditionModel timestep",
                dtype: t.dtype(),
                device: t.device(),
                hint: "; timesteps must be f32, f16, bf16 or i32".into(),
            });
        }
        match &self.fourier {
            Some(w) => fourier_projection(&t, w, self.flip_sin_to_cos, dtype),
            None => {
                t.timestep_embedding(self.channels, self.flip_sin_to_cos, self.freq_shift, dtype)
            }
        }
    }

    /// The input of SDXL's `add_embedding` (this embedding, with `channels` its
    /// `projection_class_embeddings_input_dim` and the sinusoid options of the time ids):
    /// `[text_embeds, add_time_proj(time_ids).reshape(B, -1)]` in `dtype`, `[batch, channels]`.
    /// `text` must already be checked against the model's dtype and device, `ids` be on it.
    pub(crate) fn project_text_time(
        &self,
        (text, ids): (&Tensor, &Tensor),
        batch: usize,
        time_dim: usize,
        dtype: DType,
    ) -> Result<Tensor> {
        let op = "UNet2DConditionModel added conditions";
        let (&[tb, td], &[ib, k]) = (text.shape(), ids.shape()) else {
            return Err(Error::ShapeMismatch {
                op,
                expected: format!("text_embeds [{batch}, D] and time_ids [{batch}, K]"),
                got: format!("{:?} and {:?}", text.shape(), ids.shape()),
            });
        };
        let width = k.checked_mul(time_dim).and_then(|w| w.checked_add(td));
        if tb != batch || ib != batch || width != Some(self.channels) {
            return Err(Error::ShapeMismatch {
                op,
                expected: format!(
                    "text_embeds [{batch}, D] and time_ids [{batch}, K] with D + K * {time_dim} = {} \
                     (projection_class_embeddings_input_dim)",
                    self.channels
                ),
                got: format!("{:?} and {:?}", text.shape(), ids.shape()),
            });
        }
        if !(ids.dtype().is_float() || ids.dtype() == DType::I32) {
            return Err(Error::UnsupportedDType {
                op,
                dtype: ids.dtype(),
                device: ids.device(),
                hint: "; time_ids must be f32, f16, bf16 or i32".into(),
            });
        }
        let time = ids
            .reshape(&[batch * k])?
            .timestep_embedding(time_dim, self.flip_sin_to_cos, self.freq_shift, dtype)?
            .reshape(&[batch, k * time_dim])?;
        Tensor::cat(&[text, &time], 1)
    }

    /// The input width (`in_channels` of diffusers' `TimestepEmbedding`).
    pub fn channels(&self) -> usize {
        self.channels
    }

    /// `linear_2(act(linear_1(t_emb)))` (then `post_act`, where the config names one) for a
    /// projected `t_emb` `[B, channels]`.
    pub fn forward(&self, t_emb: &Tensor) -> Result<Tensor> {
        let h = linear_act(&self.linear_1, t_emb, self.act)?;
        match self.post_act {
            None => self.linear_2.forward(&h),
            Some(f) => linear_act(&self.linear_2, &h, f),
        }
    }

    /// [`Self::forward`] of `t_emb + cond_proj(condition)` (diffusers' `TimestepEmbedding`
    /// with a `condition`): `condition` `[B, time_cond_proj_dim]` needs a `cond_proj`.
    pub fn forward_cond(&self, t_emb: &Tensor, condition: &Tensor) -> Result<Tensor> {
        let Some(proj) = &self.cond_proj else {
            return Err(Error::invalid(
                "UNet2DConditionModel timestep_cond",
                "a timestep_cond was given but this model has no time_embedding.cond_proj \
                 (time_cond_proj_dim is null)",
            ));
        };
        self.forward(&t_emb.add(&proj.forward(condition)?)?)
    }
}

/// diffusers' `GaussianFourierProjection(log=False)` of timesteps `t` `[B]` with frequencies
/// `w` `[D/2]`: `[sin(2π t w), cos(2π t w)]` (`[cos, sin]` with `flip_sin_to_cos`), `[B, D]`,
/// computed in f32 (diffusers computes it in the weight's dtype: f32 for the reference) and
/// cast to `dtype`.
fn fourier_projection(
    t: &Tensor,
    w: &Tensor,
    flip_sin_to_cos: bool,
    dtype: DType,
) -> Result<Tensor> {
    let t = t.to_dtype(DType::F32)?.unsqueeze(1)?;
    let w = w.to_dtype(DType::F32)?.to(t.device())?.unsqueeze(0)?;
    let x = t.mul(&w)?.mul_scalar(2.0 * std::f64::consts::PI)?;
    let (sin, cos) = (x.sin()?, x.cos()?);
    let halves = if flip_sin_to_cos {
        [&cos, &sin]
    } else {
        [&sin, &cos]
    };
    Tensor::cat(&halves, 1)?.to_dtype(dtype)
}
