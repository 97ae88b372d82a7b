//! The pooling descriptor: window geometry and the pooling kind.

/// What a window reduces to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PoolKind {
    /// The largest element (NaN if any is NaN).
    Max,
    /// The mean, counting padded positions when `true`.
    Avg(bool),
}

/// Window geometry: `(kh, kw)`, `(sh, sw)`, `(ph, pw)`, `(oh, ow)`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PoolGeom {
    pub kernel: (usize, usize),
    pub stride: (usize, usize),
    pub padding: (usize, usize),
    pub out: (usize, usize),
}
