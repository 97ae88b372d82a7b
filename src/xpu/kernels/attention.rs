//! Fused attention on Xpu (`shaders/attention.wgsl`).

use crate::layout::Layout;
use crate::ops::attention::AttnShape;
use crate::xpu::XpuStorage;
use crate::{Error, Result};

impl XpuStorage {
    /// Fused attention (see `ops::attention`); not yet implemented.
    pub(crate) fn attention(
        &self,
        _q: &Layout,
        _k: (&XpuStorage, &Layout),
        _v: (&XpuStorage, &Layout),
        _mask: Option<(&XpuStorage, &Layout)>,
        _s: &AttnShape,
    ) -> Result<XpuStorage> {
        Err(Error::invalid(
            "scaled_dot_product_attention",
            "no Xpu kernel yet",
        ))
    }
}
