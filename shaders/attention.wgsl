// attention.wgsl: fused scaled dot-product attention (flash-attention style). One workgroup of
// 256 invocations computes BQ = 32 query rows of one head: for each block of BK = 32 keys it
// forms the 32x32 scores (q and k staged through workgroup memory in head-dim chunks of DC = 40),
// applies scale and mask, updates the running row max / sum (online softmax, f32) and adds
// P.V to the running output held in registers; the Lq x Lk score matrix never exists.
// Invocation (r, tx) = (lid / 8, lid % 8) owns query row r of the tile, score columns
// tx + 8i (i < 4) and output columns tx + 8j (j < VARIANT <= OC, so Dv <= 160).
//
// Bindings: 1 dst (f32 words; rows of Dv placed by out_row), 2 q (src0), 3 k (src1), 4 v, 5 mask
// (bound to q and never read when absent). q, k, v have dtype DT_IN; the mask is u8 (boolean,
// nonzero keeps) or DT_IN (additive; values below -2.35e38, e.g. -inf or f32::MIN, drop the
// key), selected by params[43].
// params: [0] workgroups (heads * q tiles), [1] rank of the (jointly coalesced) head dims,
// [4..12) head dims, [12..) q / [20..) k head strides, [28] q offset, [29] k offset,
// [30] scale (f32), [32] Lq, [33] Lk, [34] D, [35] Dv, [36] q row stride, [37] q col stride,
// [38] k row stride, [39] k col stride, [40] v row stride, [41] v col stride, [42] v offset,
// [43] mask kind (0 none, 1 u8 boolean, 2 additive), [44] mask row stride, [45] mask col
// stride, [46] mask offset, [47] q tiles per head, [48..54) v head strides, [54..60) mask head
// strides, [60..64) output row placement (out_row in common.wgsl).
// Rows whose keys are all masked out (or Lk == 0) are written as 0, as PyTorch does.
// Workgroup memory: (2560 + 1024) f32 = 14 KiB, inside WebGPU's 16 KiB minimum.

@group(0) @binding(4) var<storage, read> src_v: array<u32>;
@group(0) @binding(5) var<storage, read> src_mask: array<u32>;

const BQ: u32 = 32u;
const BK: u32 = 32u;
const DC: u32 = 40u;
const OC: u32 = 20u;
// "Masked out": below every finite score the kernel can form, and finite (no inf arithmetic).
const NEG: f32 = -3.0e38;
const DROP: f32 = -2.35e38;

// q and k chunks ([BQ][DC] then [BK][DC]), or a v chunk ([vc][Dv]).
var<workgroup> attn_s: array<f32, 2560>;
// Scores, then probabilities, of the tile: [BQ][BK].
var<workgroup> attn_p: array<f32, 1024>;

fn load_v(i: u32) -> f32 {
    let e = epw(DT_IN);
    return bits_to_f32(lane_bits(src_v[i / e], i % e, DT_IN), DT_IN);
}

// Mask element i: x = 1 to keep the key (0 drops it), y = the additive term.
fn mask_at(i: u32) -> vec2<f32> {
    if (p(43u) == 1u) {
        let keep = lane_bits(src_mask[i / 4u], i % 4u, 4u) != 0u;
        return vec2<f32>(select(0.0, 1.0, keep), 0.0);
    }
    let e = epw(DT_IN);
    let a = bits_to_f32(lane_bits(src_mask[i / e], i % e, DT_IN), DT_IN);
    return vec2<f32>(select(0.0, 1.0, a >= DROP), a);
}

// Register blocks are vectors indexed by constants only: a per-invocation array indexed in a
// loop is demoted to local memory by some drivers (NVIDIA's Vulkan compiler does not unroll
// naga's loops), which made this kernel ~30x slower than its arithmetic on an H100.

