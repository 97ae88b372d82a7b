//! Scaled dot-product attention: [`Tensor::scaled_dot_product_attention`] (fused) and
//! [`Tensor::scaled_dot_product_attention_unfused`] (the reference with materialised scores).
//!
//! Semantics (PyTorch's `F.scaled_dot_product_attention`): `out = softmax(q·kᵀ·scale + mask)·v`
//! over `[..., Lq, D] x [..., Lk, D] x [..., Lk, Dv] -> [..., Lq, Dv]`.
//!
//! Invariants:
//! - q, k and v have rank >= 2, one device and float dtype; their leading dims broadcast
//!   together (as `torch.matmul` does inside PyTorch's attention: `[1, H, L, D]` queries with
//!   `[B, 1, L, D]` keys, or ranks that differ), by stride-0 views, never copies; the kernels see
//!   equal leading dims (rank-2 operands gain a leading 1 that the output drops). The output has
//!   q's dtype. f16/bf16 inputs are computed in f32 (scores, softmax statistics and P·V) and
//!   rounded once.
//! - The fused output has PyTorch's memory format ([`flash_strides`]): where PyTorch's CPU
//!   flash kernel serves the call (rank 3 or 4, q/k/v last-dim stride 1, equal batch, k and v
//!   with q's heads or both with one, equal nonzero head dims, keys present) it is laid out as
//!   `empty_like(q)`, so diffusers' `[B, L, H, D] -> transpose(1, 2)` queries give an output whose
//!   `transpose(1, 2).reshape(B, L, H·D)` is a view; every other call (PyTorch's math path) and
//!   the unfused reference give a contiguous output. Checked against PyTorch's strides
//!   (`tests/attention_strides.rs`).
//! - `mask` broadcasts to `[..., Lq, Lk]` (leading size-1 dims beyond that rank are dropped);
//!   a `U8` mask is boolean (nonzero keeps the key, as a
//!   PyTorch bool mask), any other mask must have q's dtype and is added to the scaled scores.
//! - `scale` defaults to `1/sqrt(D)` (1 when `D == 0`) and must be finite.
//! - A query row whose keys are all masked out (or `Lk == 0`) yields zeros, as PyTorch >= 2.5
//!   does; `Lq == 0` or an empty batch gives an empty output. Nothing here panics.
//! - Views (e.g. diffusers' `[B, L, H, D] -> transpose(1, 2)`) are read in place by strides.
//! - The fused path (`cpu::attention`, `xpu::kernels::attention`) never forms the `Lq × Lk`
//!   scores; on Xpu a value head dim above 160 takes the unfused path instead. Additive mask
//!   values below about -2.3e38 (`-inf`, `f32::MIN`) drop the key on both devices.

use crate::desc::AttnShape;
use crate::layout::{broadcast_shapes, Layout};
use crate::{DType, Error, Result, Tensor};

