//! Fused scaled dot-product attention on the CPU: [`CpuStorage::attention`].
//!
//! Algorithm (flash-attention's blocked online softmax): heads are processed a group at a time
//! (enough to keep every thread busy); K and V of each head of the group are packed once into
//! f32 blocks of [`KB`] keys (K transposed, `[D][KB]`; V `[KB][Dv rounded up to 8]`,
//! zero-padded). Work is split over rayon into tasks of one head × a block of query rows; a task
//! packs its queries (pre-multiplied by `scale·log2 e`, so the softmax uses `exp2`), then for
//! every key block and every tile of [`MR`] query rows computes the `MR × KB` scores, adds the
//! mask, updates the running row max `m` and sum `l`, rescales the running output and adds
//! `P · V` (`portable` or `avx512` kernels, chosen by `Kernels::level()`). The output is
//! `o / l` rounded once to the input dtype.
//!
//! bf16 inputs may run on one of two bf16 kernels instead (the autotuner's `cpu_attention` candidates), both with
//! `Q·Kᵀ` and `P·V` on bf16 pair products with f32 accumulation, `P` rounded to bf16 and the
//! softmax in f32 (as PyTorch's bf16 flash attention), with the same invariants as below:
//! Intel AMX tiles (`tdpbf16ps`) where AMX is in use (`bf16_method() == Amx`, `amx::usable`;
//! see `amx` / `amx_kernel`), else AVX512_BF16 dot products (`vdpbf16ps`) where the bf16 GEMM's
//! calibration chose them (`bf16_method() == DotProduct`, `dp::usable`, e.g. AMD Zen 4; see
//! `dp` / `dp_kernel`). Elsewhere bf16 is widened to f32 on the kernels above.
//!
//! Invariants:
//! - Memory beyond the inputs and output is O((Lk + Lq_block)·(D + Dv)) per head: the packed
//!   K/V and per-task tiles; no `Lq × Lk` buffer exists.
//! - Inputs are read in place through their strides (any view, e.g. a transposed
//!   `[B, L, H, D]`); the mask through its broadcast strides. All layouts are checked against
//!   their storages before any access.
//! - Rows whose keys are all masked out (`m` stays `-inf`) are written as zeros, as PyTorch does.
//! - Results do not depend on the thread count (each row is computed by one task, in key order).

#[cfg(target_arch = "x86_64")]
mod amx;
#[cfg(target_arch = "x86_64")]
mod amx_kernel;
#[cfg(target_arch = "x86_64")]
mod amx_kv;
#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
#[cfg(target_arch = "x86_64")]
mod dp;
#[cfg(target_arch = "x86_64")]
mod dp_kernel;
#[cfg(target_arch = "x86_64")]
mod lanes;
#[cfg(all(test, target_arch = "x86_64"))]
mod lanes_tests;
mod operands;
mod portable;
mod rows;
mod schedule;
#[cfg(test)]
mod tests;

pub(super) use schedule::{for_head_groups, out_layout_fits, plan_tasks, OutRows};

use operands::{mask_data, pack_kv, MaskData, PackedKv, View};

use super::elem::FloatElem;
use super::simd::{Kernels, SimdLevel};
use super::storage::CpuStorage;
use super::strided::check_layout;
use crate::desc::AttnShape;
use crate::layout::Layout;
use crate::{DType, Device, Error, Result};

/// Query rows per register tile.
pub(crate) const MR: usize = 6;
/// Keys per block.
pub(crate) const KB: usize = 64;
/// `exp2` argument below which the result is exactly 0 (keeps `-inf - m` from making NaN and
/// the AVX-512 kernel away from subnormal results, which cost a microcode assist).
const MIN_EXP2: f32 = -125.0;
/// Degree-7 Taylor coefficients of `2^f = e^{f ln 2}` for `|f| <= 1/2` (relative error < 1e-8
/// before rounding), shared by the AVX-512 and AVX2 tile kernels' `exp2`.
#[cfg(target_arch = "x86_64")]
#[allow(clippy::excessive_precision)]
const EXP2_SERIES: [f32; 8] = [
    1.0,
    std::f32::consts::LN_2,
    0.240_226_5,
    0.055_504_11,
    0.009_618_129,
    0.001_333_355_8,
    0.000_154_035_3,
    0.000_015_252_734,
];

