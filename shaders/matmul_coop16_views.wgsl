// matmul_coop16_views.wgsl: an experimental word-pair staging for mm_coop16 (composed after
// matmul_coop16.wgsl in place of matmul_coop16_words.wgsl, with the same functions): A and B
// pairs are read through second, `array<vec2<f16>>` views of the operands (bindings 7 and 8,
// bound to the same buffers as 2 and 3) instead of u32 words converted by
// `vec2<f16>(unpack2x16float(w))`: two conversions per element fewer in the staging, which the
// twelfth session's H100 profile named as the tensor-core kernel's limit (staging skipped: 180
// TFLOP/s; staged: 57.7). (naga 30 cannot bitcast a u32 to vec2<f16>, so a second view is the
// only conversion-free path.) Used only when `XPU_COOP16_VIEWS=1`
// (src/xpu/kernels/matmul_select.rs), for products and f16 convolutions (conv_coop.rs binds the
// input and the weight at 7 and 8), and only after the cooperative self-check passed with it.
// Its index logic mirrors matmul_coop16_words.wgsl; once a GPU has measured the two, whichever
// wins should replace the other.

@group(0) @binding(7) var<storage, read> src0h: array<vec2<f16>>;
@group(0) @binding(8) var<storage, read> src1h: array<vec2<f16>>;

struct Words {
    w0: vec2<f16>,
    w1: vec2<f16>,
    w2: vec2<f16>,
    w3: vec2<f16>,
    w4: vec2<f16>,
    w5: vec2<f16>,
    w6: vec2<f16>,
    w7: vec2<f16>,
}

fn words_zero() -> Words {
    let z = vec2<f16>();
    return Words(z, z, z, z, z, z, z, z);
}

// Word e of the A tile of the K step at k0 (layouts as pa_word).
fn ha_word(mode: u32, ab: u32, row0: u32, k0: u32, e: u32) -> vec2<f16> {
    var r = e / 16u;
    var kk = 2u * (e % 16u);
    if ((mode & 2u) != 0u) {
        r = 2u * (e % 64u);
        kk = e / 64u;
    }
    if (row0 + r >= dim_m() || k0 + kk >= dim_k()) {
        return vec2<f16>();
    }
    return src0h[(ab + (row0 + r) * p(35u) + (k0 + kk) * p(36u)) / 2u];
}

fn hb_word(mode: u32, bb: u32, tile: u32, k0: u32, e: u32) -> vec2<f16> {
    var jj = 2u * (e % 64u);
    var kk = e / 64u;
    if ((mode & 4u) != 0u) {
        jj = e / 16u;
        kk = 2u * (e % 16u);
    }
    let pc = coop_col(tile, jj);
    if (pc.y == 0u || k0 + kk >= dim_k()) {
        return vec2<f16>();
    }
    return src1h[(bb + (k0 + kk) * p(37u) + pc.x * p(38u)) / 2u];
}

fn ha_put(mode: u32, e: u32, h: vec2<f16>) {
    if ((mode & 2u) != 0u) {
        let r = 2u * (e % 64u);
        let kk = e / 64u;
        coop_a[r * CA + kk] = h.x;
        coop_a[(r + 1u) * CA + kk] = h.y;
    } else {
        let at = (e / 16u) * CA + 2u * (e % 16u);
        coop_a[at] = h.x;
        coop_a[at + 1u] = h.y;
    }
}

fn hb_put(mode: u32, e: u32, h: vec2<f16>) {
    if ((mode & 4u) != 0u) {
        let jj = e / 16u;
        let kk = 2u * (e % 16u);
        coop_b[kk * CB + jj] = h.x;
        coop_b[(kk + 1u) * CB + jj] = h.y;
    } else {
        let at = (e / 64u) * CB + 2u * (e % 64u);
        coop_b[at] = h.x;
        coop_b[at + 1u] = h.y;
    }
}

// conv_word through the f16 view.
fn conv_word_h(base: u32, ih0: i32, iw0: i32, dy: i32, dx: i32, ci: u32) -> vec2<f16> {
    let ih = ih0 + dy;
    let iw = iw0 + dx;
    if (ih < 0 || iw < 0 || ih >= i32(p(13u)) || iw >= i32(p(14u))) {
        return vec2<f16>();
    }
    return src0h[(base + u32(ih) * p(25u) + u32(iw) * p(26u) + ci) / 2u];
}

