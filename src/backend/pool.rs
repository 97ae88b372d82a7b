//! Pooling dispatch: the direct 2-D pooling kernel of the Cpu (the Xpu pools through strided
//! window views in the Tensor layer, so it has no kernel here).

use super::*;
use crate::desc::pool::{PoolGeom, PoolKind};

impl Storage {
    /// Pools the contiguous f32 planes `layout` addresses (`[N, C, H, W]` with `(h, w)` its
    /// last dims) into contiguous `[N, C, OH, OW]` f32 data. Cpu only.
    pub(crate) fn pool2d_f32(
        &self,
        layout: &Layout,
        geom: PoolGeom,
        kind: PoolKind,
    ) -> Result<Storage> {
        let op = "pool2d";
        let shape = layout.shape();
        let (off, n) = (layout.offset(), layout.numel());
        let values = match self {
            Storage::Cpu(CpuStorage::F32(v)) if layout.is_contiguous() && shape.len() == 4 => {
                v.get(off..off + n)
            }
            _ => None,
        }
        .ok_or_else(|| Error::invalid(op, "expected contiguous 4-D f32 data on the Cpu"))?;
        let planes = shape[0].saturating_mul(shape[1]);
        host_output(
            op,
            planes.saturating_mul(geom.out.0 * geom.out.1),
            DType::F32,
        )?;
        let out = crate::cpu::pool2d::pool2d(values, (shape[2], shape[3]), geom, kind)?;
        Ok(Storage::Cpu(CpuStorage::F32(out)))
    }
}
