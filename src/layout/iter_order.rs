//! The memory order of an elementwise op's output, as PyTorch's `TensorIterator` chooses it,
//! so that `x.t().exp()`, `cl + cl` or `cl * bias` come out with PyTorch's strides (a
//! transpose stays transposed, channels-last stays channels-last) and the kernels read their
//! operands in storage order instead of gathering them into row-major order.
//!
//! Invariants: the output is dense at offset 0; the returned dim order (outermost first) is
//! the order in which the output's storage holds the dims, so a kernel that writes a
//! contiguous result of the operands permuted by it has written the output's storage.
//! Operands come already broadcast to the output's shape (stride 0 on broadcast dims).

use super::Layout;
use std::cmp::Ordering;

/// The output layout of an elementwise op over `operands` (each broadcast to the common
/// shape, in PyTorch's operand order: `lhs, rhs` or `mask, on_true, on_false`) and the dims
/// from outermost to innermost in the output's storage. `same_shape` says whether every
/// operand had the common shape before broadcasting (PyTorch's fast paths need it):
/// - all contiguous: row-major;
/// - all dense channels-last (4-D): channels-last's own strides;
/// - all dense with equal strides: those strides;
/// - otherwise dims ordered by the first operand whose strides tell two dims apart (broadcast
///   dims tell nothing; equal strides put the larger dim outside, else ask the next operand),
///   then row-major order.
pub(crate) fn elementwise_output(operands: &[&Layout], same_shape: bool) -> (Vec<usize>, Layout) {
    let Some(first) = operands.first() else {
        return (Vec::new(), Layout::contiguous(&[]));
    };
    let shape = first.shape().to_vec();
    let rank = shape.len();
    let row_major = || ((0..rank).collect(), Layout::contiguous(&shape));
    if first.numel() == 0 || rank == 0 {
        return row_major();
    }
    if same_shape {
        if operands.iter().all(|l| l.is_contiguous()) {
            return row_major();
        }
        let nhwc = super::channels_last::NHWC;
        let channels_last =
            |l: &&Layout| rank == 4 && l.permute(&nhwc).is_ok_and(|p| p.is_contiguous());
        if operands.iter().all(channels_last) {
            if let Ok(out) = super::channels_last::channels_last_layout(&shape) {
                return (nhwc.to_vec(), out);
            }
        }
        let strides = first.strides();
        if operands
            .iter()
            .all(|l| l.dense_span().is_some() && l.strides() == strides)
        {
            let mut order: Vec<usize> = (0..rank).collect();
            order.sort_by_key(|&d| std::cmp::Reverse(strides[d]));
            return (order, Layout::from_parts(shape, strides.to_vec(), 0));
        }
    }
    let inner_first = |a: usize, b: usize| -> Ordering {
        for l in operands {
            let (sa, sb) = (l.strides()[a], l.strides()[b]);
            if sa == 0 || sb == 0 {
                continue;
            }
            match sa.cmp(&sb) {
                Ordering::Equal if shape[a] > shape[b] => return Ordering::Greater,
                Ordering::Equal => {}
                decided => return decided,
            }
        }
        Ordering::Equal
    };
    let (strides, order) = dense_order(&shape, inner_first);
    (order, Layout::from_parts(shape, strides, 0))
}

/// Orders the dims innermost first by `inner_first` (an insertion sort from row-major order
/// that moves a dim inward only past dims it must precede, as PyTorch's sorts do), and
/// returns dense strides in that order together with the dims outermost first.
pub(super) fn dense_order(
    shape: &[usize],
    inner_first: impl Fn(usize, usize) -> Ordering,
) -> (Vec<usize>, Vec<usize>) {
    let rank = shape.len();
    let mut order: Vec<usize> = (0..rank).rev().collect();
    for i in 1..rank {
        let mut moving = i;
        for j in (0..i).rev() {
            match inner_first(order[j], order[moving]) {
                Ordering::Greater => {
                    order.swap(j, moving);
                    moving = j;
                }
                Ordering::Less => break,
                Ordering::Equal => {}
            }
        }
    }
    let mut strides = vec![0; rank];
    let mut next = 1usize;
    for &d in &order {
        strides[d] = next;
        if shape[d] > 1 {
            next = next.saturating_mul(shape[d]);
        }
    }
    order.reverse();
    (strides, order)
}
