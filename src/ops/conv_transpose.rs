//! [`Tensor::conv_transpose2d`]: PyTorch's `F.conv_transpose2d` (the gradient of `conv2d`
//! with respect to its input), built on [`Tensor::conv2d`] so both devices and every layout
//! run it with the convolution engines.
//!
//! How, with dilation 1 (the common case: upsampling layers): a sub-pixel split. Output row
//! `y` receives input row `x` through tap `j` where `y + p = x·s + j`; writing `y + p = q·s + r`
//! (phase `r < s`), only taps `j = r + t·s` reach it, from rows `x = q - t`. So each phase is a
//! stride-1 convolution of the input with the sub-kernel `w[r + t·s]` (flipped in `t`, padded
//! with zero taps to `T = ceil(k/s)`), and all `s_h·s_w` phases are one convolution whose
//! output channels are `[group, phase_h, phase_w, Cout/groups]`; interleaving them (`y + p`
//! is row `q·s + r`) and cropping `p` gives the output. The engines do the useful
//! multiply-adds only (plus the zero taps when `s` does not divide `k`, and `ceil(p/s)` rows
//! computed then cropped). On the Cpu the phases are computed channels-last whatever the
//! input's format, so the interleave copies runs of `Cout/groups` contiguous values (an NCHW
//! interleave moves single elements); the Xpu keeps the input's format. The output is then
//! laid out in the input's format.
//!
//! With dilation > 1 the phases mix (`j·d` modulo `s`), and the general form is used: a
//! stride-1 convolution of the input with `s - 1` zeros inserted between its elements, padded
//! by `d·(k-1) - p` on each side (cropped where that is negative) plus `output_padding` at
//! the end, with the kernel flipped and its in/out channels swapped per group; the zero
//! insertion wastes `s²` of the multiply-adds. Both give PyTorch's definition (checked against
//! a scatter reference and PyTorch's values).
//!
//! Invariants: input `[N, Cin, H, W]`; weight `[Cin, Cout/groups, kh, kw]` (PyTorch's layout)
//! of the input's dtype and device; `output_padding` smaller than the stride or the dilation
//! (PyTorch's rule); output `[N, Cout, (H-1)·s - 2p + d·(k-1) + output_padding + 1, ...]`, at
//! least 1 each way; a channels-last input gives a channels-last output.

use crate::desc::checks;
use crate::tensor::{NCHW_FROM_NHWC, NHWC};
use crate::{Conv2dParams, Device, Error, MemoryFormat, Result, Tensor};

/// Stride, padding, output padding, dilation and groups of a transposed convolution,
/// `(height, width)` each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvTranspose2dParams {
    /// Step between input positions in the output (the upsampling factor).
    pub stride: (usize, usize),
    /// Rows/columns removed from both sides of the full output.
    pub padding: (usize, usize),
    /// Rows/columns added at the end (bottom/right) to pick one of the output sizes a strided
    /// `conv2d` maps to the same input size.
    pub output_padding: (usize, usize),
    /// Step between kernel taps.
    pub dilation: (usize, usize),
    /// Channel groups (`Cin` and `Cout` divisible by it).
    pub groups: usize,
}

impl Default for ConvTranspose2dParams {
    fn default() -> Self {
        ConvTranspose2dParams {
            stride: (1, 1),
            padding: (0, 0),
            output_padding: (0, 0),
            dilation: (1, 1),
            groups: 1,
        }
    }
}

/// Pads (positive) or crops (negative) `x` along `dim` by `before` and `after`.
fn extend(x: &Tensor, dim: usize, before: isize, after: isize) -> Result<Tensor> {
    let len = x.shape()[dim] as isize;
    let (cut_front, cut_back) = ((-before).max(0), (-after).max(0));
    let x = if cut_front > 0 || cut_back > 0 {
        x.narrow(
            dim as isize,
            cut_front as usize,
            (len - cut_front - cut_back).max(0) as usize,
        )?
    } else {
        x.clone()
    };
    let (add_front, add_back) = (before.max(0) as usize, after.max(0) as usize);
    if add_front == 0 && add_back == 0 {
        return Ok(x);
    }
    // F.pad order: (last_left, last_right, second_last_left, ...), covering dims dim..rank.
    let mut pads = vec![0; 2 * (x.rank() - dim)];
    let at = 2 * (x.rank() - 1 - dim);
    pads[at] = add_front;
    pads[at + 1] = add_back;
    x.pad(&pads, 0.0)
}

