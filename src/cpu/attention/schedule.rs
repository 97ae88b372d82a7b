//! How fused attention's work is split: tasks of one head × a block of query rows, run in
//! parallel over heads a group at a time (the group's K and V are packed once per group).
//!
//! Invariants: every output row belongs to exactly one task, so results do not depend on the
//! thread count; packed K/V memory stays at one group of heads.

use rayon::prelude::*;

use super::AttnShape;

/// Runs `task(ctx, head, q0, rows)` over every head's `[Lq, Dv]` output block of `out` in
/// tasks of `rows_per_task` query rows (`q0` the first), in parallel, heads `group` at a time
/// with `ctx = group_ctx(heads)` built once per group (it packs that group's K and V).
pub(in crate::cpu) fn for_head_groups<T: Send, C: Sync>(
    out: &mut [T],
    s: &AttnShape,
    (rows_per_task, group): (usize, usize),
    group_ctx: impl Fn(std::ops::Range<usize>) -> C,
    task: impl Fn(&C, usize, usize, &mut [T]) + Sync,
) {
    let heads = s.heads();
    let mut heads_out = out.chunks_mut(s.lq * s.dv).enumerate();
    for h0 in (0..heads).step_by(group.max(1)) {
        let h1 = (h0 + group).min(heads);
        let ctx = group_ctx(h0..h1);
        let mut tasks: Vec<(usize, usize, &mut [T])> = Vec::new();
        for (h, head) in heads_out.by_ref().take(h1 - h0) {
            for (i, part) in head.chunks_mut(rows_per_task * s.dv).enumerate() {
                tasks.push((h, i * rows_per_task, part));
            }
        }
        tasks
            .into_par_iter()
            .for_each(|(h, q0, part)| task(&ctx, h, q0, part));
    }
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
