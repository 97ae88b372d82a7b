//! [`UNet2DConditionModel`]'s forward pass: input checks, the embedding (time, plus class
//! labels and SDXL's added conditions where the model takes them), then `conv_in`, the down
//! levels, the mid block, the up levels (with diffusers' forwarded upsample sizes), and the
//! output head.
//!
//! Invariants: inputs are checked against the model's dtype, device and config, and the
//! memory the step needs against what the device can give (`memory.rs`), before any work; a
//! model requires exactly the extra conditions its config names (`text_time`, a class
//! embedding) and refuses the others, instead of silently dropping or inventing a term of the
//! embedding. With `encoder_hid_dim` the text states are projected once, before the blocks.

use super::embeddings::AddedCond;
use super::UNet2DConditionModel;
use crate::nn::layers::act;
use crate::{DType, Device, Error, MemoryFormat, Result, Tensor};

/// Errors for extra conditions a model needs or refuses ([`UNet2DConditionModel::embed`]).
const NEEDS_TEXT_TIME: &str = "this model (addition_embed_type \"text_time\", SDXL) needs \
     text_embeds and time_ids in its AddedCond (forward_with_added_cond)";
const REFUSES_TEXT_TIME: &str =
    "text_embeds or time_ids were given but this model's addition_embed_type is null";
const NEEDS_CLASS: &str =
    "this model needs class_labels in its AddedCond (forward_with_added_cond)";
const REFUSES_CLASS: &str = "class_labels were given but this model has no class embedding \
     (class_embed_type and num_class_embeds are null)";
const REFUSES_TIMESTEP_COND: &str = "a timestep_cond was given but this model has no \
     time_embedding.cond_proj (time_cond_proj_dim is null)";

impl UNet2DConditionModel {
    fn check_input(&self, what: &'static str, t: &Tensor) -> Result<()> {
        if t.device() != self.device {
            return Err(Error::DeviceMismatch {
                op: what,
                lhs: t.device(),
                rhs: self.device,
            });
        }
        if t.dtype() != self.dtype {
            return Err(Error::DTypeMismatch {
                op: what,
                expected: self.dtype,
                got: t.dtype(),
            });
        }
        Ok(())
    }

    /// The embedding `temb` `[B, time_embed_dim]` of `timestep` (scalar, `[1]` or `[B]`; f32,
    /// f16, bf16 or i32; moved to the model's device as diffusers does) for a batch of `batch`.
    pub fn time_embed(&self, timestep: &Tensor, batch: usize) -> Result<Tensor> {
        let t = timestep.to(self.device)?;
        let e = &self.time_embedding;
        e.forward(&e.project(&t, batch, self.dtype)?)
    }

