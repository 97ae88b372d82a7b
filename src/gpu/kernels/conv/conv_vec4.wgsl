// conv_vec4.wgsl: the large (128x128, TK 8, 8x8 block) and medium (64x64, TK 16, 4x4 block)
// convolution tiles with their tiles held as vec4 in workgroup memory (composed as common.wgsl +
// conv.wgsl + this file: same params, flags, gathers and stores).
//
// Why vec4: read one f32 at a time, the register operands cost 16 workgroup loads per 64 FMAs
// (large) or 8 per 16 (medium); here each read is one vec4 (4 loads per 64 FMAs, 2 per 16), and
// each invocation stages one vec4 per operand per K step, fetched into registers before this
// step's products and written to the other tile buffer after them.
// Groups: group g holds tile rows (A) or columns (B) c, c+1, c+32, c+33 with
// c = 64 (g / 16) + 2 (g % 16): the rows and columns of invocation (lr, lc)'s 2x2 micro-blocks,
// so each 16-bit store writes a whole word (conv.wgsl's store_block / store_band). Slots:
// buf*256 + k*G + (g ^ (k & 7)) (G groups, TK*G = 256), which keeps the staging stores of a
// quarter-warp (one group, 8 k, or one k, 8 groups) and the reads (8 groups at one k) on
// distinct banks. Staging positions run along the operand's contiguous axis: k fastest for
// channels-last inputs (flag bit 2) and C-contiguous weights (bit 3), groups fastest otherwise.

var<workgroup> cva: array<vec4<f32>, 512>;
var<workgroup> cvb: array<vec4<f32>, 512>;

fn cv_slot(buf: u32, k: u32, g: u32, groups: u32) -> u32 {
    return buf * 256u + k * groups + (g ^ (k & 7u));
}

fn cv_first(g: u32) -> u32 {
    return 64u * (g / 16u) + 2u * (g % 16u);
}

// Staging position (k, g) of invocation `lid`; `by_k`: the operand is contiguous along k.
fn cv_pos(lid: u32, tk: u32, groups: u32, by_k: bool) -> vec2<u32> {
    return select(vec2<u32>(lid / groups, lid % groups), vec2<u32>(lid % tk, lid / tk), by_k);
}

// The input rows of the A group an invocation stages (fixed for the whole K loop).
fn cv_rows(pos: vec2<u32>, row0: u32, g: u32) -> array<RowIn, 4> {
    let r = row0 + cv_first(pos.y);
    return array<RowIn, 4>(row_in(r, g), row_in(r + 1u, g), row_in(r + 32u, g),
                           row_in(r + 33u, g));
}

fn cv_fetch_a(rows: array<RowIn, 4>, ks: vec3<u32>, pos: vec2<u32>) -> vec4<f32> {
    let ci = ks.z + pos.x;
    return vec4<f32>(a_val(rows[0], ks.x, ks.y, ci), a_val(rows[1], ks.x, ks.y, ci),
                     a_val(rows[2], ks.x, ks.y, ci), a_val(rows[3], ks.x, ks.y, ci));
}

fn cv_weight(tap_off: u32, g: u32, c: u32, ci: u32) -> f32 {
    if (c < og() && ci < cg()) {
        return load1(tap_off + (g * og() + c) * p(9u) + ci * p(10u));
    }
    return 0.0;
}

fn cv_fetch_b(g: u32, col0: u32, ks: vec3<u32>, pos: vec2<u32>) -> vec4<f32> {
    let tap_off = p(13u) + ks.x * p(11u) + ks.y * p(12u);
    let ci = ks.z + pos.x;
    let c = col0 + cv_first(pos.y);
    return vec4<f32>(cv_weight(tap_off, g, c, ci), cv_weight(tap_off, g, c + 1u, ci),
                     cv_weight(tap_off, g, c + 32u, ci), cv_weight(tap_off, g, c + 33u, ci));
}

