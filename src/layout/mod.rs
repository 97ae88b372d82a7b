//! Shapes, strides and offsets: how a tensor's logical elements map to its storage.
//!
//! Invariants: strides and the offset are in elements (not bytes); a stride of 0 marks a
//! broadcast dimension; every index reachable through a layout lies inside its storage, which
//! [`Layout::max_offset`] lets callers check once. Views (permute, narrow, broadcast, ...) only
//! build a new `Layout`; they never touch data.

pub(crate) mod channels_last;
mod dense;
mod iter_order;

pub(crate) use iter_order::elementwise_output;

use crate::{Error, Result};

/// Maximum rank supported by every kernel (CPU and WGSL share the limit).
pub const MAX_DIMS: usize = 8;

/// Shape, strides and offset of a tensor view.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    shape: Vec<usize>,
    strides: Vec<usize>,
    offset: usize,
}

/// Row-major (C order) strides of a shape.
pub fn contiguous_strides(shape: &[usize]) -> Vec<usize> {
    let mut strides = vec![0; shape.len()];
    let mut acc = 1usize;
    for (s, &d) in strides.iter_mut().zip(shape).rev() {
        *s = acc;
        acc = acc.saturating_mul(d.max(1));
    }
    strides
}

/// Number of elements of a shape (1 for a scalar, 0 if any dim is 0). A product past
/// `usize::MAX` saturates there (no tensor can hold that many: allocation refuses it), so
/// shape checks compare real counts and never wrapped ones.
pub fn numel(shape: &[usize]) -> usize {
    if shape.contains(&0) {
        return 0;
    }
    shape
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .unwrap_or(usize::MAX)
}

/// The bytes of `numel` elements of `dtype`, or an error naming `op` when that is more than one
/// allocation can hold (`isize::MAX` bytes, Rust's limit on any allocation).
pub(crate) fn alloc_bytes(op: &'static str, numel: usize, dtype: crate::DType) -> Result<usize> {
    numel
        .checked_mul(dtype.size_in_bytes())
        .filter(|&b| b <= isize::MAX as usize)
        .ok_or_else(|| {
            Error::invalid(
                op,
                format!(
                    "a tensor of {numel} {dtype} elements is larger than any allocation can be"
                ),
            )
        })
}

/// NumPy broadcasting of two shapes.
pub fn broadcast_shapes(op: &'static str, a: &[usize], b: &[usize]) -> Result<Vec<usize>> {
    let rank = a.len().max(b.len());
    let mut out = vec![0; rank];
    for i in 0..rank {
        let da = if i < rank - a.len() {
            1
        } else {
            a[i - (rank - a.len())]
        };
        let db = if i < rank - b.len() {
            1
        } else {
            b[i - (rank - b.len())]
        };
        out[i] = if da == db || db == 1 {
            da
        } else if da == 1 {
            db
        } else {
            return Err(Error::ShapeMismatch {
                op,
                expected: format!("shapes that broadcast against {a:?}"),
                got: format!("{b:?}"),
            });
        };
    }
    Ok(out)
}

/// Resolves a possibly negative dim against a rank.
pub fn resolve_dim(op: &'static str, dim: isize, rank: usize) -> Result<usize> {
    let r = rank as isize;
    let d = if dim < 0 { dim + r } else { dim };
    if d < 0 || d >= r.max(1) || (rank == 0) {
        return Err(Error::DimOutOfRange { op, dim, rank });
    }
    Ok(d as usize)
}

impl Layout {
    /// A contiguous layout of `shape` starting at offset 0.
    pub fn contiguous(shape: &[usize]) -> Layout {
        Layout {
            shape: shape.to_vec(),
            strides: contiguous_strides(shape),
            offset: 0,
        }
    }

    /// A layout from raw parts; the caller guarantees it stays inside the storage.
    pub fn from_parts(shape: Vec<usize>, strides: Vec<usize>, offset: usize) -> Layout {
        Layout {
            shape,
            strides,
            offset,
        }
    }

    /// The dims.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Element strides, one per dim.
    pub fn strides(&self) -> &[usize] {
        &self.strides
    }

