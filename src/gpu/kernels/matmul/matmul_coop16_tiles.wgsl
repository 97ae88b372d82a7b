// matmul_coop16_tiles.wgsl: f16 tensor-core products with the workgroup and subgroup tiles as
// pipeline constants (composed as common.wgsl + matmul.wgsl + matmul_coop16_gather.wgsl + this
// file), where mm_coop16
// (matmul_coop16.wgsl) has one shape, 128x128x32 with 32x64 per subgroup, written out by hand:
// the shapes of coop16_tiles.rs are autotuner candidates beside it (family gpu_matmul), each
// measured on the device that runs it. Products and their fused epilogues, split K included,
// and the convolution gather (no GEGLU: that stays on mm_coop16); same features and f32
// accumulation as mm_coop16.
//
// VARIANT (set by the host, validated there): bits 0-3 WM and 4-7 WN, the subgroup grid of the
// workgroup (WG = 32 WM WN invocations); bits 8-11 TM and 12-15 TN, the 16x16 accumulator tiles
// each subgroup owns (each 1..=4); bits 16-17 log2(BK / 16), the K step; bit 20 two
// tile pairs in workgroup memory (one barrier per K step: step i computes from pair i % 2 while
// the next step's words go to the other) instead of one (two barriers); bit 21 B staged
// [column][k] and read as column-major fragments (the host sets it for B whose rows are
// contiguous in k, such as a transposed Linear weight, so the staging never transposes); bit 22
// the convolution gather (see GATHER below).
// The workgroup computes a BM x BN = 16 WM TM x 16 WN TN output tile; subgroup slot s owns rows
// (s / WN) 16 TM.. and columns (s % WN) 16 TN.. of it. With subgroups narrower than 32 lanes
// (lavapipe: 8) the extra subgroups compute the last slot's tiles too and store nothing; with
// wider ones the workgroup makes ceil(slots / subgroups) passes, each re-staging the K range.
// Staging: each invocation carries NA + NB u32 words (f16 pairs along k, or along columns for
// row-major B) of the next K step in registers while this step's products run. Fast words are
// one u32 load; where a pair is not one aligned word of the operand (odd K, odd strides or
// offsets, non-f16 data) the pair's two elements are loaded one by one through the prelude's
// loads (exact for F16, the only dtype the host sends). Every staged row is 16 bytes longer than
// its data (bank spread) and every tile array a whole number of 16-byte lines, so each fragment
// starts 16-byte aligned (see matmul_coop16.wgsl on why that matters on NVIDIA).
// Split K (matmul.wgsl's header): a workgroup covers the K range of its split; words past it
// are zeros.

enable f16;
enable wgpu_cooperative_matrix;

override WM: u32 = VARIANT & 15u;
override WN: u32 = (VARIANT >> 4u) & 15u;
override TM: u32 = (VARIANT >> 8u) & 15u;
override TN: u32 = (VARIANT >> 12u) & 15u;
override BK: u32 = 16u << ((VARIANT >> 16u) & 3u);
override NBUF: u32 = 1u + ((VARIANT >> 20u) & 1u);
override BT: bool = ((VARIANT >> 21u) & 1u) != 0u;
override SLOTS: u32 = WM * WN;
override BM: u32 = 16u * WM * TM;
override BN: u32 = 16u * WN * TN;
// Row strides of the staged tiles in f16: A [BM][BK], B [BK][BN] or (BT) [BN][BK].
override SA: u32 = BK + 8u;
override SB: u32 = select(BN + 8u, BK + 8u, BT);
override A_TILE: u32 = BM * SA;
override B_TILE: u32 = select(BK * SB, BN * SB, BT);
override T_A_LEN: u32 = NBUF * A_TILE;
override T_B_LEN: u32 = NBUF * B_TILE;
// Slots whose accumulator tiles pass through t_c at once (the rest wait a round).
override C_SLOTS: u32 = min(SLOTS, 8u);
override T_C_LEN: u32 = C_SLOTS * 256u;
// Words of A and of B each invocation carries per K step (the host checks they divide evenly).
override NA: u32 = BM * BK / 2u / WG;
override NB: u32 = BN * BK / 2u / WG;
const MAX_WORDS: u32 = 32u;
// VARIANT bit 22: A is the convolution gather (matmul_coop16.wgsl's header gives its params;
// the host sets BT with it, for the weight [O][kh][kw][C]), at most MAX_ROWS words of A per
// invocation (each word's row position held in registers through the K loop).
override GATHER: bool = ((VARIANT >> 22u) & 1u) != 0u;
const MAX_ROWS: u32 = 16u;
override GATHER_ROWS: u32 = min(NA, MAX_ROWS);