/// Checks q, k, v, the mask and the scale; returns the geometry.
pub(crate) fn check(
    op: &'static str,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    scale: Option<f64>,
) -> Result<AttnShape> {
    for t in [k, v] {
        q.same_device(t, op)?;
        q.same_dtype(t, op)?;
    }
    if !q.dtype().is_float() {
        return Err(Error::UnsupportedDType {
            op,
            dtype: q.dtype(),
            device: q.device(),
            hint: ": attention needs f32, f16 or bf16 q, k and v".into(),
        });
    }
    let r = q.rank();
    if r < 3 || k.rank() != r || v.rank() != r {
        return Err(Error::ShapeMismatch {
            op,
            expected: "q [..., Lq, D], k [..., Lk, D], v [..., Lk, Dv] of the same rank >= 3"
                .into(),
            got: format!("q {:?}, k {:?}, v {:?}", q.shape(), k.shape(), v.shape()),
        });
    }
    let (qs, ks, vs) = (q.shape(), k.shape(), v.shape());
    let lead = &qs[..r - 2];
    let mismatch = |expected: String| Error::ShapeMismatch {
        op,
        expected,
        got: format!("q {qs:?}, k {ks:?}, v {vs:?}"),
    };
    if &ks[..r - 2] != lead || &vs[..r - 2] != lead {
        return Err(mismatch(format!(
            "k and v with the leading (batch, head) dims {lead:?} of q"
        )));
    }
    if ks[r - 1] != qs[r - 1] {
        return Err(mismatch(format!(
            "k with q's head dim D = {} as its last dim (got {})",
            qs[r - 1],
            ks[r - 1]
        )));
    }
    if vs[r - 2] != ks[r - 2] {
        return Err(mismatch(format!(
            "v with k's key count Lk = {} as its dim {} (got {})",
            ks[r - 2],
            r - 2,
            vs[r - 2]
        )));
    }
    let d = qs[r - 1];
    let scale = match scale {
        Some(s) if s.is_finite() => s,
        Some(s) => return Err(Error::invalid(op, format!("scale must be finite, got {s}"))),
        None if d == 0 => 1.0,
        None => 1.0 / (d as f64).sqrt(),
    };
    let shape = AttnShape {
        lead: lead.to_vec(),
        lq: qs[r - 2],
        lk: ks[r - 2],
        d,
        dv: vs[r - 1],
        scale: scale as f32,
    };
    if let Some(m) = mask {
        q.same_device(m, op)?;
        if m.dtype() != DType::U8 && m.dtype() != q.dtype() {
            return Err(Error::invalid(
                op,
                format!(
                    "mask must be u8 (boolean, nonzero keeps) or {} (additive), got {}",
                    q.dtype(),
                    m.dtype()
                ),
            ));
        }
        let scores = shape.score_shape();
        let ok = m.rank() <= scores.len()
            && broadcast_shapes(op, &scores, m.shape()).is_ok_and(|b| b == scores);
        if !ok {
            return Err(Error::ShapeMismatch {
                op,
                expected: format!("a mask that broadcasts to the scores {scores:?}"),
                got: format!("{:?}", m.shape()),
            });
        }
    }
    Ok(shape)
}

/// The mask as an f32 additive mask (`0` keeps, `-inf` drops for a boolean mask).
fn additive_f32(mask: &Tensor) -> Result<Tensor> {
    let m = mask.to_dtype(DType::F32)?;
    if mask.dtype() == DType::U8 {
        // keep = min(m, 1) in {0, 1}; log(keep) in {-inf, 0}.
        m.minimum_scalar(1.0)?.log()
    } else {
        Ok(m)
    }
}

/// Softmax along the last dim that gives an all-zero row where every entry is `-inf`.
fn safe_softmax(s: &Tensor) -> Result<Tensor> {
    // A finite row max keeps `-inf - max` at `-inf` (exp = 0) instead of NaN; every row that
    // has a finite entry sums to >= 1, so the clamp of the sum only touches all-masked rows.
    let max = s.max(-1, true)?.maximum_scalar(f64::from(f32::MIN))?;
    let e = s.sub(&max)?.exp()?;
    let sum = e
        .sum(-1, true)?
        .maximum_scalar(f64::from(f32::MIN_POSITIVE))?;
    e.div(&sum)
}

impl Tensor {
    /// Fused scaled dot-product attention, `softmax(q·kᵀ·scale + mask)·v` for `self = q`
    /// `[..., Lq, D]`, `k` `[..., Lk, D]`, `v` `[..., Lk, Dv]` (rank >= 2, leading dims that
    /// broadcast together; `[B, H, L, D]` is the main case). `mask` broadcasts to `[..., Lq, Lk]`: `U8` is boolean
    /// (nonzero keeps), a float mask in q's dtype is additive. `scale` defaults to `1/sqrt(D)`.
    /// The output is `[..., Lq, Dv]` in q's dtype; rows with every key masked out are zero.
    /// The score matrix is never materialised: memory stays O(Lq·Dv) beyond the inputs.
    pub fn scaled_dot_product_attention(
        &self,
        k: &Tensor,
        v: &Tensor,
        mask: Option<&Tensor>,
        scale: Option<f64>,
    ) -> Result<Tensor> {
        let strides = flash_strides(self, k, v, false);
        self.fused_attention(k, v, mask, scale, strides.as_deref())
    }

