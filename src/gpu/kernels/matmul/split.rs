//! Split-K products (`super::split_k`): each tile's K range as separate
//! workgroups writing f32 partials into a `[batch, S, M, np]` buffer, which the matmul
//! family's epilogue pass sums and finishes. Invariant: the partial products carry the
//! identity epilogue over all (virtual) product columns, so GEGLU, C, bias, residual and the
//! output dtype are applied exactly once, by the pass.

use super::{dispatch, params, Epilogue, Problem, SPLITS};
use crate::gpu::pipelines::PipelineKey;
use crate::gpu::XpuStorage;
use crate::{DType, Result};

impl XpuStorage {
    /// `splits.0` f32 partial products of `splits.1` K each, one workgroup per (tile, split),
    /// then the epilogue pass sums them and applies `ep`.
    pub(super) fn matmul_split(
        &self,
        rhs: &XpuStorage,
        pr: &Problem,
        ep: &Epilogue,
        key: PipelineKey,
        tile: [usize; 2],
        (splits, kc): (usize, usize),
    ) -> Result<XpuStorage> {
        // The raw product over all (virtual) product columns, in f32.
        let raw = Epilogue::identity(ep.op, ep.kernel, DType::F32);
        let whole = Problem {
            n: pr.np,
            pitch: pr.np,
            ..*pr
        };
        let prod = XpuStorage::alloc(&self.ctx, DType::F32, pr.batch * splits * pr.m * pr.np)?;
        let key = PipelineKey {
            dt_out: DType::F32,
            ..key
        };
        let groups = [pr.np.div_ceil(tile[0]), pr.m.div_ceil(tile[1])];
        let bindings = self.bindings(rhs, &raw);
        self.per_batch_chunk(ep.op, pr.batch, splits, |first, count| {
            let mut p = params(&whole, &raw, pr.batch, first)?;
            p.set(SPLITS, splits, ep.op)?.set(SPLITS + 1, kc, ep.op)?;
            let grid = [groups[0], groups[1], count * splits];
            dispatch(&prod, key, p, &bindings, grid, ep.op)
        })?;
        self.epilogue_pass(&prod, rhs, pr, ep, splits)
    }
}
