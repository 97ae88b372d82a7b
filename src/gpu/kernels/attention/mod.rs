//! Fused scaled dot-product attention on Xpu: the FMA kernel (`attention_vec4.wgsl` after the
//! family prelude `attention.wgsl`), or the tensor-core kernel where it fits ([`coop`]), as the
//! caller chooses.
//!
//! Invariants: one workgroup per (head, tile of 32 query rows); q, k, v and the mask are read
//! in place through their strides (head dims jointly coalesced, at most 6 after coalescing),
//! the output is written as f32 words in the layout the caller asked for (contiguous, or
//! PyTorch's `empty_like(q)` order such as `[B, L, H, D]` memory for a `[B, H, L, D]` result:
//! [`out_rows`] places each row), and cast once for 16-bit dtypes (so no two invocations share
//! a word). A layout whose head dims do not merge into two levels is an error (the caller asks
//! for other layouts only at ranks 3 and 4). Workgroup memory is 14 KiB whatever the head
//! dim; extra memory is O(Lq·Dv) (the f32 output). `Dv` is limited to [`MAX_DV`]; every index
//! the shader forms is checked to fit in 32 bits here.

use crate::gpu::kernels::params::{
    coalesce_joint, grid, u32_arg, Params, EXTRA, OFFSET0, OFFSET1, RANK,
};
use crate::gpu::kernels::params::{SHAPE, STRIDES0, STRIDES1};
pub(crate) mod coop;

use crate::desc::AttnShape;
use crate::gpu::kernels::{key, launch};
use crate::gpu::pipelines::{PipelineKey, ShaderId};
use crate::gpu::XpuStorage;
use crate::layout::Layout;
use crate::{DType, Device, Error, Result};

/// Largest value head dim the kernel holds in registers (8 lanes x 20 columns).
pub(crate) const MAX_DV: usize = 160;
/// Query rows per workgroup.
const BQ: usize = 32;
/// Query rows per workgroup of the tensor-core kernel.
const BQ_COOP: usize = 64;
/// Most head dims after coalescing (params has room for four stride vectors of 6).
const MAX_HEAD_DIMS: usize = 6;

/// Params words of the family block (see the header of `attention.wgsl`).
const LQ: usize = EXTRA;
const V_STRIDES: usize = EXTRA + 16;
const M_STRIDES: usize = EXTRA + 22;
/// Where output rows go (`out_row` in `common.wgsl`): inner lead size, outer and inner lead
/// strides, row stride.
const OUT_ROWS: usize = EXTRA + 28;

/// How the kernels place output rows for a dense layout `l` of `[..., Lq, Dv]` at offset 0
/// with adjacent value columns: `[inner, outer stride, inner stride, row stride]`, row `r` of
/// head `h` starting at `(h / inner)·outer + (h % inner)·inner_stride + r·row_stride`. `None`
/// when the head dims do not merge into two such levels (ranks above 4 that are not
/// contiguous) or the layout is not of that kind; contiguous layouts always fit.
pub(crate) fn out_rows(l: &Layout) -> Option<[usize; 4]> {
    let r = l.rank();
    let dense = l.numel() == 0 || l.dense_span().is_some();
    if r < 2 || l.offset() != 0 || !dense || (l.shape()[r - 1] > 1 && l.strides()[r - 1] != 1) {
        return None;
    }
    let (lead, strides) = coalesce_joint(&l.shape()[..r - 2], &[&l.strides()[..r - 2]]);
    let row = l.strides()[r - 2];
    match (lead.as_slice(), strides[0].as_slice()) {
        ([], _) => Some([1, 0, 0, row]),
        ([_], [s]) => Some([1, *s, 0, row]),
        ([_, inner], [so, si]) => Some([*inner, *so, *si, row]),
        _ => None,
    }
}

/// The last storage element a `[..., rows, cols]` view reaches, checked to fit 32 bits.
fn check_reach(op: &'static str, l: &Layout) -> Result<()> {
    let reach = l
        .shape()
        .iter()
        .zip(l.strides())
        .map(|(&d, &s)| d.saturating_sub(1).saturating_mul(s))
        .fold(l.offset(), usize::saturating_add);
    u32_arg(op, reach).map(drop)
}

