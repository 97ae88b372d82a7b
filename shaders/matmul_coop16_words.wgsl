// matmul_coop16_words.wgsl: the word-pair staging of mm_coop16 (composed after
// matmul_coop16.wgsl, whose header describes the layouts): A and B read as u32 words, each word's
// two f16 converted through `unpack2x16float` (naga 30 cannot bitcast a u32 to vec2<f16>).
// (Reading the pairs through second `array<vec2<f16>>` views of the operands instead, with no
// conversions, ran 1.3-2.2x slower on an H100: twenty-fifth session, BENCHMARKS.md; 16-byte
// quads of 8 f16 through `array<vec4<u32>>` views were right and no faster on an H200:
// twenty-eighth session.)

// VARIANT bit 12 (`XPU_COOP16_VARIANT=4096`, an experiment): ConvRows keeps each row's top and
// left input position packed in `ih` as (top + 32768) << 16 | (left + 32768), `iw` unused (8
// registers fewer through the K loop). The host sets it only where every position fits 16 bits
// (src/xpu/kernels/conv_coop.rs); a row past M packs as top -32768, which no tap reaches.
fn conv_packed() -> bool { return (VARIANT & 4096u) != 0u; }

fn conv_pack(q: vec3<i32>) -> i32 {
    let top = u32(clamp(q.y + 32768, 0, 65535));
    let left = u32(clamp(q.z + 32768, 0, 65535));
    return i32((top << 16u) | left);
}

fn conv_word(base: u32, ih0: i32, iw0: i32, t: vec3<i32>) -> u32 {
    var top = ih0;
    var left = iw0;
    if (conv_packed()) {
        top = i32(u32(ih0) >> 16u) - 32768;
        left = i32(u32(ih0) & 0xffffu) - 32768;
    }
    let at = conv_at(base, top, left, t);
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

// Writes the step's staged words to workgroup memory, tile pair `buf`.
fn put_words(mode: u32, lid: u32, wa: Words, wb: Words, buf: u32) {
    put_words_a(mode, lid, wa, buf * A_TILE);
    put_words_b(mode, lid, wb, buf * B_TILE);
}

fn put_words_a(mode: u32, lid: u32, wa: Words, o: u32) {
    pa_put(mode, lid, wa.lo.x, o);
    pa_put(mode, lid + 256u, wa.lo.y, o);
    pa_put(mode, lid + 512u, wa.lo.z, o);
    pa_put(mode, lid + 768u, wa.lo.w, o);
    pa_put(mode, lid + 1024u, wa.hi.x, o);
    pa_put(mode, lid + 1280u, wa.hi.y, o);
    pa_put(mode, lid + 1536u, wa.hi.z, o);
    pa_put(mode, lid + 1792u, wa.hi.w, o);
}

fn put_words_b(mode: u32, lid: u32, wb: Words, o: u32) {
    pb_put(mode, lid, wb.lo.x, o);
    pb_put(mode, lid + 256u, wb.lo.y, o);
    pb_put(mode, lid + 512u, wb.lo.z, o);
    pb_put(mode, lid + 768u, wb.lo.w, o);
    pb_put(mode, lid + 1024u, wb.hi.x, o);
    pb_put(mode, lid + 1280u, wb.hi.y, o);
    pb_put(mode, lid + 1536u, wb.hi.z, o);
    pb_put(mode, lid + 1792u, wb.hi.w, o);
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

fn pa_put(mode: u32, e: u32, w: u32, o: u32) {
    let h = vec2<f16>(unpack2x16float(w));
    if ((mode & 2u) != 0u) {
        let r = 2u * (e % 64u);
        let kk = e / 64u;
        coop_a[o + r * CA + kk] = h.x;
        coop_a[o + (r + 1u) * CA + kk] = h.y;
    } else {
        let at = o + (e / 16u) * CA + 2u * (e % 16u);
        coop_a[at] = h.x;
        coop_a[at + 1u] = h.y;
    }
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

fn pb_put(mode: u32, e: u32, w: u32, o: u32) {
    let h = vec2<f16>(unpack2x16float(w));
    if ((mode & 4u) != 0u) {
        let jj = e / 16u;
        let kk = 2u * (e % 16u);
        coop_b[o + kk * CB + jj] = h.x;
        coop_b[o + (kk + 1u) * CB + jj] = h.y;
    } else {
        let at = o + (e / 64u) * CB + 2u * (e % 64u);
        coop_b[at] = h.x;
        coop_b[at + 1u] = h.y;
    }
}

