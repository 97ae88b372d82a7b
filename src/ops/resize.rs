//! Resizing and padding ops composed from views and `cat` (so they run unchanged on every
//! device): nearest-neighbour upsampling and interpolation, constant padding, and diffusers'
//! sinusoidal timestep embedding.
//!
//! Invariants: nearest interpolation follows PyTorch's `mode="nearest"` index rule
//! `src = floor(dst * in / out)`; an integer scale factor is a broadcast view plus one copy;
//! other sizes are built from runs of repeated source rows, one `cat` per resized dim.
//! Upsampling, interpolation and padding keep a channels-last input channels-last (as PyTorch
//! does): they run on its dense `[N, H, W, C]` view, so the copy they make is NHWC-ordered and
//! the channels of a pixel stay one contiguous run; other inputs give contiguous outputs.

use crate::tensor::{NCHW_FROM_NHWC, NHWC};
use crate::{DType, Error, MemoryFormat, Result, Tensor};

impl Tensor {
    /// Repeats every element `factor` times along `dim` (a broadcast view, then one copy).
    fn repeat_each(&self, dim: usize, factor: usize) -> Result<Tensor> {
        let mut shape = self.shape().to_vec();
        let x = self.unsqueeze(dim as isize + 1)?;
        let mut b = x.shape().to_vec();
        b[dim + 1] = factor;
        shape[dim] *= factor;
        // The copy before the reshape: a size-1 dim repeated would otherwise stay a view.
        x.broadcast_to(&b)?.contiguous()?.reshape(&shape)
    }

    /// Nearest-neighbour resize of one dim to `out` elements (PyTorch's index rule).
    fn nearest_dim(&self, dim: usize, out: usize) -> Result<Tensor> {
        let input = self.shape()[dim];
        if out == input {
            return Ok(self.clone());
        }
        if input == 0 || out == 0 {
            let mut shape = self.shape().to_vec();
            shape[dim] = out;
            return Tensor::zeros(&shape, self.dtype(), self.device());
        }
        if out.is_multiple_of(input) {
            return self.repeat_each(dim, out / input);
        }
        // Runs of equal source indices: (source, count).
        let mut runs: Vec<(usize, usize)> =
            crate::backend::alloc::with_capacity("interpolate_nearest", out.min(input))?;
        for i in 0..out {
            // In u128: `i * input` may pass usize for broadcast views of huge dims.
            let src = ((i as u128 * input as u128 / out as u128) as usize).min(input - 1);
            match runs.last_mut() {
                Some((s, n)) if *s == src => *n += 1,
                _ => runs.push((src, 1)),
            }
        }
        let mut pieces = crate::backend::alloc::with_capacity("interpolate_nearest", runs.len())?;
        for &(src, n) in &runs {
            let slice = self.narrow(dim as isize, src, 1)?;
            let mut shape = slice.shape().to_vec();
            shape[dim] = n;
            pieces.push(slice.broadcast_to(&shape)?);
        }
        let mut refs: Vec<&Tensor> =
            crate::backend::alloc::with_capacity("interpolate_nearest", pieces.len())?;
        refs.extend(pieces.iter());
        Tensor::cat(&refs, dim as isize)
    }

    /// `[N, C, H, W]` → `[N, C, H·s, W·s]` by nearest neighbour (diffusers' `Upsample2D`).
    pub fn upsample_nearest2d(&self, scale: usize) -> Result<Tensor> {
        crate::desc::checks::positive("upsample_nearest2d", "scale", scale)?;
        let &[n, c, h, w] = self.shape() else {
            return Err(Error::invalid(
                "upsample_nearest2d",
                format!(
                    "the input must be [N, C, H, W] (rank 4), got {:?}",
                    self.shape()
                ),
            ));
        };
        let (Some(hs), Some(ws)) = (h.checked_mul(scale), w.checked_mul(scale)) else {
            return Err(Error::invalid(
                "upsample_nearest2d",
                format!(
                    "scale must keep {h}·scale and {w}·scale within usize (a [N, C, H, W] input {:?}), got {scale}",
                    self.shape()
                ),
            ));
        };
        let out_numel = crate::layout::numel(&[n, c, hs, ws]);
        crate::backend::ensure_buffer(
            "upsample_nearest2d",
            self.device(),
            out_numel,
            self.dtype(),
        )?;
        if self.memory_format() == MemoryFormat::ChannelsLast {
            // [N, H, W, C] -> [N, H, s, W, s, C] (a broadcast view) -> one dense copy.
            return self.via_nhwc(|v| {
                v.reshape(&[n, h, 1, w, 1, c])?
                    .broadcast_to(&[n, h, scale, w, scale, c])?
                    .contiguous()?
                    .reshape(&[n, hs, ws, c])
            });
        }
        self.repeat_each(2, scale)?.repeat_each(3, scale)
    }