var<workgroup> t_a: array<f16, T_A_LEN>;
var<workgroup> t_b: array<f16, T_B_LEN>;
// 256 f32 for each of C_SLOTS slots: one accumulator tile at a time on its way to the
// epilogue (its last element also carries the pass count to the whole workgroup at the start).
var<workgroup> t_c: array<f32, T_C_LEN>;

struct TileWords {
    a: array<u32, MAX_WORDS>,
    b: array<u32, MAX_WORDS>,
}

// The input base and top-left position of each gathered row of this invocation.
struct GatherRows {
    base: array<u32, MAX_ROWS>,
    pos: array<vec2<i32>, MAX_ROWS>,
}

// The rows of this invocation's A words (row0 + e / (BK/2) for word e = lid + WG i; their k
// pair, 2 (lid % (BK/2)), is the same for all of them since WG is a multiple of BK/2).
fn t_rows(ab: u32, row0: u32, lid: u32) -> GatherRows {
    var g: GatherRows;
    for (var i = 0u; i < GATHER_ROWS; i = i + 1u) {
        let q = conv_pixel(ab, row0 + (lid + WG * i) / (BK / 2u));
        g.base[i] = u32(q.x);
        g.pos[i] = q.yz;
    }
    return g;
}

// The gathered A words of the K step at k0 (zeros for taps in the padding and past ke).
fn t_gather(g: GatherRows, k0: u32, ke: u32, lid: u32) -> TileWords {
    var w: TileWords;
    let k = k0 + 2u * (lid % (BK / 2u));
    if (k < ke) {
        let t = conv_tap(k);
        for (var i = 0u; i < GATHER_ROWS; i = i + 1u) {
            let at = conv_at(g.base[i], g.pos[i].x, g.pos[i].y, t);
            let inside = at != CONV_OUTSIDE;
            w.a[i] = select(0u, src0[select(0u, at / 2u, inside)], inside);
        }
    }
    return w;
}

// The A word at row r, k (k even): A[r][k], A[r][k+1], zeros past M and the K range end ke;
// `fast`: one u32 load, else the two elements one by one.
fn t_word_a(ab: u32, r: u32, k: u32, ke: u32, fast: bool) -> u32 {
    let inside = r < dim_m() && k < ke;
    let at = ab + r * p(35u) + k * p(36u);
    if (fast) {
        return select(0u, src0[select(0u, at / 2u, inside)], inside);
    }
    if (!inside) {
        return 0u;
    }
    var x1 = 0.0;
    if (k + 1u < ke) {
        x1 = load0(at + p(36u));
    }
    return pack2x16float(vec2<f32>(load0(at), x1));
}

// The B word at column c, k: B[k][c], B[k+1][c] (BT) or B[k][c], B[k][c+1]; zeros past N and
// the K range end ke.
fn t_word_b(bb: u32, c: u32, k: u32, ke: u32, fast: bool) -> u32 {
    let inside = c < dim_n() && k < ke;
    let at = bb + k * p(37u) + c * p(38u);
    if (fast) {
        return select(0u, src1[select(0u, at / 2u, inside)], inside);
    }
    if (!inside) {
        return 0u;
    }
    var x1 = 0.0;
    if (BT && k + 1u < ke) {
        x1 = load1(at + p(37u));
    } else if (!BT && c + 1u < dim_n()) {
        x1 = load1(at + p(38u));
    }
    return pack2x16float(vec2<f32>(load1(at), x1));
}

// Column and k of B word e (see t_fetch).
fn t_b_at(col0: u32, k0: u32, e: u32) -> vec2<u32> {
    if (BT) {
        return vec2<u32>(col0 + e / (BK / 2u), k0 + 2u * (e % (BK / 2u)));
    }
    return vec2<u32>(col0 + 2u * (e % (BN / 2u)), k0 + e / (BN / 2u));
}

