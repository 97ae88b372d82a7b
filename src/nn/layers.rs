//! Small layers of the UNet: [`GroupNorm`], [`LayerNorm`], a dense projection with a fused
//! residual, and the private convolution wrapper the blocks call.
//!
//! Invariants: parameters keep diffusers' layouts (`[C]` norm affines, `[out, in]` Linear
//! weights, `[O, C, kh, kw]` conv weights) and are only ever read through [`ParamSource`];
//! every layer can be rebuilt with each tensor mapped (`map`), which is how whole models move
//! between devices and dtypes.

use crate::desc::Activation;
use crate::nn::weights::{Init, ParamSource};
use crate::nn::ActFn;
use crate::nn::{Conv2d, Linear};
use crate::{Conv2dParams, DType, MemoryFormat, Result, Tensor};

/// A function applied to every parameter when a model is moved or converted.
pub(crate) type MapFn<'a> = dyn FnMut(&Tensor) -> Result<Tensor> + 'a;

/// `{prefix}.{name}`, or `name` when the prefix is empty.
pub(crate) fn join(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_string()
    } else {
        format!("{prefix}.{name}")
    }
}

/// Applies an activation (unfused), keeping a channels-last input channels-last.
pub(crate) fn act(x: &Tensor, f: ActFn) -> Result<Tensor> {
    let apply = |x: &Tensor| match f {
        ActFn::Silu => x.silu(),
        ActFn::Gelu => x.gelu(),
        ActFn::Relu => x.relu(),
        ActFn::Mish => mish(x),
    };
    // Elementwise ops write row-major outputs: a channels-last activation goes through its
    // dense NHWC view, so the next convolution does not have to transpose it back.
    if x.rank() == 4 && x.memory_format() == MemoryFormat::ChannelsLast {
        apply(&x.permute(&[0, 2, 3, 1])?)?.permute(&[0, 3, 1, 2])
    } else {
        apply(x)
    }
}

/// `x * tanh(softplus(x))` (PyTorch's `mish`), computed in f32 whatever `x`'s dtype (as
/// PyTorch's kernel computes it) and returned in `x`'s dtype. `softplus` is `ln(1 + e^x)`; past
/// f32's `exp` range it is infinite and `tanh` 1, so large inputs give `x` as they should.
fn mish(x: &Tensor) -> Result<Tensor> {
    let x32 = x.to_dtype(DType::F32)?;
    let softplus = x32.exp()?.add_scalar(1.0)?.log()?;
    x32.mul(&softplus.tanh()?)?.to_dtype(x.dtype())
}

/// The matrix-engine epilogue for an activation, where the engine has one (not Mish).
pub(crate) fn epilogue(f: ActFn) -> Option<Activation> {
    match f {
        ActFn::Silu => Some(Activation::Silu),
        ActFn::Gelu => Some(Activation::Gelu),
        ActFn::Relu => Some(Activation::Relu),
        ActFn::Mish => None,
    }
}

/// `f(x @ Wᵀ + b)`: `f` fused into the product's store where the engine has it.
pub(crate) fn linear_act(l: &Linear, x: &Tensor, f: ActFn) -> Result<Tensor> {
    match epilogue(f) {
        Some(a) => l.forward_act(x, a),
        None => act(&l.forward(x)?, f),
    }
}

/// Group normalisation over `[N, C, *spatial]` with a per-channel affine (PyTorch's
/// `nn.GroupNorm(groups, C, eps, affine=True)`).
#[derive(Clone, Debug)]
pub struct GroupNorm {
    weight: Tensor,
    bias: Tensor,
    groups: usize,
    eps: f64,
}

impl GroupNorm {
    pub(crate) fn load(
        src: &mut dyn ParamSource,
        prefix: &str,
        channels: usize,
        groups: usize,
        eps: f64,
    ) -> Result<GroupNorm> {
        Ok(GroupNorm {
            weight: src.get(&join(prefix, "weight"), &[channels], Init::Ones)?,
            bias: src.get(&join(prefix, "bias"), &[channels], Init::Zeros)?,
            groups,
            eps,
        })
    }

    pub(crate) fn map(&self, f: &mut MapFn) -> Result<GroupNorm> {
        Ok(GroupNorm {
            weight: f(&self.weight)?,
            bias: f(&self.bias)?,
            ..self.clone()
        })
    }

    /// Normalises `x` (`[N, C, ...]`).
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        x.group_norm(self.groups, Some(&self.weight), Some(&self.bias), self.eps)
    }

    /// Normalises then applies `f` (SiLU fused into the normalisation pass).
    pub fn forward_act(&self, x: &Tensor, f: ActFn) -> Result<Tensor> {
        match f {
            ActFn::Silu => {
                x.group_norm_silu(self.groups, Some(&self.weight), Some(&self.bias), self.eps)
            }
            _ => act(&self.forward(x)?, f),
        }
    }
}

