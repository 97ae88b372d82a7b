// matmul_vec4.wgsl: the large and medium tile configs with their tiles held as vec4 in workgroup
// memory (composed as common.wgsl + matmul.wgsl + matmul_tiled.wgsl + this file: it shares the
// prelude's loads and fused epilogue and matmul_tiled's finish_row8 / finish_row4).
//
// Why vec4: read one f32 at a time, the register operands cost 16 workgroup loads per 64 FMAs
// (large) or 8 per 16 (medium), and a [k][row] staging of k-contiguous A stores with an 8-way
// bank conflict (1.6-2x slower on lavapipe, 1.4-9.4x on an H100). Here every operand read is
// one vec4 (a group of 4 rows of A, or 4 virtual columns of B): mm_large4 reads 4 vec4 per 64
// FMAs, mm_medium4 2 per 16; each invocation stages one vec4 per operand per K step. The next K step is fetched into registers before this step's products and written to
// the other tile buffer after them (double-buffered, one barrier per K step).
//
// Slots: buffer `buf` (2), k (TK), group g (G groups, TK * G = 256 vec4 per buffer and operand):
// buf*256 + k*G + (g ^ (k & 7)). The xor spreads the 8 slots a quarter-warp writes at one g and
// 8 consecutive k over distinct banks (without it all 8 share one 16-byte bank group); the
// reads, 8 consecutive groups at one k, stay conflict-free since xor with k & 7 permutes every
// aligned run of 8 groups.
// Group g of A: tile rows 4g..4g+3. Group g of B: virtual columns c, c+1, c+32, c+33 with
// c = 64 (g / 16) + 2 (g % 16), the column layout matmul_tiled.wgsl's finish_row8 / finish_row4
// expect (GEGLU: h in the first pair, its gate in the second).
// Invocation (tx, ty): mm_large4 rows 4ty+i and 64+4ty+i (i < 4), B groups tx and 16+tx (an
// 8x8 block); mm_medium4 rows 4ty+i, B group tx (a 4x4 block).
// Staging: along the operand's contiguous axis, so that neighbouring invocations read
// neighbouring addresses: k fastest (invocation -> k = lid % TK, g = lid / TK) for k-contiguous
// operands, groups fastest otherwise (k = lid / G, g = lid % G).

var<workgroup> va: array<vec4<f32>, 512>;
var<workgroup> vb: array<vec4<f32>, 512>;

fn v4_slot(buf: u32, k: u32, g: u32, groups: u32) -> u32 {
    return buf * 256u + k * groups + (g ^ (k & 7u));
}

// Staging position (k, g) of invocation `lid`; `by_k`: the operand is contiguous along k.
fn v4_pos(lid: u32, tk: u32, groups: u32, by_k: bool) -> vec2<u32> {
    return select(vec2<u32>(lid / groups, lid % groups), vec2<u32>(lid % tk, lid / tk), by_k);
}

// The 4 A values of staging position `pos` in the K step at k0; `full`: no bounds checks.
fn v4_fetch_a(ab: u32, row0: u32, k0: u32, pos: vec2<u32>, full: bool) -> vec4<f32> {
    let rs = p(35u);
    let k = k0 + pos.x;
    let r = row0 + 4u * pos.y;
    let at = ab + r * rs + k * p(36u);
    if (full) {
        return vec4<f32>(load0(at), load0(at + rs), load0(at + 2u * rs), load0(at + 3u * rs));
    }
    var v = vec4<f32>(0.0);
    if (k < dim_k()) {
        let m = dim_m();
        if (r < m) { v.x = load0(at); }
        if (r + 1u < m) { v.y = load0(at + rs); }
        if (r + 2u < m) { v.z = load0(at + 2u * rs); }
        if (r + 3u < m) { v.w = load0(at + 3u * rs); }
    }
    return v;
}

// The 4 B values of staging position `pos` (column tile `tile`, `tn` virtual columns).
fn v4_fetch_b(bb: u32, tile: u32, tn: u32, k0: u32, pos: vec2<u32>, full: bool) -> vec4<f32> {
    let k = k0 + pos.x;
    let c = 64u * (pos.y / 16u) + 2u * (pos.y % 16u);
    let at = bb + k * p(37u);
    let cs = p(38u);
    let q0 = prod_col(tile, c, tn);
    let q2 = prod_col(tile, c + 32u, tn);
    if (full) {
        return vec4<f32>(load1(at + q0.x * cs), load1(at + (q0.x + 1u) * cs),
                         load1(at + q2.x * cs), load1(at + (q2.x + 1u) * cs));
    }
    var v = vec4<f32>(0.0);
    if (k < dim_k()) {
        let q1 = prod_col(tile, c + 1u, tn);
        let q3 = prod_col(tile, c + 33u, tn);
        if (q0.y != 0u) { v.x = load1(at + q0.x * cs); }
        if (q1.y != 0u) { v.y = load1(at + q1.x * cs); }
        if (q2.y != 0u) { v.z = load1(at + q2.x * cs); }
        if (q3.y != 0u) { v.w = load1(at + q3.x * cs); }
    }
    return v;
}