// This invocation's words of the K step at k0 (word e = lid + WG i; A: row e / (BK/2), k pair
// e % (BK/2); B likewise with columns for rows (BT), or k row e / (BN/2), column pair
// e % (BN/2)), so consecutive invocations read consecutive words. The fast and element-wise
// forms are separate loops (a uniform branch), so the fast loads can all be in flight at once.
fn t_fetch(ab: u32, bb: u32, row0: u32, col0: u32, k0: u32, ke: u32, lid: u32,
           fa: bool, fb: bool, g: GatherRows) -> TileWords {
    var w: TileWords;
    if (GATHER) {
        w = t_gather(g, k0, ke, lid);
    } else if (fa) {
        for (var i = 0u; i < NA; i = i + 1u) {
            let e = lid + WG * i;
            w.a[i] = t_word_a(ab, row0 + e / (BK / 2u), k0 + 2u * (e % (BK / 2u)), ke, true);
        }
    } else {
        for (var i = 0u; i < NA; i = i + 1u) {
            let e = lid + WG * i;
            w.a[i] = t_word_a(ab, row0 + e / (BK / 2u), k0 + 2u * (e % (BK / 2u)), ke, false);
        }
    }
    if (fb) {
        for (var i = 0u; i < NB; i = i + 1u) {
            let ck = t_b_at(col0, k0, lid + WG * i);
            w.b[i] = t_word_b(bb, ck.x, ck.y, ke, true);
        }
    } else {
        for (var i = 0u; i < NB; i = i + 1u) {
            let ck = t_b_at(col0, k0, lid + WG * i);
            w.b[i] = t_word_b(bb, ck.x, ck.y, ke, false);
        }
    }
    return w;
}

// Writes the words to tile pair `buf` (both halves of a word are neighbours in every layout).
fn t_put(w: TileWords, lid: u32, buf: u32) {
    for (var i = 0u; i < NA; i = i + 1u) {
        let e = lid + WG * i;
        let h = vec2<f16>(unpack2x16float(w.a[i]));
        let at = buf * A_TILE + (e / (BK / 2u)) * SA + 2u * (e % (BK / 2u));
        t_a[at] = h.x;
        t_a[at + 1u] = h.y;
    }
    for (var i = 0u; i < NB; i = i + 1u) {
        let e = lid + WG * i;
        let h = vec2<f16>(unpack2x16float(w.b[i]));
        var at = buf * B_TILE + (e / (BN / 2u)) * SB + 2u * (e % (BN / 2u));
        if (BT) {
            at = buf * B_TILE + (e / (BK / 2u)) * SB + 2u * (e % (BK / 2u));
        }
        t_b[at] = h.x;
        t_b[at + 1u] = h.y;
    }
}

// Finishes the 16x16 tile in t_c[base..] (rows r0.., columns c0..) through the fused epilogue,
// the subgroup's lanes taking column pairs in turn.
fn t_finish(b: u32, r0: u32, c0: u32, base: u32, lane: u32, width: u32, has: bool) {
    if (!has) {
        return;
    }
    for (var q = lane; q < 128u; q = q + width) {
        let i = base + (q / 8u) * 16u + 2u * (q % 8u);
        finish_pair(b, r0 + q / 8u, c0 + 2u * (q % 8u), t_c[i], t_c[i + 1u], 0.0, 0.0);
    }
}

// Whether the operands' pairs are single aligned words (see the header).
fn t_fast_a(ab: u32) -> bool {
    return DT_IN == 1u && p(36u) == 1u && p(35u) % 2u == 0u && ab % 2u == 0u
        && dim_k() % 2u == 0u;
}

fn t_fast_b(bb: u32) -> bool {
    if (BT) {
        return DT_IN == 1u && p(37u) == 1u && p(38u) % 2u == 0u && bb % 2u == 0u
            && dim_k() % 2u == 0u;
    }
    return DT_IN == 1u && p(38u) == 1u && p(37u) % 2u == 0u && bb % 2u == 0u;
}

// Fragment i (rows ar + 16 i) of the A tile at oa, k column kk.
fn t_frag_a(oa: u32, ar: u32, i: u32, kk: u32) -> coop_mat16x16<f16, A> {
    return coopLoadT<coop_mat16x16<f16, A>>(&t_a[oa + (ar + 16u * i) * SA + kk], SA);
}