/// Query tiles per task at most (48 rows: Q, O and one K/V block stay near L1).
pub(crate) const MAX_TILES_PER_TASK: usize = 8;

/// One tile step's read-only operands, all packed f32.
pub(crate) struct Tile<'a> {
    /// `MR × d` queries, pre-scaled by `scale·log2 e`.
    q: &'a [f32],
    /// `d × KB` keys (transposed block).
    kt: &'a [f32],
    /// `KB × dvp` values.
    v: &'a [f32],
    /// `MR × KB` additive mask in log2 units (`-inf` drops), if any.
    bias: Option<&'a [f32]>,
    d: usize,
    /// Value columns rounded up to whole 8-lane half vectors (the AVX-512 kernel ends in a
    /// half vector where needed).
    dvp: usize,
    /// Valid keys in this block (`1..=KB`); the rest are padding.
    valid: usize,
    /// First key block: the running output is overwritten (its memory is not initialised).
    first: bool,
}

/// The running state of one tile of `MR` query rows.
pub(crate) struct State<'a> {
    /// Running row maxima (log2 units).
    m: &'a mut [f32; MR],
    /// Running row sums, split over 16 lanes per row (their total is the sum).
    l: &'a mut [[f32; 16]; MR],
    /// `MR × dvp` unnormalised output.
    o: &'a mut [f32],
    /// `MR × KB` scratch for the block's probabilities.
    p: &'a mut [f32],
}

impl Tile<'_> {
    /// True when every slice is long enough for the kernels' unchecked accesses.
    fn fits(&self, st: &State) -> bool {
        self.q.len() >= MR * self.d
            && self.kt.len() >= self.d * KB
            && self.v.len() >= KB * self.dvp
            && self.bias.is_none_or(|b| b.len() >= MR * KB)
            && self.dvp.is_multiple_of(8)
            && (1..=KB).contains(&self.valid)
            && st.o.len() >= MR * self.dvp
            && st.p.len() >= MR * KB
    }
}

/// Runs one tile step on the kernels of `level`.
fn tile(level: SimdLevel, t: &Tile, st: &mut State) {
    if !t.fits(st) {
        return; // unreachable by construction; never read out of bounds
    }
    #[cfg(target_arch = "x86_64")]
    if level == SimdLevel::Avx512 {
        // SAFETY: `Avx512` is only reported when the CPU has AVX-512F/DQ and FMA
        // (`Kernels::new` clamps to the hardware); `fits` checked the slice lengths and that
        // the value columns are whole 8-lane half vectors (the padding every level packs).
        return unsafe { avx512::tile(t, st) };
    }
    #[cfg(target_arch = "x86_64")]
    if level == SimdLevel::Avx2 {
        // SAFETY: `Avx2` is only reported when the CPU has AVX2 and FMA (`Kernels::new`
        // clamps to the hardware); `fits` checked the slice lengths.
        return unsafe { avx2::tile(t, st) };
    }
    let _ = level;
    portable::tile(t, st);
}

/// Everything a task reads.
struct Ctx<'a, T> {
    k: Kernels,
    q: View<'a, T>,
    kv: PackedKv,
    mask: Option<(MaskData<'a>, &'a Layout)>,
    s: &'a AttnShape,
    dvp: usize,
    /// `scale · log2 e`.
    qmul: f32,
}