/// `x` with `s - 1` zeros between neighbours along dims 2 and 3 (`[N, C, (H-1)·s+1, ...]`).
fn insert_zeros(x: &Tensor, (sh, sw): (usize, usize)) -> Result<Tensor> {
    if sh == 1 && sw == 1 {
        return Ok(x.clone());
    }
    let [n, c, h, w] = [x.shape()[0], x.shape()[1], x.shape()[2], x.shape()[3]];
    // [N, C, H, 1, W, 1] -> zeros after each element -> [N, C, H·sh, W·sw] -> trim the tail.
    let spread = x
        .reshape(&[n, c, h, 1, w, 1])?
        .pad(&[0, sw - 1, 0, 0, 0, sh - 1], 0.0)?
        .reshape(&[n, c, h * sh, w * sw])?;
    spread
        .narrow(2, 0, (h - 1) * sh + 1)?
        .narrow(3, 0, (w - 1) * sw + 1)
}

/// Checks `p`, a `[Cin, Cout/groups, kh, kw]` weight shape and the bias shape `[Cout]` (the
/// checks that need no input).
pub(crate) fn check_weight(
    op: &'static str,
    weight: &[usize],
    bias: Option<&[usize]>,
    p: ConvTranspose2dParams,
) -> Result<()> {
    let &[cin, cog, kh, kw] = weight else {
        return Err(Error::shape(
            op,
            "a weight of shape [Cin, Cout/groups, kh, kw]",
            weight,
        ));
    };
    let g = p.groups;
    checks::positive_pair(op, "stride", p.stride)?;
    checks::positive_pair(op, "dilation", p.dilation)?;
    checks::positive(op, "groups", g)?;
    checks::positive_pair(
        op,
        &format!("kernel size (kh, kw) (dims 2 and 3 of weight {weight:?})"),
        (kh, kw),
    )?;
    checks::divisible(
        op,
        &format!("input channels Cin (dim 0 of weight {weight:?})"),
        cin,
        "groups",
        g,
    )?;
    if let Some(b) = bias {
        if b != [g * cog] {
            return Err(Error::shape(
                op,
                format!("a bias of shape [{}]", g * cog),
                b,
            ));
        }
    }
    let (op_h, op_w) = p.output_padding;
    if (op_h >= p.stride.0 && op_h >= p.dilation.0) || (op_w >= p.stride.1 && op_w >= p.dilation.1)
    {
        return Err(Error::invalid(
            op,
            format!(
                "output_padding must be smaller than the stride {:?} or the dilation {:?} in each dim, got {:?}",
                p.stride, p.dilation, p.output_padding
            ),
        ));
    }
    Ok(())
}