// The invocation's eight A words of the K step at k0 (fetch_a through the f16 view).
fn fetch_a(mode: u32, ab: u32, row0: u32, k0: u32, lid: u32, cr: ConvRows) -> Words {
    if ((mode & 8u) != 0u) {
        let k = k0 + 2u * (lid % 16u);
        if (k >= dim_k()) {
            let z = vec2<f16>();
            return Words(z, z, z, z, z, z, z, z);
        }
        let tap = k / p(12u);
        let ci = k % p(12u);
        let dy = i32((tap / p(17u)) * p(22u));
        let dx = i32((tap % p(17u)) * p(23u));
        return Words(conv_word_h(cr.base_lo.x, cr.ih_lo.x, cr.iw_lo.x, dy, dx, ci),
                 conv_word_h(cr.base_lo.y, cr.ih_lo.y, cr.iw_lo.y, dy, dx, ci),
                 conv_word_h(cr.base_lo.z, cr.ih_lo.z, cr.iw_lo.z, dy, dx, ci),
                 conv_word_h(cr.base_lo.w, cr.ih_lo.w, cr.iw_lo.w, dy, dx, ci),
                 conv_word_h(cr.base_hi.x, cr.ih_hi.x, cr.iw_hi.x, dy, dx, ci),
                 conv_word_h(cr.base_hi.y, cr.ih_hi.y, cr.iw_hi.y, dy, dx, ci),
                 conv_word_h(cr.base_hi.z, cr.ih_hi.z, cr.iw_hi.z, dy, dx, ci),
                 conv_word_h(cr.base_hi.w, cr.ih_hi.w, cr.iw_hi.w, dy, dx, ci));
    }
    return Words(ha_word(mode, ab, row0, k0, lid), ha_word(mode, ab, row0, k0, lid + 256u),
                  ha_word(mode, ab, row0, k0, lid + 512u), ha_word(mode, ab, row0, k0, lid + 768u),
                  ha_word(mode, ab, row0, k0, lid + 1024u),
                  ha_word(mode, ab, row0, k0, lid + 1280u),
                  ha_word(mode, ab, row0, k0, lid + 1536u),
                  ha_word(mode, ab, row0, k0, lid + 1792u));
}

fn fetch_b(mode: u32, bb: u32, tile: u32, k0: u32, lid: u32) -> Words {
    return Words(hb_word(mode, bb, tile, k0, lid), hb_word(mode, bb, tile, k0, lid + 256u),
                  hb_word(mode, bb, tile, k0, lid + 512u), hb_word(mode, bb, tile, k0, lid + 768u),
                  hb_word(mode, bb, tile, k0, lid + 1024u),
                  hb_word(mode, bb, tile, k0, lid + 1280u),
                  hb_word(mode, bb, tile, k0, lid + 1536u),
                  hb_word(mode, bb, tile, k0, lid + 1792u));
}

fn put_words(mode: u32, lid: u32, wa: Words, wb: Words) {
    ha_put(mode, lid, wa.w0);
    ha_put(mode, lid + 256u, wa.w1);
    ha_put(mode, lid + 512u, wa.w2);
    ha_put(mode, lid + 768u, wa.w3);
    ha_put(mode, lid + 1024u, wa.w4);
    ha_put(mode, lid + 1280u, wa.w5);
    ha_put(mode, lid + 1536u, wa.w6);
    ha_put(mode, lid + 1792u, wa.w7);
    hb_put(mode, lid, wb.w0);
    hb_put(mode, lid + 256u, wb.w1);
    hb_put(mode, lid + 512u, wb.w2);
    hb_put(mode, lid + 768u, wb.w3);
    hb_put(mode, lid + 1024u, wb.w4);
    hb_put(mode, lid + 1280u, wb.w5);
    hb_put(mode, lid + 1536u, wb.w6);
    hb_put(mode, lid + 1792u, wb.w7);
}
