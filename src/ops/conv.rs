//! 2-D convolution with PyTorch semantics (`F.conv2d`: stride, padding, dilation, groups, bias)
//! on NCHW and channels-last input, on every device, with a fused epilogue
//! ([`Conv2dBuilder`]: `act(conv(x, w) + bias) + residual`).
//!
//! Memory formats follow PyTorch: the output is channels-last when the input or the weight is
//! (by [`Tensor::memory_format`]), NCHW otherwise; its shape is always `[N, O, Ho, Wo]`.
//! Empty inputs follow PyTorch too: an empty batch or channel dim gives the (empty or bias-only)
//! output, an image with zero height or width is an error.
//!
//! Engines:
//! - Xpu: the implicit-GEMM kernel of `ops::conv_xpu` (no im2col buffer; input, weight and
//!   residual read through their strides; the epilogue in its store).
//! - Cpu: implicit GEMM on channels-last data with prepacked weights (`cpu::conv`): no im2col
//!   buffer; NCHW inputs are transposed to NHWC once and NCHW outputs back once (measured 1.5-2x
//!   faster than im2col on the SD shapes), channels-last costs neither. `nn::Conv2d` packs its
//!   weights once; [`Tensor::conv2d`] packs them per call.
//! - im2col (`run_unfused`'s on every device): the padded input is
//!   viewed (without a copy) as `[N, G, C/G, kh, kw, Ho, Wo]` through strides, permuted to
//!   `[G, N·Ho·Wo, C/G·kh·kw]`, gathered once (the im2col copy) and multiplied by the weights
//!   `[G, C/G·kh·kw, O/G]` with the whole epilogue fused into the product's store. Its rows
//!   `[N·Ho·Wo, O]` are the NHWC output, so a channels-last result costs no extra pass.
//!   Invariant: the strided view never reaches outside the padded input (checked against its
//!   storage).
//!
//! Semantics are defined by [`Conv2dBuilder::run_unfused`] (separate ops, f32 until one final
//! rounding), which the tests compare the fused engines against.

use crate::backend::conv::ConvPacking;
use crate::backend::prepared::LayerConv;
use crate::desc::Activation;
pub use crate::desc::Conv2dParams;
use crate::desc::ConvGeom;
use crate::ops::conv_cpu::{conv2d_cpu_layer, conv2d_cpu_per_call, f32_vec, pack_weight};
use crate::{DType, Error, Layout, MemoryFormat, Result, Tensor};

/// A convolution with a fused epilogue, `act(conv2d(x, w) + bias) + residual`; made by
/// [`Tensor::conv2d_fused`], computed by [`Conv2dBuilder::run`].
#[derive(Clone, Debug)]
pub struct Conv2dBuilder<'a> {
    x: &'a Tensor,
    weight: &'a Tensor,
    params: Conv2dParams,
    bias: Option<&'a Tensor>,
    residual: Option<&'a Tensor>,
    activation: Activation,
}

impl Tensor {
    /// `F.conv2d(self, weight, bias, stride, padding, dilation, groups)` for `self` of shape
    /// `[N, C, H, W]` (NCHW or channels-last) and `weight` of shape `[O, C/groups, kh, kw]`;
    /// returns `[N, O, Ho, Wo]`, channels-last when the input or weight is.
    pub fn conv2d(
        &self,
        weight: &Tensor,
        bias: Option<&Tensor>,
        p: Conv2dParams,
    ) -> Result<Tensor> {
        let mut b = self.conv2d_fused(weight, p);
        b.bias = bias;
        b.run()
    }

    /// Starts a convolution with a fused epilogue; add `.bias()`, `.activation()`,
    /// `.residual()` and finish with [`Conv2dBuilder::run`].
    pub fn conv2d_fused<'a>(
        &'a self,
        weight: &'a Tensor,
        params: Conv2dParams,
    ) -> Conv2dBuilder<'a> {
        Conv2dBuilder {
            x: self,
            weight,
            params,
            bias: None,
            residual: None,
            activation: Activation::None,
        }
    }
}

/// The output format PyTorch picks: channels-last when the input or the weight is.
pub(crate) fn output_format(x: &Tensor, weight: &Tensor) -> MemoryFormat {
    if x.memory_format() == MemoryFormat::ChannelsLast
        || weight.memory_format() == MemoryFormat::ChannelsLast
    {
        MemoryFormat::ChannelsLast
    } else {
        MemoryFormat::Contiguous
    }
}

impl<'a> Conv2dBuilder<'a> {
    /// Adds a per-output-channel bias (`[O]`).
    pub fn bias(mut self, bias: &'a Tensor) -> Self {
        self.bias = Some(bias);
        self
    }

    /// Applies an activation after the bias.
    pub fn activation(mut self, activation: Activation) -> Self {
        self.activation = activation;
        self
    }

    /// Adds `residual` last; it broadcasts to the output `[N, O, Ho, Wo]` and may have any
    /// layout (NCHW, channels-last, strided views).
    pub fn residual(mut self, residual: &'a Tensor) -> Self {
        self.residual = Some(residual);
        self
    }