fn attention_float<T: FloatElem>(
    k: Kernels,
    (q, ol): (View<T>, &Layout),
    kv: (View<T>, View<T>),
    mask: Option<(MaskData, &Layout)>,
    s: &AttnShape,
    query_lanes: bool,
) -> Result<Vec<T>> {
    let n = s.heads() * s.lq * s.dv;
    let mut out = super::pool::take::<T>(operands::OP, n)?;
    if n == 0 {
        return Ok(out);
    }
    if s.lk == 0 {
        out.fill(T::zeroed());
        return Ok(out);
    }
    // Value columns are padded to whole 8-lane half vectors (the AVX2 kernel's vectors; the
    // AVX-512 kernel ends in a half vector where needed): SD's head dim 40 then costs 40
    // columns of `P · V` instead of 48. The portable kernel takes any multiple of 8.
    let lanes = 8;
    let dvp = s.dv.div_ceil(lanes).max(1) * lanes;
    // Short key sequences (cross-attention) keep little in cache: take bigger tasks.
    let max_tiles = if s.lk <= 2 * KB {
        4 * MAX_TILES_PER_TASK
    } else {
        MAX_TILES_PER_TASK
    };
    let (rows_per_task, group) = plan_tasks(s.heads(), s.lq.div_ceil(MR), max_tiles, MR);
    let qv = || View {
        data: q.data,
        layout: q.layout,
    };
    let group_ctx = |heads| -> Result<Ctx<T>> {
        Ok(Ctx {
            k,
            q: qv(),
            kv: pack_kv(k, (&kv.0, &kv.1), s, dvp, heads)?,
            mask,
            s,
            dvp,
            qmul: s.scale * std::f32::consts::LOG2_E,
        })
    };
    #[cfg(target_arch = "x86_64")]
    if query_lanes && k.level() == SimdLevel::Avx512 {
        let max_tiles = max_tiles / MAX_TILES_PER_TASK * lanes::MAX_TILES_PER_TASK;
        let tiles = s.lq.div_ceil(lanes::QL);
        let plan = plan_tasks(s.heads(), tiles, max_tiles, lanes::QL);
        for_head_groups(&mut out, ol, s, plan, group_ctx, lanes::task)?;
        return Ok(out);
    }
    for_head_groups(
        &mut out,
        ol,
        s,
        (rows_per_task, group),
        group_ctx,
        rows::task,
    )?;
    Ok(out)
}

/// The CPU attention kernels: the autotuner's candidates for `cpu_attention`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AttnKernel {
    /// bf16 on Intel AMX tiles (`amx`).
    Amx,
    /// bf16 on AVX512_BF16 dot products (`dp`).
    Dot,
    /// The f32 FMA kernel with queries in vector lanes (`lanes`, AVX-512), any dtype widened.
    FmaLanes,
    /// The f32 FMA row kernels (`avx512`, `avx2` or `portable`), any dtype widened.
    FmaRows,
}

impl AttnKernel {
    /// The candidate's name (what `config::AutotuneConfig::force` takes).
    pub(crate) fn name(self) -> &'static str {
        match self {
            AttnKernel::Amx => "amx",
            AttnKernel::Dot => "dot",
            AttnKernel::FmaLanes => "fma_lanes",
            AttnKernel::FmaRows => "fma_rows",
        }
    }
}

/// The kernels that can run an attention of `dtype` queries with `lq` query rows in this
/// process, and the index of the static rule's pick: for bf16 AMX where the bf16 products use
/// it, else the dot products where they do; otherwise the query-lane FMA kernel from [`lanes::MIN_QUERIES`] queries on AVX-512,
/// else the row kernels.
pub(crate) fn attention_kernels(dtype: DType, lq: usize) -> (Vec<AttnKernel>, usize) {
    let k = Kernels::current();
    let mut list = Vec::with_capacity(4);
    let mut rule = None;
    #[cfg(target_arch = "x86_64")]
    {
        if dtype == DType::BF16 {
            if amx::available(k) {
                if amx::usable(k) {
                    rule = Some(list.len());
                }
                list.push(AttnKernel::Amx);
            }
            if dp::available(k) {
                if dp::usable(k) && rule.is_none() {
                    rule = Some(list.len());
                }
                list.push(AttnKernel::Dot);
            }
        }
        if k.level() == SimdLevel::Avx512 {
            if rule.is_none() && lq >= lanes::MIN_QUERIES {
                rule = Some(list.len());
            }
            list.push(AttnKernel::FmaLanes);
        }
    }
    let _ = (dtype, lq);
    let rows = list.len();
    list.push(AttnKernel::FmaRows);
    (list, rule.unwrap_or(rows))
}

