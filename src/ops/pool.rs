//! 2-D pooling: [`Tensor::max_pool2d`] and [`Tensor::avg_pool2d`] (PyTorch's `F.max_pool2d` /
//! `F.avg_pool2d` without `ceil_mode` and dilation).
//!
//! How: on the Xpu the (padded) input is viewed as windows `[N, C, OH, OW, kh, kw]` through
//! strides (no copy: overlapping windows share elements) and reduced over the two window dims
//! by the reduction kernels, any input layout read in place. On the Cpu that view reduced rows
//! of 2–3 elements at ~1% of the memory bandwidth, so a direct kernel (`cpu::pool2d`) pools
//! NCHW f32 planes instead (contiguous f32 input read in place, anything else gathered once).
//!
//! Invariants: inputs are `[N, C, H, W]` or `[C, H, W]` of a float dtype; kernel and stride are
//! positive, padding at most half the kernel (PyTorch's rule), and at least one window fits:
//! anything else is an error naming the values. `OH = (H + 2·ph - kh) / sh + 1` (floor). Max
//! pads with `-inf` (padding never wins) and propagates NaN; average sums in f32 and divides by
//! `kh·kw` (`count_include_pad`) or by the window's count of real elements, rounding once to
//! the input's dtype. A channels-last input gives a channels-last output, as in PyTorch.

use crate::desc::pool::{PoolGeom, PoolKind};
use crate::layout::Layout;
use crate::{DType, Device, Error, MemoryFormat, Result, Tensor};

/// Window geometry of one pooling call.
struct Windows {
    kernel: (usize, usize),
    stride: (usize, usize),
    padding: (usize, usize),
    out: (usize, usize),
}

impl Windows {
    fn new(
        op: &'static str,
        shape: &[usize],
        kernel: (usize, usize),
        stride: (usize, usize),
        padding: (usize, usize),
    ) -> Result<Windows> {
        let (h, w) = (shape[2], shape[3]);
        crate::desc::checks::positive_pair(op, "kernel_size", kernel)?;
        crate::desc::checks::positive_pair(op, "stride", stride)?;
        if padding.0 > kernel.0 / 2 || padding.1 > kernel.1 / 2 {
            return Err(Error::invalid(
                op,
                format!(
                    "padding must be at most half the kernel_size {kernel:?}, i.e. at most {:?}, got {padding:?}",
                    (kernel.0 / 2, kernel.1 / 2)
                ),
            ));
        }
        // padding <= kernel / 2, so these overflow only for kernels near usize::MAX.
        let grow = |len: usize, pad: usize| len.checked_add(pad).and_then(|v| v.checked_add(pad));
        let (Some(ph), Some(pw)) = (grow(h, padding.0), grow(w, padding.1)) else {
            return Err(Error::invalid(
                op,
                format!("padding {padding:?} is out of range"),
            ));
        };
        if ph < kernel.0 || pw < kernel.1 {
            return Err(Error::ShapeMismatch {
                op,
                expected: format!(
                    "a padded input of at least {kernel:?} for kernel {kernel:?} (padding {padding:?})"
                ),
                got: format!("{:?}", shape),
            });
        }
        let out = (
            (ph - kernel.0) / stride.0 + 1,
            (pw - kernel.1) / stride.1 + 1,
        );
        Ok(Windows {
            kernel,
            stride,
            padding,
            out,
        })
    }

    /// The windows of `x` (already padded) as a strided `[N, C, OH, OW, kh, kw]` view.
    fn view(&self, x: &Tensor) -> Tensor {
        let (l, s) = (x.layout(), x.layout().strides());
        let shape = vec![
            l.shape()[0],
            l.shape()[1],
            self.out.0,
            self.out.1,
            self.kernel.0,
            self.kernel.1,
        ];
        let strides = vec![
            s[0],
            s[1],
            // Saturating: a stride that overflows here only occurs with one window per axis,
            // whose index (0) never multiplies it.
            s[2].saturating_mul(self.stride.0),
            s[3].saturating_mul(self.stride.1),
            s[2],
            s[3],
        ];
        x.with_layout(Layout::from_parts(shape, strides, l.offset()))
    }