    /// The embedding the blocks receive (diffusers' `emb`): [`Self::time_embed`] (of the
    /// sinusoid plus `cond_proj(added.timestep_cond)` where given), plus (or, with
    /// `class_embeddings_concat`, concatenated with) the class embedding of
    /// `added.class_labels` for a model with one, plus `add_embedding` of `added.text_embeds`
    /// and `added.time_ids` for a `text_time` (SDXL) model, then `time_embedding_act_fn`, in
    /// diffusers' order: `[batch, blocks_time_embed_dim]`. A model requires the conditions its
    /// config names and refuses the others (which are present is checked before anything is
    /// computed; their shapes as each is used).
    pub fn embed(&self, timestep: &Tensor, batch: usize, added: &AddedCond) -> Result<Tensor> {
        let op = "UNet2DConditionModel::forward";
        let text_time = match (&self.add_embedding, &added.text_embeds, &added.time_ids) {
            (Some(e), Some(text), Some(ids)) => Some((e, text, ids)),
            (Some(_), _, _) => return Err(Error::invalid(op, NEEDS_TEXT_TIME)),
            (None, None, None) => None,
            (None, _, _) => return Err(Error::invalid(op, REFUSES_TEXT_TIME)),
        };
        let class = match (&self.class_embedding, &added.class_labels) {
            (Some(e), Some(labels)) => Some((e, labels)),
            (Some(e), None) => {
                return Err(Error::invalid(
                    op,
                    format!("{NEEDS_CLASS}: {}", e.expects("B")),
                ));
            }
            (None, Some(_)) => return Err(Error::invalid(op, REFUSES_CLASS)),
            (None, None) => None,
        };
        if added.timestep_cond.is_some() && self.config.time_cond_proj_dim.is_none() {
            return Err(Error::invalid(op, REFUSES_TIMESTEP_COND));
        }
        if let Some((_, text, _)) = text_time {
            self.check_input("UNet2DConditionModel text_embeds", text)?;
        }
        let mut emb = match &added.timestep_cond {
            Some(cond) => {
                self.check_input("UNet2DConditionModel timestep_cond", cond)?;
                if let Some(d) = self.config.time_cond_proj_dim {
                    if cond.shape() != [batch, d] {
                        return Err(Error::shape(
                            "UNet2DConditionModel timestep_cond",
                            format!("[{batch}, {d}] (time_cond_proj_dim)"),
                            cond.shape(),
                        ));
                    }
                }
                let e = &self.time_embedding;
                let t = e.project(&timestep.to(self.device)?, batch, self.dtype)?;
                e.forward_cond(&t, cond)?
            }
            None => self.time_embed(timestep, batch)?,
        };
        if let Some((e, labels)) = class {
            let class_emb = e.forward(labels, batch, (self.dtype, self.device))?;
            emb = if self.config.class_embeddings_concat {
                Tensor::cat(&[&emb, &class_emb], 1)?
            } else {
                emb.add(&class_emb)?
            };
        }
        if let Some(((add, time_dim), text, ids)) = text_time {
            let ids = ids.to(self.device)?;
            let x = add.project_text_time((text, &ids), batch, *time_dim, self.dtype)?;
            emb = emb.add(&add.forward(&x)?)?;
        }
        match self.config.time_embedding_act_fn {
            Some(f) => act(&emb, f),
            None => Ok(emb),
        }
    }

    /// Predicts the noise (or v) for `sample` `[B, in_channels, H, W]` at `timestep` (scalar,
    /// `[1]` or `[B]`) given `encoder_hidden_states` `[B, L, cross_attention_dim]`. `sample` and
    /// `encoder_hidden_states` must have the model's dtype and device. The output has the
    /// sample's memory format. Activations are kept in [`Self::activation_format`].
    /// A model that takes more conditions (SDXL's `text_time`, class labels) needs
    /// [`Self::forward_with_added_cond`] (this method then returns an error saying so).
    pub fn forward(
        &self,
        sample: &Tensor,
        timestep: &Tensor,
        encoder_hidden_states: &Tensor,
    ) -> Result<Tensor> {
        let fmt = self.activation_format();
        let none = AddedCond::default();
        self.forward_in_format(sample, timestep, encoder_hidden_states, &none, fmt)
    }

    /// [`Self::forward`] with the conditions diffusers takes as `added_cond_kwargs` (SDXL's
    /// pooled text embeddings and time ids) and `class_labels` (see [`AddedCond`]).
    pub fn forward_with_added_cond(
        &self,
        sample: &Tensor,
        timestep: &Tensor,
        encoder_hidden_states: &Tensor,
        added: &AddedCond,
    ) -> Result<Tensor> {
        let fmt = self.activation_format();
        self.forward_in_format(sample, timestep, encoder_hidden_states, added, fmt)
    }

    /// The memory format [`Self::forward`] keeps activations in: channels-last on the Cpu
    /// (its convolution engine works on NHWC, so no conv transposes its input or output and the
    /// transformers' tokens are views) and for f16 on an Xpu whose convolutions run on tensor
    /// cores (they gather channels-last inputs); NCHW on other Xpus. `config::GpuConfig::unet_channels_last`
    /// overrides the Xpu choice (for comparisons).
    pub fn activation_format(&self) -> MemoryFormat {
        match self.device {
            Device::Cpu => MemoryFormat::ChannelsLast,
            Device::Xpu => {
                let forced = crate::config::with(|c| c.gpu.unet_channels_last);
                let channels_last = match forced {
                    Some(on) => on,
                    None => {
                        self.dtype == DType::F16
                            && crate::ops::conv::prefers_channels_last_f16(self.device)
                    }
                };
                if channels_last {
                    MemoryFormat::ChannelsLast
                } else {
                    MemoryFormat::Contiguous
                }
            }
        }
    }

