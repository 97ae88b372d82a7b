//! The attention descriptor: the checked geometry of one scaled dot-product attention call.

use crate::{Error, Layout};

/// The checked geometry of one attention call.
pub(crate) struct AttnShape {
    /// Leading (batch) dims, shared by q, k, v and the output.
    pub lead: Vec<usize>,
    /// Query rows.
    pub lq: usize,
    /// Key/value rows.
    pub lk: usize,
    /// Query/key head dim.
    pub d: usize,
    /// Value head dim.
    pub dv: usize,
    /// The softmax scale.
    pub scale: f32,
}

impl AttnShape {
    /// Number of heads (product of the leading dims).
    pub(crate) fn heads(&self) -> usize {
        self.lead.iter().product()
    }

    /// The output shape `[..., Lq, Dv]`.
    pub(crate) fn out_shape(&self) -> Vec<usize> {
        let mut s = self.lead.clone();
        s.extend([self.lq, self.dv]);
        s
    }

    /// The error for an output layout `l` that cannot hold this output (the devices accept
    /// dense layouts of [`Self::out_shape`] at offset 0).
    pub(crate) fn bad_out_layout(&self, l: &Layout) -> Error {
        Error::invalid(
            "scaled_dot_product_attention",
            format!(
                "output layout {:?} / {:?} is not a dense layout of {:?}",
                l.shape(),
                l.strides(),
                self.out_shape()
            ),
        )
    }

    /// The score shape `[..., Lq, Lk]` the mask broadcasts to.
    pub(crate) fn score_shape(&self) -> Vec<usize> {
        let mut s = self.lead.clone();
        s.extend([self.lq, self.lk]);
        s
    }
}