// Fragment j (columns bc + 16 j) of the B tile at ob, k row kk.
fn t_frag_b(ob: u32, bc: u32, j: u32, kk: u32) -> coop_mat16x16<f16, B> {
    if (BT) {
        return coopLoad<coop_mat16x16<f16, B>>(&t_b[ob + (bc + 16u * j) * SB + kk], SB);
    }
    return coopLoadT<coop_mat16x16<f16, B>>(&t_b[ob + kk * SB + bc + 16u * j], SB);
}

// Accumulator tile (i, j) of slot cs through its 256 f32 of t_c and the epilogue, in round
// cs / C_SLOTS (every subgroup takes part in every round's barriers; only one with a slot
// stores).
fn t_out(c: coop_mat16x16<f32, C>, b: u32, r0: u32, c0: u32, cs: u32, lane: u32, width: u32,
         has: bool) {
    let base = (cs % C_SLOTS) * 256u;
    for (var q = 0u; q < SLOTS; q = q + C_SLOTS) {
        let mine = has && cs / C_SLOTS == q / C_SLOTS;
        workgroupBarrier();
        if (mine) {
            coopStoreT(c, &t_c[base], 16u);
        }
        workgroupBarrier();
        t_finish(b, r0, c0, base, lane, width, mine);
    }
}