    /// [`Self::forward`] (with `added` conditions where the model takes them) with activations
    /// kept in `activations` from `conv_in` to `conv_out`: the sample is converted once at the
    /// start and the output once at the end, back to the sample's format. Both formats compute
    /// the same values (up to rounding order).
    pub fn forward_in_format(
        &self,
        sample: &Tensor,
        timestep: &Tensor,
        encoder_hidden_states: &Tensor,
        added: &AddedCond,
        activations: MemoryFormat,
    ) -> Result<Tensor> {
        let op = "UNet2DConditionModel::forward";
        let c = &self.config;
        self.check_input("UNet2DConditionModel sample", sample)?;
        self.check_input(
            "UNet2DConditionModel encoder_hidden_states",
            encoder_hidden_states,
        )?;
        if sample.rank() != 4 || sample.shape()[1] != c.in_channels {
            return Err(Error::shape(
                op,
                format!("sample [B, {}, H, W]", c.in_channels),
                sample.shape(),
            ));
        }
        let b = sample.shape()[0];
        let ehs = encoder_hidden_states;
        let ehs_dim = c.encoder_states_dim();
        if ehs.rank() != 3 || ehs.shape()[0] != b || ehs.shape()[2] != ehs_dim {
            let what = if c.encoder_hid_dim.is_some() {
                " (encoder_hid_dim)"
            } else {
                ""
            };
            return Err(Error::shape(
                op,
                format!("encoder_hidden_states [{b}, L, {ehs_dim}]{what}"),
                ehs.shape(),
            ));
        }
        // Before any work: a sample whose activations cannot fit the device is refused now.
        self.check_forward_memory(b, (sample.shape()[2], sample.shape()[3]))?;
        // diffusers forwards upsample sizes when H or W is not a multiple of 2^(levels - 1).
        let factor = u32::try_from(c.levels() - 1)
            .ok()
            .and_then(|s| 1usize.checked_shl(s))
            .unwrap_or(0);
        let forward_size = sample.shape()[2..]
            .iter()
            .any(|&d| factor == 0 || !d.is_multiple_of(factor));

        let temb = self.embed(timestep, b, added)?;
        let projected;
        let ehs = match &self.encoder_hid_proj {
            Some(proj) => {
                projected = proj.forward(ehs)?;
                &projected
            }
            None => ehs,
        };
        let x = if c.center_input_sample {
            sample.affine(2.0, -1.0)?
        } else {
            sample.clone()
        };
        let x = x.to_memory_format(activations)?;
        let mut h = self.conv_in.forward(&x)?;
        let mut skips = vec![h.clone()];
        for block in &self.down_blocks {
            let (out, s) = block.forward(&h, &temb, Some(ehs))?;
            h = out;
            skips.extend(s);
        }
        if let Some(mid) = &self.mid_block {
            h = mid.forward(&h, &temb, ehs)?;
        }
        let n_up = self.up_blocks.len();
        for (i, block) in self.up_blocks.iter().enumerate() {
            let take = block.resnets().len();
            let Some(rest) = skips.len().checked_sub(take) else {
                return Err(Error::invalid(
                    op,
                    "internal: fewer skip tensors than up-block ResNets",
                ));
            };
            let res = skips.split_off(rest);
            let size = match skips.last() {
                Some(s) if forward_size && i + 1 < n_up => Some((s.shape()[2], s.shape()[3])),
                _ => None,
            };
            h = block.forward(&h, &res, &temb, Some(ehs), size)?;
        }
        let h = self.conv_norm_out.forward_act(&h, c.act_fn)?;
        self.conv_out
            .forward(&h)?
            .to_memory_format(sample.memory_format())
    }
}