// Four staged v values of key row `kk` for output columns tx + 8 (4 g + i), 0 past Dv.
fn v_cols(kk: u32, tx: u32, g: u32, dv: u32) -> vec4<f32> {
    var x = vec4<f32>(0.0);
    let c = tx + 32u * g;
    let base = kk * dv;
    if (c < dv) { x.x = attn_s[base + c]; }
    if (c + 8u < dv) { x.y = attn_s[base + c + 8u]; }
    if (c + 16u < dv) { x.z = attn_s[base + c + 16u]; }
    if (c + 24u < dv) { x.w = attn_s[base + c + 24u]; }
    return x;
}

// Writes output columns tx + 8 (4 g + i) of one row that are inside Dv.
fn store_cols(out: u32, tx: u32, g: u32, dv: u32, v: vec4<f32>) {
    let c = tx + 32u * g;
    if (c < dv) { dst[out + c] = bitcast<u32>(v.x); }
    if (c + 8u < dv) { dst[out + c + 8u] = bitcast<u32>(v.y); }
    if (c + 16u < dv) { dst[out + c + 16u] = bitcast<u32>(v.z); }
    if (c + 24u < dv) { dst[out + c + 24u] = bitcast<u32>(v.w); }
}

// Scaled and masked score of key j (NEG when the key is dropped or out of range).
fn masked_score(x: f32, j: u32, row: u32, row_ok: bool, lk: u32, mb: u32, scale: f32) -> f32 {
    var keep = row_ok && j < lk;
    var add = 0.0;
    if (keep && p(43u) != 0u) {
        let mk = mask_at(mb + row * p(44u) + j * p(45u));
        keep = mk.x != 0.0;
        add = mk.y;
    }
    return select(NEG, x * scale + add, keep);
}

fn prob(x: f32, m_new: f32) -> f32 {
    return select(0.0, exp(x - m_new), x > NEG);
}