@compute @workgroup_size(16, 16)
fn mm_large4(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) l: vec3<u32>,
             @builtin(local_invocation_index) lid: u32) {
    // Split K (matmul.wgsl's header): this workgroup's batch, output batch and K range.
    let sk = split_k(wid.z);
    let b = sk.x;
    let ab = a_base(b);
    let bb = b_base(b);
    let row0 = wid.y * 128u;
    let rows_full = row0 + 128u <= dim_m();
    let cf = cols_full(wid.x, 128u);
    let t0 = sk.z / 8u;
    let nt = (sk.w + 7u) / 8u;
    let pa = v4_pos(lid, 8u, 32u, p(36u) == 1u);
    let pb = v4_pos(lid, 8u, 32u, p(37u) == 1u && p(38u) != 1u);
    var na = v4_fetch_a(ab, row0, t0 * 8u, pa, full_step(t0 * 8u, 8u, rows_full, true));
    var nb = v4_fetch_b(bb, wid.x, 128u, t0 * 8u, pb, full_step(t0 * 8u, 8u, true, cf));
    va[v4_slot(t0 & 1u, pa.x, pa.y, 32u)] = na;
    vb[v4_slot(t0 & 1u, pb.x, pb.y, 32u)] = nb;
    workgroupBarrier();
    var acc = block8_zero();
    for (var t = t0; t < nt; t = t + 1u) {
        let cur = t & 1u;
        let more = t + 1u < nt;
        if (more) {
            let k1 = (t + 1u) * 8u;
            na = v4_fetch_a(ab, row0, k1, pa, full_step(k1, 8u, rows_full, true));
            nb = v4_fetch_b(bb, wid.x, 128u, k1, pb, full_step(k1, 8u, true, cf));
        }
        for (var kk = 0u; kk < 8u; kk = kk + 1u) {
            let a_lo = va[v4_slot(cur, kk, l.y, 32u)];
            let a_hi = va[v4_slot(cur, kk, l.y + 16u, 32u)];
            let b_lo = vb[v4_slot(cur, kk, l.x, 32u)];
            let b_hi = vb[v4_slot(cur, kk, l.x + 16u, 32u)];
            acc = block8_fma(acc, a_lo, a_hi, b_lo, b_hi);
        }
        if (more) {
            va[v4_slot(1u - cur, pa.x, pa.y, 32u)] = na;
            vb[v4_slot(1u - cur, pb.x, pb.y, 32u)] = nb;
        }
        workgroupBarrier();
    }
    let r = row0 + 4u * l.y;
    finish_row8(sk.y, r, wid.x, l.x, acc.c0l, acc.c0h);
    finish_row8(sk.y, r + 1u, wid.x, l.x, acc.c1l, acc.c1h);
    finish_row8(sk.y, r + 2u, wid.x, l.x, acc.c2l, acc.c2h);
    finish_row8(sk.y, r + 3u, wid.x, l.x, acc.c3l, acc.c3h);
    finish_row8(sk.y, r + 64u, wid.x, l.x, acc.c4l, acc.c4h);
    finish_row8(sk.y, r + 65u, wid.x, l.x, acc.c5l, acc.c5h);
    finish_row8(sk.y, r + 66u, wid.x, l.x, acc.c6l, acc.c6h);
    finish_row8(sk.y, r + 67u, wid.x, l.x, acc.c7l, acc.c7h);
}

@compute @workgroup_size(16, 16)
fn mm_medium4(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) l: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    // Split K (matmul.wgsl's header): this workgroup's batch, output batch and K range.
    let sk = split_k(wid.z);
    let b = sk.x;
    let ab = a_base(b);
    let bb = b_base(b);
    let row0 = wid.y * 64u;
    let rows_full = row0 + 64u <= dim_m();
    let cf = cols_full(wid.x, 64u);
    let t0 = sk.z / 16u;
    let nt = (sk.w + 15u) / 16u;
    let pa = v4_pos(lid, 16u, 16u, p(36u) == 1u);
    let pb = v4_pos(lid, 16u, 16u, p(37u) == 1u && p(38u) != 1u);
    var na = v4_fetch_a(ab, row0, t0 * 16u, pa, full_step(t0 * 16u, 16u, rows_full, true));
    var nb = v4_fetch_b(bb, wid.x, 64u, t0 * 16u, pb, full_step(t0 * 16u, 16u, true, cf));
    va[v4_slot(t0 & 1u, pa.x, pa.y, 16u)] = na;
    vb[v4_slot(t0 & 1u, pb.x, pb.y, 16u)] = nb;
    workgroupBarrier();
    var c0 = vec4<f32>(0.0);
    var c1 = vec4<f32>(0.0);
    var c2 = vec4<f32>(0.0);
    var c3 = vec4<f32>(0.0);
    for (var t = t0; t < nt; t = t + 1u) {
        let cur = t & 1u;
        let more = t + 1u < nt;
        if (more) {
            let k1 = (t + 1u) * 16u;
            na = v4_fetch_a(ab, row0, k1, pa, full_step(k1, 16u, rows_full, true));
            nb = v4_fetch_b(bb, wid.x, 64u, k1, pb, full_step(k1, 16u, true, cf));
        }
        for (var kk = 0u; kk < 16u; kk = kk + 1u) {
            let a = va[v4_slot(cur, kk, l.y, 16u)];
            let bv = vb[v4_slot(cur, kk, l.x, 16u)];
            c0 = fma(vec4<f32>(a.x), bv, c0);
            c1 = fma(vec4<f32>(a.y), bv, c1);
            c2 = fma(vec4<f32>(a.z), bv, c2);
            c3 = fma(vec4<f32>(a.w), bv, c3);
        }
        if (more) {
            va[v4_slot(1u - cur, pa.x, pa.y, 16u)] = na;
            vb[v4_slot(1u - cur, pb.x, pb.y, 16u)] = nb;
        }
        workgroupBarrier();
    }
    let r = row0 + 4u * l.y;
    finish_row4(sk.y, r, wid.x, l.x, 32u, c0);
    finish_row4(sk.y, r + 1u, wid.x, l.x, 32u, c1);
    finish_row4(sk.y, r + 2u, wid.x, l.x, 32u, c2);
    finish_row4(sk.y, r + 3u, wid.x, l.x, 32u, c3);
}
