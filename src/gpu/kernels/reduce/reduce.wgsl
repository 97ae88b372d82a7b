// reduce.wgsl: reductions and softmax along one dim. One workgroup per output row.
// The shape/strides in params describe the *outer* dims (the reduced dim removed); params[32] is
// the reduced length R and params[33] its stride; params[0] the number of rows.
// `reduce` writes one 32-bit word per row: f32 for sum/mean/max/min, an i32 index for argmax/argmin;
// `reduce_i32` the same for i32 input, with i32 values.
// `softmax` writes R f32 values per row, contiguous (row-major over [rows, R]).
// VARIANT is ReduceOp::code: 0 sum, 1 mean, 2 max, 3 min, 4 argmax, 5 argmin.

var<workgroup> red_v: array<f32, 256>;
var<workgroup> red_i: array<u32, 256>;

// One workgroup's row: its index, the reduced length and stride, and the storage index of its
// first element (0 on a tail row past `rows`, which still takes part in every barrier).
struct Row {
    row: u32,
    in_range: bool,
    r_len: u32,
    r_stride: u32,
    base: u32,
}

fn row_of(wid: vec3<u32>, nwg: vec3<u32>) -> Row {
    let row = wid.y * nwg.x + wid.x;
    let in_range = row < p(0u);
    let base = select(0u, strided(row, 12u) + p(28u), in_range);
    return Row(row, in_range, p(32u), p(33u), base);
}

// True if (v, i) should replace (best, bi) for a max (want_max) or min reduction: NaN wins,
// ties keep the lower index.
fn better(v: f32, i: u32, best: f32, bi: u32, want_max: bool) -> bool {
    if (is_nan(best)) {
        return is_nan(v) && i < bi;
    }
    if (is_nan(v)) {
        return true;
    }
    if (v == best) {
        return i < bi;
    }
    return select((v < best), (v > best), want_max);
}

// Tree reduction of red_v (and red_i for the arg ops) over the workgroup; result in slot 0.
fn tree(lid: u32, op: u32) {
    for (var s = WG / 2u; s > 0u; s = s >> 1u) {
        workgroupBarrier();
        if (lid < s) {
            let v = red_v[lid + s];
            let i = red_i[lid + s];
            if (op <= 1u) {
                red_v[lid] = red_v[lid] + v;
            } else {
                let want_max = op == 2u || op == 4u;
                if (better(v, i, red_v[lid], red_i[lid], want_max)) {
                    red_v[lid] = v;
                    red_i[lid] = i;
                }
            }
        }
    }
    workgroupBarrier();
}

@compute @workgroup_size(WG)
fn reduce(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) lid: u32) {
    // Uniform control flow: every invocation takes part in the barriers, even on a tail row.
    let g = row_of(wid, nwg);
    let op = VARIANT;
    let want_max = op == 2u || op == 4u;
    var acc = 0.0;
    var best_i = 0xffffffffu;
    if (op >= 2u) {
        acc = select(inf(), -inf(), want_max);
    }
    if (g.in_range) {
        for (var r = lid; r < g.r_len; r = r + WG) {
            let v = load0(g.base + r * g.r_stride);
            if (op <= 1u) {
                acc = acc + v;
            } else if (best_i == 0xffffffffu || better(v, r, acc, best_i, want_max)) {
                acc = v;
                best_i = r;
            }
        }
    }
    red_v[lid] = acc;
    red_i[lid] = best_i;
    tree(lid, op);
    if (lid == 0u && g.in_range) {
        let v = red_v[0];
        switch op {
            case 1u: { dst[g.row] = bitcast<u32>(v / f32(g.r_len)); }
            case 4u, 5u: { dst[g.row] = red_i[0]; }
            default: { dst[g.row] = bitcast<u32>(v); }
        }
    }
}

// i32 reductions (DT_IN 3), exact: sum wraps (two's complement, as WGSL's i32 addition and the
// Cpu kernel), max/min/argmax/argmin compare integers, ties keep the lower index. VARIANT as in
// `reduce` (mean is refused on the host). An invocation that saw no element holds index
// 0xffffffff and never wins a comparison.
var<workgroup> red_n: array<i32, 256>;

fn better_i32(v: i32, i: u32, best: i32, bi: u32, want_max: bool) -> bool {
    if (bi == 0xffffffffu) {
        return true;
    }
    if (v == best) {
        return i < bi;
    }
    return select((v < best), (v > best), want_max);
}

