//! Normalisation: [`Tensor::layer_norm`], [`Tensor::group_norm`] and
//! [`Tensor::group_norm_silu`], with PyTorch semantics.
//!
//! Invariants: these functions check everything the kernels rely on (float dtype, rank,
//! `groups` dividing `C`, weight/bias of shape `[C]` with the input's dtype and device, a finite
//! non-negative `eps`), then forward to `Storage`. Statistics are computed in f32 for every
//! float dtype with the biased variance; the output has the input's shape and dtype and is
//! rounded once. Any strided input view is accepted. Layer norm output is contiguous; group
//! norm output keeps the input's memory format as PyTorch's does (dense channels-last for an
//! input whose [`Tensor::memory_format`] is `ChannelsLast`, contiguous otherwise); on both
//! devices channels-last data is normalised in place of its NHWC order (no transpose).

use crate::desc::NormSpec;
use crate::layout::Layout;
use crate::{Error, MemoryFormat, Result, Tensor};

/// Checks the input dtype, `eps` and an optional `[channels]` parameter.
fn check(
    op: &'static str,
    x: &Tensor,
    eps: f64,
    channels: usize,
    params: [(&str, Option<&Tensor>); 2],
) -> Result<()> {
    if !x.dtype().is_float() {
        return Err(Error::UnsupportedDType {
            op,
            dtype: x.dtype(),
            device: x.device(),
            hint: ": normalisation needs f32, f16 or bf16; cast first".into(),
        });
    }
    if !(eps.is_finite() && eps >= 0.0) {
        return Err(Error::invalid(
            op,
            format!("eps must be finite and >= 0, got {eps}"),
        ));
    }
    for (name, p) in params {
        let Some(p) = p else { continue };
        if p.shape() != [channels] {
            return Err(Error::ShapeMismatch {
                op,
                expected: format!("{name} of shape [{channels}] (the normalised channels)"),
                got: format!("{name} of shape {:?}", p.shape()),
            });
        }
        x.same_device(p, op)?;
        x.same_dtype(p, op)?;
    }
    Ok(())
}

impl Tensor {
    /// Layer norm over the last dim (PyTorch's `layer_norm(x, [C], weight, bias, eps)`):
    /// `(x - mean) / sqrt(var + eps) * weight + bias` with the biased variance, statistics in
    /// f32. `weight` and `bias` have shape `[C]` (C = last dim) and the input's dtype and
    /// device. The result is contiguous with the input's shape and dtype.
    pub fn layer_norm(
        &self,
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        eps: f64,
    ) -> Result<Tensor> {
        let op = "layer_norm";
        let Some(&channels) = self.shape().last() else {
            return Err(Error::shape(
                op,
                "a tensor of rank >= 1 (normalised over its last dim)",
                self.shape(),
            ));
        };
        check(
            op,
            self,
            eps,
            channels,
            [("weight", weight), ("bias", bias)],
        )?;
        let s = self.storage().layer_norm(
            self.layout(),
            weight.map(|w| (w.storage(), w.layout())),
            bias.map(|b| (b.storage(), b.layout())),
            eps as f32,
        )?;
        Ok(Tensor::from_storage(s, Layout::contiguous(self.shape())))
    }

    /// Group norm of an `[N, C, *spatial]` tensor (NCHW; any rank >= 2) as PyTorch's
    /// `group_norm(x, groups, weight, bias, eps)`: the `C / groups` channels of each group are
    /// normalised together per batch item, then scaled and shifted per channel. `groups` must
    /// divide `C`; `weight` and `bias` have shape `[C]` and the input's dtype and device. The
    /// output keeps the input's memory format: dense channels-last for a channels-last input
    /// (normalised in its NHWC order on the Cpu, without a transpose), contiguous otherwise.
    pub fn group_norm(
        &self,
        groups: usize,
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        eps: f64,
    ) -> Result<Tensor> {
        self.group_norm_impl("group_norm", groups, weight, bias, eps, false)
    }

    /// [`Tensor::group_norm`] followed by SiLU (`y * sigmoid(y)`), fused into one pass (the
    /// `norm -> nonlinearity` of diffusers' ResNet blocks).
    pub fn group_norm_silu(
        &self,
        groups: usize,
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        eps: f64,
    ) -> Result<Tensor> {
        self.group_norm_impl("group_norm_silu", groups, weight, bias, eps, true)
    }

    fn group_norm_impl(
        &self,
        op: &'static str,
        groups: usize,
        weight: Option<&Tensor>,
        bias: Option<&Tensor>,
        eps: f64,
        silu: bool,
    ) -> Result<Tensor> {
        if self.rank() < 2 {
            return Err(Error::shape(
                op,
                "a tensor of rank >= 2 ([N, C, *spatial])",
                self.shape(),
            ));
        }
        let channels = self.shape()[1];
        if groups == 0 || !channels.is_multiple_of(groups) {
            return Err(Error::invalid(
                op,
                format!(
                    "groups must be > 0 and divide the {channels} channels, got groups = {groups}"
                ),
            ));
        }
        check(
            op,
            self,
            eps,
            channels,
            [("weight", weight), ("bias", bias)],
        )?;
        let weight = weight.map(|w| (w.storage(), w.layout()));
        let bias = bias.map(|b| (b.storage(), b.layout()));
        if self.memory_format() != MemoryFormat::ChannelsLast {
            let s =
                self.storage()
                    .group_norm(self.layout(), groups, weight, bias, eps as f32, silu)?;
            return Ok(Tensor::from_storage(s, Layout::contiguous(self.shape())));
        }
        // Channels-last in, channels-last out (PyTorch keeps the input's memory format), read
        // and written in place of the NHWC order on both devices.
        let x = self.to_memory_format(MemoryFormat::ChannelsLast)?;
        let &[n, c, h, w_] = x.shape() else {
            return Err(Error::shape(op, "a 4-D [N, C, H, W] tensor", x.shape()));
        };
        let spec = NormSpec {
            batch: n,
            channels: c,
            groups,
            inner: h * w_,
            eps: eps as f32,
            silu,
        };
        let out = x
            .storage()
            .group_norm_channels_last(op, x.layout(), weight, bias, &spec)?;
        Tensor::from_storage(out, Layout::contiguous(&[n, h, w_, c])).permute(&[0, 3, 1, 2])
    }
}