    /// Offset of the first element, in elements.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// Rank.
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        numel(&self.shape)
    }

    /// True when elements are laid out row-major without gaps (offset may be non-zero).
    pub fn is_contiguous(&self) -> bool {
        // As in PyTorch, a view without elements is contiguous whatever its strides (the
        // strides of `contiguous_strides` for a shape with a 0 dim would not pass the loop).
        if self.numel() == 0 {
            return true;
        }
        let mut acc = 1;
        for (&d, &s) in self.shape.iter().zip(&self.strides).rev() {
            if d != 1 && s != acc {
                return false;
            }
            acc *= d;
        }
        true
    }

    /// Largest storage index reached plus one (0 for an empty view).
    pub fn max_offset(&self) -> usize {
        if self.numel() == 0 {
            return 0;
        }
        self.offset
            + self
                .shape
                .iter()
                .zip(&self.strides)
                .map(|(&d, &s)| (d - 1) * s)
                .sum::<usize>()
            + 1
    }

    /// Reorders dims; `perm` must be a permutation of `0..rank`.
    pub fn permute(&self, perm: &[usize]) -> Result<Layout> {
        let rank = self.rank();
        let mut seen = vec![false; rank];
        if perm.len() != rank
            || perm
                .iter()
                .any(|&p| p >= rank || std::mem::replace(&mut seen[p], true))
        {
            return Err(Error::invalid(
                "permute",
                format!("expected a permutation of 0..{rank}, got {perm:?}"),
            ));
        }
        Ok(Layout {
            shape: perm.iter().map(|&p| self.shape[p]).collect(),
            strides: perm.iter().map(|&p| self.strides[p]).collect(),
            offset: self.offset,
        })
    }

    /// Swaps two (resolved) dims.
    pub fn transpose(&self, a: usize, b: usize) -> Layout {
        let mut l = self.clone();
        l.shape.swap(a, b);
        l.strides.swap(a, b);
        l
    }

    /// Restricts `dim` to `start..start + len`.
    pub fn narrow(&self, dim: usize, start: usize, len: usize) -> Result<Layout> {
        let size = self.shape[dim];
        if start.checked_add(len).is_none_or(|end| end > size) {
            return Err(Error::invalid(
                "narrow",
                format!(
                    "range {start}..{} is outside dim {dim} of size {size}",
                    start.saturating_add(len)
                ),
            ));
        }
        let mut l = self.clone();
        if len > 0 {
            l.offset += start * self.strides[dim];
        }
        l.shape[dim] = len;
        Ok(l)
    }

    /// Broadcasts to `shape` (NumPy rules: prepend dims, stretch size-1 dims).
    pub fn broadcast_to(&self, shape: &[usize]) -> Result<Layout> {
        let err = || Error::ShapeMismatch {
            op: "broadcast_to",
            expected: format!("a shape that {:?} broadcasts to", self.shape),
            got: format!("{shape:?}"),
        };
        if shape.len() < self.rank() {
            return Err(err());
        }
        let lead = shape.len() - self.rank();
        let mut strides = vec![0; shape.len()];
        for i in 0..self.rank() {
            let (d, t) = (self.shape[i], shape[lead + i]);
            strides[lead + i] = if d == t {
                self.strides[i]
            } else if d == 1 {
                0
            } else {
                return Err(err());
            };
        }
        Ok(Layout {
            shape: shape.to_vec(),
            strides,
            offset: self.offset,
        })
    }

    /// A view of the same elements with a new shape, if strides allow it without a copy
    /// (PyTorch's `view` rule): row-major strides for a contiguous view, else each run of old
    /// dims that is contiguous within itself (a "chunk", such as H and W of a channels-last
    /// tensor) may be split or merged into new dims. `None` when a new dim would cross chunks.
    pub fn reshape(&self, shape: &[usize]) -> Option<Layout> {
        if self.is_contiguous() {
            return Some(Layout {
                shape: shape.to_vec(),
                strides: contiguous_strides(shape),
                offset: self.offset,
            });
        }
        if numel(shape) != self.numel() {
            return None;
        }
        let strides = dense::view_strides(&self.shape, &self.strides, shape)?;
        Some(Layout {
            shape: shape.to_vec(),
            strides,
            offset: self.offset,
        })
    }

    /// Inserts a size-1 dim at `dim` (0..=rank).
    pub fn unsqueeze(&self, dim: usize) -> Layout {
        let mut l = self.clone();
        let stride = if dim < self.rank() {
            self.strides[dim] * self.shape[dim]
        } else {
            1
        };
        l.shape.insert(dim, 1);
        l.strides.insert(dim, stride);
        l
    }

    /// Removes a size-1 dim.
    pub fn squeeze(&self, dim: usize) -> Layout {
        let mut l = self.clone();
        if self.shape[dim] == 1 {
            l.shape.remove(dim);
            l.strides.remove(dim);
        }
        l
    }

    /// Iterator over the storage offsets of every element, in row-major logical order.
    pub fn offsets(&self) -> StridedOffsets<'_> {
        StridedOffsets {
            layout: self,
            index: vec![0; self.rank()],
            next: if self.numel() == 0 {
                None
            } else {
                Some(self.offset)
            },
        }
    }

    /// Merges adjacent dims that are contiguous with each other, keeping the same element order.
    /// Kernels use it to lower rank (and so index arithmetic) without changing meaning.
    pub fn coalesced(&self) -> Layout {
        let mut shape: Vec<usize> = Vec::with_capacity(self.rank());
        let mut strides: Vec<usize> = Vec::with_capacity(self.rank());
        for (&d, &s) in self.shape.iter().zip(&self.strides) {
            if d == 1 {
                continue;
            }
            match (shape.last_mut(), strides.last_mut()) {
                (Some(pd), Some(ps)) if *ps == s * d => {
                    *pd *= d;
                    *ps = s;
                }
                _ => {
                    shape.push(d);
                    strides.push(s);
                }
            }
        }
        if shape.is_empty() && self.numel() != 0 {
            shape.push(1);
            strides.push(1);
        }
        if self.numel() == 0 {
            return Layout::contiguous(&[0]);
        }
        Layout {
            shape,
            strides,
            offset: self.offset,
        }
    }
}

