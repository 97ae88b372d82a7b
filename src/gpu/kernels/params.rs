//! Kernel parameter blocks (the `params` uniform of `common.wgsl`) and dispatch geometry.
//!
//! Invariant: the word positions here mirror the comment at the top of `common.wgsl`;
//! shapes are jointly coalesced across all operands before they are written, so kernels do the
//! least index arithmetic that keeps the element order.

use crate::gpu::stream::PARAM_WORDS;
use crate::layout::MAX_DIMS;
use crate::{Error, Result};

/// Word indices into the parameter block.
pub(crate) const COUNT: usize = 0;
pub(crate) const RANK: usize = 1;
pub(crate) const SHAPE: usize = 4;
pub(crate) const STRIDES0: usize = 12;
pub(crate) const STRIDES1: usize = 20;
pub(crate) const OFFSET0: usize = 28;
pub(crate) const OFFSET1: usize = 29;
pub(crate) const SCALARS: usize = 30;
pub(crate) const EXTRA: usize = 32;

/// A parameter block under construction.
#[derive(Clone)]
pub(crate) struct Params(pub [u32; PARAM_WORDS]);

/// Converts a size to a u32 kernel argument, or explains the limit.
pub(crate) fn u32_arg(op: &'static str, v: usize) -> Result<u32> {
    u32::try_from(v).map_err(|_| {
        Error::invalid(
            op,
            format!("size {v} exceeds the Xpu kernels' 32-bit index range"),
        )
    })
}

/// Merges dims that are contiguous for every operand at once and drops size-1 dims.
pub(crate) fn coalesce_joint(
    shape: &[usize],
    strides: &[&[usize]],
) -> (Vec<usize>, Vec<Vec<usize>>) {
    let mut out_shape: Vec<usize> = Vec::new();
    let mut out_strides: Vec<Vec<usize>> = vec![Vec::new(); strides.len()];
    for d in 0..shape.len() {
        if shape[d] == 1 {
            continue;
        }
        let mergeable = !out_shape.is_empty()
            && strides
                .iter()
                .zip(&out_strides)
                .all(|(s, o)| o.last().is_some_and(|&last| last == s[d] * shape[d]));
        if mergeable {
            if let Some(last) = out_shape.last_mut() {
                *last *= shape[d];
            }
            for (s, o) in strides.iter().zip(out_strides.iter_mut()) {
                if let Some(last) = o.last_mut() {
                    *last = s[d];
                }
            }
        } else {
            out_shape.push(shape[d]);
            for (s, o) in strides.iter().zip(out_strides.iter_mut()) {
                o.push(s[d]);
            }
        }
    }
    (out_shape, out_strides)
}

impl Params {
    pub(crate) fn new(count: usize, op: &'static str) -> Result<Params> {
        let mut p = Params([0; PARAM_WORDS]);
        p.0[COUNT] = u32_arg(op, count)?;
        Ok(p)
    }

    /// Writes a shape with one stride vector per operand (src0 at STRIDES0, src1 at STRIDES1,
    /// a third operand at EXTRA; more are refused).
    pub(crate) fn shape(
        &mut self,
        op: &'static str,
        shape: &[usize],
        strides: &[&[usize]],
    ) -> Result<&mut Self> {
        let (shape, strides) = coalesce_joint(shape, strides);
        if shape.len() > MAX_DIMS {
            return Err(Error::invalid(
                op,
                format!("rank {} exceeds the maximum of {MAX_DIMS}", shape.len()),
            ));
        }
        self.0[RANK] = shape.len() as u32;
        for (d, &s) in shape.iter().enumerate() {
            self.0[SHAPE + d] = u32_arg(op, s)?;
        }
        for (k, st) in strides.iter().enumerate() {
            let Some(&base) = [STRIDES0, STRIDES1, EXTRA].get(k) else {
                return Err(Error::invalid(
                    op,
                    "at most three strided operands per kernel",
                ));
            };
            for (d, &s) in st.iter().enumerate() {
                self.0[base + d] = u32_arg(op, s)?;
            }
        }
        Ok(self)
    }

    pub(crate) fn set(&mut self, word: usize, value: usize, op: &'static str) -> Result<&mut Self> {
        self.0[word] = u32_arg(op, value)?;
        Ok(self)
    }

    pub(crate) fn scalars(&mut self, a: f32, b: f32) -> &mut Self {
        self.0[SCALARS] = a.to_bits();
        self.0[SCALARS + 1] = b.to_bits();
        self
    }
}

/// A 2-D grid of `groups` 1-D workgroups (x capped at `max_per_dim`).
pub(crate) fn grid(groups: usize, max_per_dim: u32) -> [u32; 3] {
    let groups = groups.max(1);
    let x = groups.min(max_per_dim as usize);
    let y = groups.div_ceil(x);
    [x as u32, y.min(u32::MAX as usize) as u32, 1]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn joint_coalescing_respects_every_operand() {
        // [2,3,4] contiguous with a broadcast row [1,1,4] -> strides (12,4,1) and (0,0,1).
        let (s, st) = coalesce_joint(&[2, 3, 4], &[&[12, 4, 1], &[0, 0, 1]]);
        assert_eq!(s, vec![6, 4]);
        assert_eq!(st, vec![vec![4, 1], vec![0, 1]]);
        let (s, _) = coalesce_joint(&[2, 3, 4], &[&[12, 4, 1], &[12, 4, 1]]);
        assert_eq!(s, vec![24]);
    }

    #[test]
    fn grid_covers_all_groups() {
        assert_eq!(grid(10, 65535), [10, 1, 1]);
        let g = grid(200_000, 65535);
        assert!(g[0] as usize * g[1] as usize >= 200_000);
    }
}
