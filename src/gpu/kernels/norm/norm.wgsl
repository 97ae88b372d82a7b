// norm.wgsl: layer norm and group norm (optionally followed by SiLU). One workgroup per
// normalised row: the input is contiguous [batch, channels, inner], a row is one (batch item,
// channel group) = `len` contiguous elements starting at row * len; or (VARIANT bit 8) a
// dense channels-last [batch, inner, channels] array, a row being the group's channels at
// every pixel (see norm_at). The output has the input's layout.
// params: [0] rows, [30] eps (f32), [32] len, [33] inner, [34] groups, [35] channels per group,
// [36] element offset of x (src0), [37] of the weight (src1), [38] of the bias (src2).
// VARIANT bits: 1 has weight, 2 has bias, 4 fused SiLU, 8 channels-last. Absent operands are bound to x and never
// read. Statistics are two-pass in f32, shifted by the row's first element (robust to a large
// offset), biased variance; dst is f32, one word per element, or for 16-bit DT_OUT (even row
// lengths) element pairs per word.

@group(0) @binding(4) var<storage, read> src2: array<u32>;

var<workgroup> norm_acc: array<f32, 256>;

fn load2(i: u32) -> f32 {
    let e = epw(DT_IN);
    return bits_to_f32(lane_bits(src2[i / e], i % e, DT_IN), DT_IN);
}

// Workgroup sum of `v` (tree in workgroup memory); every invocation gets the total.
fn norm_sum(lid: u32, v: f32) -> f32 {
    norm_acc[lid] = v;
    for (var s = WG / 2u; s > 0u; s = s >> 1u) {
        workgroupBarrier();
        if (lid < s) {
            norm_acc[lid] = norm_acc[lid] + norm_acc[lid + s];
        }
    }
    workgroupBarrier();
    let total = norm_acc[0];
    // The next call overwrites the slots: let every invocation read the total first.
    workgroupBarrier();
    return total;
}

@compute @workgroup_size(WG)
fn norm(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
    let row = wid.y * nwg.x + wid.x;
    let rows = p(0u);
    let len = p(32u);
    // Uniform control flow: every invocation takes part in the barriers, even on a tail row.
    let in_range = row < rows;
    let r = select(0u, row, in_range);
    let x_at = p(36u);
    var x0 = 0.0;
    if (in_range) {
        x0 = load0(x_at + norm_at(r, 0u));
    }
    var s = 0.0;
    if (in_range) {
        for (var j = lid; j < len; j = j + WG) {
            s = s + (load0(x_at + norm_at(r, j)) - x0);
        }
    }
    let shifted_mean = norm_sum(lid, s) / f32(max(len, 1u));
    var q = 0.0;
    if (in_range) {
        for (var j = lid; j < len; j = j + WG) {
            let d = (load0(x_at + norm_at(r, j)) - x0) - shifted_mean;
            q = q + d * d;
        }
    }
    let variance = norm_sum(lid, q) / f32(max(len, 1u));
    let rstd = 1.0 / sqrt(variance + pf(30u));
    if (!in_range) {
        return;
    }
    let stats = vec3<f32>(x0, shifted_mean, rstd);
    if (DT_OUT == 0u) {
        for (var j = lid; j < len; j = j + WG) {
            let at = norm_at(r, j);
            dst[at] = bitcast<u32>(norm_value(x_at + at, norm_channel(r, j), stats));
        }
        return;
    }
    // 16-bit output: elements 2k and 2k + 1 of a row are adjacent in memory and share a word
    // (the host guarantees it: an even row length, or channels-last with an even number of
    // channels per group).
    for (var k = lid; 2u * k < len; k = k + WG) {
        let at = norm_at(r, 2u * k);
        let lo = f32_to_bits(norm_value(x_at + at, norm_channel(r, 2u * k), stats), DT_OUT);
        let c1 = norm_channel(r, 2u * k + 1u);
        let hi = f32_to_bits(norm_value(x_at + at + 1u, c1, stats), DT_OUT);
        dst[at / 2u] = lo | (hi << 16u);
    }
}

// Offset (from the tensor's first element; the output is dense with the same layout) of
// element j of row `row`. Contiguous rows: row * len + j. Channels-last (VARIANT bit 8): the
// row is (image n, group g) of a dense [N, HW, C] array and j runs over (pixel, channel of
// the group), channels fastest.
fn norm_at(row: u32, j: u32) -> u32 {
    if ((VARIANT & 8u) == 0u) {
        return row * p(32u) + j;
    }
    let groups = max(p(34u), 1u);
    let cpg = max(p(35u), 1u);
    let c_all = groups * cpg;
    return (row / groups) * c_all * p(33u) + (j / cpg) * c_all + (row % groups) * cpg + j % cpg;
}

// The channel of element j of row `row` (indexes the weight and bias).
fn norm_channel(row: u32, j: u32) -> u32 {
    let cpg = max(p(35u), 1u);
    let first = (row % max(p(34u), 1u)) * cpg;
    if ((VARIANT & 8u) == 0u) {
        return first + j / max(p(33u), 1u);
    }
    return first + j % cpg;
}

// The normalised element at storage index i of channel c, stats = (x0, shifted mean, rstd):
// ((x - x0) - shifted mean) * rstd, then weight, bias and SiLU.
fn norm_value(i: u32, c: u32, stats: vec3<f32>) -> f32 {
    var y = ((load0(i) - stats.x) - stats.y) * stats.z;
    if ((VARIANT & 1u) != 0u) {
        y = y * load1(p(37u) + c);
    }
    if ((VARIANT & 2u) != 0u) {
        y = y + load2(p(38u) + c);
    }
    if ((VARIANT & 4u) != 0u) {
        y = y / (1.0 + exp(-y));
    }
    return y;
}
