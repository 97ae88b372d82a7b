// attention_coop16.wgsl: fused scaled dot-product attention on 16x16x16 f16 cooperative
// matrices with f32 accumulation (NVIDIA tensor cores through Vulkan); composed as common.wgsl +
// this file + its pair loads (attention_coop16_words.wgsl: u32 words through unpack2x16float;
// second `array<vec2<f16>>` views of q/k/v measured slower on an H100) + its lane softmax
// (attention_coop16_softmax.wgsl) + the subgroup size SG (attention_coop16_sg32.wgsl: NVIDIA;
// attention_coop16_sg8.wgsl: lavapipe). The Lq x Lk score matrix never exists: a workgroup of
// THREADS = SUBGROUPS * SG invocations takes ROWS = 16 * SUBGROUPS query rows of one head, each
// subgroup 16 of them, and walks the keys in blocks of BK = 32 twice:
//   pass 1: S = Q K^T on the tensor cores, scaled; the row max m and the row sum
//           l = sum exp(s - m) are kept online (f32; at SG 32 two lanes per row);
//   pass 2: S again, P = exp(s - m) / l (final probabilities, rounded to f16) and O += P V on
//           the tensor cores, so the f32 accumulators never need rescaling (the price is the
//           second Q K^T, a third more products than one pass).
// Head dims up to MAX_TILES * 16 (D and Dv; padded to whole 16-column tiles with zeros). The
// launcher (src/gpu/kernels/attention/coop.rs) sends only f16, no mask, Lk > 0, and q/k/v read
// two elements per 32-bit word: column stride 1, even row strides, head strides, offsets, D and
// Dv. A once-per-process self-check against the FMA kernel (attention_vec4.wgsl) guards every
// use.
//
// Bindings and params are attention.wgsl's: 1 dst (f32 words, rows placed by out_row),
// 2 q, 3 k, 4 v (5, 6 bound and unused); [0] workgroups, [1] rank of the head dims, [4..12)
// head dims, [12..) q / [20..) k / [48..) v head strides, [28] q offset, [29] k offset,
// [30] scale, [32] Lq, [33] Lk, [34] D, [35] Dv, [36] q row stride, [38] k row stride,
// [40] v row stride, [42] v offset, [47] q tiles per head.
// VARIANT: bits 0..4 head-dim tiles of q/k, 4..8 of v; every other bit is 0.
// Workgroup memory (every array a whole number of 16-byte lines, see matmul_coop16.wgsl): four
// subgroups, 64 query rows, head dims up to 80 (five 16-column tiles): Q [64][88] f16, K and V
// [32 keys][88] f16, S [4][16][32] f32, P [4][16][40] f16: 35 KiB. K is staged like V and its
// transposed tiles are column-major cooperative loads (staging K^T instead, with 16-bit stores,
// measured the same on an H100 and took a second copy of the product code). Measured on an
// H200 and dropped (head dim 40): staging all 80 columns whatever the head dims (4.98 against
// 3.57 ms), reloading the query fragments per key block (3.60).

enable f16;
enable wgpu_cooperative_matrix;

@group(0) @binding(4) var<storage, read> src_v: array<u32>;

const SUBGROUPS: u32 = 4u;
const THREADS: u32 = SUBGROUPS * SG;
const ROWS: u32 = 64u;
const MAX_TILES: u32 = 5u;
const AQ: u32 = 88u;
const AV: u32 = 88u;
const AP: u32 = 40u;

var<workgroup> aq: array<f16, 5632>;
var<workgroup> ak: array<f16, 2816>;
var<workgroup> av: array<f16, 2816>;
var<workgroup> as_s: array<f32, 2048>;
var<workgroup> ap: array<f16, 2560>;

const NEG_S: f32 = -3.0e38;

// Stages K (and, in pass 2, V) of the key block at k0, row-major [key][dim]: only the head-dim
// tiles the products read (nt = VARIANT bits 0..4 of K, nv = bits 4..8 of V; zeros past D, Dv).
fn stage_kv(kb: u32, vb: u32, k0: u32, lid: u32, with_v: bool) {
    let lk = p(33u);
    let kp = (VARIANT & 15u) * 8u;
    for (var e = lid; e < 32u * kp; e = e + THREADS) {
        let j = e / kp;
        let c = 2u * (e % kp);
        let hk = pair_h(1u, kb, k0 + j, lk, p(38u), c, p(34u));
        ak[j * AV + c] = hk.x;
        ak[j * AV + c + 1u] = hk.y;
    }
    if (with_v) {
        let vp = ((VARIANT >> 4u) & 15u) * 8u;
        for (var e = lid; e < 32u * vp; e = e + THREADS) {
            let j = e / vp;
            let c = 2u * (e % vp);
            let hv = pair_h(2u, vb, k0 + j, lk, p(40u), c, p(35u));
            av[j * AV + c] = hv.x;
            av[j * AV + c + 1u] = hv.y;
        }
    }
}