@compute @workgroup_size(WG)
fn mm_coop16t(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32,
              @builtin(subgroup_id) sg: u32, @builtin(num_subgroups) nsg: u32,
              @builtin(subgroup_invocation_id) lane: u32, @builtin(subgroup_size) width: u32) {
    let sk = split_k(wid.z);
    let ab = a_base(sk.x);
    let bb = b_base(sk.x);
    let row0 = wid.y * BM;
    let col0 = wid.x * BN;
    let fa = t_fast_a(ab);
    let fb = t_fast_b(bb);
    if (lid == 0u) {
        t_c[T_C_LEN - 1u] = f32((SLOTS + nsg - 1u) / nsg);
    }
    let passes = u32(workgroupUniformLoad(&t_c[T_C_LEN - 1u]));
    var g = GatherRows();
    if (GATHER) {
        g = t_rows(ab, row0, lid);
    }
    for (var round = 0u; round < passes; round = round + 1u) {
        let slot = sg + round * nsg;
        let has = slot < SLOTS;
        // Cooperative loads need uniform control flow: a subgroup without a slot multiplies
        // the last slot's tiles too and keeps nothing.
        let cs = min(slot, SLOTS - 1u);
        let ar = (cs / WN) * TM * 16u;
        let bc = (cs % WN) * TN * 16u;
        // Accumulator cIJ: rows ar + 16 I, columns bc + 16 J. Named, not an array: an array
        // indexed in loops went to scratch memory under Mesa's NAK compiler (512 bytes per
        // invocation; lab/lavapipe_coop/nak.sh), and the branches on TM and TN below are
        // on pipeline constants, so they fold away.
        var c00 = coop_mat16x16<f32, C>();
        var c01 = c00;
        var c02 = c00;
        var c03 = c00;
        var c10 = c00;
        var c11 = c00;
        var c12 = c00;
        var c13 = c00;
        var c20 = c00;
        var c21 = c00;
        var c22 = c00;
        var c23 = c00;
        var c30 = c00;
        var c31 = c00;
        var c32 = c00;
        var c33 = c00;
        var w = t_fetch(ab, bb, row0, col0, sk.z, sk.w, lid, fa, fb, g);
        workgroupBarrier();
        t_put(w, lid, 0u);
        workgroupBarrier();
        for (var k0 = sk.z; k0 < sk.w; k0 = k0 + BK) {
            let more = k0 + BK < sk.w;
            if (more) {
                w = t_fetch(ab, bb, row0, col0, k0 + BK, sk.w, lid, fa, fb, g);
            }
            let buf = ((k0 - sk.z) / BK) % NBUF;
            let oa = buf * A_TILE;
            let ob = buf * B_TILE;
            for (var kk = 0u; kk < BK; kk = kk + 16u) {
                let a0 = t_frag_a(oa, ar, 0u, kk);
                var a1 = a0;
                var a2 = a0;
                var a3 = a0;
                if (TM > 1u) {
                    a1 = t_frag_a(oa, ar, 1u, kk);
                }
                if (TM > 2u) {
                    a2 = t_frag_a(oa, ar, 2u, kk);
                }
                if (TM > 3u) {
                    a3 = t_frag_a(oa, ar, 3u, kk);
                }
                // Each B fragment just before its products (fewer live registers).
                var b = t_frag_b(ob, bc, 0u, kk);
                c00 = coopMultiplyAdd(a0, b, c00);
                if (TM > 1u) { c10 = coopMultiplyAdd(a1, b, c10); }
                if (TM > 2u) { c20 = coopMultiplyAdd(a2, b, c20); }
                if (TM > 3u) { c30 = coopMultiplyAdd(a3, b, c30); }
                if (TN > 1u) {
                    b = t_frag_b(ob, bc, 1u, kk);
                    c01 = coopMultiplyAdd(a0, b, c01);
                    if (TM > 1u) { c11 = coopMultiplyAdd(a1, b, c11); }
                    if (TM > 2u) { c21 = coopMultiplyAdd(a2, b, c21); }
                    if (TM > 3u) { c31 = coopMultiplyAdd(a3, b, c31); }
                }
                if (TN > 2u) {
                    b = t_frag_b(ob, bc, 2u, kk);
                    c02 = coopMultiplyAdd(a0, b, c02);
                    if (TM > 1u) { c12 = coopMultiplyAdd(a1, b, c12); }
                    if (TM > 2u) { c22 = coopMultiplyAdd(a2, b, c22); }
                    if (TM > 3u) { c32 = coopMultiplyAdd(a3, b, c32); }
                }
                if (TN > 3u) {
                    b = t_frag_b(ob, bc, 3u, kk);
                    c03 = coopMultiplyAdd(a0, b, c03);
                    if (TM > 1u) { c13 = coopMultiplyAdd(a1, b, c13); }
                    if (TM > 2u) { c23 = coopMultiplyAdd(a2, b, c23); }
                    if (TM > 3u) { c33 = coopMultiplyAdd(a3, b, c33); }
                }
            }
            if (NBUF == 2u) {
                // The other pair was last read before the barrier that ended the last step.
                if (more) {
                    t_put(w, lid, 1u - buf);
                }
                workgroupBarrier();
            } else {
                workgroupBarrier();
                if (more) {
                    t_put(w, lid, 0u);
                }
                workgroupBarrier();
            }
        }
        let r = row0 + ar;
        let c = col0 + bc;
        t_out(c00, sk.y, r, c, cs, lane, width, has);
        if (TN > 1u) { t_out(c01, sk.y, r, c + 16u, cs, lane, width, has); }
        if (TN > 2u) { t_out(c02, sk.y, r, c + 32u, cs, lane, width, has); }
        if (TN > 3u) { t_out(c03, sk.y, r, c + 48u, cs, lane, width, has); }
        if (TM > 1u) {
            t_out(c10, sk.y, r + 16u, c, cs, lane, width, has);
            if (TN > 1u) { t_out(c11, sk.y, r + 16u, c + 16u, cs, lane, width, has); }
            if (TN > 2u) { t_out(c12, sk.y, r + 16u, c + 32u, cs, lane, width, has); }
            if (TN > 3u) { t_out(c13, sk.y, r + 16u, c + 48u, cs, lane, width, has); }
        }
        if (TM > 2u) {
            t_out(c20, sk.y, r + 32u, c, cs, lane, width, has);
            if (TN > 1u) { t_out(c21, sk.y, r + 32u, c + 16u, cs, lane, width, has); }
            if (TN > 2u) { t_out(c22, sk.y, r + 32u, c + 32u, cs, lane, width, has); }
            if (TN > 3u) { t_out(c23, sk.y, r + 32u, c + 48u, cs, lane, width, has); }
        }
        if (TM > 3u) {
            t_out(c30, sk.y, r + 48u, c, cs, lane, width, has);
            if (TN > 1u) { t_out(c31, sk.y, r + 48u, c + 16u, cs, lane, width, has); }
            if (TN > 2u) { t_out(c32, sk.y, r + 48u, c + 32u, cs, lane, width, has); }
            if (TN > 3u) { t_out(c33, sk.y, r + 48u, c + 48u, cs, lane, width, has); }
        }
    }
}