/// Row-major iterator over storage offsets; see [`Layout::offsets`].
pub struct StridedOffsets<'a> {
    layout: &'a Layout,
    index: Vec<usize>,
    next: Option<usize>,
}

impl Iterator for StridedOffsets<'_> {
    type Item = usize;

    fn next(&mut self) -> Option<usize> {
        let current = self.next?;
        let mut off = current;
        let mut dim = self.layout.rank();
        loop {
            if dim == 0 {
                self.next = None;
                break;
            }
            dim -= 1;
            self.index[dim] += 1;
            off += self.layout.strides[dim];
            if self.index[dim] < self.layout.shape[dim] {
                self.next = Some(off);
                break;
            }
            off -= self.layout.strides[dim] * self.index[dim];
            self.index[dim] = 0;
        }
        Some(current)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_follow_strides() -> Result<()> {
        let l = Layout::contiguous(&[2, 3]).transpose(0, 1);
        assert_eq!(l.offsets().collect::<Vec<_>>(), vec![0, 3, 1, 4, 2, 5]);
        assert!(!l.is_contiguous());
        let b = Layout::contiguous(&[3]).broadcast_to(&[2, 3])?;
        assert_eq!(b.offsets().collect::<Vec<_>>(), vec![0, 1, 2, 0, 1, 2]);
        assert_eq!(Layout::contiguous(&[0, 3]).offsets().count(), 0);
        assert_eq!(
            Layout::contiguous(&[]).offsets().collect::<Vec<_>>(),
            vec![0]
        );
        Ok(())
    }

    #[test]
    fn coalesce_merges_contiguous_runs() -> Result<()> {
        let l = Layout::contiguous(&[2, 3, 4]);
        assert_eq!(l.coalesced().shape(), &[24]);
        let n = l.narrow(2, 1, 2)?;
        assert_eq!(n.coalesced().shape(), &[6, 2]);
        assert_eq!(
            n.coalesced().offsets().collect::<Vec<_>>(),
            n.offsets().collect::<Vec<_>>()
        );
        Ok(())
    }

    #[test]
    fn broadcast_rules() -> Result<()> {
        assert_eq!(broadcast_shapes("t", &[2, 1, 3], &[4, 1])?, vec![2, 4, 3]);
        assert!(broadcast_shapes("t", &[2, 3], &[4]).is_err());
        Ok(())
    }
}