// This subgroup's 16 x 32 scores of the staged key block into as_s[sbase..] ([16][32]);
// nt (VARIANT bits 0..4) head-dim tiles.
fn scores(sbase: u32, qa0: coop_mat16x16<f16, A>, qa1: coop_mat16x16<f16, A>,
          qa2: coop_mat16x16<f16, A>, qa3: coop_mat16x16<f16, A>, qa4: coop_mat16x16<f16, A>) {
    let nt = VARIANT & 15u;
    var s0 = coop_mat16x16<f32, C>();
    var s1 = coop_mat16x16<f32, C>();
    // K is staged row-major [key][dim]: its transposed tiles are column-major loads.
    s0 = coopMultiplyAdd(qa0, coopLoad<coop_mat16x16<f16, B>>(&ak[0u], AV), s0);
    s1 = coopMultiplyAdd(qa0, coopLoad<coop_mat16x16<f16, B>>(&ak[16u * AV], AV), s1);
    if (nt > 1u) {
        s0 = coopMultiplyAdd(qa1, coopLoad<coop_mat16x16<f16, B>>(&ak[16u], AV), s0);
        s1 = coopMultiplyAdd(qa1, coopLoad<coop_mat16x16<f16, B>>(&ak[16u * AV + 16u], AV), s1);
    }
    if (nt > 2u) {
        s0 = coopMultiplyAdd(qa2, coopLoad<coop_mat16x16<f16, B>>(&ak[32u], AV), s0);
        s1 = coopMultiplyAdd(qa2, coopLoad<coop_mat16x16<f16, B>>(&ak[16u * AV + 32u], AV), s1);
    }
    if (nt > 3u) {
        s0 = coopMultiplyAdd(qa3, coopLoad<coop_mat16x16<f16, B>>(&ak[48u], AV), s0);
        s1 = coopMultiplyAdd(qa3, coopLoad<coop_mat16x16<f16, B>>(&ak[16u * AV + 48u], AV), s1);
    }
    if (nt > 4u) {
        s0 = coopMultiplyAdd(qa4, coopLoad<coop_mat16x16<f16, B>>(&ak[64u], AV), s0);
        s1 = coopMultiplyAdd(qa4, coopLoad<coop_mat16x16<f16, B>>(&ak[16u * AV + 64u], AV), s1);
    }
    coopStoreT(s0, &as_s[sbase], 32u);
    coopStoreT(s1, &as_s[sbase + 16u], 32u);
}

// Stages the Q block (rows q0.., zero past Lq and D). Loops whose bounds depend on the
// invocation live in functions: naga's uniformity analysis treats the code after such a loop as
// non-uniform, and cooperative operations need uniform control flow.
fn stage_q(qb: u32, q0: u32, lid: u32) {
    let qp = (VARIANT & 15u) * 8u;
    for (var e = lid; e < ROWS * qp; e = e + THREADS) {
        let r = e / qp;
        let c = 2u * (e % qp);
        let h = pair_h(0u, qb, q0 + r, p(32u), p(36u), c, p(34u));
        aq[r * AQ + c] = h.x;
        aq[r * AQ + c + 1u] = h.y;
    }
}

// Writes the 16 x 16 output tile in as_s[sbase..] (rows r0.., columns c0..) inside Lq and Dv.
fn write_tile(bh: u32, r0: u32, c0: u32, sbase: u32, lane: u32) {
    let lq = p(32u);
    let dv = p(35u);
    for (var q = lane; q < 256u; q = q + SG) {
        let row = r0 + q / 16u;
        let col = c0 + q % 16u;
        if (row < lq && col < dv) {
            dst[out_row(bh, row) + col] = bitcast<u32>(as_s[sbase + q]);
        }
    }
}

