//! Convolution descriptors: the user's parameters ([`Conv2dParams`]) and the validated geometry
//! every engine works from ([`ConvGeom`]).
//!
//! Invariant: a `ConvGeom` exists only through [`ConvGeom::new`], so its fields are consistent
//! and its output size fits in memory arithmetic.

use super::checks;
use crate::{Error, Result};

/// Stride, padding and dilation of a 2-D convolution, `(height, width)` each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Conv2dParams {
    /// Step between output positions.
    pub stride: (usize, usize),
    /// Zeros added on both sides.
    pub padding: (usize, usize),
    /// Step between kernel taps.
    pub dilation: (usize, usize),
    /// Channel groups (`C` and `O` must be divisible by it).
    pub groups: usize,
}

impl Default for Conv2dParams {
    fn default() -> Self {
        Conv2dParams {
            stride: (1, 1),
            padding: (0, 0),
            dilation: (1, 1),
            groups: 1,
        }
    }
}

/// The validated geometry of one convolution: input `[n, c, h, w]`, weight `[o, c/g, kh, kw]`,
/// output `[n, o, ho, wo]`. Invariant: every field is consistent (checked by [`ConvGeom::new`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct ConvGeom {
    pub n: usize,
    pub c: usize,
    pub h: usize,
    pub w: usize,
    pub o: usize,
    pub kh: usize,
    pub kw: usize,
    pub ho: usize,
    pub wo: usize,
    pub p: Conv2dParams,
}

impl ConvGeom {
    /// Checks an input shape against a weight shape and parameters.
    pub(crate) fn new(
        op: &'static str,
        x: &[usize],
        wt: &[usize],
        p: Conv2dParams,
    ) -> Result<Self> {
        let (&[n, c, h, w], &[o, cg, kh, kw]) = (x, wt) else {
            return Err(Error::ShapeMismatch {
                op,
                expected: "input [N, C, H, W] and weight [O, C/groups, kh, kw]".into(),
                got: format!("{x:?} and {wt:?}"),
            });
        };
        if (h == 0 || w == 0) && n > 0 && c > 0 {
            // As PyTorch: only the batch or the channels may be empty.
            return Err(Error::ShapeMismatch {
                op,
                expected: "an input with non-zero height and width (only the batch or the \
                           channels may be empty)"
                    .into(),
                got: format!("{x:?}"),
            });
        }
        let g = p.groups;
        checks::positive_pair(op, "stride", p.stride)?;
        checks::positive_pair(op, "dilation", p.dilation)?;
        checks::positive(op, "groups", g)?;
        checks::divisible(
            op,
            &format!("input channels C (dim 1 of input {x:?})"),
            c,
            "groups",
            g,
        )?;
        checks::divisible(
            op,
            &format!("output channels O (dim 0 of weight {wt:?})"),
            o,
            "groups",
            g,
        )?;
        if cg != c / g {
            return Err(Error::invalid(
                op,
                format!(
                    "weight dim 1 must equal input channels / groups = {c} / {g} = {} \
                     (input {x:?}), got {cg} (weight {wt:?})",
                    c / g
                ),
            ));
        }
        if kh == 0 || kw == 0 {
            return Err(Error::invalid(
                op,
                format!("kernel size (kh, kw) (dims 2 and 3 of weight {wt:?}) must be at least 1 in both dims, got ({kh}, {kw})"),
            ));
        }
        // Sizes past usize (absurd padding or dilation) are refused, never wrapped.
        let padded = |len: usize, pad: usize| pad.checked_mul(2).and_then(|p| p.checked_add(len));
        let extent =
            |k: usize, d: usize| d.checked_mul(k.max(1) - 1).and_then(|e| e.checked_add(1));
        let sizes = (
            padded(h, p.padding.0),
            padded(w, p.padding.1),
            extent(kh, p.dilation.0),
            extent(kw, p.dilation.1),
        );
        let (Some(hp), Some(wp), Some(ekh), Some(ekw)) = sizes else {
            return Err(Error::invalid(
                op,
                format!(
                    "padding {:?} or dilation {:?} makes the input or kernel larger than memory can address",
                    p.padding, p.dilation
                ),
            ));
        };
        if hp < ekh || wp < ekw {
            return Err(Error::invalid(
                op,
                format!(
                    "the dilated kernel {ekh}x{ekw} (kernel {kh}x{kw}, dilation {:?}) does not \
                     fit the padded input {hp}x{wp} (input {h}x{w}, padding {:?}): the padded \
                     input must be at least the kernel's extent",
                    p.dilation, p.padding
                ),
            ));
        }
        let (ho, wo) = ((hp - ekh) / p.stride.0 + 1, (wp - ekw) / p.stride.1 + 1);
        // A stride along a dim with one output, or a dilation along a kernel dim of one tap,
        // has no effect: an absurd value is normalised (so it reaches no kernel's indexing) to
        // the smallest stride with the same single output, and to dilation 1. Both keep the
        // geometry when it is computed again from the normalised parameters.
        let mut p = p;
        p.stride.0 = p.stride.0.min(hp - ekh + 1);
        p.stride.1 = p.stride.1.min(wp - ekw + 1);
        p.dilation = (
            if kh == 1 { 1 } else { p.dilation.0 },
            if kw == 1 { 1 } else { p.dilation.1 },
        );
        crate::layout::alloc_bytes(op, crate::layout::numel(&[n, o, ho, wo]), crate::DType::F32)?;
        Ok(ConvGeom {
            n,
            c,
            h,
            w,
            o,
            kh,
            kw,
            ho,
            wo,
            p,
        })
    }

    /// `[N, O, Ho, Wo]`.
    pub(crate) fn out_shape(&self) -> [usize; 4] {
        [self.n, self.o, self.ho, self.wo]
    }

    /// Rows of the product: output pixels `N·Ho·Wo`.
    pub(crate) fn m(&self) -> usize {
        self.n * self.ho * self.wo
    }
}

/// Tile config of the Xpu implicit-GEMM convolution. Every config computes every shape; the
/// choice only changes speed (`Auto` picks by shape).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ConvTile {
    /// Chosen from the problem's shape.
    #[default]
    Auto,
    /// 128 pixels × 128 output channels per workgroup (8×8 registers per invocation).
    Large,
    /// 64 × 64 per workgroup (4×4 registers per invocation).
    Medium,
    /// 128 pixels × 16 output channels per workgroup, for few output channels.
    Narrow,
    /// `Large` with its workgroup tiles held as vec4 (one load per 4 rows or channels).
    LargeVec4,
    /// `Medium` with vec4 workgroup tiles.
    MediumVec4,
    /// Winograd F(2×2, 3×3): transforms plus 16 batched point products on the matrix engine
    /// (3×3, stride 1, dilation 1, one group only; anything else is an error). `Auto` takes it
    /// for wide channels (see `backend::conv_gpu_winograd`).
    Winograd,
}