    /// Runs `f` on the `[N, H, W, C]` view of a channels-last `[N, C, H, W]` tensor (free: that
    /// view is dense) and views its `[N, H', W', C]` result back as `[N, C, H', W']`, which is
    /// channels-last when `f` returns a dense tensor (as copies and `cat` do).
    fn via_nhwc(&self, f: impl FnOnce(&Tensor) -> Result<Tensor>) -> Result<Tensor> {
        f(&self.permute(&NHWC)?)?.permute(&NCHW_FROM_NHWC)
    }

    /// Nearest-neighbour interpolation of the trailing spatial dims of `[N, C, *spatial]` to
    /// `size` (one entry per spatial dim), like `F.interpolate(mode="nearest", size=...)`.
    pub fn interpolate_nearest(&self, size: &[usize]) -> Result<Tensor> {
        if self.rank() < 3 || size.len() != self.rank() - 2 {
            return Err(Error::ShapeMismatch {
                op: "interpolate_nearest",
                expected: format!(
                    "{} output sizes for a [N, C, *spatial] tensor",
                    self.rank().saturating_sub(2)
                ),
                got: format!("{size:?} for {:?}", self.shape()),
            });
        }
        let mut out_shape = self.shape()[..2].to_vec();
        out_shape.extend_from_slice(size);
        let out_numel = crate::layout::numel(&out_shape);
        let op = "interpolate_nearest";
        crate::backend::ensure_buffer(op, self.device(), out_numel, self.dtype())?;
        if self.memory_format() == MemoryFormat::ChannelsLast {
            return self.via_nhwc(|v| {
                let (h, w) = (v.nearest_dim(1, size[0])?, size[1]);
                h.nearest_dim(2, w)?
                    .to_memory_format(MemoryFormat::Contiguous)
            });
        }
        let mut x = self.clone();
        for (i, &out) in size.iter().enumerate() {
            x = x.nearest_dim(i + 2, out)?;
        }
        Ok(x)
    }

    /// Pads the last `pads.len() / 2` dims with `value`; `pads` is PyTorch's `F.pad` order:
    /// `(last_left, last_right, second_last_left, second_last_right, ...)`.
    pub fn pad(&self, pads: &[usize], value: f64) -> Result<Tensor> {
        if !pads.len().is_multiple_of(2) || pads.len() / 2 > self.rank() {
            return Err(Error::invalid(
                "pad",
                format!(
                    "expected an even number of pads covering at most {} dims, got {pads:?}",
                    self.rank()
                ),
            ));
        }
        // The padded output must exist (its parts are made first): refused before them.
        let mut padded = self.shape().to_vec();
        for (i, pair) in pads.chunks(2).enumerate() {
            let d = self.rank() - 1 - i;
            padded[d] = pair
                .iter()
                .try_fold(padded[d], |a, &p| a.checked_add(p))
                .ok_or_else(|| Error::invalid("pad", format!("pads {pads:?} overflow dim {d}")))?;
        }
        let numel = crate::layout::numel(&padded);
        crate::layout::alloc_bytes("pad", numel, self.dtype())?;
        crate::backend::ensure_buffer("pad", self.device(), numel, self.dtype())?;
        if self.memory_format() == MemoryFormat::ChannelsLast {
            // Pad the NHWC view: NCHW dim d sits at NHWC position NCHW_FROM_NHWC[d].
            return self.via_nhwc(|v| {
                let dims: Vec<usize> = (0..pads.len() / 2).map(|i| NCHW_FROM_NHWC[3 - i]).collect();
                v.pad_dims(&dims, pads, value)?
                    .to_memory_format(MemoryFormat::Contiguous)
            });
        }
        let dims: Vec<usize> = (0..pads.len() / 2).map(|i| self.rank() - 1 - i).collect();
        self.pad_dims(&dims, pads, value)
    }

