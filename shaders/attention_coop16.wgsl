// attention_coop16.wgsl: fused scaled dot-product attention on 16x16x16 f16 cooperative
// matrices with f32 accumulation (NVIDIA tensor cores through Vulkan); composed as common.wgsl +
// this file + its pair loads (attention_coop16_words.wgsl: u32 words through unpack2x16float;
// second `array<vec2<f16>>` views of q/k/v measured slower on an H100) + the subgroup size SG
// (attention_coop16_sg32.wgsl: NVIDIA; attention_coop16_sg8.wgsl: lavapipe, where the tests
// run the kernel on the CPU) + a workgroup layout: attention_coop16_rows64.wgsl (the default:
// four subgroups, 64 query rows, head dims up to 80) or attention_coop16_rows128.wgsl
// (`XPU_ATTN_ROWS128=1`, an experiment: eight subgroups, 128 query rows, head dims up to 48,
// so each staged key block serves twice the rows); attention_coop16_lean.wgsl, the lean form
// (VARIANT bit 8192, `XPU_ATTN_LEAN=1`: constant-stride staging, key-major scores and
// probabilities, a base-2 softmax), is composed in every form. The Lq x Lk score matrix never
// exists: a workgroup of THREADS = SUBGROUPS * SG invocations takes ROWS = 16 * SUBGROUPS query
// rows of one head, each subgroup 16 of them, and walks the keys in blocks of BK = 32 twice:
//   pass 1: S = Q K^T on the tensor cores, scaled; the row max m and the row sum
//           l = sum exp(s - m) are kept online (f32; at SG 32 two lanes per row);
//   pass 2: S again, P = exp(s - m) / l (final probabilities, rounded to f16) and O += P V on
//           the tensor cores, so the f32 accumulators never need rescaling (the price is the
//           second Q K^T, a third more products than one pass).
// The one-pass form (VARIANT bit 4096, `XPU_ATTN_ONEPASS=1`, an experiment) skips pass 1: its
// probabilities are taken against a row max raised only when a block's scores pass it by more
// than LAZY = 8 (then every subgroup rescales its f32 accumulators through workgroup memory, a
// branch made uniform by workgroupUniformLoad), and O is divided by the row sums at the end.
// Head dims up to MAX_TILES * 16 (D and Dv; padded to whole 16-column tiles with zeros). The launcher
// (src/gpu/kernels/attention_coop.rs) sends only f16, no mask, Lk > 0, and q/k/v read two
// elements per 32-bit word: column stride 1, even row strides, head strides, offsets, D and Dv.
// A once-per-process self-check against the FMA kernel (attention.wgsl) guards every use.
//
// Bindings and params are attention.wgsl's: 1 dst (f32 words, rows placed by out_row),
// 2 q, 3 k, 4 v (5, 6 bound and unused); [0] workgroups, [1] rank of the head dims, [4..12)
// head dims, [12..) q / [20..) k / [48..) v head strides, [28] q offset, [29] k offset,
// [30] scale, [32] Lq, [33] Lk, [34] D, [35] Dv, [36] q row stride, [38] k row stride,
// [40] v row stride, [42] v offset, [47] q tiles per head.
// Workgroup memory: the layout file's (every array a whole number of 16-byte lines, see
// matmul_coop16.wgsl): Q [ROWS][AQ] f16, K and V [32 keys][AV] f16, S [SUBGROUPS][16][32] f32,
// P [SUBGROUPS][16][AP] f16. VARIANT: bits 0..4 head-dim tiles of q/k, 4..8 of v. K is staged like V and its
// transposed tiles are column-major cooperative loads (staging K^T instead, with 16-bit stores,
// measured the same on the H100 and took a second copy of the product code). Measured on an H200
// and dropped (twenty-eighth session, head dim 40): staging all 80 columns whatever the head
// dims (4.98 against 3.57 ms), reloading the query fragments per key block (3.60).

enable f16;
enable wgpu_cooperative_matrix;

@group(0) @binding(4) var<storage, read> src_v: array<u32>;

const NEG_S: f32 = -3.0e38;
// K and V words of one key block per invocation, at most (32 keys x MAX_TILES * 8 pairs).
const KV_WORDS: u32 = (32u * MAX_TILES * 8u + THREADS - 1u) / THREADS;

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

// Prefetch form (VARIANT bit 2048, `XPU_ATTN_PREFETCH=1`): each invocation holds the next key
// block's K (and, in pass 2, V) words in registers, loaded while this block's products and
// softmax run, and writes them to workgroup memory at the top of the next block (the words
// and layout of stage_kv; at most KV_WORDS of each per invocation).
struct KvWords {
    k: array<u32, KV_WORDS>,
    v: array<u32, KV_WORDS>,
}