/// Layer normalisation over the last dim with a per-channel affine (`nn.LayerNorm(C, eps)`).
#[derive(Clone, Debug)]
pub struct LayerNorm {
    weight: Tensor,
    bias: Tensor,
    eps: f64,
}

impl LayerNorm {
    pub(crate) fn load(
        src: &mut dyn ParamSource,
        prefix: &str,
        channels: usize,
        eps: f64,
    ) -> Result<LayerNorm> {
        Ok(LayerNorm {
            weight: src.get(&join(prefix, "weight"), &[channels], Init::Ones)?,
            bias: src.get(&join(prefix, "bias"), &[channels], Init::Zeros)?,
            eps,
        })
    }

    pub(crate) fn map(&self, f: &mut MapFn) -> Result<LayerNorm> {
        Ok(LayerNorm {
            weight: f(&self.weight)?,
            bias: f(&self.bias)?,
            eps: self.eps,
        })
    }

    /// Normalises `x` over its last dim.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        x.layer_norm(Some(&self.weight), Some(&self.bias), self.eps)
    }
}

/// Loads a `Linear` stored as `{prefix}.weight` `[out, in]` and optionally `{prefix}.bias`.
pub(crate) fn load_linear(
    src: &mut dyn ParamSource,
    prefix: &str,
    in_features: usize,
    out_features: usize,
    bias: bool,
) -> Result<Linear> {
    let w = src.get(
        &join(prefix, "weight"),
        &[out_features, in_features],
        Init::FanIn(in_features),
    )?;
    let b = if bias {
        Some(src.get(&join(prefix, "bias"), &[out_features], Init::Zeros)?)
    } else {
        None
    };
    Linear::new(w, b)
}

/// Rebuilds a `Linear` with every parameter mapped.
pub(crate) fn map_linear(l: &Linear, f: &mut MapFn) -> Result<Linear> {
    let b = l.bias().map(&mut *f).transpose()?;
    Linear::new(f(&l.weight_owned())?, b)
}

/// `x @ Wᵀ + b + residual` for `x` `[..., in]`: one product whose store adds the bias and the
/// residual (any strided view), see [`Linear::forward_residual`].
pub(crate) fn linear_residual(l: &Linear, x: &Tensor, residual: Option<&Tensor>) -> Result<Tensor> {
    match residual {
        None => l.forward(x),
        Some(r) => l.forward_residual(x, r),
    }
}

/// A 2-D convolution with PyTorch's `nn.Conv2d` parameters (`{prefix}.weight`
/// `[O, C, k, k]`, `{prefix}.bias` `[O]`) on [`Conv2d`], whose store adds the bias and an
/// optional residual.
#[derive(Clone, Debug)]
pub(crate) struct Conv {
    conv: Conv2d,
}

impl Conv {
    pub(crate) fn load(
        src: &mut dyn ParamSource,
        prefix: &str,
        in_ch: usize,
        out_ch: usize,
        kernel: usize,
        stride: usize,
        padding: usize,
    ) -> Result<Conv> {
        let (name, shape) = (join(prefix, "weight"), [out_ch, in_ch, kernel, kernel]);
        let init = Init::FanIn(in_ch * kernel * kernel);
        let weight = src.get(&name, &shape, init)?;
        let regenerate = src.regenerate(&name, &shape, init);
        let bias = src.get(&join(prefix, "bias"), &[out_ch], Init::Zeros)?;
        let params = Conv2dParams {
            stride: (stride, stride),
            padding: (padding, padding),
            ..Conv2dParams::default()
        };
        Ok(Conv {
            conv: Conv2d::new_owned(weight, Some(bias), params, regenerate)?,
        })
    }

    pub(crate) fn map(&self, f: &mut MapFn) -> Result<Conv> {
        let c = &self.conv;
        let bias = c.bias().map(&mut *f).transpose()?;
        Ok(Conv {
            conv: Conv2d::new_owned(f(&c.weight_owned())?, bias, c.params(), None)?,
        })
    }

    /// `conv(x) + bias`, NCHW in and out.
    pub(crate) fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.conv.forward(x)
    }

    /// `conv(x) + bias + residual` in one pass (`residual` broadcasts to the output).
    pub(crate) fn forward_residual(&self, x: &Tensor, residual: &Tensor) -> Result<Tensor> {
        self.conv.forward_fused(x, Some(residual), Activation::None)
    }
}
