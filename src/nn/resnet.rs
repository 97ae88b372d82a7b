//! diffusers' `ResnetBlock2D` (`time_embedding_norm` `"default"` or `"scale_shift"`), `Downsample2D` (strided conv)
//! and `Upsample2D` (nearest x2 or to a given size, then a 3x3 conv).
//!
//! Invariants: the output has the input's memory format (NCHW or channels-last: convolutions,
//! GroupNorm, upsampling and the output scaling all keep it, so a channels-last block never
//! transposes); GroupNorm + activation run as one fused pass for SiLU; the time
//! embedding is projected per block (`time_emb_proj(act(temb))`) and broadcast over H, W; the
//! shortcut is a 1x1 conv exactly when the channel count changes (diffusers' `use_in_shortcut`
//! default).

use crate::nn::layers::{act, join, load_linear, map_linear, Conv, GroupNorm, MapFn};
use crate::nn::weights::ParamSource;
use crate::nn::ActFn;
use crate::nn::Linear;
use crate::{Error, MemoryFormat, Result, Tensor};

/// Shapes and options of one ResNet block.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ResnetDims {
    pub in_ch: usize,
    pub out_ch: usize,
    pub temb: usize,
    /// `time_embedding_norm == "scale_shift"` (see [`ResnetBlock2D::forward`]).
    pub scale_shift: bool,
    pub groups: usize,
    pub eps: f64,
    pub act: ActFn,
    pub output_scale_factor: f64,
}

/// diffusers' `ResnetBlock2D`.
#[derive(Clone, Debug)]
pub struct ResnetBlock2D {
    norm1: GroupNorm,
    conv1: Conv,
    time_emb_proj: Linear,
    norm2: GroupNorm,
    conv2: Conv,
    conv_shortcut: Option<Conv>,
    act: ActFn,
    output_scale_factor: f64,
    scale_shift: bool,
}

impl ResnetBlock2D {
    pub(crate) fn load(
        src: &mut dyn ParamSource,
        prefix: &str,
        d: ResnetDims,
    ) -> Result<ResnetBlock2D> {
        let p = |n: &str| join(prefix, n);
        let temb_out = if d.scale_shift {
            2 * d.out_ch
        } else {
            d.out_ch
        };
        Ok(ResnetBlock2D {
            norm1: GroupNorm::load(src, &p("norm1"), d.in_ch, d.groups, d.eps)?,
            conv1: Conv::load(src, &p("conv1"), d.in_ch, d.out_ch, 3, 1, 1)?,
            time_emb_proj: load_linear(src, &p("time_emb_proj"), d.temb, temb_out, true)?,
            norm2: GroupNorm::load(src, &p("norm2"), d.out_ch, d.groups, d.eps)?,
            conv2: Conv::load(src, &p("conv2"), d.out_ch, d.out_ch, 3, 1, 1)?,
            conv_shortcut: (d.in_ch != d.out_ch)
                .then(|| Conv::load(src, &p("conv_shortcut"), d.in_ch, d.out_ch, 1, 1, 0))
                .transpose()?,
            act: d.act,
            output_scale_factor: d.output_scale_factor,
            scale_shift: d.scale_shift,
        })
    }

    pub(crate) fn map(&self, f: &mut MapFn) -> Result<ResnetBlock2D> {
        Ok(ResnetBlock2D {
            norm1: self.norm1.map(f)?,
            conv1: self.conv1.map(f)?,
            time_emb_proj: map_linear(&self.time_emb_proj, f)?,
            norm2: self.norm2.map(f)?,
            conv2: self.conv2.map(f)?,
            conv_shortcut: self.conv_shortcut.as_ref().map(|c| c.map(f)).transpose()?,
            act: self.act,
            output_scale_factor: self.output_scale_factor,
            scale_shift: self.scale_shift,
        })
    }

