// matmul_coop16_lean.wgsl: mm_coop16's lean staging (VARIANT bit 13, `XPU_COOP16_LEAN=1`, an
// experiment until a GPU times it; composed after matmul_coop16_words.wgsl, before the layout
// file).
//
// Why: Mesa's NAK compiler (benches/lavapipe_coop/kloop.sh, the nearest thing to NVIDIA's
// compiler this workplace has) turns the default K loop into about 970 instructions per K step
// besides its register moves, for 32 tensor-core instructions: the word-pair staging decodes
// every word's row, column and bounds from the params and the runtime `mode` each step. Here
// the layout is a pipeline constant and each invocation computes its words' offsets once; a K
// step inside the matrix then costs one add per word before its load, and only steps that
// touch an edge (a partial tile, the last K step when K % 32 != 0) take the checked path of
// matmul_coop16_words.wgsl. The stores' workgroup offsets (put_at) are likewise computed
// once, and with the layout constant each store's offset from them is an immediate. NAK's count per interior K step: 460 (260 with XPU_COOP16_UNCHECKED=1) against
// the default's 969 (BENCHMARKS.md, thirty-sixth session).
//
// VARIANT bit 14 picks the layout: clear, A by k and B by columns (`pairs_mode` 1: both
// row-major); set, A by k and B by k (mode 5: B column-major, a transposed weight). The host
// sets bit 14 from the operand's layout; a product whose runtime mode differs (a strided view,
// an odd offset) takes mm_coop16's default loop, so a wrong guess costs speed, never a result.
// GEGLU products are covered (their gate columns are uniform offsets per word). The
// convolution gather (mode 13, VARIANT bit 6, with bit 14: its weights are B by k) takes the
// lean B fetch, and a lean A gather where the input's channels C are a multiple of 32 (every
// SD UNet layer but the first; the check is uniform, at run time): a K step's 32 columns then
// share one tap, whose offsets advance by one compare per step instead of two divisions per
// word, and each of an invocation's eight rows keeps its input word offset at the tap (0, 0)
// and its top and left positions, so a word costs two adds, two unsigned range tests and an
// add. Other channel counts (and the packed row positions of VARIANT bit 12) keep the checked
// gather of matmul_coop16_words.wgsl.

fn lean_asked() -> bool { return (VARIANT & 8192u) != 0u; }

fn lean_mode() -> u32 { return select(1u, 5u, (VARIANT & 16384u) != 0u); }

// Word offsets of one invocation: `a`/`b` index word 0 of its A/B words at k = 0 (in u32
// words of src0/src1); `a_i`/`b_i` step from word i to word i + 1 (B by k: 0, see lean_b).
struct LeanAt {
    a: u32,
    a_i: u32,
    b: u32,
    b_i: u32,
}

// A by k: word i holds row lid/16 + 16i, k 2(lid%16) and 2(lid%16)+1. B by columns: word i
// holds k lid/64 + 4i, columns 2(lid%64) and +1 (one output column pair for the whole loop).
// B by k: word i holds column pc_i of lid/16 + 16i (lean_dcol), k 2(lid%16) and +1.
fn lean_at(ab: u32, bb: u32, row0: u32, tile: u32, lid: u32) -> LeanAt {
    let ars = p(35u);
    let a = (ab + (row0 + lid / 16u) * ars + 2u * (lid % 16u)) / 2u;
    if (lean_mode() == 5u) {
        let c0 = coop_col(tile, lid / 16u).x;
        return LeanAt(a, 8u * ars, (bb + 2u * (lid % 16u) + c0 * p(38u)) / 2u, 0u);
    }
    let brs = p(37u);
    let c = coop_col(tile, 2u * (lid % 64u)).x;
    return LeanAt(a, 8u * ars, (bb + (lid / 64u) * brs + c) / 2u, 2u * brs);
}

