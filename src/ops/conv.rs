//! 2-D convolution with PyTorch semantics (`F.conv2d`: stride, padding, dilation, groups, bias)
//! on NCHW input, on every device.
//!
//! This first engine lowers the convolution to a matrix product: the padded input is viewed
//! (without a copy) as `[N, G, C/G, kh, kw, Ho, Wo]` through strides, permuted to
//! `[G, N·Ho·Wo, C/G·kh·kw]`, gathered once (the im2col copy) and multiplied by the weights
//! `[G, C/G·kh·kw, O/G]` with the bias fused into the product's store. Invariant: the strided
//! view never reaches outside the padded input (checked against its storage). The implicit-GEMM
//! kernels of issue 4 (no im2col buffer, channels-last) replace the gather without changing
//! results.

use crate::{Error, Layout, Result, Tensor};

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

impl Tensor {
    /// `F.conv2d(self, weight, bias, stride, padding, dilation, groups)` for `self` of shape
    /// `[N, C, H, W]` and `weight` of shape `[O, C/groups, kh, kw]`; returns `[N, O, Ho, Wo]`.
    pub fn conv2d(
        &self,
        weight: &Tensor,
        bias: Option<&Tensor>,
        p: Conv2dParams,
    ) -> Result<Tensor> {
        let op = "conv2d";
        self.same_device(weight, op)?;
        self.same_dtype(weight, op)?;
        if self.rank() != 4 || weight.rank() != 4 {
            return Err(Error::ShapeMismatch {
                op,
                expected: "input [N, C, H, W] and weight [O, C/groups, kh, kw]".into(),
                got: format!("{:?} and {:?}", self.shape(), weight.shape()),
            });
        }
        let (n, c, h, w) = (
            self.shape()[0],
            self.shape()[1],
            self.shape()[2],
            self.shape()[3],
        );
        let (o, cg, kh, kw) = (
            weight.shape()[0],
            weight.shape()[1],
            weight.shape()[2],
            weight.shape()[3],
        );
        let g = p.groups;
        let zero = [p.stride.0, p.stride.1, p.dilation.0, p.dilation.1, g].contains(&0);
        if zero || c % g != 0 || o % g != 0 || cg != c / g {
            return Err(Error::invalid(
                op,
                format!("need non-zero stride/dilation/groups, C={c} and O={o} divisible by groups={g}, and weight dim 1 = C/groups; got weight {:?}", weight.shape()),
            ));
        }
        if let Some(b) = bias {
            self.same_device(b, op)?;
            self.same_dtype(b, op)?;
            if b.shape() != [o] {
                return Err(Error::shape(
                    op,
                    format!("a bias of shape [{o}]"),
                    b.shape(),
                ));
            }
        }
        let (hp, wp) = (h + 2 * p.padding.0, w + 2 * p.padding.1);
        let (ekh, ekw) = (
            p.dilation.0 * (kh.max(1) - 1) + 1,
            p.dilation.1 * (kw.max(1) - 1) + 1,
        );
        if kh == 0 || kw == 0 || hp < ekh || wp < ekw {
            return Err(Error::invalid(
                op,
                format!(
                    "kernel {kh}x{kw} (dilation {:?}) does not fit the padded input {hp}x{wp}",
                    p.dilation
                ),
            ));
        }
        let (ho, wo) = ((hp - ekh) / p.stride.0 + 1, (wp - ekw) / p.stride.1 + 1);
        let x = self
            .pad(&[p.padding.1, p.padding.1, p.padding.0, p.padding.0], 0.0)?
            .contiguous()?;
        // Unfold view [N, G, C/G, kh, kw, Ho, Wo] over the padded contiguous input.
        let (sn, sc, sh) = (c * hp * wp, hp * wp, wp);
        let unfold = Layout::from_parts(
            vec![n, g, cg, kh, kw, ho, wo],
            vec![
                sn,
                cg * sc,
                sc,
                p.dilation.0 * sh,
                p.dilation.1,
                p.stride.0 * sh,
                p.stride.1,
            ],
            x.layout().offset(),
        );
        if unfold.max_offset() > x.storage().len() {
            return Err(Error::invalid(
                op,
                "internal: unfold view outside the input",
            ));
        }
        let cols = x
            .with_layout(unfold)
            .permute(&[1, 0, 5, 6, 2, 3, 4])?
            .reshape(&[g, n * ho * wo, cg * kh * kw])?;
        let wmat = weight.reshape(&[g, o / g, cg * kh * kw])?.transpose(1, 2)?;
        let mut outs = Vec::with_capacity(g);
        for gi in 0..g {
            let a = cols.narrow(0, gi, 1)?.squeeze(0)?;
            let b = wmat.narrow(0, gi, 1)?.squeeze(0)?;
            let bias_g = bias.map(|t| t.narrow(0, gi * (o / g), o / g)).transpose()?;
            let mut mm = a.matmul_fused(&b);
            if let Some(bg) = &bias_g {
                mm = mm.bias(bg);
            }
            outs.push(mm.run()?);
        }
        let refs: Vec<&Tensor> = outs.iter().collect();
        // [N·Ho·Wo, O] -> [N, O, Ho, Wo]
        let y = if g == 1 {
            outs[0].clone()
        } else {
            Tensor::cat(&refs, 1)?
        };
        y.reshape(&[n, ho, wo, o])?
            .permute(&[0, 3, 1, 2])?
            .contiguous()
    }
}
