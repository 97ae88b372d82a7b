//! Bilinear interpolation ([`Tensor::interpolate_bilinear`], PyTorch's
//! `F.interpolate(x, size=(h, w), mode="bilinear", align_corners=...)`), composed from
//! `index_select` and elementwise ops so it runs unchanged on every device.
//!
//! Invariants: source coordinates and weights are computed on the host in f32 exactly as
//! PyTorch's kernels do (`scale = in / out`, or `(in - 1) / (out - 1)` with `align_corners`;
//! `src = scale * (dst + 0.5) - 0.5` clamped at 0, or `scale * dst`; `i1 = i0 + 1` except at the
//! last row; weights `1 - l` and `l`), and applied width first, then height, in f32:
//! `h0 * (w0 * x00 + w1 * x01) + h1 * (w0 * x10 + w1 * x11)`. 16-bit inputs are widened and
//! the result rounded once. A channels-last input gives a channels-last output.

use crate::{DType, Error, MemoryFormat, Result, Tensor};

/// Per output index along one dim: the two source indices and their weights.
struct Taps {
    i0: Vec<i32>,
    i1: Vec<i32>,
    w0: Vec<f32>,
    w1: Vec<f32>,
}

fn taps(input: usize, output: usize, align_corners: bool) -> Result<Taps> {
    let scale = if align_corners {
        if output > 1 {
            (input as f32 - 1.0) / (output as f32 - 1.0)
        } else {
            0.0
        }
    } else {
        input as f32 / output as f32
    };
    let mut t = Taps {
        i0: crate::backend::alloc::with_capacity("interpolate_bilinear", output)?,
        i1: crate::backend::alloc::with_capacity("interpolate_bilinear", output)?,
        w0: crate::backend::alloc::with_capacity("interpolate_bilinear", output)?,
        w1: crate::backend::alloc::with_capacity("interpolate_bilinear", output)?,
    };
    for dst in 0..output {
        let src = if align_corners {
            scale * dst as f32
        } else {
            (scale * (dst as f32 + 0.5) - 0.5).max(0.0)
        };
        let i0 = (src as usize).min(input - 1);
        let i1 = i0 + usize::from(i0 + 1 < input);
        let l1 = src - i0 as f32;
        t.i0.push(i0 as i32);
        t.i1.push(i1 as i32);
        t.w0.push(1.0 - l1);
        t.w1.push(l1);
    }
    Ok(t)
}

impl Tensor {
    /// Bilinear interpolation of an `[N, C, H, W]` tensor to `size = [h, w]`, as
    /// `F.interpolate(x, size=(h, w), mode="bilinear", align_corners=...)`. Float dtypes; the
    /// output keeps `self`'s dtype (and channels-last format). Sizes of 0 are errors.
    pub fn interpolate_bilinear(&self, size: [usize; 2], align_corners: bool) -> Result<Tensor> {
        let op = "interpolate_bilinear";
        if self.rank() != 4 || self.shape()[2..].contains(&0) {
            return Err(Error::shape(
                op,
                "an input [N, C, H, W] with non-zero height and width",
                self.shape(),
            ));
        }
        crate::desc::checks::positive_pair(op, "size", (size[0], size[1]))?;
        if !self.dtype().is_float() {
            return Err(Error::UnsupportedDType {
                op,
                dtype: self.dtype(),
                device: self.device(),
                hint: "; bilinear interpolation takes f32, f16 or bf16".into(),
            });
        }
        let out_shape = [self.shape()[0], self.shape()[1], size[0], size[1]];
        let out_numel = crate::layout::numel(&out_shape);
        crate::backend::ensure_buffer(op, self.device(), out_numel, DType::F32)?;
        let mut x = self.to_dtype(DType::F32)?;
        // Width first, then height (PyTorch's order of the weighted sums).
        for (dim, out) in [(3, size[1]), (2, size[0])] {
            x = x.linear_dim(dim, out, align_corners)?;
        }
        let x = x.to_dtype(self.dtype())?;
        if self.memory_format() == MemoryFormat::ChannelsLast {
            return x.to_memory_format(MemoryFormat::ChannelsLast);
        }
        Ok(x)
    }

    /// `w0 * x[i0] + w1 * x[i1]` along `dim` of an f32 tensor, resized to `out`.
    fn linear_dim(&self, dim: usize, out: usize, align_corners: bool) -> Result<Tensor> {
        let input = self.shape()[dim];
        if input == out {
            return Ok(self.clone());
        }
        let t = taps(input, out, align_corners)?;
        let device = self.device();
        let mut wshape = vec![1; self.rank()];
        wshape[dim] = out;
        let index = |v: Vec<i32>| Tensor::from_vec(v, &[out], device);
        let weight = |v: Vec<f32>| Tensor::from_vec(v, &wshape, device);
        let x0 = self.index_select_in_range(dim, &index(t.i0)?)?;
        let x1 = self.index_select_in_range(dim, &index(t.i1)?)?;
        x0.mul(&weight(t.w0)?)?.add(&x1.mul(&weight(t.w1)?)?)
    }
}