impl XpuStorage {
    /// Fused attention of `self = q` (layout `ql`) with `k`, `v` and an optional mask whose
    /// layout is broadcast to `[..., Lq, Lk]`; `s` is the checked geometry. Returns the
    /// `[..., Lq, Dv]` output in q's dtype laid out by `out` (a dense layout of that shape at
    /// offset 0 that [`out_rows`] accepts: contiguous, or PyTorch's `empty_like(q)` order of a
    /// rank 3 or 4 call): the kernels write the f32 rows there, and a 16-bit dtype is rounded
    /// from them in storage order. `coop`: on the tensor-core kernel (an error where
    /// [`Self::attention_coop_serves`] says it cannot), else on the FMA kernel.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn attention(
        &self,
        ql: &Layout,
        k: (&XpuStorage, &Layout),
        v: (&XpuStorage, &Layout),
        mask: Option<(&XpuStorage, &Layout)>,
        s: &AttnShape,
        out: &Layout,
        coop: bool,
    ) -> Result<XpuStorage> {
        let op = "scaled_dot_product_attention";
        if !self.dtype.is_float() {
            return Err(Error::UnsupportedDType {
                op,
                dtype: self.dtype,
                device: Device::Xpu,
                hint: ": attention needs f32, f16 or bf16".into(),
            });
        }
        for st in [k.0, v.0] {
            if st.dtype != self.dtype {
                return Err(Error::DTypeMismatch {
                    op,
                    expected: self.dtype,
                    got: st.dtype,
                });
            }
        }
        if s.dv > MAX_DV {
            return Err(Error::invalid(
                op,
                format!(
                    "the Xpu kernel takes value head dims up to {MAX_DV}, got {}",
                    s.dv
                ),
            ));
        }
        if coop && !self.attention_coop_serves(ql, k.1, v.1, mask.is_some(), s) {
            return Err(Error::invalid(
                op,
                "the tensor-core attention takes f16 calls without a mask, head dims even and \
                 up to 80, q/k/v in 32-bit element pairs, on an adapter whose f16 cooperative \
                 matrices passed its self-check",
            ));
        }
        let rows = self.attention_on(ql, k, v, mask, s, coop, out)?;
        match self.dtype {
            DType::F32 => Ok(rows),
            dt => rows.copy_cast(&Layout::contiguous(&[rows.len]), dt),
        }
    }

    /// Whether the tensor-core kernel can serve this call (its shapes and layouts fit, the
    /// adapter has it and its self-check passed).
    pub(crate) fn attention_coop_serves(
        &self,
        ql: &Layout,
        kl: &Layout,
        vl: &Layout,
        masked: bool,
        s: &AttnShape,
    ) -> bool {
        coop::fits(self, [ql, kl, vl], masked, s) && coop::enabled(self)
    }

    /// The f32 output `[..., Lq, Dv]` of the FMA kernel, or of the tensor-core kernel when
    /// `coop` (the caller has checked [`coop::fits`]), laid out by `ol`: a dense
    /// layout of that shape that [`out_rows`] accepts (contiguous always is).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn attention_on(
        &self,
        ql: &Layout,
        k: (&XpuStorage, &Layout),
        v: (&XpuStorage, &Layout),
        mask: Option<(&XpuStorage, &Layout)>,
        s: &AttnShape,
        coop: bool,
        ol: &Layout,
    ) -> Result<XpuStorage> {
        let n = s.heads() * s.lq * s.dv;
        let rows = match out_rows(ol) {
            Some(rows) if ol.shape() == s.out_shape().as_slice() && ol.numel() == n => rows,
            _ => return Err(s.bad_out_layout(ol)),
        };
        let out = XpuStorage::alloc(&self.ctx, DType::F32, n)?;
        if n > 0 {
            self.launch_attention(&out, ql, k, v, mask, s, coop, rows)?;
        }
        Ok(out)
    }

    #[allow(clippy::too_many_arguments)]
    fn launch_attention(
        &self,
        out: &XpuStorage,
        ql: &Layout,
        k: (&XpuStorage, &Layout),
        v: (&XpuStorage, &Layout),
        mask: Option<(&XpuStorage, &Layout)>,
        s: &AttnShape,
        coop: bool,
        out_rows: [usize; 4],
    ) -> Result<()> {
        let op = "scaled_dot_product_attention";
        let mut layouts = vec![ql, k.1, v.1];
        if let Some((_, ml)) = mask {
            layouts.push(ml);
        }
        for l in &layouts {
            if l.rank() != ql.rank() || l.rank() < 3 {
                return Err(Error::shape(
                    op,
                    "q, k, v and mask of equal rank >= 3",
                    l.shape(),
                ));
            }
            check_reach(op, l)?;
        }
        let lead = ql.rank() - 2;
        let lead_strides: Vec<&[usize]> = layouts.iter().map(|l| &l.strides()[..lead]).collect();
        let (hshape, hstrides) = coalesce_joint(&ql.shape()[..lead], &lead_strides);
        if hshape.len() > MAX_HEAD_DIMS {
            return Err(Error::invalid(
                op,
                format!("at most {MAX_HEAD_DIMS} non-mergeable head dims, got {hshape:?}"),
            ));
        }
        let heads = s.heads();
        let bq = if coop { BQ_COOP } else { BQ };
        let qtiles = s.lq.div_ceil(bq);
        let groups = heads * qtiles;
        u32_arg(op, heads * s.lq * s.dv)?;
        let mut p = Params::new(groups, op)?;
        p.0[RANK] = hshape.len() as u32;
        for (dim, &size) in hshape.iter().enumerate() {
            p.set(SHAPE + dim, size, op)?;
        }
        let bases = [STRIDES0, STRIDES1, V_STRIDES, M_STRIDES];
        for (st, &base) in hstrides.iter().zip(&bases) {
            for (dim, &x) in st.iter().enumerate() {
                p.set(base + dim, x, op)?;
            }
        }
        let mat = |l: &Layout| {
            let st = l.strides();
            (st[st.len() - 2], st[st.len() - 1])
        };
        let ((qrs, qcs), (krs, kcs), (vrs, vcs)) = (mat(ql), mat(k.1), mat(v.1));
        p.set(OFFSET0, ql.offset(), op)?
            .set(OFFSET1, k.1.offset(), op)?
            .scalars(s.scale, 0.0);
        let words = [
            s.lq,
            s.lk,
            s.d,
            s.dv,
            qrs,
            qcs,
            krs,
            kcs,
            vrs,
            vcs,
            v.1.offset(),
        ];
        for (i, &w) in words.iter().enumerate() {
            p.set(LQ + i, w, op)?;
        }
        p.set(LQ + 15, qtiles, op)?;
        for (i, &w) in out_rows.iter().enumerate() {
            p.set(OUT_ROWS + i, w, op)?;
        }
        let mut mask_buf = self;
        if let Some((m, ml)) = mask {
            let kind = match m.dtype {
                DType::U8 => 1,
                dt if dt == self.dtype => 2,
                dt => {
                    return Err(Error::invalid(
                        op,
                        format!("mask must be u8 or {}, got {dt}", self.dtype),
                    ))
                }
            };
            let (mrs, mcs) = mat(ml);
            p.set(LQ + 11, kind, op)?
                .set(LQ + 12, mrs, op)?
                .set(LQ + 13, mcs, op)?
                .set(LQ + 14, ml.offset(), op)?;
            mask_buf = m;
        }
        // Output columns per invocation (8 invocations per row), bucketed to few pipelines.
        let ocn = match s.dv.div_ceil(8) {
            0..=5 => 5,
            6..=10 => 10,
            11..=16 => 16,
            _ => 20,
        };
        let kkey = key(
            ShaderId::AttentionVec4,
            "attention4",
            self.dtype,
            DType::F32,
            ocn,
        );
        let wg = grid(groups, self.ctx.limits.max_compute_workgroups_per_dimension);
        if coop {
            // Head-dim tiles of q/k and v as pipeline constants; bindings 5 and 6 of the
            // passthrough layout are bound and unused.
            let (shader, workgroup) = coop::shader(self.ctx.features.fixed_subgroup_size);
            let key = PipelineKey {
                shader,
                entry: "attention_coop16",
                dt_in: DType::F16,
                dt_out: DType::F32,
                workgroup,
                variant: (s.d.div_ceil(16) | s.dv.div_ceil(16) << 4) as u32,
            };
            return launch(out, key, p, &[self, k.0, v.0, self, self], wg);
        }
        launch(out, kkey, p, &[self, k.0, v.0, mask_buf], wg)
    }
}
