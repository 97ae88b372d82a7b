// attention_vec4.wgsl: the fused attention kernel (composed as common.wgsl + attention.wgsl +
// this file: attention.wgsl gives the bindings, params, masks and score helpers). One workgroup
// of 256 invocations takes BQ = 32 query rows of one head by blocks of BK = 32 keys, with its
// workgroup tiles held as vec4.
//
// Why vec4: read one f32 at a time, the tiles cost 5 workgroup loads per 4 score FMAs (a query
// element and four keys 8 apart), 32 loads per lane for each row maximum, and 1 + 4 loads per 4
// P.V FMAs (strided value columns, each bounds-checked). Here invocation (r, tx) owns keys
// 4tx..4tx+3 of the block and output columns 4(tx + 8g)..+3 (g < 5), so every read is a vec4:
// per 4 head dims one query vec4 and four key vec4 (16 FMAs), per row maximum 8 vec4, per 4
// keys of P.V one probability vec4 and one value vec4 per column group.
//
// Workgroup memory (14 KiB, inside WebGPU's 16 KiB minimum): at4_s holds the Q chunk [BQ][DC/4] (vec4 of 4 head
// dims) then the K chunk transposed, [DC][BK/4] (vec4 of 4 keys at one head dim, slot
// QN + dd*8 + (kg ^ (dd & 7))), or a V chunk [vc][ceil(Dv/4)] (vec4 of 4 value columns); at4_p
// holds the block's scores, then probabilities, [BQ][BK/4] at slot r*8 + (kg ^ (r & 7)). The
// xors keep every quarter-warp's 16-byte accesses on distinct banks: staging stores of 8 head
// dims of one key group, and reads of one slot index by 4 rows at once.

var<workgroup> at4_s: array<vec4<f32>, 640>;
var<workgroup> at4_p: array<vec4<f32>, 256>;

// Head dims per vec4 row of the Q chunk (DC / 4), and the Q chunk's size in vec4.
const DC4: u32 = 10u;
const QN: u32 = 320u;

fn at4_k_slot(dd: u32, kg: u32) -> u32 {
    return QN + dd * 8u + (kg ^ (dd & 7u));
}

fn at4_p_slot(r: u32, kg: u32) -> u32 {
    return r * 8u + (kg ^ (r & 7u));
}

// Staged value columns 4(tx + 8g)..+3 of key row kk (zero past Dv).
fn at4_v(kk: u32, tx: u32, g: u32, dv4: u32) -> vec4<f32> {
    let c4 = tx + 8u * g;
    if (c4 < dv4) {
        return at4_s[kk * dv4 + c4];
    }
    return vec4<f32>(0.0);
}

// The running output of one row: columns 4(tx + 8g)..+3 in o_g (a struct of vectors, not an
// array: see the register note in attention.wgsl).
struct Acc5 {
    o0: vec4<f32>,
    o1: vec4<f32>,
    o2: vec4<f32>,
    o3: vec4<f32>,
    o4: vec4<f32>,
}

// acc + pr * (staged value row kk); groups past `groups` (a pipeline constant) are skipped.
fn at4_pv(acc: Acc5, pr: f32, kk: u32, tx: u32, groups: u32, dv4: u32) -> Acc5 {
    var a = acc;
    let pv = vec4<f32>(pr);
    a.o0 = fma(pv, at4_v(kk, tx, 0u, dv4), a.o0);
    a.o1 = fma(pv, at4_v(kk, tx, 1u, dv4), a.o1);
    if (groups > 2u) {
        a.o2 = fma(pv, at4_v(kk, tx, 2u, dv4), a.o2);
    }
    if (groups > 3u) {
        a.o3 = fma(pv, at4_v(kk, tx, 3u, dv4), a.o3);
    }
    if (groups > 4u) {
        a.o4 = fma(pv, at4_v(kk, tx, 4u, dv4), a.o4);
    }
    return a;
}

// Writes output columns 4(tx + 8g)..+3 of one row that are inside Dv.
fn at4_store(out: u32, tx: u32, g: u32, dv: u32, v: vec4<f32>) {
    let c = 4u * (tx + 8u * g);
    if (c < dv) { dst[out + c] = bitcast<u32>(v.x); }
    if (c + 1u < dv) { dst[out + c + 1u] = bitcast<u32>(v.y); }
    if (c + 2u < dv) { dst[out + c + 2u] = bitcast<u32>(v.z); }
    if (c + 3u < dv) { dst[out + c + 3u] = bitcast<u32>(v.w); }
}