/// Output size and the sides `d·(k-1) - p` of the stride-1 convolution for an input of
/// `shape` (`[N, Cin, H, W]`, checked against the weight's `Cin`), or why there is none.
pub(crate) fn geometry(
    op: &'static str,
    shape: &[usize],
    weight: [usize; 4],
    p: ConvTranspose2dParams,
) -> Result<Geometry> {
    let [cin, _, kh, kw] = weight;
    let &[_, c, h, w] = shape else {
        return Err(Error::ShapeMismatch {
            op,
            expected: "input [N, Cin, H, W] and weight [Cin, Cout/groups, kh, kw]".into(),
            got: format!("{shape:?} and {weight:?}"),
        });
    };
    if c != cin {
        return Err(Error::ShapeMismatch {
            op,
            expected: format!("an input of {cin} channels (the weight's first dim)"),
            got: format!("input {shape:?}, weight {weight:?}"),
        });
    }
    if h == 0 || w == 0 {
        return Err(Error::shape(
            op,
            "an input [N, Cin, H, W] with non-zero height and width (only the batch may be empty)",
            shape,
        ));
    }
    let (op_h, op_w) = p.output_padding;
    // Sizes in i128 (no overflow for any usize arguments), then checked back into isize:
    // sides of the stride-1 convolution are d·(k-1) - p before, plus output_padding after;
    // the zero-spread input is (len-1)·s + 1 long.
    let wide = |v: usize| v as i128;
    let side = |d: usize, k: usize, pad: usize| wide(d) * (wide(k) - 1) - wide(pad);
    let spread = |len: usize, s: usize| (wide(len) - 1) * wide(s) + 1;
    let (top, left) = (
        side(p.dilation.0, kh, p.padding.0),
        side(p.dilation.1, kw, p.padding.1),
    );
    let out_h = spread(h, p.stride.0) + 2 * top + wide(op_h) - (top + wide(p.padding.0));
    let out_w = spread(w, p.stride.1) + 2 * left + wide(op_w) - (left + wide(p.padding.1));
    let fits = |v: i128| isize::try_from(v).is_ok() && v.unsigned_abs() < (1u128 << 40);
    let sizes = [
        top,
        left,
        spread(h, p.stride.0),
        spread(w, p.stride.1),
        out_h,
        out_w,
    ];
    if !sizes.into_iter().all(fits) {
        return Err(Error::invalid(
            op,
            format!("sizes out of range for input {shape:?} with {p:?}"),
        ));
    }
    if out_h < 1 || out_w < 1 {
        return Err(Error::ShapeMismatch {
            op,
            expected: "an output of at least 1x1".into(),
            got: format!("input {shape:?} gives {out_h}x{out_w} with {p:?}"),
        });
    }
    Ok(Geometry {
        out: (out_h as usize, out_w as usize),
        sides: (top as isize, left as isize),
    })
}

/// What [`geometry`] found for one input.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Geometry {
    /// Output height and width.
    pub out: (usize, usize),
    /// `d·(k-1) - p` along height and width (the zero-spread form's sides).
    pub sides: (isize, isize),
}

/// The stride-1 convolution that computes a transposed convolution with `weight` (`[Cin,
/// Cout/groups, kh, kw]`) and `bias`: its weight and bias, and its parameters (module docs:
/// the sub-pixel phases with dilation 1, the flipped, channel-swapped kernel otherwise).
pub(crate) fn stride1_weights(
    weight: &Tensor,
    bias: Option<&Tensor>,
    p: ConvTranspose2dParams,
) -> Result<(Tensor, Option<Tensor>, Conv2dParams)> {
    let (cin, cog, kh, kw) = (
        weight.shape()[0],
        weight.shape()[1],
        weight.shape()[2],
        weight.shape()[3],
    );
    let g = p.groups;
    if p.dilation != (1, 1) {
        // [Cin, Cout/g, kh, kw] -> per group [Cout/g, Cin/g], flipped in space.
        let w = weight
            .reshape(&[g, cin / g, cog, kh, kw])?
            .transpose(1, 2)?
            .contiguous()?
            .reshape(&[g * cog, cin / g, kh, kw])?;
        let conv = Conv2dParams {
            stride: (1, 1),
            padding: (0, 0),
            dilation: p.dilation,
            groups: g,
        };
        return Ok((flip_spatial(&w)?, bias.cloned(), conv));
    }
    let (sh, sw) = p.stride;
    let (th, tw) = (kh.div_ceil(sh), kw.div_ceil(sw));
    // [Cin, Cout/g, kh, kw] padded to T·s taps (tap j = t·s + r) ->
    // [g, sh, sw, Cout/g, Cin/g, Th, Tw], flipped in t.
    let sub = weight
        .pad(&[0, tw * sw - kw, 0, th * sh - kh], 0.0)?
        .reshape(&[g, cin / g, cog, th, sh, tw, sw])?
        .permute(&[0, 4, 6, 2, 1, 3, 5])?
        .contiguous()?
        .reshape(&[g * sh * sw * cog, cin / g, th, tw])?;
    let sub = flip_spatial(&sub)?;
    let phases = sh * sw;
    let bias = match bias {
        Some(b) if phases > 1 => Some(
            b.reshape(&[g, 1, cog])?
                .broadcast_to(&[g, phases, cog])?
                .contiguous()?
                .reshape(&[g * phases * cog])?,
        ),
        other => other.cloned(),
    };
    let conv = Conv2dParams {
        stride: (1, 1),
        padding: (0, 0),
        dilation: (1, 1),
        groups: g,
    };
    Ok((sub, bias, conv))
}

