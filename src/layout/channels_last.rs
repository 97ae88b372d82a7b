//! Channels-last layouts of 4-D `[N, C, H, W]` shapes: the dim orders, PyTorch's stride test,
//! and the dense channels-last layout of a shape.

use super::Layout;
use crate::{Error, Result};

/// NCHW dims in channels-last memory order (N, H, W, C).
pub(crate) const NHWC: [usize; 4] = [0, 2, 3, 1];
/// The inverse permutation: an NHWC view back to `[N, C, H, W]`; also, entry `d` is the NHWC
/// position of NCHW dim `d`.
pub(crate) const NCHW_FROM_NHWC: [usize; 4] = [0, 3, 1, 2];

/// PyTorch's `is_channels_last_strides_2d_s4`: strides ordered C < W < H < N (size-1 dims
/// may take any stride), with the ambiguous cases resolved to NCHW.
pub(crate) fn channels_last_strides(l: &Layout) -> bool {
    if l.rank() != 4 {
        return false;
    }
    let (sizes, strides) = (l.shape(), l.strides());
    if strides[1] == 0 {
        return false;
    }
    let mut min = 0usize;
    for d in [1, 3, 2, 0] {
        if sizes[d] == 0 || strides[d] < min {
            return false;
        }
        if d == 0 && min == strides[1] {
            return false;
        }
        min = strides[d];
        if sizes[d] > 1 {
            min *= sizes[d];
        }
    }
    true
}

/// The layout of a dense channels-last tensor of `shape` (`[N, C, H, W]`) at offset 0.
pub(crate) fn channels_last_layout(shape: &[usize]) -> Result<Layout> {
    if shape.len() != 4 {
        return Err(Error::shape(
            "channels_last",
            "a 4-D [N, C, H, W] shape",
            shape,
        ));
    }
    let nhwc: Vec<usize> = NHWC.iter().map(|&d| shape[d]).collect();
    Layout::contiguous(&nhwc).permute(&NCHW_FROM_NHWC)
}