@compute @workgroup_size(WG)
fn reduce_i32(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    // Uniform control flow: every invocation takes part in the barriers, even on a tail row.
    let g = row_of(wid, nwg);
    let op = VARIANT;
    let want_max = op == 2u || op == 4u;
    var acc: i32 = 0;
    var best_i = 0xffffffffu;
    if (g.in_range) {
        for (var r = lid; r < g.r_len; r = r + WG) {
            let v = bitcast<i32>(load0_bits(g.base + r * g.r_stride));
            if (op == 0u) {
                acc = acc + v;
            } else if (better_i32(v, r, acc, best_i, want_max)) {
                acc = v;
                best_i = r;
            }
        }
    }
    red_n[lid] = acc;
    red_i[lid] = best_i;
    for (var s = WG / 2u; s > 0u; s = s >> 1u) {
        workgroupBarrier();
        if (lid < s) {
            let v = red_n[lid + s];
            let i = red_i[lid + s];
            if (op == 0u) {
                red_n[lid] = red_n[lid] + v;
            } else if (i != 0xffffffffu && better_i32(v, i, red_n[lid], red_i[lid], want_max)) {
                red_n[lid] = v;
                red_i[lid] = i;
            }
        }
    }
    workgroupBarrier();
    if (lid == 0u && g.in_range) {
        dst[g.row] = select(bitcast<u32>(red_n[0]), red_i[0], op >= 4u);
    }
}

@compute @workgroup_size(WG)
fn softmax(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_index) lid: u32) {
    // Uniform control flow: every invocation takes part in the barriers, even on a tail row.
    let g = row_of(wid, nwg);
    var m = -inf();
    if (g.in_range) {
        for (var r = lid; r < g.r_len; r = r + WG) {
            m = max(m, load0(g.base + r * g.r_stride));
        }
    }
    red_v[lid] = m;
    red_i[lid] = 0u;
    for (var s = WG / 2u; s > 0u; s = s >> 1u) {
        workgroupBarrier();
        if (lid < s) {
            red_v[lid] = max(red_v[lid], red_v[lid + s]);
        }
    }
    workgroupBarrier();
    let row_max = red_v[0];
    workgroupBarrier();
    var sum = 0.0;
    if (g.in_range) {
        for (var r = lid; r < g.r_len; r = r + WG) {
            sum = sum + exp(load0(g.base + r * g.r_stride) - row_max);
        }
    }
    red_v[lid] = sum;
    tree(lid, 0u);
    let inv = 1.0 / red_v[0];
    // The output is contiguous in the input's dim order, as softmax_each's (row a * inner + b
    // writes a * len * inner + r * inner + b, inner = params[34]; inner 1 for the last dim).
    let inner = p(34u);
    let first = (g.row / inner) * g.r_len * inner + g.row % inner;
    if (g.in_range) {
        for (var r = lid; r < g.r_len; r = r + WG) {
            dst[first + r * inner] = bitcast<u32>(exp(load0(g.base + r * g.r_stride) - row_max) * inv);
        }
    }
}

// ---- One invocation per output row -------------------------------------------------------
// For short reduced dims and for column reductions (reduced stride != 1 with many rows): there
// neighbouring invocations read neighbouring addresses, where a workgroup per row would read
// one element per cache line and leave most of its invocations idle. Sums are taken in blocks
// of EACH_BLOCK elements added into a running total, so the rounding error grows with
// EACH_BLOCK + len / EACH_BLOCK rather than len. Same results as `reduce`/`reduce_i32`/`softmax`
// up to the order of f32 additions (max/min/arg ops and i32 sums are identical); `softmax_each`
// writes its output in the input's own dim order (coalesced for column softmax).
const EACH_BLOCK: u32 = 256u;