    /// The activation and residual of the epilogue.
    fn epilogue(&self) -> (Activation, Option<&'a Tensor>) {
        (self.activation, self.residual)
    }

    /// Checks every operand; returns the geometry and the output format.
    pub(crate) fn validate(&self) -> Result<(ConvGeom, MemoryFormat)> {
        let op = "conv2d";
        let (x, wt) = (self.x, self.weight);
        x.same_device(wt, op)?;
        x.same_dtype(wt, op)?;
        if !x.dtype().is_float() {
            return Err(Error::UnsupportedDType {
                op,
                dtype: x.dtype(),
                device: x.device(),
                hint: "; conv2d takes f32, f16 or bf16".into(),
            });
        }
        let g = ConvGeom::new(op, x.shape(), wt.shape(), self.params)?;
        if let Some(b) = self.bias {
            x.same_device(b, op)?;
            x.same_dtype(b, op)?;
            if b.shape() != [g.o] {
                return Err(Error::shape(
                    op,
                    format!("a bias of shape [{}]", g.o),
                    b.shape(),
                ));
            }
        }
        if let Some(r) = self.residual {
            x.same_device(r, "conv2d residual")?;
            x.same_dtype(r, "conv2d residual")?;
            r.layout()
                .broadcast_to(&g.out_shape())
                .map_err(|_| Error::ShapeMismatch {
                    op: "conv2d residual",
                    expected: format!("a shape that broadcasts to the output {:?}", g.out_shape()),
                    got: format!("{:?}", r.shape()),
                })?;
        }
        Ok((g, output_format(x, wt)))
    }

    /// Computes the fused convolution.
    pub fn run(&self) -> Result<Tensor> {
        let (g, fmt) = self.validate()?;
        if self.x.device() == crate::Device::Xpu {
            let args = crate::ops::conv_xpu::ConvXpuArgs {
                bias: self.bias,
                residual: self.residual,
                activation: self.activation,
                channels_last_out: fmt == MemoryFormat::ChannelsLast,
                ..Default::default()
            };
            return crate::ops::conv_xpu::conv2d_xpu(self.x, self.weight, g.p, &args);
        }
        if self.x.device() == crate::Device::Cpu {
            let out_numel = crate::layout::numel(&g.out_shape());
            crate::backend::ensure_host_memory("conv2d", out_numel, crate::DType::F32)?;
            let bias = self.bias.map(f32_vec).transpose()?;
            return conv2d_cpu_per_call(
                self.x,
                self.weight,
                bias.as_deref(),
                self.epilogue(),
                &g,
                fmt,
            );
        }
        let nhwc = im2col(self.x, self.weight, &g, self, self.x.dtype())?;
        finish(nhwc, &g, fmt)
    }

    /// The Cpu engine with a layer's packs (`nn::Conv2d` packs once, and again for the
    /// autotuner's winner; `weight` gives the weight for that). Packs that cannot serve this
    /// call (AMX panels while the GEMM path is forced off AMX) are bypassed: the weight is
    /// packed for this call as [`Self::run`] does.
    pub(crate) fn run_prepacked(
        &self,
        layer: &LayerConv,
        weight: &dyn Fn() -> Result<Tensor>,
    ) -> Result<Tensor> {
        if !layer.current().serves(self.x.dtype()) {
            return self.run();
        }
        let (g, fmt) = self.validate()?;
        conv2d_cpu_layer(self.x, layer, weight, self.epilogue(), &g, fmt)
    }

    /// The same result by separate ops: convolution in f32, `+ bias`, activation, `+ residual`,
    /// one rounding to the input dtype (the semantics' definition; for tests and benchmarks).
    pub fn run_unfused(&self) -> Result<Tensor> {
        let (g, fmt) = self.validate()?;
        let plain = Conv2dBuilder {
            bias: None,
            residual: None,
            activation: Activation::None,
            ..self.clone()
        };
        let f32_ = |t: &Tensor| t.to_dtype(DType::F32);
        let mut y = finish(
            im2col(self.x, self.weight, &g, &plain, DType::F32)?,
            &g,
            fmt,
        )?;
        if let Some(b) = self.bias {
            y = y.add(&f32_(b)?.reshape(&[1, g.o, 1, 1])?)?;
        }
        y = match self.activation {
            Activation::None => y,
            Activation::Relu => y.relu()?,
            Activation::Gelu => y.gelu()?,
            Activation::GeluTanh => y.gelu_tanh()?,
            Activation::Silu => y.silu()?,
        };
        if let Some(r) = self.residual {
            y = y.add(&f32_(r)?)?;
        }
        y.to_dtype(self.x.dtype())?.to_memory_format(fmt)
    }
}

/// `[N·Ho·Wo, O]` rows (NHWC) to the `[N, O, Ho, Wo]` tensor in `fmt`.
fn finish(rows: Tensor, g: &ConvGeom, fmt: MemoryFormat) -> Result<Tensor> {
    let y = rows
        .reshape(&[g.n, g.ho, g.wo, g.o])?
        .permute(&[0, 3, 1, 2])?;
    y.to_memory_format(fmt)
}