    /// Causal fused attention, PyTorch's `F.scaled_dot_product_attention(q, k, v,
    /// is_causal=True)`: query `i` attends to keys `0..=i` (PyTorch's top-left aligned
    /// `ones(Lq, Lk).tril()` mask, so with more keys than queries the last keys are seen by
    /// none, and with more queries every query past `Lk` sees them all). Everything else is
    /// [`Tensor::scaled_dot_product_attention`]'s; the boolean `[Lq, Lk]` mask is built on
    /// q's device (`Lq·Lk` bytes).
    pub fn scaled_dot_product_attention_causal(
        &self,
        k: &Tensor,
        v: &Tensor,
        scale: Option<f64>,
    ) -> Result<Tensor> {
        if self.rank() < 2 || k.rank() < 2 {
            // The plain call reports the rank error.
            return self.scaled_dot_product_attention(k, v, None, scale);
        }
        let (lq, lk) = (self.shape()[self.rank() - 2], k.shape()[k.rank() - 2]);
        let mask = Tensor::ones(&[lq, lk], DType::U8, self.device())?.tril(0)?;
        self.scaled_dot_product_attention(k, v, Some(&mask), scale)
    }

    /// The fused attention with its output laid out by `strides` (dense, of the output's shape;
    /// `None`: contiguous), which the caller derived from the original operands.
    pub(crate) fn fused_attention(
        &self,
        k: &Tensor,
        v: &Tensor,
        mask: Option<&Tensor>,
        scale: Option<f64>,
        strides: Option<&[usize]>,
    ) -> Result<Tensor> {
        let op = "scaled_dot_product_attention";
        if let Some(m) = trimmed_mask(self, k, v, mask)? {
            return self.fused_attention(k, v, Some(&m), scale, strides);
        }
        if let Some((q, k, v, squeeze)) = broadcast_qkv(op, self, k, v)? {
            let out = q.fused_attention(&k, &v, mask, scale, strides)?;
            return if squeeze { out.squeeze(0) } else { Ok(out) };
        }
        let shape = check(op, self, k, v, mask, scale)?;
        if let Some(empty) = empty_output(self, &shape)? {
            return Ok(empty);
        }
        if crate::backend::attention_max_value_dim(self.device()).is_some_and(|m| shape.dv > m) {
            // Beyond the Xpu kernel's register budget: the materialised path.
            let out = self.scaled_dot_product_attention_unfused(k, v, mask, scale)?;
            return match strides {
                Some(st) => out.copy_to_strides(st),
                None => Ok(out),
            };
        }
        let mask = match mask {
            Some(m) => Some((m.storage(), m.layout().broadcast_to(&shape.score_shape())?)),
            None => None,
        };
        let out = match strides {
            Some(st) => Layout::from_parts(shape.out_shape(), st.to_vec(), 0),
            None => Layout::contiguous(&shape.out_shape()),
        };
        let s = self.storage().attention(
            self.layout(),
            (k.storage(), k.layout()),
            (v.storage(), v.layout()),
            mask.as_ref().map(|(s, l)| (*s, l)),
            &shape,
            &out,
        )?;
        Ok(Tensor::from_storage(s, out))
    }

    /// The same computed as matmul -> scale -> (mask) -> softmax -> matmul with materialised
    /// `[..., Lq, Lk]` f32 scores (the reference for tests and the `unfused` bench rows). Its
    /// output is contiguous, as PyTorch's math path.
    pub fn scaled_dot_product_attention_unfused(
        &self,
        k: &Tensor,
        v: &Tensor,
        mask: Option<&Tensor>,
        scale: Option<f64>,
    ) -> Result<Tensor> {
        let op = "scaled_dot_product_attention_unfused";
        if let Some(m) = trimmed_mask(self, k, v, mask)? {
            return self.scaled_dot_product_attention_unfused(k, v, Some(&m), scale);
        }
        if let Some((q, k, v, squeeze)) = broadcast_qkv(op, self, k, v)? {
            let out = q.scaled_dot_product_attention_unfused(&k, &v, mask, scale)?;
            return if squeeze { out.squeeze(0) } else { Ok(out) };
        }
        let shape = check(op, self, k, v, mask, scale)?;
        if let Some(empty) = empty_output(self, &shape)? {
            return Ok(empty);
        }
        let kt = k.t()?;
        let scores = self
            .matmul_fused(&kt)
            .alpha(f64::from(shape.scale))
            .out_dtype(DType::F32)
            .run()?;
        let p = match mask {
            Some(m) => safe_softmax(&scores.add(&additive_f32(m)?)?)?,
            None => scores.softmax(-1)?,
        };
        p.matmul(&v.to_dtype(DType::F32)?)?.to_dtype(self.dtype())
    }
}

