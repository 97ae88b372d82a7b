//! Dense orders of views: which views fill a storage span exactly (PyTorch's
//! `is_non_overlapping_and_dense`) and, for the others, the dense strides that keep their
//! memory order (PyTorch's `infer_dense_strides`). Format-preserving copies (`Tensor::to`,
//! `Tensor::to_dtype`) use both, so their results' strides are PyTorch's (checked against
//! PyTorch in `tests/copies_keep_strides.rs`).

use super::Layout;

impl Layout {
    /// The storage span of a non-overlapping, dense view: when its elements fill
    /// `offset..offset + numel` exactly, in some dim order (a transpose, a permute, a
    /// channels-last tensor), that span as a 1-D contiguous layout; `None` for views with gaps
    /// or repeats (slices, broadcasts) and for empty views. PyTorch's
    /// `is_non_overlapping_and_dense`: size-1 dims are ignored whatever their stride.
    pub fn dense_span(&self) -> Option<Layout> {
        let n = self.numel();
        if n == 0 {
            return None;
        }
        let mut dims: Vec<(usize, usize)> = self
            .shape
            .iter()
            .zip(&self.strides)
            .filter(|(&d, _)| d != 1)
            .map(|(&d, &s)| (s, d))
            .collect();
        dims.sort_unstable();
        let mut expected = 1;
        for (stride, size) in dims {
            if stride != expected {
                return None;
            }
            expected *= size;
        }
        Some(Layout {
            shape: vec![n],
            strides: vec![1],
            offset: self.offset,
        })
    }

    /// Dense strides that order the dims in memory as this view orders them (PyTorch's
    /// `infer_dense_strides`, which its copies of views with gaps or repeats take): dims sorted
    /// innermost first by stride, a stride of 0 (a broadcast dim) comparing equal to every
    /// other so that it keeps its row-major place, and equal strides putting the smaller dim
    /// inside. Returns the strides and the dims from outermost to innermost.
    pub fn dense_strides_like(&self) -> (Vec<usize>, Vec<usize>) {
        let rank = self.rank();
        // Innermost first; starts from row-major order and moves a dim inward only past
        // dims it must precede.
        let mut order: Vec<usize> = (0..rank).rev().collect();
        let inner_first = |a: usize, b: usize| -> std::cmp::Ordering {
            let (sa, sb) = (self.strides[a], self.strides[b]);
            if sa == 0 || sb == 0 {
                std::cmp::Ordering::Equal
            } else {
                sa.cmp(&sb)
                    .then_with(|| match self.shape[a] > self.shape[b] {
                        true => std::cmp::Ordering::Greater,
                        false => std::cmp::Ordering::Equal,
                    })
            }
        };
        for i in 1..rank {
            let mut moving = i;
            for j in (0..i).rev() {
                match inner_first(order[j], order[moving]) {
                    std::cmp::Ordering::Greater => {
                        order.swap(j, moving);
                        moving = j;
                    }
                    std::cmp::Ordering::Less => break,
                    std::cmp::Ordering::Equal => {}
                }
            }
        }
        let mut strides = vec![0; rank];
        let mut next = 1usize;
        for &d in &order {
            strides[d] = next;
            if self.shape[d] > 1 {
                next = next.saturating_mul(self.shape[d]);
            }
        }
        order.reverse();
        (strides, order)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Result;

    #[test]
    fn dense_spans_cover_permutes_and_refuse_gaps_and_repeats() -> Result<()> {
        let base = Layout::contiguous(&[2, 3, 4]);
        for perm in [[0, 1, 2], [2, 0, 1], [1, 2, 0], [2, 1, 0]] {
            let span = base.permute(&perm)?.dense_span();
            assert_eq!(
                span.map(|l| (l.shape().to_vec(), l.offset())),
                Some((vec![24], 0))
            );
        }
        // A whole sub-tensor at an offset is dense; a slice of an inner dim is not.
        let third = Layout::contiguous(&[3, 4, 5])
            .narrow(0, 2, 1)?
            .transpose(1, 2);
        assert_eq!(third.dense_span().map(|l| l.offset()), Some(40));
        assert!(base.narrow(2, 1, 2)?.dense_span().is_none());
        assert!(Layout::contiguous(&[3])
            .broadcast_to(&[2, 3])?
            .dense_span()
            .is_none());
        // Size-1 dims may carry any stride; an empty view has no span.
        let odd = Layout::from_parts(vec![3, 1, 2], vec![1, 99, 3], 5);
        assert_eq!(odd.dense_span().map(|l| l.offset()), Some(5));
        assert!(Layout::contiguous(&[2, 0]).dense_span().is_none());
        assert!(Layout::from_parts(vec![2, 2], vec![1, 1], 0)
            .dense_span()
            .is_none());
        Ok(())
    }
}