/// The transposed convolution of `x` given `conv`, the stride-1 convolution of
/// [`stride1_weights`] (`kernel`: the original weight's `[kh, kw]`, `cog`: Cout/groups), laid out
/// in `x`'s format.
pub(crate) fn apply(
    x: &Tensor,
    conv: &dyn Fn(&Tensor) -> Result<Tensor>,
    (cog, kernel): (usize, (usize, usize)),
    p: ConvTranspose2dParams,
    geo: Geometry,
) -> Result<Tensor> {
    let y = if p.dilation == (1, 1) {
        sub_pixel(x, conv, (cog, kernel), p, geo.out)?
    } else {
        let (top, left) = geo.sides;
        let (op_h, op_w) = p.output_padding;
        let xs = insert_zeros(x, p.stride)?;
        let xs = extend(&xs, 2, top, top + op_h as isize)?;
        let xs = extend(&xs, 3, left, left + op_w as isize)?;
        conv(&xs)?
    };
    // The interleaving (or the zero insertion) may have gathered a channels-last input
    // into NCHW: keep the input's format.
    y.to_memory_format(x.memory_format())
}

impl Tensor {
    /// The transposed convolution of `self` (`[N, Cin, H, W]`) with `weight`
    /// (`[Cin, Cout/groups, kh, kw]`) plus an optional `[Cout]` bias: PyTorch's
    /// `F.conv_transpose2d(x, weight, bias, stride, padding, output_padding, groups, dilation)`.
    /// The weight is rearranged on every call; [`crate::nn::ConvTranspose2d`] does it once.
    pub fn conv_transpose2d(
        &self,
        weight: &Tensor,
        bias: Option<&Tensor>,
        p: ConvTranspose2dParams,
    ) -> Result<Tensor> {
        let op = "conv_transpose2d";
        self.same_device(weight, op)?;
        self.same_dtype(weight, op)?;
        if let Some(b) = bias {
            self.same_device(b, op)?;
            self.same_dtype(b, op)?;
        }
        check_weight(op, weight.shape(), bias.map(|b| b.shape()), p)?;
        let ws = weight.shape();
        let ws = [ws[0], ws[1], ws[2], ws[3]];
        let geo = geometry(op, self.shape(), ws, p)?;
        // The output and the padded input the stride-1 convolution reads must exist: refused
        // before the padding and the weights are built.
        let (n, (oh, ow)) = (self.shape()[0], geo.out);
        let out = crate::layout::numel(&[n, ws[1] * p.groups, oh, ow]);
        let (rows, cols) = if p.dilation == (1, 1) {
            // Sub-pixel: T - 1 + Q rows per phase (see `sub_pixel`).
            let taps = |k: usize, s: usize| k.div_ceil(s);
            let q = |pad: usize, o: usize, s: usize| pad.saturating_add(o).div_ceil(s);
            (
                taps(ws[2], p.stride.0) - 1 + q(p.padding.0, oh, p.stride.0),
                taps(ws[3], p.stride.1) - 1 + q(p.padding.1, ow, p.stride.1),
            )
        } else {
            // Zero insertion and extension: the stride-1 convolution's input is the output
            // plus the dilated kernel less one.
            let grow = |o: usize, k: usize, d: usize| o.saturating_add(d.saturating_mul(k - 1));
            (grow(oh, ws[2], p.dilation.0), grow(ow, ws[3], p.dilation.1))
        };
        let padded = crate::layout::numel(&[n, ws[0], rows, cols]);
        for numel in [out, padded] {
            crate::layout::alloc_bytes(op, numel, self.dtype())?;
            crate::backend::ensure_buffer(op, self.device(), numel, self.dtype())?;
        }
        if self.shape()[0] == 0 {
            let (oh, ow) = geo.out;
            return Tensor::zeros(&[0, ws[1] * p.groups, oh, ow], self.dtype(), self.device());
        }
        let (w, b, conv) = stride1_weights(weight, bias, p)?;
        apply(
            self,
            &|xs: &Tensor| xs.conv2d(&w, b.as_ref(), conv),
            (ws[1], (ws[2], ws[3])),
            p,
            geo,
        )
    }
}