    /// Pads `dims[i]` by `pads[2i]` before and `pads[2i + 1]` after with `value` (one `cat`
    /// per padded dim).
    fn pad_dims(&self, dims: &[usize], pads: &[usize], value: f64) -> Result<Tensor> {
        let mut x = self.clone();
        for (&dim, pair) in dims.iter().zip(pads.chunks(2)) {
            let mut parts = Vec::with_capacity(3);
            for (&n, before) in pair.iter().zip([true, false]) {
                if n > 0 {
                    let mut shape = x.shape().to_vec();
                    shape[dim] = n;
                    parts.push((before, Tensor::full(value, &shape, x.dtype(), x.device())?));
                }
            }
            if parts.is_empty() {
                continue;
            }
            let mut refs: Vec<&Tensor> = parts.iter().filter(|(b, _)| *b).map(|(_, t)| t).collect();
            refs.push(&x);
            refs.extend(parts.iter().filter(|(b, _)| !*b).map(|(_, t)| t));
            x = Tensor::cat(&refs, dim as isize)?;
        }
        Ok(x)
    }

    /// Sinusoidal embedding of 1-D timesteps `[B]` into `[B, dim]`, as diffusers'
    /// `get_timestep_embedding(timesteps, dim, flip_sin_to_cos, downscale_freq_shift, scale=1,
    /// max_period=10000)`: `exponent = -ln(max_period) * k / (half - downscale_freq_shift)`,
    /// `emb = t * exp(exponent)`, then `[sin, cos]` (or `[cos, sin]` when flipped), zero-padded
    /// when `dim` is odd. Computed in f32; the result has `dtype`.
    pub fn timestep_embedding(
        &self,
        dim: usize,
        flip_sin_to_cos: bool,
        downscale_freq_shift: f64,
        dtype: DType,
    ) -> Result<Tensor> {
        if self.rank() != 1 {
            return Err(Error::shape(
                "timestep_embedding",
                "1-D timesteps [B]",
                self.shape(),
            ));
        }
        if dim < 2 {
            return Err(Error::invalid(
                "timestep_embedding",
                format!("dim must be at least 2, got {dim}"),
            ));
        }
        let half = dim / 2;
        let denom = half as f64 - downscale_freq_shift;
        if denom == 0.0 {
            return Err(Error::invalid(
                "timestep_embedding",
                "half of dim equals downscale_freq_shift (division by zero)",
            ));
        }
        let device = self.device();
        // The frequencies in f32 step by step as diffusers computes them (`-ln(max_period) * k`,
        // then `/ (half - shift)`, then `exp`), on the host: the arguments `t * freq` reach ~1e3,
        // where one ulp of a frequency moves sin/cos by ~1e-4, so a different rounding order (or
        // a GPU's looser exp) would show as a 1e-4 difference from diffusers.
        // (An absurd `dim` is an error here, before the table is allocated.)
        crate::backend::ensure_host_memory("timestep_embedding", half, DType::F32)?;
        let (scale, denom) = (-(10000f64.ln()) as f32, denom as f32);
        let table: Vec<f32> = (0..half)
            .map(|k| ((scale * k as f32) / denom).exp())
            .collect();
        let freqs = Tensor::from_vec(table, &[half], device)?;
        let t = self.to_dtype(DType::F32)?.unsqueeze(1)?;
        let args = t.mul(&freqs.unsqueeze(0)?)?;
        let (sin, cos) = (args.sin()?, args.cos()?);
        let mut emb = if flip_sin_to_cos {
            Tensor::cat(&[&cos, &sin], 1)?
        } else {
            Tensor::cat(&[&sin, &cos], 1)?
        };
        if dim % 2 == 1 {
            emb = emb.pad(&[0, 1], 0.0)?;
        }
        emb.to_dtype(dtype)
    }
}
