//! Grouped-query attention: [`Tensor::scaled_dot_product_attention_gqa`], PyTorch's
//! `F.scaled_dot_product_attention(..., enable_gqa=True)`.
//!
//! Invariants: query head `h` attends with key head `h / (Hq / Hk)` and value head
//! `h / (Hq / Hv)` (PyTorch's `repeat_interleave`); Hk and Hv must divide Hq. With Hk == Hv the
//! heads are never copied: q's head dim is split into `[Hk, Hq / Hk]` (a view), k and v gain a
//! broadcast dim over the group, and the fused kernels run one rank higher; the output's heads
//! merge back by a view. Only when Hk != Hv are k and v repeated (copied) to the least common
//! head count. The output layout is PyTorch's: `empty_like(q)` where its flash kernel serves
//! the call (k and v with one head count), else contiguous (see `attention::flash_strides`).

use super::attention::flash_strides;
use crate::{Error, Result, Tensor};

/// `shape` with dim `h` replaced by the two dims `outer, inner`.
fn split_dim(shape: &[usize], h: usize, outer: usize, inner: usize) -> Vec<usize> {
    let mut s = shape.to_vec();
    s[h] = outer;
    s.insert(h + 1, inner);
    s
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// `t` with its head dim `h` repeated to `n` heads (`repeat_interleave`; `n` a multiple of
/// the head count), or `t` itself when it has `n` already.
fn repeat_heads(t: &Tensor, h: usize, n: usize) -> Result<Tensor> {
    let have = t.shape()[h];
    if have == n {
        return Ok(t.clone());
    }
    let per = n / have;
    let idx: Vec<i32> = (0..n).map(|i| (i / per) as i32).collect();
    let idx = Tensor::from_vec(idx, &[n], t.device())?;
    t.index_select(h as isize, &idx)
}

impl Tensor {
    /// Grouped-query attention, PyTorch's `F.scaled_dot_product_attention(q, k, v,
    /// attn_mask, scale=scale, enable_gqa=True)`: q `[..., Hq, Lq, D]`, k `[..., Hk, Lk, D]`,
    /// v `[..., Hv, Lk, Dv]` (one rank, at least 3) where Hk and Hv divide Hq; query head `h`
    /// uses key head `h / (Hq / Hk)` and value head `h / (Hq / Hv)`. The mask broadcasts to
    /// `[..., Hq, Lq, Lk]`. Everything else is [`Tensor::scaled_dot_product_attention`]'s; with
    /// Hk == Hv no head is copied.
    pub fn scaled_dot_product_attention_gqa(
        &self,
        k: &Tensor,
        v: &Tensor,
        mask: Option<&Tensor>,
        scale: Option<f64>,
    ) -> Result<Tensor> {
        let op = "scaled_dot_product_attention_gqa";
        let r = self.rank();
        if r < 3 || k.rank() != r || v.rank() != r {
            return Err(Error::ShapeMismatch {
                op,
                expected: "q [..., Hq, Lq, D], k [..., Hk, Lk, D], v [..., Hv, Lk, Dv] of one \
                           rank >= 3"
                    .into(),
                got: format!("q {:?}, k {:?}, v {:?}", self.shape(), k.shape(), v.shape()),
            });
        }
        let h = r - 3;
        let (hq, hk, hv) = (self.shape()[h], k.shape()[h], v.shape()[h]);
        if hk == 0 || hv == 0 || !hq.is_multiple_of(hk) || !hq.is_multiple_of(hv) {
            return Err(Error::ShapeMismatch {
                op,
                expected: format!("key and value head counts that divide the query's {hq}"),
                got: format!("{hk} key and {hv} value heads"),
            });
        }
        let strides = flash_strides(self, k, v, true);
        if hk == hq && hv == hq {
            return self.fused_attention(k, v, mask, scale, strides.as_deref());
        }
        let n = hk / gcd(hk, hv) * hv; // divides hq: both do
        let (k, v) = (repeat_heads(k, h, n)?, repeat_heads(v, h, n)?);
        let g = hq / n;
        let q5 = self.reshape(&split_dim(self.shape(), h, n, g))?;
        let grouped = |t: &Tensor| -> Result<Tensor> {
            t.unsqueeze((h + 1) as isize)?
                .broadcast_to(&split_dim(t.shape(), h, n, g))
        };
        let (k5, v5) = (grouped(&k)?, grouped(&v)?);
        let mask5 = match mask {
            None => None,
            Some(m) => Some(group_mask(op, m, r, h, (n, g))?),
        };
        let strides5 = strides.map(|st| {
            let mut s5 = st.clone();
            s5[h] = st[h] * g;
            s5.insert(h + 1, st[h]);
            s5
        });
        let out = q5.fused_attention(&k5, &v5, mask5.as_ref(), scale, strides5.as_deref())?;
        let mut shape = out.shape().to_vec();
        shape.remove(h + 1);
        shape[h] = hq;
        out.reshape(&shape)
    }
}

/// The mask of a rank-`r` call with its head dim `h` (of the scores `[..., Hq, Lq, Lk]`) split
/// into `[n, g]`: a view (a size-1 head dim gains a size-1 group dim). A mask of lower rank is
/// aligned first; one whose head dim is neither 1 nor `n·g` is left for the attention's own
/// check to refuse.
fn group_mask(
    op: &'static str,
    m: &Tensor,
    r: usize,
    h: usize,
    (n, g): (usize, usize),
) -> Result<Tensor> {
    let m = if m.rank() < r {
        let mut shape = vec![1; r - m.rank()];
        shape.extend_from_slice(m.shape());
        m.reshape(&shape)?
    } else if m.rank() > r && m.shape()[..m.rank() - r].iter().all(|&s| s == 1) {
        m.reshape(&m.shape()[m.rank() - r..])?
    } else {
        m.clone()
    };
    if m.rank() != r {
        return Err(Error::ShapeMismatch {
            op,
            expected: format!("a mask that broadcasts to the scores of rank {r}"),
            got: format!("{:?}", m.shape()),
        });
    }
    match m.shape()[h] {
        1 => m.unsqueeze((h + 1) as isize),
        x if x == n * g => m.reshape(&split_dim(m.shape(), h, n, g)),
        _ => Err(Error::ShapeMismatch {
            op,
            expected: format!("a mask with 1 or {} heads", n * g),
            got: format!("{:?}", m.shape()),
        }),
    }
}