// Stages the Q chunk of head dims d0.. and the K chunk of keys k0.. (transposed).
fn at4_stage_qk(lid: u32, in_range: bool, qb: u32, kb: u32, q0: u32, k0: u32, d0: u32) {
    let lq = p(32u);
    let lk = p(33u);
    let d = p(34u);
    for (var e = lid; e < QN; e = e + 256u) {
        let rr = e / DC4;
        let dd = d0 + 4u * (e % DC4);
        let cs = p(37u);
        let at = qb + (q0 + rr) * p(36u) + dd * cs;
        var x = vec4<f32>(0.0);
        if (in_range && q0 + rr < lq) {
            if (dd < d) { x.x = load0(at); }
            if (dd + 1u < d) { x.y = load0(at + cs); }
            if (dd + 2u < d) { x.z = load0(at + 2u * cs); }
            if (dd + 3u < d) { x.w = load0(at + 3u * cs); }
        }
        at4_s[e] = x;
    }
    for (var e = lid; e < QN; e = e + 256u) {
        let kg = e / DC;
        let dd = e % DC;
        let key = k0 + 4u * kg;
        let rs = p(38u);
        let at = kb + key * rs + (d0 + dd) * p(39u);
        var x = vec4<f32>(0.0);
        if (d0 + dd < d) {
            if (key < lk) { x.x = load1(at); }
            if (key + 1u < lk) { x.y = load1(at + rs); }
            if (key + 2u < lk) { x.z = load1(at + 2u * rs); }
            if (key + 3u < lk) { x.w = load1(at + 3u * rs); }
        }
        at4_s[at4_k_slot(dd, kg)] = x;
    }
}

// Stages vc keys of V from key k0 + v0 (keys past Lk or the block are zero).
fn at4_stage_v(lid: u32, vb: u32, k0: u32, v0: u32, vc: u32, dv4: u32) {
    let lk = p(33u);
    let dv = p(35u);
    let cs = p(41u);
    for (var e = lid; e < vc * dv4; e = e + 256u) {
        let kk = e / dv4;
        let c = 4u * (e % dv4);
        let j = k0 + v0 + kk;
        let at = vb + j * p(40u) + c * cs;
        var x = vec4<f32>(0.0);
        if (j < lk && v0 + kk < BK) {
            if (c < dv) { x.x = load_v(at); }
            if (c + 1u < dv) { x.y = load_v(at + cs); }
            if (c + 2u < dv) { x.z = load_v(at + 2u * cs); }
            if (c + 3u < dv) { x.w = load_v(at + 3u * cs); }
        }
        at4_s[e] = x;
    }
}

