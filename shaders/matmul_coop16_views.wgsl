// matmul_coop16_views.wgsl: an experimental form of mm_coop16 whose word-pair staging reads
// f16 pairs through `array<vec2<f16>>` views of A and B (bindings 7 and 8, bound to the same
// buffers as 2 and 3) instead of u32 words converted by `vec2<f16>(unpack2x16float(w))`:
// two conversions per element fewer in the staging, which the twelfth session's H100 profile
// named as the tensor-core kernel's limit (staging skipped: 180 TFLOP/s; staged: 57.7).
// (naga 30 cannot bitcast a u32 to vec2<f16>, so a second view is the only conversion-free
// path.) Composed as common.wgsl + matmul.wgsl + matmul_coop16.wgsl + this file; used only
// when `XPU_COOP16_VIEWS=1` (src/xpu/kernels/matmul_select.rs), for products and f16
// convolutions (the gather through the same view, conv_coop.rs binds the input and weight at 7
// and 8), and only after the cooperative self-check passed with it. Until a GPU measures it
// against mm_coop16, its index logic mirrors pa_word/pb_word/pa_put/pb_put/fetch_a there;
// whichever form wins should replace the other. No VARIANT diagnostics here beyond
// pairs_mode's.

@group(0) @binding(7) var<storage, read> src0h: array<vec2<f16>>;
@group(0) @binding(8) var<storage, read> src1h: array<vec2<f16>>;

