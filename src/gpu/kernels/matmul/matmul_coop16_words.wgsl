// matmul_coop16_words.wgsl: the word-pair staging of mm_coop16 (composed after
// matmul_coop16.wgsl, whose header describes the layouts): A and B read as u32 words, each word's
// two f16 converted through `unpack2x16float` (naga 30 cannot bitcast a u32 to vec2<f16>; the
// SPIR-V fold of src/gpu/spirv_fold.rs turns each conversion into a bitcast). Reading the pairs
// through second `array<vec2<f16>>` views of the operands instead, with no conversions, ran
// 1.3-2.2x slower on an H100; 16-byte quads of 8 f16 through `array<vec4<u32>>` views were
// right and no faster on an H200.

fn conv_word(base: u32, ih0: i32, iw0: i32, t: vec3<i32>) -> u32 {
    let at = conv_at(base, ih0, iw0, t);
    if (at == CONV_OUTSIDE) {
        return 0u;
    }
    return src0[at / 2u];
}

struct Words {
    lo: vec4<u32>,
    hi: vec4<u32>,
}

fn words_zero() -> Words {
    return Words(vec4<u32>(), vec4<u32>());
}

// Where an invocation's staged words go (f16 indices into coop_a/coop_b), by
// the layout `mode`: word i's first half at a + i a_s (b + i b_s), its second a_next (b_next)
// on. A by k (word lid + 256i: row lid/16 + 16i, k 2(lid%16)): a_s 16 CA, halves adjacent; A
// by rows (mode bit 2: rows 2(lid%64) and +1, k lid/64 + 4i): a_s 4, halves CA apart. B by k
// (bit 4: column lid/16 + 16i, k 2(lid%16)): b_s 16, halves CB apart; B by columns (k
// lid/64 + 4i, columns 2(lid%64)): b_s 4 CB, adjacent. Bounded by construction: A's last half
// at 15 CA + 31 + 112 CA = 5111 or 127 CA + 3 + 28 = 5111 < 5120 (coop_a), B's at 31 CB + 15 +
// 112 or 3 CB + 127 + 28 CB = 4343 < 4352 (coop_b).
//
// Why: decoding each word's row and column from lid + 256i took six instructions a store in
// NAK's count; from these offsets a store takes one add.
struct PutAt {
    a: u32,
    a_s: u32,
    a_next: u32,
    b: u32,
    b_s: u32,
    b_next: u32,
}

fn put_at(mode: u32, lid: u32) -> PutAt {
    var at = PutAt((lid / 16u) * CA + 2u * (lid % 16u), 16u * CA, 1u,
                   (lid / 64u) * CB + 2u * (lid % 64u), 4u * CB, 1u);
    if ((mode & 2u) != 0u) {
        at.a = 2u * (lid % 64u) * CA + lid / 64u;
        at.a_s = 4u;
        at.a_next = CA;
    }
    if ((mode & 4u) != 0u) {
        at.b = 2u * (lid % 16u) * CB + lid / 16u;
        at.b_s = 16u;
        at.b_next = CB;
    }
    return at;
}

// Writes the step's staged words to workgroup memory.
fn put_words(mode: u32, lid: u32, wa: Words, wb: Words) {
    let at = put_at(mode, lid);
    let a = at.a;
    put_pair_a(a, at.a_next, wa.lo.x);
    put_pair_a(a + at.a_s, at.a_next, wa.lo.y);
    put_pair_a(a + 2u * at.a_s, at.a_next, wa.lo.z);
    put_pair_a(a + 3u * at.a_s, at.a_next, wa.lo.w);
    put_pair_a(a + 4u * at.a_s, at.a_next, wa.hi.x);
    put_pair_a(a + 5u * at.a_s, at.a_next, wa.hi.y);
    put_pair_a(a + 6u * at.a_s, at.a_next, wa.hi.z);
    put_pair_a(a + 7u * at.a_s, at.a_next, wa.hi.w);
    let b = at.b;
    put_pair_b(b, at.b_next, wb.lo.x);
    put_pair_b(b + at.b_s, at.b_next, wb.lo.y);
    put_pair_b(b + 2u * at.b_s, at.b_next, wb.lo.z);
    put_pair_b(b + 3u * at.b_s, at.b_next, wb.lo.w);
    put_pair_b(b + 4u * at.b_s, at.b_next, wb.hi.x);
    put_pair_b(b + 5u * at.b_s, at.b_next, wb.hi.y);
    put_pair_b(b + 6u * at.b_s, at.b_next, wb.hi.z);
    put_pair_b(b + 7u * at.b_s, at.b_next, wb.hi.w);
}