// B by k: how far word i's column lies from word 0's (uniform: coop_col of lid/16 + 16i minus
// that of lid/16; GEGLU's gate half starts N columns on).
fn lean_dcol(i: u32) -> u32 {
    if (is_geglu()) {
        return (i / 4u) * 32u + 16u * (i % 2u) + select(0u, dim_n(), i % 4u >= 2u);
    }
    return 16u * i;
}

// The invocation's eight A words of the K step at k0: unchecked where `full`, else
// matmul_coop16_words.wgsl's checked fetch.
fn lean_a(at: LeanAt, k0: u32, full: bool, ab: u32, row0: u32, lid: u32) -> Words {
    if (!full) {
        return fetch_a(lean_mode(), ab, row0, k0, lid, ConvRows(vec4<i32>(), vec4<i32>(),
                       vec4<i32>(), vec4<i32>(), vec4<u32>(), vec4<u32>()));
    }
    let w = at.a + k0 / 2u;
    let s = at.a_i;
    return Words(vec4<u32>(src0[w], src0[w + s], src0[w + 2u * s], src0[w + 3u * s]),
                 vec4<u32>(src0[w + 4u * s], src0[w + 5u * s], src0[w + 6u * s],
                           src0[w + 7u * s]));
}

// The invocation's eight B words of the K step at k0 (as lean_a).
fn lean_b(at: LeanAt, k0: u32, full: bool, bb: u32, tile: u32, lid: u32) -> Words {
    if (!full) {
        return fetch_b(lean_mode(), bb, tile, k0, lid);
    }
    if (lean_mode() == 5u) {
        let w = at.b + k0 / 2u;
        let h = p(38u) / 2u;
        return Words(vec4<u32>(src1[w], src1[w + lean_dcol(1u) * h],
                               src1[w + lean_dcol(2u) * h], src1[w + lean_dcol(3u) * h]),
                     vec4<u32>(src1[w + lean_dcol(4u) * h], src1[w + lean_dcol(5u) * h],
                               src1[w + lean_dcol(6u) * h], src1[w + lean_dcol(7u) * h]));
    }
    let w = at.b + (k0 / 2u) * p(37u);
    let s = at.b_i;
    return Words(vec4<u32>(src1[w], src1[w + s], src1[w + 2u * s], src1[w + 3u * s]),
                 vec4<u32>(src1[w + 4u * s], src1[w + 5u * s], src1[w + 6u * s],
                           src1[w + 7u * s]));
}

// Whether the lean round serves a workgroup whose run-time layout is `mode`.
fn lean_serves(mode: u32) -> bool {
    let conv = is_conv() && mode == 13u && lean_mode() == 5u;
    return lean_asked() && (mode == lean_mode() || conv) && (VARIANT & 0xfbfu) == 0u;
}

// The A words of a lean round: the convolution's gather (lean_gather where `tap` serves), else
// lean_a.
// `gathers`: lean_gathers(), read once per round; `lr`: the rows (the checked gather's
// ConvRows in the same registers where it does not serve, so only one set stays live).
fn lean_a_words(at: LeanAt, k0: u32, full: bool, ab: u32, row0: u32, lid: u32,
                gathers: bool, lr: LeanRows, tap: LeanTap) -> Words {
    if (is_conv() && gathers) {
        return lean_gather(lr, tap);
    }
    if (is_conv()) {
        return fetch_a(13u, ab, row0, k0, lid, ConvRows(lr.top_lo, lr.top_hi, lr.left_lo,
                       lr.left_hi, lr.w_lo, lr.w_hi));
    }
    return lean_a(at, k0, full, ab, row0, lid);
}

// Whether the lean A gather serves this convolution (uniform): C a multiple of 32, rows not
// packed.
fn lean_gathers() -> bool {
    return p(12u) % 32u == 0u && !conv_packed();
}

// The tap of a K step (k0 a multiple of 32, C too): channel c0 of tap (ky, kx).
struct LeanTap {
    c0: u32,
    kx: u32,
    ky: u32,
}