struct HWords {
    w0: vec2<f16>,
    w1: vec2<f16>,
    w2: vec2<f16>,
    w3: vec2<f16>,
    w4: vec2<f16>,
    w5: vec2<f16>,
    w6: vec2<f16>,
    w7: vec2<f16>,
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
fn fetch_ah(mode: u32, ab: u32, row0: u32, k0: u32, lid: u32, cr: ConvRows) -> HWords {
    if ((mode & 8u) != 0u) {
        let k = k0 + 2u * (lid % 16u);
        if (k >= dim_k()) {
            let z = vec2<f16>();
            return HWords(z, z, z, z, z, z, z, z);
        }
        let tap = k / p(12u);
        let ci = k % p(12u);
        let dy = i32((tap / p(17u)) * p(22u));
        let dx = i32((tap % p(17u)) * p(23u));
        return HWords(conv_word_h(cr.base_lo.x, cr.ih_lo.x, cr.iw_lo.x, dy, dx, ci),
                      conv_word_h(cr.base_lo.y, cr.ih_lo.y, cr.iw_lo.y, dy, dx, ci),
                      conv_word_h(cr.base_lo.z, cr.ih_lo.z, cr.iw_lo.z, dy, dx, ci),
                      conv_word_h(cr.base_lo.w, cr.ih_lo.w, cr.iw_lo.w, dy, dx, ci),
                      conv_word_h(cr.base_hi.x, cr.ih_hi.x, cr.iw_hi.x, dy, dx, ci),
                      conv_word_h(cr.base_hi.y, cr.ih_hi.y, cr.iw_hi.y, dy, dx, ci),
                      conv_word_h(cr.base_hi.z, cr.ih_hi.z, cr.iw_hi.z, dy, dx, ci),
                      conv_word_h(cr.base_hi.w, cr.ih_hi.w, cr.iw_hi.w, dy, dx, ci));
    }
    return HWords(ha_word(mode, ab, row0, k0, lid), ha_word(mode, ab, row0, k0, lid + 256u),
                  ha_word(mode, ab, row0, k0, lid + 512u), ha_word(mode, ab, row0, k0, lid + 768u),
                  ha_word(mode, ab, row0, k0, lid + 1024u),
                  ha_word(mode, ab, row0, k0, lid + 1280u),
                  ha_word(mode, ab, row0, k0, lid + 1536u),
                  ha_word(mode, ab, row0, k0, lid + 1792u));
}

fn fetch_bh(mode: u32, bb: u32, tile: u32, k0: u32, lid: u32) -> HWords {
    return HWords(hb_word(mode, bb, tile, k0, lid), hb_word(mode, bb, tile, k0, lid + 256u),
                  hb_word(mode, bb, tile, k0, lid + 512u), hb_word(mode, bb, tile, k0, lid + 768u),
                  hb_word(mode, bb, tile, k0, lid + 1024u),
                  hb_word(mode, bb, tile, k0, lid + 1280u),
                  hb_word(mode, bb, tile, k0, lid + 1536u),
                  hb_word(mode, bb, tile, k0, lid + 1792u));
}

fn put_h(mode: u32, lid: u32, wa: HWords, wb: HWords) {
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

// One output slot's epilogue pass (as in mm_coop16): accumulators through coop_c, then the
// subgroup's lanes finish column pairs. GEGLU pairs tile j with its gate tile j + 2.
fn coop16h_store(c0: coop_mat16x16<f32, C>, c1: coop_mat16x16<f32, C>, base: u32, has: bool) {
    if (has) {
        coopStoreT(c0, &coop_c[base], 16u);
        coopStoreT(c1, &coop_c[base + 256u], 16u);
    }
    workgroupBarrier();
}

@compute @workgroup_size(256)
fn mm_coop16h(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32,
              @builtin(subgroup_id) sg: u32, @builtin(num_subgroups) nsg: u32,
              @builtin(subgroup_invocation_id) lane: u32, @builtin(subgroup_size) width: u32) {
    let b = wid.z + p(39u);
    let ab = a_base(b);
    let bb = b_base(b);
    let row0 = wid.y * 128u;
    let rows_full = row0 + 128u <= dim_m();
    let cf = cols_full(wid.x, 128u);
    if (lid == 0u) {
        coop_c[4095] = f32((8u + nsg - 1u) / nsg);
    }
    let passes = u32(workgroupUniformLoad(&coop_c[4095]));
    let g = is_geglu();
    let mode = pairs_mode(ab, bb);
    var cr = ConvRows(vec4<i32>(), vec4<i32>(), vec4<i32>(), vec4<i32>(), vec4<u32>(), vec4<u32>());
    if ((mode & 8u) != 0u) {
        cr = conv_rows(ab, row0, lid);
    }
    for (var round = 0u; round < passes; round = round + 1u) {
        let slot = sg + round * nsg;
        let has = slot < 8u;
        let cs = min(slot, 7u);
        let ar = (cs / 2u) * 32u;
        let bc = (cs % 2u) * 64u;
        var c00 = coop_mat16x16<f32, C>();
        var c01 = c00;
        var c02 = c00;
        var c03 = c00;
        var c10 = c00;
        var c11 = c00;
        var c12 = c00;
        var c13 = c00;
        var wa = HWords(vec2<f16>(), vec2<f16>(), vec2<f16>(), vec2<f16>(), vec2<f16>(),
                        vec2<f16>(), vec2<f16>(), vec2<f16>());
        var wb = wa;
        if (mode != 0u) {
            wa = fetch_ah(mode, ab, row0, 0u, lid, cr);
            wb = fetch_bh(mode, bb, wid.x, 0u, lid);
        }
        for (var k0 = 0u; k0 < dim_k(); k0 = k0 + 32u) {
            if (mode != 0u) {
                put_h(mode, lid, wa, wb);
            } else {
                coop_stage(ab, bb, row0, wid.x, k0, lid, rows_full && cf && k0 + 32u <= dim_k());
            }
            workgroupBarrier();
            let kn = k0 + 32u;
            if (mode != 0u && kn < dim_k()) {
                wa = fetch_ah(mode, ab, row0, kn, lid, cr);
                wb = fetch_bh(mode, bb, wid.x, kn, lid);
            }
            for (var kk = 0u; kk < 32u; kk = kk + 16u) {
                let a0 = coopLoadT<coop_mat16x16<f16, A>>(&coop_a[ar * CA + kk], CA);
                let a1 = coopLoadT<coop_mat16x16<f16, A>>(&coop_a[(ar + 16u) * CA + kk], CA);
                let b0 = coopLoadT<coop_mat16x16<f16, B>>(&coop_b[kk * CB + bc], CB);
                let b1 = coopLoadT<coop_mat16x16<f16, B>>(&coop_b[kk * CB + bc + 16u], CB);
                let b2 = coopLoadT<coop_mat16x16<f16, B>>(&coop_b[kk * CB + bc + 32u], CB);
                let b3 = coopLoadT<coop_mat16x16<f16, B>>(&coop_b[kk * CB + bc + 48u], CB);
                c00 = coopMultiplyAdd(a0, b0, c00);
                c01 = coopMultiplyAdd(a0, b1, c01);
                c02 = coopMultiplyAdd(a0, b2, c02);
                c03 = coopMultiplyAdd(a0, b3, c03);
                c10 = coopMultiplyAdd(a1, b0, c10);
                c11 = coopMultiplyAdd(a1, b1, c11);
                c12 = coopMultiplyAdd(a1, b2, c12);
                c13 = coopMultiplyAdd(a1, b3, c13);
            }
            workgroupBarrier();
        }
        let base = cs * 512u;
        let r0 = row0 + ar;
        if (g) {
            let oc = wid.x * 64u + (slot % 2u) * 32u;
            coop16h_store(c00, c02, base, has);
            coop_finish(b, r0, oc, base, 256u, lane, width, has);
            workgroupBarrier();
            coop16h_store(c01, c03, base, has);
            coop_finish(b, r0, oc + 16u, base, 256u, lane, width, has);
            workgroupBarrier();
            coop16h_store(c10, c12, base, has);
            coop_finish(b, r0 + 16u, oc, base, 256u, lane, width, has);
            workgroupBarrier();
            coop16h_store(c11, c13, base, has);
            coop_finish(b, r0 + 16u, oc + 16u, base, 256u, lane, width, has);
            workgroupBarrier();
        } else {
            let oc = wid.x * 128u + bc;
            coop16h_store(c00, c01, base, has);
            coop_finish(b, r0, oc, base, 0u, lane, width, has);
            coop_finish(b, r0, oc + 16u, base + 256u, 0u, lane, width, has);
            workgroupBarrier();
            coop16h_store(c02, c03, base, has);
            coop_finish(b, r0, oc + 32u, base, 0u, lane, width, has);
            coop_finish(b, r0, oc + 48u, base + 256u, 0u, lane, width, has);
            workgroupBarrier();
            coop16h_store(c10, c11, base, has);
            coop_finish(b, r0 + 16u, oc, base, 0u, lane, width, has);
            coop_finish(b, r0 + 16u, oc + 16u, base + 256u, 0u, lane, width, has);
            workgroupBarrier();
            coop16h_store(c12, c13, base, has);
            coop_finish(b, r0 + 16u, oc + 32u, base, 0u, lane, width, has);
            coop_finish(b, r0 + 16u, oc + 48u, base + 256u, 0u, lane, width, has);
            workgroupBarrier();
        }
    }
}