@compute @workgroup_size(256)
fn attention(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
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
    // Output columns per lane (VARIANT = ceil(Dv / 8) rounded up to 5, 10, 16 or 20 by the
    // launcher): a pipeline constant, so the loops over o unroll and o stays in registers.
    let ocn = min(VARIANT, OC);
    // Keys per staged v chunk: as many as fit (all BK up to Dv = 80, 16 at Dv = 160).
    let vc = clamp(2560u / max(dv, 1u), 1u, BK);
    var m = NEG;
    var l = 0.0;
    // Output columns tx + 8 (4 g + i) in o_g; groups past ceil(ocn / 4) stay unused (ocn is a
    // pipeline constant, so their branches fold away).
    let groups = (ocn + 3u) / 4u;
    var o0 = vec4<f32>(0.0);
    var o1 = vec4<f32>(0.0);
    var o2 = vec4<f32>(0.0);
    var o3 = vec4<f32>(0.0);
    var o4 = vec4<f32>(0.0);
    // v staging positions, advanced without divisions (invocation e covers e, e + 256, ...).
    let dvs = max(dv, 1u);
    let kk_lid = lid / dvs;
    let c_lid = lid % dvs;
    let kk_step = 256u / dvs;
    let c_step = 256u % dvs;
    for (var k0 = 0u; k0 < lk; k0 = k0 + BK) {
        // Scores S[r][tx + 8i] = q[row] . k[k0 + tx + 8i], i < 4, in s.
        var s = vec4<f32>(0.0);
        for (var d0 = 0u; d0 < d; d0 = d0 + DC) {
            // Everyone is done reading attn_s (the last scores or P.V step) before restaging.
            if (k0 > 0u || d0 > 0u) {
                workgroupBarrier();
            }
            for (var e = lid; e < BQ * DC; e = e + 256u) {
                let rr = e / DC;
                let dd = d0 + e % DC;
                var qv = 0.0;
                if (in_range && q0 + rr < lq && dd < d) {
                    qv = load0(qb + (q0 + rr) * p(36u) + dd * p(37u));
                }
                attn_s[e] = qv;
                var kv = 0.0;
                if (k0 + rr < lk && dd < d) {
                    kv = load1(kb + (k0 + rr) * p(38u) + dd * p(39u));
                }
                attn_s[BQ * DC + e] = kv;
            }
            workgroupBarrier();
            let dn = min(DC, d - d0);
            let kbase = BQ * DC + tx * DC;
            for (var dd = 0u; dd < dn; dd = dd + 1u) {
                let qv = attn_s[r * DC + dd];
                let kv = vec4<f32>(attn_s[kbase + dd], attn_s[kbase + 8u * DC + dd],
                                   attn_s[kbase + 16u * DC + dd], attn_s[kbase + 24u * DC + dd]);
                s = fma(vec4<f32>(qv), kv, s);
            }
        }
        // Scale, mask, and the block's row maximum.
        s = vec4<f32>(masked_score(s.x, k0 + tx, row, row_ok, lk, mb, scale),
                      masked_score(s.y, k0 + tx + 8u, row, row_ok, lk, mb, scale),
                      masked_score(s.z, k0 + tx + 16u, row, row_ok, lk, mb, scale),
                      masked_score(s.w, k0 + tx + 24u, row, row_ok, lk, mb, scale));
        let pr_row = r * BK + tx;
        attn_p[pr_row] = s.x;
        attn_p[pr_row + 8u] = s.y;
        attn_p[pr_row + 16u] = s.z;
        attn_p[pr_row + 24u] = s.w;
        workgroupBarrier();
        var bm = NEG;
        for (var j = 0u; j < BK; j = j + 1u) {
            bm = max(bm, attn_p[r * BK + j]);
        }
        workgroupBarrier();
        let m_new = max(m, bm);
        var alpha = 1.0;
        if (m > NEG) {
            alpha = exp(m - m_new);
        }
        attn_p[pr_row] = prob(s.x, m_new);
        attn_p[pr_row + 8u] = prob(s.y, m_new);
        attn_p[pr_row + 16u] = prob(s.z, m_new);
        attn_p[pr_row + 24u] = prob(s.w, m_new);
        m = m_new;
        o0 = o0 * alpha;
        o1 = o1 * alpha;
        o2 = o2 * alpha;
        o3 = o3 * alpha;
        o4 = o4 * alpha;
        // o += P . V with V staged vc keys at a time; the row sum of P comes along.
        var bs = 0.0;
        for (var v0 = 0u; v0 < BK; v0 = v0 + vc) {
            if (v0 > 0u) {
                workgroupBarrier();
            }
            var kk = kk_lid;
            var c = c_lid;
            for (var e = lid; e < vc * dv; e = e + 256u) {
                let j = k0 + v0 + kk;
                var x = 0.0;
                if (j < lk && v0 + kk < BK) {
                    x = load_v(vb + j * p(40u) + c * p(41u));
                }
                attn_s[e] = x;
                c = c + c_step;
                kk = kk + kk_step;
                if (c >= dvs) {
                    c = c - dvs;
                    kk = kk + 1u;
                }
            }
            // Also publishes P (written above) to every invocation.
            workgroupBarrier();
            for (var kk2 = 0u; kk2 < min(vc, BK - v0); kk2 = kk2 + 1u) {
                let pr = vec4<f32>(attn_p[r * BK + v0 + kk2]);
                bs = bs + pr.x;
                o0 = fma(pr, v_cols(kk2, tx, 0u, dv), o0);
                o1 = fma(pr, v_cols(kk2, tx, 1u, dv), o1);
                if (groups > 2u) {
                    o2 = fma(pr, v_cols(kk2, tx, 2u, dv), o2);
                }
                if (groups > 3u) {
                    o3 = fma(pr, v_cols(kk2, tx, 3u, dv), o3);
                }
                if (groups > 4u) {
                    o4 = fma(pr, v_cols(kk2, tx, 4u, dv), o4);
                }
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
        store_cols(out, tx, 0u, dv, o0 * inv);
        store_cols(out, tx, 1u, dv, o1 * inv);
        store_cols(out, tx, 2u, dv, o2 * inv);
        store_cols(out, tx, 3u, dv, o3 * inv);
        store_cols(out, tx, 4u, dv, o4 * inv);
    }
}