    /// The pooled `[N, C, OH, OW]` of a Cpu `x` in its dtype, by the direct kernel.
    fn on_cpu(&self, x: &Tensor, kind: PoolKind) -> Result<Tensor> {
        let s = x.shape();
        // Contiguous f32 is read in place; anything else is gathered to that once.
        let dense = if x.dtype() == DType::F32 && x.is_contiguous() {
            x.clone()
        } else {
            x.to_dtype(DType::F32)?.contiguous()?
        };
        let geom = PoolGeom {
            kernel: self.kernel,
            stride: self.stride,
            padding: self.padding,
            out: self.out,
        };
        let out = dense.storage().pool2d_f32(dense.layout(), geom, kind)?;
        Tensor::from_storage(
            out,
            Layout::contiguous(&[s[0], s[1], self.out.0, self.out.1]),
        )
        .to_dtype(x.dtype())
    }

    /// `x` padded on H and W with `value` (unchanged without padding).
    fn pad(&self, x: &Tensor, value: f64) -> Result<Tensor> {
        let (ph, pw) = self.padding;
        if ph == 0 && pw == 0 {
            return Ok(x.clone());
        }
        x.pad(&[pw, pw, ph, ph], value)
    }
}

/// `[C, H, W]` -> `[1, C, H, W]`; checks rank and dtype.
fn batched(op: &'static str, x: &Tensor) -> Result<Tensor> {
    if !x.dtype().is_float() {
        return Err(Error::UnsupportedDType {
            op,
            dtype: x.dtype(),
            device: x.device(),
            hint: ": pooling takes f32, f16 or bf16".into(),
        });
    }
    match x.rank() {
        4 => Ok(x.clone()),
        3 => x.unsqueeze(0),
        _ => Err(Error::shape(op, "[N, C, H, W] or [C, H, W]", x.shape())),
    }
}

/// The pooled `[N, C, OH, OW]` back in the input's rank and memory format.
fn finish(input: &Tensor, y: Tensor) -> Result<Tensor> {
    let y = if input.rank() == 4 && input.memory_format() == MemoryFormat::ChannelsLast {
        y.to_memory_format(MemoryFormat::ChannelsLast)?
    } else {
        y
    };
    if input.rank() == 3 {
        y.squeeze(0)
    } else {
        Ok(y)
    }
}

impl Tensor {
    /// The largest element of each `kernel` window, windows `stride` apart, after padding H
    /// and W by `padding` on both sides (padding never wins; NaN propagates).
    pub fn max_pool2d(
        &self,
        kernel: (usize, usize),
        stride: (usize, usize),
        padding: (usize, usize),
    ) -> Result<Tensor> {
        let op = "max_pool2d";
        let x = batched(op, self)?;
        let w = Windows::new(op, x.shape(), kernel, stride, padding)?;
        if x.device() == Device::Cpu {
            return finish(self, w.on_cpu(&x, PoolKind::Max)?);
        }
        let windows = w.view(&w.pad(&x, f64::NEG_INFINITY)?);
        finish(self, windows.max(-1, false)?.max(-1, false)?)
    }

    /// The mean of each `kernel` window, windows `stride` apart, after zero-padding H and W by
    /// `padding`; with `count_include_pad` the divisor is always `kh·kw` (PyTorch's default),
    /// else the number of input elements the window covers.
    pub fn avg_pool2d(
        &self,
        kernel: (usize, usize),
        stride: (usize, usize),
        padding: (usize, usize),
        count_include_pad: bool,
    ) -> Result<Tensor> {
        let op = "avg_pool2d";
        let x = batched(op, self)?;
        let w = Windows::new(op, x.shape(), kernel, stride, padding)?;
        if x.device() == Device::Cpu {
            return finish(self, w.on_cpu(&x, PoolKind::Avg(count_include_pad))?);
        }
        let wide = x.to_dtype(DType::F32)?;
        let sums = w.view(&w.pad(&wide, 0.0)?).sum(-1, false)?.sum(-1, false)?;
        let mean = if count_include_pad || padding == (0, 0) {
            sums.div_scalar((kernel.0 * kernel.1) as f64)?
        } else {
            // The same windows over ones count the real elements of each.
            let (h, wd) = (x.shape()[2], x.shape()[3]);
            let ones = Tensor::ones(&[1, 1, h, wd], DType::F32, x.device())?;
            let counts = w.view(&w.pad(&ones, 0.0)?).sum(-1, false)?.sum(-1, false)?;
            sums.div(&counts)?
        };
        finish(self, mean.to_dtype(self.dtype())?)
    }
}