/// The im2col engine: `[N·Ho·Wo, O]` rows of `act(conv + bias) + residual` in `out_dtype`.
fn im2col(
    x: &Tensor,
    weight: &Tensor,
    g: &ConvGeom,
    ep: &Conv2dBuilder,
    out_dtype: DType,
) -> Result<Tensor> {
    let op = "conv2d";
    let p = g.p;
    let (n, c, kh, kw, ho, wo, o) = (g.n, g.c, g.kh, g.kw, g.ho, g.wo, g.o);
    let (hp, wp) = (g.h + 2 * p.padding.0, g.w + 2 * p.padding.1);
    let groups = p.groups;
    let cg = c / groups;
    let xp = x
        .pad(&[p.padding.1, p.padding.1, p.padding.0, p.padding.0], 0.0)?
        .contiguous()?;
    // Unfold view [N, G, C/G, kh, kw, Ho, Wo] over the padded contiguous input.
    let (sn, sc, sh) = (c * hp * wp, hp * wp, wp);
    let unfold = Layout::from_parts(
        vec![n, groups, cg, kh, kw, ho, wo],
        vec![
            sn,
            cg * sc,
            sc,
            p.dilation.0 * sh,
            p.dilation.1,
            p.stride.0 * sh,
            p.stride.1,
        ],
        xp.layout().offset(),
    );
    if unfold.max_offset() > xp.storage().len() {
        return Err(Error::invalid(
            op,
            "internal: unfold view outside the input",
        ));
    }
    let cols = xp
        .with_layout(unfold)
        .permute(&[1, 0, 5, 6, 2, 3, 4])?
        .reshape(&[groups, g.m(), cg * kh * kw])?;
    let wmat = weight
        .reshape(&[groups, o / groups, cg * kh * kw])?
        .transpose(1, 2)?;
    // The residual as [N·Ho·Wo, O] rows (a view for channels-last data, else one copy).
    let residual = ep
        .residual
        .map(|r| {
            r.broadcast_to(&g.out_shape())?
                .permute(&[0, 2, 3, 1])?
                .reshape(&[g.m(), o])
        })
        .transpose()?;
    let og = o / groups;
    let mut outs = crate::backend::alloc::with_capacity(op, groups)?;
    for gi in 0..groups {
        let a = cols.narrow(0, gi, 1)?.squeeze(0)?;
        let b = wmat.narrow(0, gi, 1)?.squeeze(0)?;
        let bias_g = ep.bias.map(|t| t.narrow(0, gi * og, og)).transpose()?;
        let res_g = residual
            .as_ref()
            .map(|t| t.narrow(1, gi * og, og))
            .transpose()?;
        let mut mm = a
            .matmul_fused(&b)
            .activation(ep.activation)
            .out_dtype(out_dtype);
        if let Some(bg) = &bias_g {
            mm = mm.bias(bg);
        }
        if let Some(rg) = &res_g {
            mm = mm.residual(rg);
        }
        outs.push(mm.run()?);
    }
    if groups == 1 {
        return Ok(outs.swap_remove(0));
    }
    let refs: Vec<&Tensor> = outs.iter().collect();
    Tensor::cat(&refs, 1)
}

/// The form a convolution layer keeps its weight in for `weight`'s device: on the Cpu the
/// weight packed once into the engine's panels (Winograd points where they win) and the bias
/// widened to f32; on the Xpu nothing (the kernels read the weight tensor).
pub(crate) fn prepare_layer_weight(
    weight: &Tensor,
    bias: Option<&Tensor>,
    params: Conv2dParams,
) -> Result<Option<LayerConv>> {
    if weight.device() != crate::Device::Cpu {
        return Ok(None);
    }
    Ok(Some(LayerConv::new(
        pack_weight(weight, params, ConvPacking::Layer, None)?,
        bias.map(f32_vec).transpose()?,
    )))
}

/// The memory format a convolution layer should store `weight` in: channels-last (the
/// `[O][kh][kw][C]` order) for f16 weights on a device whose tensor-core convolutions read it
/// so (even channel counts, one group), so no call repacks it; `None`: keep it as given.
pub(crate) fn layer_weight_format(weight: &Tensor, groups: usize) -> Option<MemoryFormat> {
    let s = weight.shape();
    let tensor_cores = weight.dtype() == DType::F16
        && groups == 1
        && s.len() == 4
        && s[1].is_multiple_of(2)
        && s[0].is_multiple_of(2)
        && crate::backend::conv::tensor_core_convolutions(weight.device());
    tensor_cores.then_some(MemoryFormat::ChannelsLast)
}

/// Whether f16 activations are best kept channels-last on `device` (its tensor-core
/// convolutions gather channels-last inputs).
pub(crate) fn prefers_channels_last_f16(device: crate::Device) -> bool {
    crate::backend::conv::tensor_core_convolutions(device)
}