impl CpuStorage {
    /// Fused attention of `self = q` (layout `ql`) with `k`, `v` and an optional mask whose
    /// layout is already broadcast to `[..., Lq, Lk]`; `s` is the checked geometry. Returns the
    /// `[..., Lq, Dv]` output in q's dtype, laid out by `out` (a dense layout of that shape
    /// at offset 0 with adjacent value columns: contiguous, or e.g. `[B, L, H, D]` memory for
    /// a `[B, H, L, D]` result), written in place by the kernels.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn attention(
        &self,
        ql: &Layout,
        k: (&CpuStorage, &Layout),
        v: (&CpuStorage, &Layout),
        mask: Option<(&CpuStorage, &Layout)>,
        s: &AttnShape,
        out: &Layout,
        kernel: AttnKernel,
    ) -> Result<CpuStorage> {
        let op = "scaled_dot_product_attention";
        if !out_layout_fits(out, s, s.heads() * s.lq * s.dv) {
            return Err(s.bad_out_layout(out));
        }
        check_layout(op, ql, self.len())?;
        check_layout(op, k.1, k.0.len())?;
        check_layout(op, v.1, v.0.len())?;
        for l in [ql, k.1, v.1] {
            if l.rank() < 3 || l.rank() != ql.rank() {
                return Err(Error::shape(op, "q, k, v of equal rank >= 3", l.shape()));
            }
        }
        let mask = match mask {
            None => None,
            Some((m, ml)) => {
                check_layout(op, ml, m.len())?;
                if ml.rank() != ql.rank() {
                    return Err(Error::shape(
                        op,
                        "a mask broadcast to the scores",
                        ml.shape(),
                    ));
                }
                Some((mask_data(m)?, ml))
            }
        };
        let kern = Kernels::current();
        let unusable = || {
            Error::invalid(
                op,
                format!(
                    "the {} kernel for {} attention on this CPU",
                    kernel.name(),
                    self.dtype()
                ),
            )
        };
        match kernel {
            AttnKernel::FmaLanes | AttnKernel::FmaRows => {}
            #[cfg(target_arch = "x86_64")]
            AttnKernel::Amx | AttnKernel::Dot => {
                let (CpuStorage::BF16(qd), CpuStorage::BF16(kd), CpuStorage::BF16(vd)) =
                    (self, k.0, v.0)
                else {
                    return Err(unusable());
                };
                let view = |data, layout| View { data, layout };
                let (q, kv) = (view(qd, ql), (view(kd, k.1), view(vd, v.1)));
                let o = if kernel == AttnKernel::Amx {
                    amx::attention(kern, (q, out), kv, mask, s)?
                } else {
                    dp::attention(kern, (q, out), kv, mask, s)?
                };
                return o.map(CpuStorage::BF16).ok_or_else(unusable);
            }
            #[cfg(not(target_arch = "x86_64"))]
            AttnKernel::Amx | AttnKernel::Dot => return Err(unusable()),
        }
        let lanes = kernel == AttnKernel::FmaLanes;
        if lanes && kern.level() != SimdLevel::Avx512 {
            return Err(unusable());
        }
        macro_rules! run {
            ($variant:ident, $q:expr) => {{
                let (CpuStorage::$variant(kd), CpuStorage::$variant(vd)) = (k.0, v.0) else {
                    return Err(Error::DTypeMismatch {
                        op,
                        expected: self.dtype(),
                        got: if k.0.dtype() != self.dtype() {
                            k.0.dtype()
                        } else {
                            v.0.dtype()
                        },
                    });
                };
                let q = View {
                    data: $q.as_slice(),
                    layout: ql,
                };
                let kv = (
                    View {
                        data: kd.as_slice(),
                        layout: k.1,
                    },
                    View {
                        data: vd.as_slice(),
                        layout: v.1,
                    },
                );
                CpuStorage::$variant(attention_float(kern, (q, out), kv, mask, s, lanes)?)
            }};
        }
        Ok(match self {
            CpuStorage::F32(q) => run!(F32, q),
            CpuStorage::F16(q) => run!(F16, q),
            CpuStorage::BF16(q) => run!(BF16, q),
            other => {
                return Err(Error::UnsupportedDType {
                    op,
                    dtype: other.dtype(),
                    device: Device::Cpu,
                    hint: ": attention needs f32, f16 or bf16".into(),
                })
            }
        })
    }
}