@compute @workgroup_size(THREADS)
fn attention_coop16(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                    @builtin(local_invocation_index) lid: u32,
                    @builtin(subgroup_invocation_id) lane_id: u32,
                    @builtin(subgroup_id) sg_id: u32) {
    let g = wid.y * nwg.x + wid.x;
    let in_range = g < p(0u);
    let gg = select(0u, g, in_range);
    let qtiles = max(p(47u), 1u);
    let bh = gg / qtiles;
    let q0 = (gg % qtiles) * ROWS;
    let lq = p(32u);
    let lk = p(33u);
    let d = p(34u);
    let dv = p(35u);
    let qb = strided(bh, 12u) + p(28u);
    let kb = strided(bh, 20u) + p(29u);
    let vb = strided(bh, 48u) + p(42u);
    // SUBGROUPS subgroups of SG lanes (the host checks the adapter's subgroup size; the
    // self-check rejects any other arrangement).
    let sg = min(sg_id, SUBGROUPS - 1u);
    let lane = lane_id % SG;
    // Head-dim tiles of v (VARIANT bits 4..8; q/k's in bits 0..4): pipeline constants, so the
    // branches on them are uniform and fold away.
    let nv = (VARIANT >> 4u) & 15u;
    stage_q(qb, q0, lid);
    workgroupBarrier();
    let qrow = sg * 16u * AQ;
    let qa0 = coopLoadT<coop_mat16x16<f16, A>>(&aq[qrow], AQ);
    let qa1 = coopLoadT<coop_mat16x16<f16, A>>(&aq[qrow + 16u], AQ);
    let qa2 = coopLoadT<coop_mat16x16<f16, A>>(&aq[qrow + 32u], AQ);
    let qa3 = coopLoadT<coop_mat16x16<f16, A>>(&aq[qrow + 48u], AQ);
    let qa4 = coopLoadT<coop_mat16x16<f16, A>>(&aq[qrow + 64u], AQ);
    // Pass 1 keeps the row max and sum (the lanes of a row hold the same values); pass 2
    // turns the scores into normalised probabilities and accumulates P V.
    // (Cooperative operations must sit in control flow naga proves uniform: no branch on a
    // local variable.)
    var m: array<f32, RPL>;
    var l: array<f32, RPL>;
    for (var j = 0u; j < RPL; j = j + 1u) {
        m[j] = NEG_S;
        l[j] = 0.0;
    }
    var o0 = coop_mat16x16<f32, C>();
    var o1 = coop_mat16x16<f32, C>();
    var o2 = coop_mat16x16<f32, C>();
    var o3 = coop_mat16x16<f32, C>();
    var o4 = coop_mat16x16<f32, C>();
    let prow = sg * 16u * AP;
    let sbase = sg * 512u;
    for (var k0 = 0u; k0 < lk; k0 = k0 + 32u) {
        workgroupBarrier();
        stage_kv(kb, vb, k0, lid, false);
        workgroupBarrier();
        scores(sbase, qa0, qa1, qa2, qa3, qa4);
        workgroupBarrier();
        update_stats(sg, lane, k0, &m, &l);
    }
    var inv_l: array<f32, RPL>;
    for (var j = 0u; j < RPL; j = j + 1u) {
        inv_l[j] = select(0.0, 1.0 / l[j], l[j] > 0.0);
    }
    // Pass 2: normalised probabilities times V.
    for (var k0 = 0u; k0 < lk; k0 = k0 + 32u) {
        workgroupBarrier();
        stage_kv(kb, vb, k0, lid, true);
        workgroupBarrier();
        scores(sbase, qa0, qa1, qa2, qa3, qa4);
        workgroupBarrier();
        write_probabilities(prow, sg, lane, k0, m, inv_l);
        workgroupBarrier();
        let pa0 = coopLoadT<coop_mat16x16<f16, A>>(&ap[prow], AP);
        let pa1 = coopLoadT<coop_mat16x16<f16, A>>(&ap[prow + 16u], AP);
        o0 = coopMultiplyAdd(pa0, coopLoadT<coop_mat16x16<f16, B>>(&av[0u], AV), o0);
        o0 = coopMultiplyAdd(pa1, coopLoadT<coop_mat16x16<f16, B>>(&av[16u * AV], AV), o0);
        if (nv > 1u) {
            o1 = coopMultiplyAdd(pa0, coopLoadT<coop_mat16x16<f16, B>>(&av[16u], AV), o1);
            o1 = coopMultiplyAdd(pa1, coopLoadT<coop_mat16x16<f16, B>>(&av[16u * AV + 16u], AV), o1);
        }
        if (nv > 2u) {
            o2 = coopMultiplyAdd(pa0, coopLoadT<coop_mat16x16<f16, B>>(&av[32u], AV), o2);
            o2 = coopMultiplyAdd(pa1, coopLoadT<coop_mat16x16<f16, B>>(&av[16u * AV + 32u], AV), o2);
        }
        if (nv > 3u) {
            o3 = coopMultiplyAdd(pa0, coopLoadT<coop_mat16x16<f16, B>>(&av[48u], AV), o3);
            o3 = coopMultiplyAdd(pa1, coopLoadT<coop_mat16x16<f16, B>>(&av[16u * AV + 48u], AV), o3);
        }
        if (nv > 4u) {
            o4 = coopMultiplyAdd(pa0, coopLoadT<coop_mat16x16<f16, B>>(&av[64u], AV), o4);
            o4 = coopMultiplyAdd(pa1, coopLoadT<coop_mat16x16<f16, B>>(&av[16u * AV + 64u], AV), o4);
        }
    }
    // Output tiles through this subgroup's 512 f32 of as_s, 16 columns at a time.
    for (var j = 0u; j < 5u; j = j + 1u) {
        workgroupBarrier();
        if (j < nv) {
            switch (j) {
                case 0u: { coopStoreT(o0, &as_s[sbase], 16u); }
                case 1u: { coopStoreT(o1, &as_s[sbase], 16u); }
                case 2u: { coopStoreT(o2, &as_s[sbase], 16u); }
                case 3u: { coopStoreT(o3, &as_s[sbase], 16u); }
                default: { coopStoreT(o4, &as_s[sbase], 16u); }
            }
        }
        workgroupBarrier();
        if (j < nv && in_range) {
            write_tile(bh, q0 + sg * 16u, j * 16u, sbase, lane);
        }
    }
}