// The row of invocation `lid` (`in_range` false past the last row, whose base is then 0).
fn each_row(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> Row {
    let row = linear_id(wid, nwg, lid);
    let in_range = row < p(0u);
    let base = select(0u, strided(row, 12u) + p(28u), in_range);
    return Row(row, in_range, p(32u), p(33u), base);
}

@compute @workgroup_size(WG)
fn reduce_each(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
    let g = each_row(wid, nwg, lid);
    if (!g.in_range) {
        return;
    }
    let row = g.row;
    let base = g.base;
    let len = g.r_len;
    let stride = g.r_stride;
    let op = VARIANT;
    let want_max = op == 2u || op == 4u;
    if (op <= 1u) {
        var total = 0.0;
        for (var start = 0u; start < len; start = start + EACH_BLOCK) {
            let end = min(len, start + EACH_BLOCK);
            var part = 0.0;
            for (var r = start; r < end; r = r + 1u) {
                part = part + load0(base + r * stride);
            }
            total = total + part;
        }
        let v = select(total, total / f32(len), op == 1u);
        dst[row] = bitcast<u32>(v);
        return;
    }
    var best = load0(base);
    var best_i = 0u;
    for (var r = 1u; r < len; r = r + 1u) {
        let v = load0(base + r * stride);
        if (better(v, r, best, best_i, want_max)) {
            best = v;
            best_i = r;
        }
    }
    dst[row] = select(bitcast<u32>(best), best_i, op >= 4u);
}

@compute @workgroup_size(WG)
fn reduce_each_i32(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                   @builtin(local_invocation_index) lid: u32) {
    let g = each_row(wid, nwg, lid);
    if (!g.in_range) {
        return;
    }
    let row = g.row;
    let base = g.base;
    let len = g.r_len;
    let stride = g.r_stride;
    let op = VARIANT;
    let want_max = op == 2u || op == 4u;
    if (op == 0u) {
        var acc: i32 = 0;
        for (var r = 0u; r < len; r = r + 1u) {
            acc = acc + bitcast<i32>(load0_bits(base + r * stride));
        }
        dst[row] = bitcast<u32>(acc);
        return;
    }
    var best = bitcast<i32>(load0_bits(base));
    var best_i = 0u;
    for (var r = 1u; r < len; r = r + 1u) {
        let v = bitcast<i32>(load0_bits(base + r * stride));
        if (better_i32(v, r, best, best_i, want_max)) {
            best = v;
            best_i = r;
        }
    }
    dst[row] = select(bitcast<u32>(best), best_i, op >= 4u);
}

@compute @workgroup_size(WG)
fn softmax_each(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
    let g = each_row(wid, nwg, lid);
    if (!g.in_range) {
        return;
    }
    let row = g.row;
    let base = g.base;
    let len = g.r_len;
    let stride = g.r_stride;
    var m = -inf();
    for (var r = 0u; r < len; r = r + 1u) {
        m = max(m, load0(base + r * stride));
    }
    var total = 0.0;
    for (var start = 0u; start < len; start = start + EACH_BLOCK) {
        let end = min(len, start + EACH_BLOCK);
        var part = 0.0;
        for (var r = start; r < end; r = r + 1u) {
            part = part + exp(load0(base + r * stride) - m);
        }
        total = total + part;
    }
    let inv = 1.0 / total;
    // The output is contiguous in the input's dim order: row = a * inner + b (inner the product
    // of the dims after the softmax dim, params[34]) writes a * len * inner + r * inner + b.
    let inner = p(34u);
    let first = (row / inner) * len * inner + row % inner;
    for (var r = 0u; r < len; r = r + 1u) {
        dst[first + r * inner] = bitcast<u32>(exp(load0(base + r * stride) - m) * inv);
    }
}

// cumsum (f32 in and out): inclusive prefix sums along the reduced dim, written contiguous in
// the input's dim order like softmax_each (row a * inner + b writes a * len * inner + r * inner
// + b, inner = params[34]). One workgroup per row scans it 256 elements at a time (a
// Hillis-Steele scan in workgroup memory plus the running carry); `cumsum_each` gives short or
// column rows one invocation each, summing in order.
@compute @workgroup_size(256)
fn cumsum(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) lid: u32) {
    let g = row_of(wid, nwg);
    let len = g.r_len;
    let inner = p(34u);
    let first = (g.row / inner) * len * inner + g.row % inner;
    var carry = 0.0;
    for (var start = 0u; start < len; start = start + 256u) {
        let r = start + lid;
        let inside = g.in_range && r < len;
        var v = 0.0;
        if (inside) {
            v = load0(g.base + r * g.r_stride);
        }
        red_v[lid] = v;
        workgroupBarrier();
        for (var off = 1u; off < 256u; off = off * 2u) {
            var add = 0.0;
            if (lid >= off) {
                add = red_v[lid - off];
            }
            workgroupBarrier();
            red_v[lid] = red_v[lid] + add;
            workgroupBarrier();
        }
        if (inside) {
            dst[first + r * inner] = bitcast<u32>(carry + red_v[lid]);
        }
        carry = carry + red_v[255];
        workgroupBarrier();
    }
}

@compute @workgroup_size(WG)
fn cumsum_each(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
    let g = each_row(wid, nwg, lid);
    if (!g.in_range) {
        return;
    }
    let inner = p(34u);
    let first = (g.row / inner) * g.r_len * inner + g.row % inner;
    var acc = 0.0;
    for (var r = 0u; r < g.r_len; r = r + 1u) {
        acc = acc + load0(g.base + r * g.r_stride);
        dst[first + r * inner] = bitcast<u32>(acc);
    }
}