@compute @workgroup_size(256)
fn attention4(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    let g = wid.y * nwg.x + wid.x;
    // Uniform per workgroup: a tail workgroup still takes part in every barrier.
    let in_range = g < p(0u);
    let gg = select(0u, g, in_range);
    let qtiles = max(p(47u), 1u);
    let bh = gg / qtiles;
    let q0 = (gg % qtiles) * BQ;
    let lq = p(32u);
    let lk = p(33u);
    let d = p(34u);
    let dv = p(35u);
    let scale = pf(30u);
    let qb = strided(bh, 12u) + p(28u);
    let kb = strided(bh, 20u) + p(29u);
    let vb = strided(bh, 48u) + p(42u);
    let mb = strided(bh, 54u) + p(46u);
    let r = lid / 8u;
    let tx = lid % 8u;
    let row = q0 + r;
    let row_ok = in_range && row < lq;
    // Column groups of 32 (VARIANT = ceil(Dv / 8) rounded up to 5, 10, 16 or 20, a pipeline
    // constant, so the unused groups' branches fold away).
    let groups = (min(VARIANT, OC) * 8u + 31u) / 32u;
    let dv4 = (dv + 3u) / 4u;
    // Keys per staged V chunk: a multiple of 4, as many as fit (16 at Dv = 160).
    let vc = min(BK, (640u / max(dv4, 1u)) / 4u * 4u);
    var m = NEG;
    var l = 0.0;
    let zero = vec4<f32>(0.0);
    var acc = Acc5(zero, zero, zero, zero, zero);
    for (var k0 = 0u; k0 < lk; k0 = k0 + BK) {
        // Scores of keys k0 + 4tx + i in s.
        var s = vec4<f32>(0.0);
        for (var d0 = 0u; d0 < d; d0 = d0 + DC) {
            // Everyone is done reading at4_s (the last scores or P.V step) before restaging.
            if (k0 > 0u || d0 > 0u) {
                workgroupBarrier();
            }
            at4_stage_qk(lid, in_range, qb, kb, q0, k0, d0);
            workgroupBarrier();
            let dn = min(DC, d - d0);
            for (var dd = 0u; dd < dn; dd = dd + 4u) {
                // Head dims past dn are zero in both chunks (DC is a multiple of 4).
                let q4 = at4_s[r * DC4 + dd / 4u];
                s = fma(vec4<f32>(q4.x), at4_s[at4_k_slot(dd, tx)], s);
                s = fma(vec4<f32>(q4.y), at4_s[at4_k_slot(dd + 1u, tx)], s);
                s = fma(vec4<f32>(q4.z), at4_s[at4_k_slot(dd + 2u, tx)], s);
                s = fma(vec4<f32>(q4.w), at4_s[at4_k_slot(dd + 3u, tx)], s);
            }
        }
        // Scale, mask, and the block's row maximum.
        let j0 = k0 + 4u * tx;
        s = vec4<f32>(masked_score(s.x, j0, row, row_ok, lk, mb, scale),
                      masked_score(s.y, j0 + 1u, row, row_ok, lk, mb, scale),
                      masked_score(s.z, j0 + 2u, row, row_ok, lk, mb, scale),
                      masked_score(s.w, j0 + 3u, row, row_ok, lk, mb, scale));
        at4_p[at4_p_slot(r, tx)] = s;
        workgroupBarrier();
        var bm = NEG;
        for (var j = 0u; j < 8u; j = j + 1u) {
            let x = at4_p[at4_p_slot(r, j)];
            bm = max(max(max(bm, x.x), max(x.y, x.z)), x.w);
        }
        workgroupBarrier();
        let m_new = max(m, bm);
        var alpha = 1.0;
        if (m > NEG) {
            alpha = exp(m - m_new);
        }
        at4_p[at4_p_slot(r, tx)] = vec4<f32>(prob(s.x, m_new), prob(s.y, m_new),
                                             prob(s.z, m_new), prob(s.w, m_new));
        m = m_new;
        acc = Acc5(acc.o0 * alpha, acc.o1 * alpha, acc.o2 * alpha, acc.o3 * alpha,
                   acc.o4 * alpha);
        // o += P . V with V staged vc keys at a time; the row sum of P comes along.
        var bs = 0.0;
        for (var v0 = 0u; v0 < BK; v0 = v0 + vc) {
            if (v0 > 0u) {
                workgroupBarrier();
            }
            at4_stage_v(lid, vb, k0, v0, vc, dv4);
            // Also publishes P (written above) to every invocation.
            workgroupBarrier();
            let nk = min(vc, BK - v0);
            for (var kk = 0u; kk < nk; kk = kk + 4u) {
                let p4 = at4_p[at4_p_slot(r, (v0 + kk) / 4u)];
                // Keys in order (p4.x is key kk).
                bs = bs + p4.x;
                acc = at4_pv(acc, p4.x, kk, tx, groups, dv4);
                bs = bs + p4.y;
                acc = at4_pv(acc, p4.y, kk + 1u, tx, groups, dv4);
                bs = bs + p4.z;
                acc = at4_pv(acc, p4.z, kk + 2u, tx, groups, dv4);
                bs = bs + p4.w;
                acc = at4_pv(acc, p4.w, kk + 3u, tx, groups, dv4);
            }
        }
        l = l * alpha + bs;
    }
    if (row_ok) {
        var inv = 0.0;
        if (m > NEG && l > 0.0) {
            inv = 1.0 / l;
        }
        let out = out_row(bh, row);
        at4_store(out, tx, 0u, dv, acc.o0 * inv);
        at4_store(out, tx, 1u, dv, acc.o1 * inv);
        at4_store(out, tx, 2u, dv, acc.o2 * inv);
        at4_store(out, tx, 3u, dv, acc.o3 * inv);
        at4_store(out, tx, 4u, dv, acc.o4 * inv);
    }
}