fn put_pair_a(at: u32, next: u32, w: u32) {
    let h = vec2<f16>(unpack2x16float(w));
    coop_a[at] = h.x;
    coop_a[at + next] = h.y;
}

fn put_pair_b(at: u32, next: u32, w: u32) {
    let h = vec2<f16>(unpack2x16float(w));
    coop_b[at] = h.x;
    coop_b[at + next] = h.y;
}

// The invocation's eight A words of the K step at k0.
fn fetch_a(mode: u32, ab: u32, row0: u32, k0: u32, lid: u32, cr: ConvRows) -> Words {
    if ((mode & 8u) != 0u) {
        let k = k0 + 2u * (lid % 16u);
        if (k >= dim_k()) {
            return Words(vec4<u32>(), vec4<u32>());
        }
        let t = conv_tap(k);
        return Words(
            vec4<u32>(conv_word(cr.base_lo.x, cr.ih_lo.x, cr.iw_lo.x, t),
                      conv_word(cr.base_lo.y, cr.ih_lo.y, cr.iw_lo.y, t),
                      conv_word(cr.base_lo.z, cr.ih_lo.z, cr.iw_lo.z, t),
                      conv_word(cr.base_lo.w, cr.ih_lo.w, cr.iw_lo.w, t)),
            vec4<u32>(conv_word(cr.base_hi.x, cr.ih_hi.x, cr.iw_hi.x, t),
                      conv_word(cr.base_hi.y, cr.ih_hi.y, cr.iw_hi.y, t),
                      conv_word(cr.base_hi.z, cr.ih_hi.z, cr.iw_hi.z, t),
                      conv_word(cr.base_hi.w, cr.ih_hi.w, cr.iw_hi.w, t)));
    }
    return Words(
        vec4<u32>(pa_word(mode, ab, row0, k0, lid), pa_word(mode, ab, row0, k0, lid + 256u),
                  pa_word(mode, ab, row0, k0, lid + 512u), pa_word(mode, ab, row0, k0, lid + 768u)),
        vec4<u32>(pa_word(mode, ab, row0, k0, lid + 1024u), pa_word(mode, ab, row0, k0, lid + 1280u),
                  pa_word(mode, ab, row0, k0, lid + 1536u), pa_word(mode, ab, row0, k0, lid + 1792u)));
}

// The invocation's eight B words of the K step at k0.
fn fetch_b(mode: u32, bb: u32, tile: u32, k0: u32, lid: u32) -> Words {
    return Words(
        vec4<u32>(pb_word(mode, bb, tile, k0, lid), pb_word(mode, bb, tile, k0, lid + 256u),
                  pb_word(mode, bb, tile, k0, lid + 512u), pb_word(mode, bb, tile, k0, lid + 768u)),
        vec4<u32>(pb_word(mode, bb, tile, k0, lid + 1024u), pb_word(mode, bb, tile, k0, lid + 1280u),
                  pb_word(mode, bb, tile, k0, lid + 1536u), pb_word(mode, bb, tile, k0, lid + 1792u)));
}

fn pa_word(mode: u32, ab: u32, row0: u32, k0: u32, e: u32) -> u32 {
    var r = e / 16u;
    var kk = 2u * (e % 16u);
    if ((mode & 2u) != 0u) {
        r = 2u * (e % 64u);
        kk = e / 64u;
    }
    if (row0 + r >= dim_m() || k0 + kk >= dim_k()) {
        return 0u;
    }
    return src0[(ab + (row0 + r) * p(35u) + (k0 + kk) * p(36u)) / 2u];
}

fn pb_word(mode: u32, bb: u32, tile: u32, k0: u32, e: u32) -> u32 {
    var jj = 2u * (e % 64u);
    var kk = e / 64u;
    if ((mode & 4u) != 0u) {
        jj = e / 16u;
        kk = 2u * (e % 16u);
    }
    let pc = coop_col(tile, jj);
    if (pc.y == 0u || k0 + kk >= dim_k()) {
        return 0u;
    }
    return src1[(bb + (k0 + kk) * p(37u) + pc.x * p(38u)) / 2u];
}