fn lean_tap_at(k0: u32) -> LeanTap {
    let c = max(p(12u), 1u);
    let tap = k0 / c;
    let kw = max(p(17u), 1u);
    return LeanTap(k0 % c, tap % kw, tap / kw);
}

// The next K step's tap (32 channels on).
fn lean_tap_next(t: LeanTap) -> LeanTap {
    let c0 = t.c0 + 32u;
    let wrap = c0 >= p(12u);
    let kx = t.kx + select(0u, 1u, wrap);
    let wrap_x = kx >= p(17u);
    return LeanTap(select(c0, 0u, wrap), select(kx, 0u, wrap_x), t.ky + select(0u, 1u, wrap_x));
}

// An invocation's eight gathered rows (lid/16 + 16i): the word offset of each row's input at
// tap (0, 0) plus the invocation's channel 2(lid%16) (wrapping where the tap lies in the
// padding: only used inside), and the rows' top and left input positions.
struct LeanRows {
    w_lo: vec4<u32>,
    w_hi: vec4<u32>,
    top_lo: vec4<i32>,
    top_hi: vec4<i32>,
    left_lo: vec4<i32>,
    left_hi: vec4<i32>,
}

fn lean_rows(cr: ConvRows, lid: u32) -> LeanRows {
    // Halves of even element offsets, each part halved alone: a padding row's negative top or
    // left wraps, and halving the wrapped sum would not be its half modulo 2^32.
    let rs = vec4<u32>(p(25u) / 2u);
    let ps = vec4<u32>(p(26u) / 2u);
    let c = vec4<u32>(lid % 16u);
    let w_lo = cr.base_lo / 2u + bitcast<vec4<u32>>(cr.ih_lo) * rs
               + bitcast<vec4<u32>>(cr.iw_lo) * ps + c;
    let w_hi = cr.base_hi / 2u + bitcast<vec4<u32>>(cr.ih_hi) * rs
               + bitcast<vec4<u32>>(cr.iw_hi) * ps + c;
    return LeanRows(w_lo, w_hi, cr.ih_lo, cr.ih_hi, cr.iw_lo, cr.iw_hi);
}

// One gathered word: row offset w at input position (top + dy, left + dx) with the tap's word
// offset tw, 0 in the padding (the load then reads word 0).
fn lean_gather_word(w: u32, top: i32, left: i32, dy: i32, dx: i32, tw: u32) -> u32 {
    let inside = u32(top + dy) < p(13u) && u32(left + dx) < p(14u);
    return select(0u, src0[select(0u, w + tw, inside)], inside);
}

// The invocation's eight A words of the K step whose tap is `t` (C % 32 == 0).
fn lean_gather(r: LeanRows, t: LeanTap) -> Words {
    let dy = i32(t.ky * p(22u));
    let dx = i32(t.kx * p(23u));
    // Element strides and C are even (the host's guarantee): each part halves exactly.
    let tw = u32(dy) * (p(25u) / 2u) + u32(dx) * (p(26u) / 2u) + t.c0 / 2u;
    return Words(
        vec4<u32>(lean_gather_word(r.w_lo.x, r.top_lo.x, r.left_lo.x, dy, dx, tw),
                  lean_gather_word(r.w_lo.y, r.top_lo.y, r.left_lo.y, dy, dx, tw),
                  lean_gather_word(r.w_lo.z, r.top_lo.z, r.left_lo.z, dy, dx, tw),
                  lean_gather_word(r.w_lo.w, r.top_lo.w, r.left_lo.w, dy, dx, tw)),
        vec4<u32>(lean_gather_word(r.w_hi.x, r.top_hi.x, r.left_hi.x, dy, dx, tw),
                  lean_gather_word(r.w_hi.y, r.top_hi.y, r.left_hi.y, dy, dx, tw),
                  lean_gather_word(r.w_hi.z, r.top_hi.z, r.left_hi.z, dy, dx, tw),
                  lean_gather_word(r.w_hi.w, r.top_hi.w, r.left_hi.w, dy, dx, tw)));
}