    /// `x` `[B, C_in, H, W]`, `temb` `[B, temb]` -> `[B, C_out, H, W]` in `x`'s format.
    pub fn forward(&self, x: &Tensor, temb: &Tensor) -> Result<Tensor> {
        if x.rank() != 4 || temb.rank() != 2 || temb.shape()[0] != x.shape()[0] {
            return Err(Error::ShapeMismatch {
                op: "ResnetBlock2D",
                expected: "x [B, C, H, W] and temb [B, temb_channels]".into(),
                got: format!("x {:?}, temb {:?}", x.shape(), temb.shape()),
            });
        }
        let h = self.norm1.forward_act(x, self.act)?;
        let t = self.time_emb_proj.forward(&act(temb, self.act)?)?;
        let h = if self.scale_shift {
            // norm2, then h * (1 + scale) + shift (the projection's two halves), then act.
            let h = self.norm2.forward(&self.conv1.forward(&h)?)?;
            let c = h.shape()[1];
            let scale = t.narrow(1, 0, c)?.add_scalar(1.0)?;
            let shift = t.narrow(1, c, c)?;
            per_channel(&h, |h, shape| {
                let y = h.mul(&scale.reshape(shape)?)?.add(&shift.reshape(shape)?)?;
                act(&y, self.act)
            })?
        } else {
            // conv1's store adds the projected time embedding, broadcast over H and W.
            let h = self
                .conv1
                .forward_residual(&h, &t.unsqueeze(2)?.unsqueeze(3)?)?;
            self.norm2.forward_act(&h, self.act)?
        };
        let shortcut = match &self.conv_shortcut {
            Some(c) => c.forward(x)?,
            None => x.clone(),
        };
        let y = self.conv2.forward_residual(&h, &shortcut)?;
        if self.output_scale_factor == 1.0 {
            Ok(y)
        } else {
            per_channel(&y, |y, _| y.div_scalar(self.output_scale_factor))
        }
    }
}

/// `f(x, shape)` in `x`'s memory format, where `shape` is how a per-(sample, channel) tensor
/// `[B, C]` broadcasts against the tensor `f` receives. Elementwise ops give row-major outputs,
/// so a channels-last `x` is handed over as its dense NHWC view (`shape` `[B, 1, 1, C]`) and
/// the result viewed back; an NCHW `x` as itself (`[B, C, 1, 1]`).
fn per_channel(x: &Tensor, f: impl FnOnce(&Tensor, &[usize]) -> Result<Tensor>) -> Result<Tensor> {
    let (b, c) = (x.shape()[0], x.shape()[1]);
    if x.memory_format() == MemoryFormat::ChannelsLast {
        f(&x.permute(&[0, 2, 3, 1])?, &[b, 1, 1, c])?.permute(&[0, 3, 1, 2])
    } else {
        f(x, &[b, c, 1, 1])
    }
}

/// diffusers' `Downsample2D(use_conv=True)`: a 3x3 conv with stride 2 (`padding` 1, or 0 with
/// one extra zero row and column on the right and bottom).
#[derive(Clone, Debug)]
pub struct Downsample2D {
    conv: Conv,
    pad_right_bottom: bool,
}

impl Downsample2D {
    pub(crate) fn load(
        src: &mut dyn ParamSource,
        prefix: &str,
        ch: usize,
        padding: usize,
    ) -> Result<Downsample2D> {
        Ok(Downsample2D {
            conv: Conv::load(src, &join(prefix, "conv"), ch, ch, 3, 2, padding)?,
            pad_right_bottom: padding == 0,
        })
    }

    pub(crate) fn map(&self, f: &mut MapFn) -> Result<Downsample2D> {
        Ok(Downsample2D {
            conv: self.conv.map(f)?,
            pad_right_bottom: self.pad_right_bottom,
        })
    }

    /// `[B, C, H, W]` -> `[B, C, ceil(H/2), ceil(W/2)]` (padding 1).
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        if self.pad_right_bottom {
            self.conv.forward(&x.pad(&[0, 1, 0, 1], 0.0)?)
        } else {
            self.conv.forward(x)
        }
    }
}

/// diffusers' `Upsample2D(use_conv=True)`: nearest-neighbour x2 (or to `size`), then a 3x3 conv.
#[derive(Clone, Debug)]
pub struct Upsample2D {
    conv: Conv,
}

impl Upsample2D {
    pub(crate) fn load(src: &mut dyn ParamSource, prefix: &str, ch: usize) -> Result<Upsample2D> {
        Ok(Upsample2D {
            conv: Conv::load(src, &join(prefix, "conv"), ch, ch, 3, 1, 1)?,
        })
    }

    pub(crate) fn map(&self, f: &mut MapFn) -> Result<Upsample2D> {
        Ok(Upsample2D {
            conv: self.conv.map(f)?,
        })
    }

    /// `[B, C, H, W]` -> `[B, C, 2H, 2W]`, or `[B, C, size.0, size.1]` when `size` is given.
    pub fn forward(&self, x: &Tensor, size: Option<(usize, usize)>) -> Result<Tensor> {
        let up = match size {
            None => x.upsample_nearest2d(2)?,
            Some((h, w)) => x.interpolate_nearest(&[h, w])?,
        };
        self.conv.forward(&up)
    }
}