@compute @workgroup_size(16, 16)
fn conv_large4(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) l: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
    let g = wid.z + p(41u);
    let lr = select(l.y, l.x, conv_flag(32u));
    let lc = select(l.x, l.y, conv_flag(32u));
    let row0 = (wid.y + p(40u)) * 128u;
    let col0 = wid.x * 128u;
    let pa = cv_pos(lid, 8u, 32u, conv_flag(4u));
    let pb = cv_pos(lid, 8u, 32u, conv_flag(8u));
    let rows = cv_rows(pa, row0, g);
    let nt = k_steps(8u);
    var na = vec4<f32>(0.0);
    var nb = vec4<f32>(0.0);
    if (nt > 0u) {
        let ks = k_step(0u, 8u);
        na = cv_fetch_a(rows, ks, pa);
        nb = cv_fetch_b(g, col0, ks, pb);
    }
    cva[cv_slot(0u, pa.x, pa.y, 32u)] = na;
    cvb[cv_slot(0u, pb.x, pb.y, 32u)] = nb;
    workgroupBarrier();
    var acc = block8_zero();
    for (var t = 0u; t < nt; t = t + 1u) {
        let cur = t & 1u;
        let more = t + 1u < nt;
        if (more) {
            let ks = k_step(t + 1u, 8u);
            na = cv_fetch_a(rows, ks, pa);
            nb = cv_fetch_b(g, col0, ks, pb);
        }
        for (var kk = 0u; kk < 8u; kk = kk + 1u) {
            let a_lo = cva[cv_slot(cur, kk, lr, 32u)];
            let a_hi = cva[cv_slot(cur, kk, lr + 16u, 32u)];
            let blo = cvb[cv_slot(cur, kk, lc, 32u)];
            let bhi = cvb[cv_slot(cur, kk, lc + 16u, 32u)];
            acc = block8_fma(acc, a_lo, a_hi, blo, bhi);
        }
        if (more) {
            cva[cv_slot(1u - cur, pa.x, pa.y, 32u)] = na;
            cvb[cv_slot(1u - cur, pb.x, pb.y, 32u)] = nb;
        }
        workgroupBarrier();
    }
    let c = col0 + 2u * lc;
    let r = row0 + 2u * lr;
    store_band(g, r, c, acc.c0l, acc.c1l);
    store_band(g, r, c + 64u, acc.c0h, acc.c1h);
    store_band(g, r + 32u, c, acc.c2l, acc.c3l);
    store_band(g, r + 32u, c + 64u, acc.c2h, acc.c3h);
    store_band(g, r + 64u, c, acc.c4l, acc.c5l);
    store_band(g, r + 64u, c + 64u, acc.c4h, acc.c5h);
    store_band(g, r + 96u, c, acc.c6l, acc.c7l);
    store_band(g, r + 96u, c + 64u, acc.c6h, acc.c7h);
}

@compute @workgroup_size(16, 16)
fn conv_medium4(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) l: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
    let g = wid.z + p(41u);
    let lr = select(l.y, l.x, conv_flag(32u));
    let lc = select(l.x, l.y, conv_flag(32u));
    let row0 = (wid.y + p(40u)) * 64u;
    let col0 = wid.x * 64u;
    let pa = cv_pos(lid, 16u, 16u, conv_flag(4u));
    let pb = cv_pos(lid, 16u, 16u, conv_flag(8u));
    let rows = cv_rows(pa, row0, g);
    let nt = k_steps(16u);
    var na = vec4<f32>(0.0);
    var nb = vec4<f32>(0.0);
    if (nt > 0u) {
        let ks = k_step(0u, 16u);
        na = cv_fetch_a(rows, ks, pa);
        nb = cv_fetch_b(g, col0, ks, pb);
    }
    cva[cv_slot(0u, pa.x, pa.y, 16u)] = na;
    cvb[cv_slot(0u, pb.x, pb.y, 16u)] = nb;
    workgroupBarrier();
    var c0 = vec4<f32>(0.0);
    var c1 = vec4<f32>(0.0);
    var c2 = vec4<f32>(0.0);
    var c3 = vec4<f32>(0.0);
    for (var t = 0u; t < nt; t = t + 1u) {
        let cur = t & 1u;
        let more = t + 1u < nt;
        if (more) {
            let ks = k_step(t + 1u, 16u);
            na = cv_fetch_a(rows, ks, pa);
            nb = cv_fetch_b(g, col0, ks, pb);
        }
        for (var kk = 0u; kk < 16u; kk = kk + 1u) {
            let a = cva[cv_slot(cur, kk, lr, 16u)];
            let bv = cvb[cv_slot(cur, kk, lc, 16u)];
            c0 = fma(vec4<f32>(a.x), bv, c0);
            c1 = fma(vec4<f32>(a.y), bv, c1);
            c2 = fma(vec4<f32>(a.z), bv, c2);
            c3 = fma(vec4<f32>(a.w), bv, c3);
        }
        if (more) {
            cva[cv_slot(1u - cur, pa.x, pa.y, 16u)] = na;
            cvb[cv_slot(1u - cur, pb.x, pb.y, 16u)] = nb;
        }
        workgroupBarrier();
    }
    store_band(g, row0 + 2u * lr, col0 + 2u * lc, c0, c1);
    store_band(g, row0 + 2u * lr + 32u, col0 + 2u * lc, c2, c3);
}
