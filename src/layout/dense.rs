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
        super::iter_order::dense_order(&self.shape, |a, b| {
            let (sa, sb) = (self.strides[a], self.strides[b]);
            if sa == 0 || sb == 0 {
                std::cmp::Ordering::Equal
            } else if sa == sb && self.shape[a] > self.shape[b] {
                std::cmp::Ordering::Greater
            } else {
                sa.cmp(&sb)
            }
        })
    }
}

/// Strides that view a non-empty layout of `old` shape and strides as `new` (same number of
/// elements) without a copy, or `None`. Old dims are grouped from the innermost into chunks
/// whose dims nest exactly (size-1 dims join any chunk); the new dims must tile each chunk,
/// innermost first, each taking the stride its position in the chunk gives.
pub(super) fn view_strides(
    old: &[usize],
    old_strides: &[usize],
    new: &[usize],
) -> Option<Vec<usize>> {
    let mut strides = vec![0; new.len()];
    let mut view_d = new.len();
    let Some(&last) = old_strides.last() else {
        return Some(vec![1; new.len()]);
    };
    let mut chunk_stride = last;
    let (mut chunk_numel, mut view_numel) = (1usize, 1usize);
    for d in (0..old.len()).rev() {
        chunk_numel = chunk_numel.checked_mul(old[d])?;
        let chunk_ends = d == 0
            || (old[d - 1] != 1
                && Some(old_strides[d - 1]) != chunk_numel.checked_mul(chunk_stride));
        if !chunk_ends {
            continue;
        }
        while view_d > 0 && (view_numel < chunk_numel || new[view_d - 1] == 1) {
            strides[view_d - 1] = view_numel.checked_mul(chunk_stride)?;
            view_numel = view_numel.checked_mul(new[view_d - 1])?;
            view_d -= 1;
        }
        if view_numel != chunk_numel {
            return None;
        }
        if d > 0 {
            chunk_stride = old_strides[d - 1];
            chunk_numel = 1;
            view_numel = 1;
        }
    }
    (view_d == 0).then_some(strides)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Result;

    #[test]
    fn views_split_and_merge_chunks_but_never_cross_them() {
        // Channels-last [2, 3, 4, 5]: H and W form one chunk, C and N are their own.
        let cl = Layout::contiguous(&[2, 4, 5, 3])
            .permute(&[0, 3, 1, 2])
            .unwrap();
        let merged = cl.reshape(&[2, 3, 20]).unwrap();
        assert_eq!(merged.strides(), &[60, 1, 3]);
        let split = cl.reshape(&[2, 3, 2, 2, 5]).unwrap();
        assert_eq!(split.strides(), &[60, 1, 30, 15, 3]);
        let with_ones = cl.reshape(&[1, 2, 3, 1, 20]).unwrap();
        assert_eq!(with_ones.strides()[1..3], [60, 1]);
        assert!(cl.reshape(&[6, 20]).is_none(), "N and C are not one chunk");
        assert!(cl.reshape(&[2, 60]).is_none());
        // A transpose can split its dims but not merge them.
        let t = Layout::contiguous(&[4, 6]).transpose(0, 1);
        assert_eq!(t.reshape(&[2, 3, 4]).unwrap().strides(), &[3, 1, 6]);
        assert!(t.reshape(&[24]).is_none());
        // Broadcast dims stay broadcast when split, and never merge with real ones.
        let b = Layout::contiguous(&[1, 4]).broadcast_to(&[6, 4]).unwrap();
        assert_eq!(b.reshape(&[2, 3, 4]).unwrap().strides(), &[0, 0, 1]);
        assert!(b.reshape(&[24]).is_none());
        // Offsets are kept.
        let n = Layout::contiguous(&[4, 6]).narrow(1, 2, 3).unwrap();
        assert_eq!(
            n.reshape(&[2, 2, 3])
                .map(|l| (l.strides().to_vec(), l.offset())),
            Some((vec![12, 6, 1], 2))
        );
    }

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