/// The sub-pixel form (dilation 1; module docs): one stride-1 convolution (`conv`, with the
/// weights of [`stride1_weights`]) computing every output phase, then the phases interleaved
/// and `padding` cropped into `[N, Cout, out_h, out_w]` (a strided view; the caller lays it out).
fn sub_pixel(
    x: &Tensor,
    conv: &dyn Fn(&Tensor) -> Result<Tensor>,
    (cog, (kh, kw)): (usize, (usize, usize)),
    p: ConvTranspose2dParams,
    (out_h, out_w): (usize, usize),
) -> Result<Tensor> {
    let (n, h, w) = (x.shape()[0], x.shape()[2], x.shape()[3]);
    let (g, (sh, sw)) = (p.groups, p.stride);
    // Taps per phase, and output rows per phase: q covers y + p in [0, Q·s).
    let (th, tw) = (kh.div_ceil(sh), kw.div_ceil(sw));
    let (qh, qw) = (
        (p.padding.0 + out_h).div_ceil(sh),
        (p.padding.1 + out_w).div_ceil(sw),
    );
    // Output q reads input rows q - (T-1) ..= q: T-1 rows before, Q - H after (a crop when
    // negative; Q >= 1 keeps at least one row).
    let as_i = |v: usize| v as isize;
    let xp = extend(x, 2, as_i(th) - 1, as_i(qh) - as_i(h))?;
    let xp = extend(&xp, 3, as_i(tw) - 1, as_i(qw) - as_i(w))?;
    // On the Cpu the phases are computed channels-last: they interleave with runs of Cout/g
    // contiguous channels (an NCHW interleave moves single elements, TLB-bound on a CPU). The
    // Xpu keeps the input's format (its strided copy kernel does not care; no conversion).
    let xp = match x.device() {
        Device::Cpu => xp.to_memory_format(MemoryFormat::ChannelsLast)?,
        Device::Xpu => xp,
    };
    let phased = conv(&xp)?;
    // Either way: rows q·s + r = y + p, columns likewise, then the crop; the caller lays the
    // result out in the input's format.
    if phased.memory_format() == MemoryFormat::ChannelsLast {
        // NHWC [N, Qh, Qw, g, sh, sw, Cout/g] -> [N, Qh, sh, Qw, sw, g, Cout/g].
        phased
            .permute(&NHWC)?
            .reshape(&[n, qh, qw, g, sh, sw, cog])?
            .permute(&[0, 1, 4, 2, 5, 3, 6])?
            .reshape(&[n, qh * sh, qw * sw, g * cog])?
            .narrow(1, p.padding.0, out_h)?
            .narrow(2, p.padding.1, out_w)?
            .permute(&NCHW_FROM_NHWC)
    } else {
        // NCHW [N, g, sh, sw, Cout/g, Qh, Qw] -> [N, g, Cout/g, Qh, sh, Qw, sw].
        phased
            .reshape(&[n, g, sh, sw, cog, qh, qw])?
            .permute(&[0, 1, 4, 5, 2, 6, 3])?
            .reshape(&[n, g * cog, qh * sh, qw * sw])?
            .narrow(2, p.padding.0, out_h)?
            .narrow(3, p.padding.1, out_w)
    }
}

/// `w` (`[A, B, kh, kw]`) reversed along both spatial dims: one gather over the flattened
/// `kh·kw` taps (reversing them reverses both).
fn flip_spatial(w: &Tensor) -> Result<Tensor> {
    let shape = w.shape().to_vec();
    let taps = shape[2] * shape[3];
    let idx: Vec<i32> = (0..taps as i32).rev().collect();
    let idx = Tensor::from_vec(idx, &[taps], w.device())?;
    // The reversed indices are in range by construction: no read-back (an Xpu wait) to check.
    w.reshape(&[shape[0], shape[1], taps])?
        .index_select_in_range(2, &idx)?
        .reshape(&shape)
}