// One round of mm_coop16 (slot `slot`'s 2x4 accumulator tiles over the K range sk.z..sk.w,
// then the epilogue) with the lean staging; `tile_full`: the 128x128 tile lies inside M and N
// (for the convolution, only its columns are asked: A is gathered with checks); `cr`: the
// convolution's gathered rows. The K loop is mm_coop16's (matmul_coop16.wgsl): words of the
// next step fetched before this step's products, stored after its trailing barrier.
fn coop16_lean_round(sk: vec4<u32>, ab: u32, bb: u32, row0: u32, tile: u32, lid: u32,
                     slot: u32, lane: u32, width: u32, tile_full: bool, cr: ConvRows) {
    let cs = min(slot, 7u);
    let ar = (cs / 2u) * 32u;
    let bc = (cs % 2u) * 64u;
    let at = lean_at(ab, bb, row0, tile, lid);
    var c00 = coop_mat16x16<f32, C>();
    var c01 = c00;
    var c02 = c00;
    var c03 = c00;
    var c10 = c00;
    var c11 = c00;
    var c12 = c00;
    var c13 = c00;
    let full0 = tile_full && sk.z + 32u <= dim_k();
    let gathers = is_conv() && lean_gathers();
    var lr = LeanRows(cr.base_lo, cr.base_hi, cr.ih_lo, cr.ih_hi, cr.iw_lo, cr.iw_hi);
    var tap = LeanTap(0u, 0u, 0u);
    if (gathers) {
        lr = lean_rows(cr, lid);
        tap = lean_tap_at(sk.z);
    }
    var wa = lean_a_words(at, sk.z, full0, ab, row0, lid, gathers, lr, tap);
    var wb = lean_b(at, sk.z, full0, bb, tile, lid);
    // The staging layout: the gather's A rows are by k like lean_mode()'s.
    let put_mode = select(lean_mode(), 13u, is_conv());
    let put = put_at(put_mode, lid);
    for (var k0 = sk.z; k0 < sk.w; k0 = k0 + 32u) {
        put_words_at(put, wa, wb, 0u);
        workgroupBarrier();
        let kn = k0 + 32u;
        if (kn < sk.w) {
            let full = tile_full && kn + 32u <= dim_k();
            tap = lean_tap_next(tap);
            wa = lean_a_words(at, kn, full, ab, row0, lid, gathers, lr, tap);
            wb = lean_b(at, kn, full, bb, tile, lid);
        }
        for (var kk = 0u; kk < 32u; kk = kk + 16u) {
            let a0 = coopLoadT<coop_mat16x16<f16, A>>(&coop_a[ar * CA + kk], CA);
            let a1 = coopLoadT<coop_mat16x16<f16, A>>(&coop_a[(ar + 16u) * CA + kk], CA);
            let b0 = coopLoadT<coop_mat16x16<f16, B>>(&coop_b[kk * CB + bc], CB);
            c00 = coopMultiplyAdd(a0, b0, c00);
            c10 = coopMultiplyAdd(a1, b0, c10);
            let b1 = coopLoadT<coop_mat16x16<f16, B>>(&coop_b[kk * CB + bc + 16u], CB);
            c01 = coopMultiplyAdd(a0, b1, c01);
            c11 = coopMultiplyAdd(a1, b1, c11);
            let b2 = coopLoadT<coop_mat16x16<f16, B>>(&coop_b[kk * CB + bc + 32u], CB);
            c02 = coopMultiplyAdd(a0, b2, c02);
            c12 = coopMultiplyAdd(a1, b2, c12);
            let b3 = coopLoadT<coop_mat16x16<f16, B>>(&coop_b[kk * CB + bc + 48u], CB);
            c03 = coopMultiplyAdd(a0, b3, c03);
            c13 = coopMultiplyAdd(a1, b3, c13);
        }
        workgroupBarrier();
    }
    coop16_epilogue(sk.y, tile, row0, slot, lane, width, c00, c01, c02, c03, c10, c11, c12,
                    c13);
}