fn fetch_kv(kb: u32, vb: u32, k0: u32, lid: u32, with_v: bool) -> KvWords {
    var w: KvWords;
    let lk = p(33u);
    let kp = (VARIANT & 15u) * 8u;
    let vp = ((VARIANT >> 4u) & 15u) * 8u;
    for (var i = 0u; i < KV_WORDS; i = i + 1u) {
        let e = lid + THREADS * i;
        if (e < 32u * kp) {
            w.k[i] = pair_word(1u, kb, k0 + e / kp, lk, p(38u), 2u * (e % kp), p(34u));
        }
        if (with_v && e < 32u * vp) {
            w.v[i] = pair_word(2u, vb, k0 + e / vp, lk, p(40u), 2u * (e % vp), p(35u));
        }
    }
    return w;
}

fn put_kv(w: KvWords, lid: u32, with_v: bool) {
    let kp = (VARIANT & 15u) * 8u;
    let vp = ((VARIANT >> 4u) & 15u) * 8u;
    for (var i = 0u; i < KV_WORDS; i = i + 1u) {
        let e = lid + THREADS * i;
        if (e < 32u * kp) {
            let at = (e / kp) * AV + 2u * (e % kp);
            let h = vec2<f16>(unpack2x16float(w.k[i]));
            ak[at] = h.x;
            ak[at + 1u] = h.y;
        }
        if (with_v && e < 32u * vp) {
            let at = (e / vp) * AV + 2u * (e % vp);
            let h = vec2<f16>(unpack2x16float(w.v[i]));
            av[at] = h.x;
            av[at + 1u] = h.y;
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
    if ((VARIANT & LEAN) != 0u) {
        // Lean form: key-major, S^T [32 keys][16 rows].
        coopStore(s0, &as_s[sbase], 16u);
        coopStore(s1, &as_s[sbase + 256u], 16u);
    } else {
        coopStoreT(s0, &as_s[sbase], 32u);
        coopStoreT(s1, &as_s[sbase + 16u], 32u);
    }
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

// One-pass form: the accumulator tile o with its rows scaled by a_scale, through the
// subgroup's 512 f32 of as_s (called in uniform control flow; three workgroup barriers: the
// slab's earlier readers, the store, the scaling).
fn rescaled(o: coop_mat16x16<f32, C>, sbase: u32, sg: u32, lane: u32) -> coop_mat16x16<f32, C> {
    workgroupBarrier();
    coopStoreT(o, &as_s[sbase], 16u);
    workgroupBarrier();
    scale_tile_rows(sbase, sg, lane);
    workgroupBarrier();
    return coopLoadT<coop_mat16x16<f32, C>>(&as_s[sbase], 16u);
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
    // Timing-only VARIANT bits (wrong results; benches/gpu/run_gpu.sh attanat): 256 no K/V
    // staging in the key loops, 512 no softmax arithmetic, 1024 no products.
    let staging = (VARIANT & 256u) == 0u;
    let softmax = (VARIANT & 512u) == 0u;
    let products = (VARIANT & 1024u) == 0u;
    // The lean form (attention_coop16_lean.wgsl) stages without prefetching; it takes the
    // one-pass form too (its probabilities key-major, its row max in base 2).
    let lean = (VARIANT & LEAN) != 0u;
    let prefetch = !lean && (VARIANT & 2048u) != 0u;
    let onepass = (VARIANT & 4096u) != 0u;
    var kv = KvWords();
    if (prefetch) {
        kv = fetch_kv(kb, vb, 0u, lid, onepass);
    }
    stage_q(qb, q0, lid);
    workgroupBarrier();
    let qrow = sg * 16u * AQ;
    let qa0 = coopLoadT<coop_mat16x16<f16, A>>(&aq[qrow], AQ);
    let qa1 = coopLoadT<coop_mat16x16<f16, A>>(&aq[qrow + 16u], AQ);
    let qa2 = coopLoadT<coop_mat16x16<f16, A>>(&aq[qrow + 32u], AQ);
    // Tiles past the layout's MAX_TILES lie outside its Q rows (never multiplied).
    var qa3 = coop_mat16x16<f16, A>();
    var qa4 = coop_mat16x16<f16, A>();
    if (MAX_TILES > 3u) {
        qa3 = coopLoadT<coop_mat16x16<f16, A>>(&aq[qrow + 48u], AQ);
    }
    if (MAX_TILES > 4u) {
        qa4 = coopLoadT<coop_mat16x16<f16, A>>(&aq[qrow + 64u], AQ);
    }
    // Pass 1 keeps the row max and sum (the lanes of a row hold the same values); pass 2
    // turns the scores into normalised probabilities and accumulates P V. The one-pass form
    // skips pass 1 and keeps a lazily raised max instead (attention_coop16_softmax.wgsl).
    // (Cooperative operations must sit in control flow naga proves uniform: no branch on a
    // local variable; workgroupUniformLoad gives the one data-dependent branch a uniform value.)
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
    let pbase = sg * 32u * PS;
    let sbase = sg * 512u;
    for (var k0 = 0u; k0 < select(lk, 0u, onepass); k0 = k0 + 32u) {
        workgroupBarrier();
        if (staging && lean) {
            lean_stage_kv(kb, vb, k0, lid, false);
        } else if (staging && prefetch) {
            put_kv(kv, lid, false);
        } else if (staging) {
            stage_kv(kb, vb, k0, lid, false);
        }
        workgroupBarrier();
        if (prefetch && k0 + 32u < lk) {
            kv = fetch_kv(kb, vb, k0 + 32u, lid, false);
        }
        if (products) {
            scores(sbase, qa0, qa1, qa2, qa3, qa4);
        }
        workgroupBarrier();
        if (!softmax) {
            continue;
        }
        if (lean) {
            lean_update_stats(sg, lane, k0, &m, &l);
        } else {
            update_stats(sg, lane, k0, &m, &l);
        }
    }
    var inv_l: array<f32, RPL>;
    for (var j = 0u; j < RPL; j = j + 1u) {
        inv_l[j] = select(0.0, 1.0 / l[j], l[j] > 0.0);
    }
    // Pass 2: normalised probabilities times V (one-pass form: the only pass).
    if (prefetch && !onepass) {
        kv = fetch_kv(kb, vb, 0u, lid, true);
    }
    for (var k0 = 0u; k0 < lk; k0 = k0 + 32u) {
        workgroupBarrier();
        if (staging && lean) {
            lean_stage_kv(kb, vb, k0, lid, true);
        } else if (staging && prefetch) {
            put_kv(kv, lid, true);
        } else if (staging) {
            stage_kv(kb, vb, k0, lid, true);
        }
        workgroupBarrier();
        if (prefetch && k0 + 32u < lk) {
            kv = fetch_kv(kb, vb, k0 + 32u, lid, true);
        }
        if (products) {
            scores(sbase, qa0, qa1, qa2, qa3, qa4);
        }
        workgroupBarrier();
        if (onepass) {
            var raised = false;
            if (softmax) {
                if (lean) {
                    raised = lean_online_probabilities(pbase, sg, lane, k0, &m, &l);
                } else {
                    raised = online_probabilities(prow, sg, lane, k0, &m, &l);
                }
            }
            // Rare (a row's max rose by more than LAZY): most blocks make no atomic at all.
            if (raised) {
                atomicOr(&a_flag[0], 1u);
            }
            // A barrier, the load, a barrier: P and a_scale are complete after it.
            if (workgroupUniformLoad(&a_flag[0]) != 0u) {
                // Some row raised its max: every subgroup scales its O rows by a_scale, each
                // tile through its 512 f32 of as_s (the scores are in ap by now).
                o0 = rescaled(o0, sbase, sg, lane);
                if (nv > 1u) {
                    o1 = rescaled(o1, sbase, sg, lane);
                }
                if (nv > 2u) {
                    o2 = rescaled(o2, sbase, sg, lane);
                }
                if (nv > 3u) {
                    o3 = rescaled(o3, sbase, sg, lane);
                }
                if (nv > 4u) {
                    o4 = rescaled(o4, sbase, sg, lane);
                }
                // Every invocation has read the flag (the load's trailing barrier).
                if (lid == 0u) {
                    atomicStore(&a_flag[0], 0u);
                }
            }
        } else {
            if (softmax && lean) {
                lean_write_probabilities(pbase, sg, lane, k0, m, inv_l);
            } else if (softmax) {
                write_probabilities(prow, sg, lane, k0, m, inv_l);
            }
            workgroupBarrier();
        }
        if (!products) {
            continue;
        }
        var pa0 = coop_mat16x16<f16, A>();
        var pa1 = coop_mat16x16<f16, A>();
        if (lean) {
            // P^T [32 keys][PS]: the keys' tiles are column-major A loads.
            pa0 = coopLoad<coop_mat16x16<f16, A>>(&ap[pbase], PS);
            pa1 = coopLoad<coop_mat16x16<f16, A>>(&ap[pbase + 16u * PS], PS);
        } else {
            pa0 = coopLoadT<coop_mat16x16<f16, A>>(&ap[prow], AP);
            pa1 = coopLoadT<coop_mat16x16<f16, A>>(&ap[prow + 16u], AP);
        }
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
    // One-pass form: the rows' 1 / l, applied as each tile is written (by the lanes that write).
    if (onepass) {
        for (var j = 0u; j < RPL; j = j + 1u) {
            if (lane % LPR == 0u) {
                a_scale[sg * 16u + lane_row(lane, j)] = select(0.0, 1.0 / l[j], l[j] > 0.0);
            }
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
        if (j < nv && onepass) {
            scale_tile_rows(sbase, sg, lane);
        }
        if (j < nv && in_range) {
            write_tile(bh, q0 + sg * 16u, j * 16u, sbase, lane);
        }
    }
}
