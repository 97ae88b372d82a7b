//! How fused attention's work is split: tasks of one head × a block of query rows, run in
//! parallel over heads a group at a time (the group's K and V are packed once per group).
//!
//! Invariants: every output row belongs to exactly one task, so results do not depend on the
//! thread count; packed K/V memory stays at one group of heads. The output is written in place
//! in its final layout (contiguous, or PyTorch's `empty_like(q)` order, e.g. `[B, L, H, D]`
//! memory for `[B, H, L, D]` results): [`OutRows`] hands a task exactly its rows, which
//! [`out_layout_fits`] guarantees are disjoint and inside the buffer.

use rayon::prelude::*;

use super::operands::head_base;
use super::AttnShape;
use crate::layout::Layout;

/// Whether `l` can lay out the `[..., Lq, Dv]` output of `s` in a buffer of `len` elements:
/// that shape, offset 0, dense (every element its own index below `len`) and value columns
/// adjacent. Then distinct (head, row) pairs own disjoint runs of `Dv` elements.
pub(in crate::cpu) fn out_layout_fits(l: &Layout, s: &AttnShape, len: usize) -> bool {
    let r = l.rank();
    r >= 2
        && l.shape() == s.out_shape().as_slice()
        && l.offset() == 0
        && l.numel() == len
        && (len == 0 || l.dense_span().is_some())
        && (s.dv <= 1 || l.strides()[r - 1] == 1)
}

/// One task's output rows: `rows` runs of `dv` elements, `stride` elements apart, in a buffer
/// the task shares with the others (each writes only its own rows).
pub(in crate::cpu) struct OutRows<'a, T> {
    ptr: *mut T,
    rows: usize,
    dv: usize,
    stride: usize,
    _buffer: std::marker::PhantomData<&'a mut [T]>,
}

// SAFETY: an `OutRows` is the only handle on its rows (see `for_head_groups`), so moving it to
// another thread moves exclusive access to plain `T`s, as a `&mut [T]` would.
unsafe impl<T: Send> Send for OutRows<'_, T> {}

impl<T> OutRows<'_, T> {
    /// Rows of this task.
    pub(in crate::cpu) fn rows(&self) -> usize {
        self.rows
    }

    /// Row `r` (`r < rows()`), `dv` elements.
    pub(in crate::cpu) fn row(&mut self, r: usize) -> &mut [T] {
        assert!(r < self.rows, "output row {r} of {}", self.rows);
        // SAFETY: `for_head_groups` built this handle from a layout `out_layout_fits`
        // accepted: row `r` of this task is `dv` elements inside the buffer that no other
        // handle covers, and `&mut self` keeps one row borrowed at a time.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(r * self.stride), self.dv) }
    }
}

/// Runs `task(ctx, head, q0, rows)` over every head's `[Lq, Dv]` output block of `out` (laid
/// out by `out_layout`, which must satisfy [`out_layout_fits`]; otherwise nothing is written)
/// in tasks of `rows_per_task` query rows (`q0` the first), in parallel, heads `group` at a
/// time with `ctx = group_ctx(heads)` built once per group (it packs that group's K and V).
pub(in crate::cpu) fn for_head_groups<T: Send, C: Sync>(
    out: &mut [T],
    out_layout: &Layout,
    s: &AttnShape,
    (rows_per_task, group): (usize, usize),
    group_ctx: impl Fn(std::ops::Range<usize>) -> crate::Result<C>,
    task: impl Fn(&C, usize, usize, &mut OutRows<T>) -> crate::Result<()> + Sync,
) -> crate::Result<()> {
    if !out_layout_fits(out_layout, s, out.len()) || s.dv == 0 {
        return Ok(()); // callers check the layout first; an empty row needs no task
    }
    let heads = s.heads();
    let row_stride = out_layout.strides()[out_layout.rank() - 2];
    let base = out.as_mut_ptr();
    let step = rows_per_task.max(1);
    for h0 in (0..heads).step_by(group.max(1)) {
        let h1 = (h0 + group).min(heads);
        let ctx = group_ctx(h0..h1)?;
        let count = (h1 - h0).saturating_mul(s.lq.div_ceil(step));
        let mut tasks: Vec<(usize, usize, OutRows<T>)> =
            crate::cpu::alloc::with_capacity("scaled_dot_product_attention", count)?;
        for h in h0..h1 {
            let first = head_base(out_layout, h);
            for q0 in (0..s.lq).step_by(step) {
                let rows = step.min(s.lq - q0);
                // SAFETY: `first + q0 * row_stride` is the first element of row q0 of head h,
                // inside the buffer by `out_layout_fits`.
                let ptr = unsafe { base.add(first + q0 * row_stride) };
                let (dv, stride) = (s.dv, row_stride);
                let _buffer = std::marker::PhantomData;
                tasks.push((
                    h,
                    q0,
                    OutRows {
                        ptr,
                        rows,
                        dv,
                        stride,
                        _buffer,
                    },
                ));
            }
        }
        tasks
            .into_par_iter()
            .try_for_each(|(h, q0, mut part)| task(&ctx, h, q0, &mut part))?;
    }
    Ok(())
}

/// Splits the work into tasks of one head × `rows_per_task` query rows (at most `max_tiles`
/// tiles of `mr` rows, fewer when that leaves under four tasks per thread) and heads into groups
/// packed and computed together (packed K/V memory stays at a few heads' worth, each group big
/// enough to keep every thread busy). Returns `(rows_per_task, heads per group)`.
pub(in crate::cpu) fn plan_tasks(
    heads: usize,
    tiles: usize,
    max_tiles: usize,
    mr: usize,
) -> (usize, usize) {
    let threads = rayon::current_num_threads();
    let mut per_task = max_tiles.max(1);
    while per_task > 1 && heads * tiles.div_ceil(per_task) < 4 * threads {
        per_task /= 2;
    }
    let tasks_per_head = tiles.div_ceil(per_task);
    let group = heads.min((2 * threads).max((4 * threads).div_ceil(tasks_per_head.max(1))));
    (per_task * mr, group.max(1))
}