/// The strides of PyTorch's output when its CPU flash kernel serves the call, else `None`
/// (contiguous). That kernel (PyTorch 2.15) takes rank 3 or 4 operands of equal
/// rank whose last dims have stride 1, equal batch (rank 4), k and v with q's heads or both
/// with one head (with `gqa`, `enable_gqa=True`: k and v with one head count that divides q's),
/// equal nonzero head dims, and at least one query and one key; it allocates
/// its output as `empty_like(q)`: q's strides when q is dense (a transpose, a permute), else
/// dense strides in q's memory order. The math path that serves every other call gives a
/// contiguous output.
pub(crate) fn flash_strides(q: &Tensor, k: &Tensor, v: &Tensor, gqa: bool) -> Option<Vec<usize>> {
    let r = q.rank();
    if !(r == 3 || r == 4) || k.rank() != r || v.rank() != r {
        return None;
    }
    let (qs, ks, vs) = (q.shape(), k.shape(), v.shape());
    if r == 4 && (ks[0] != qs[0] || vs[0] != qs[0]) {
        return None;
    }
    let h = r - 3;
    let heads_ok = if gqa {
        ks[h] > 0 && qs[h].is_multiple_of(ks[h])
    } else {
        ks[h] == qs[h] || ks[h] == 1
    };
    if ks[h] != vs[h] || !heads_ok {
        return None;
    }
    let (d, lq, lk) = (qs[r - 1], qs[r - 2], ks[r - 2]);
    if d == 0 || ks[r - 1] != d || vs[r - 1] != d || lq == 0 || lk == 0 || vs[r - 2] != lk {
        return None;
    }
    if [q, k, v].iter().any(|t| t.strides()[r - 1] != 1) {
        return None;
    }
    Some(match q.layout().dense_span() {
        Some(_) => q.strides().to_vec(),
        None => q.layout().dense_strides_like().0,
    })
}

/// The mask without leading size-1 dims beyond the rank of the scores (PyTorch accepts a
/// `[1, 1, Lq, Lk]` mask for 3-D q, k, v), or `None` when there are none to drop.
fn trimmed_mask(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
) -> Result<Option<Tensor>> {
    let Some(m) = mask else {
        return Ok(None);
    };
    let scores = q.rank().max(k.rank()).max(v.rank());
    let extra = m.rank().saturating_sub(scores);
    if extra == 0 || m.shape()[..extra].iter().any(|&s| s != 1) {
        return Ok(None);
    }
    m.reshape(&m.shape()[extra..]).map(Some)
}

/// q, k and v as views with one rank >= 3 and equal leading dims, or `None` when they already
/// are; the flag says a leading 1 was added to rank-2 operands (to drop from the output). Only
/// the leading dims are checked here: [`check`] validates the rest on the views.
fn broadcast_qkv(
    op: &'static str,
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
) -> Result<Option<(Tensor, Tensor, Tensor, bool)>> {
    let ranks = [q.rank(), k.rank(), v.rank()];
    if ranks.iter().any(|&r| r < 2) {
        return Err(Error::ShapeMismatch {
            op,
            expected: "q [..., Lq, D], k [..., Lk, D], v [..., Lk, Dv] of rank >= 2".into(),
            got: format!("q {:?}, k {:?}, v {:?}", q.shape(), k.shape(), v.shape()),
        });
    }
    let leads = [q, k, v].map(|t| &t.shape()[..t.rank() - 2]);
    if ranks.iter().all(|&r| r >= 3) && leads.iter().all(|l| *l == leads[0]) {
        return Ok(None);
    }
    let lead = broadcast_shapes(op, &broadcast_shapes(op, leads[0], leads[1])?, leads[2])?;
    let squeeze = lead.is_empty();
    let full = |t: &Tensor| -> Result<Tensor> {
        let mut shape = if squeeze { vec![1] } else { lead.clone() };
        shape.extend_from_slice(&t.shape()[t.rank() - 2..]);
        t.broadcast_to(&shape)
    };
    Ok(Some((full(q)?, full(k)?, full(v)?, squeeze)))
}

/// The output when there is nothing to compute: empty (`Lq == 0`, empty batch) or all-zero
/// (`Lk == 0`: every row has all keys masked out).
pub(crate) fn empty_output(q: &Tensor, s: &AttnShape) -> Result<Option<Tensor>> {
    let out = s.out_shape();
    if crate::layout::numel(&out) == 0 || s.lk == 0 {
        return Ok(Some(Tensor::zeros(&out, q.dtype(), q.device())?));
    }
    Ok(None)
}
