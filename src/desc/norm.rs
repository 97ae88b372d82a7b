//! The normalisation descriptor: the geometry layer norm and group norm share.

/// Geometry of a normalisation : a contiguous input viewed as
/// `[batch, channels, inner]`, normalised over each of `groups` channel groups per batch item
/// (so a row is `channels / groups * inner` contiguous elements). Layer norm is
/// `groups == 1, inner == 1` with `channels` the last dim. Invariant: `groups` divides
/// `channels` and `groups > 0` (checked by the Tensor layer).
#[derive(Clone, Copy, Debug)]
pub(crate) struct NormSpec {
    pub batch: usize,
    pub channels: usize,
    pub groups: usize,
    pub inner: usize,
    pub eps: f32,
    pub silu: bool,
}

impl NormSpec {
    /// Number of normalised rows (`batch * groups`).
    pub(crate) fn rows(&self) -> usize {
        self.batch * self.groups
    }

    /// Channels per group.
    pub(crate) fn cpg(&self) -> usize {
        self.channels / self.groups.max(1)
    }

    /// Elements per normalised row.
    pub(crate) fn row_len(&self) -> usize {
        self.cpg() * self.inner
    }
}
