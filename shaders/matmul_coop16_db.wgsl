// matmul_coop16_db.wgsl: an experimental double-buffered form of mm_coop16 (composed after
// matmul_coop16.wgsl and matmul_coop16_words.wgsl, whose layouts and helpers it reuses); chosen
// only with `XPU_COOP16_DB=1` until a GPU measures it (`benches/gpu/run_gpu.sh select`).
//
// mm_coop16 stages a K step, waits at a barrier, multiplies, and waits again before the next
// staging overwrites the tiles: two barriers per K step, and no subgroup can stage while another
// still multiplies. Here the tiles live twice (`coop_ad`, `coop_bd`: buffers 0 and 1 at offsets
// 0 and DA / DB): K step s multiplies buffer s % 2 while the words of step s + 1 (fetched before
// the products, as in mm_coop16) go to the other buffer, then one barrier. Buffer (s + 1) % 2 was
// last read by the products of step s - 1, which every subgroup finished before the barrier that
// ended step s - 1, so the writes never race the reads.
// Workgroup memory: 2 x 10 KiB (A) + 2 x 8.5 KiB (B) + 8 KiB (C) = 45 KiB (the epilogue takes
// two rounds of four subgroups through 2048 f32 instead of one round of eight through 4096, to
// stay under the 48 KiB NVIDIA's Vulkan driver reports). Same products in the same order as
// mm_coop16: same bits. VARIANT bit 6 selects the convolution gather, as in mm_coop16; the
// diagnostic bits 0-5 are ignored.

const DA: u32 = 5120u;
const DB: u32 = 4352u;

var<workgroup> coop_ad: array<f16, 10240>;
var<workgroup> coop_bd: array<f16, 8704>;
var<workgroup> coop_cd: array<f32, 2048>;

// mm_coop16's per-element staging (any layout) into buffer offsets `oa`, `ob`.
fn stage_d(ab: u32, bb: u32, row0: u32, tile: u32, k0: u32, lid: u32, oa: u32, ob: u32) {
    let ars = p(35u);
    let acs = p(36u);
    let a_by_k = acs == 1u;
    for (var e = lid; e < 4096u; e = e + 256u) {
        let r = select(e % 128u, e / 32u, a_by_k);
        let kk = select(e / 128u, e % 32u, a_by_k);
        var v = 0.0;
        if (row0 + r < dim_m() && k0 + kk < dim_k()) {
            v = load0(ab + (row0 + r) * ars + (k0 + kk) * acs);
        }
        coop_ad[oa + r * CA + kk] = f16(v);
    }
    let brs = p(37u);
    let bcs = p(38u);
    let b_by_k = brs == 1u && bcs != 1u;
    for (var e = lid; e < 4096u; e = e + 256u) {
        let jj = select(e % 128u, e / 32u, b_by_k);
        let kk = select(e / 128u, e % 32u, b_by_k);
        let pc = coop_col(tile, jj);
        var v = 0.0;
        if (pc.y != 0u && k0 + kk < dim_k()) {
            v = load1(bb + (k0 + kk) * brs + pc.x * bcs);
        }
        coop_bd[ob + kk * CB + jj] = f16(v);
    }
}

// put_words into buffer offsets `oa`, `ob`.
fn put_words_d(mode: u32, lid: u32, wa: Words, wb: Words, oa: u32, ob: u32) {
    pa_put_d(mode, lid, wa.lo.x, oa);
    pa_put_d(mode, lid + 256u, wa.lo.y, oa);
    pa_put_d(mode, lid + 512u, wa.lo.z, oa);
    pa_put_d(mode, lid + 768u, wa.lo.w, oa);
    pa_put_d(mode, lid + 1024u, wa.hi.x, oa);
    pa_put_d(mode, lid + 1280u, wa.hi.y, oa);
    pa_put_d(mode, lid + 1536u, wa.hi.z, oa);
    pa_put_d(mode, lid + 1792u, wa.hi.w, oa);
    pb_put_d(mode, lid, wb.lo.x, ob);
    pb_put_d(mode, lid + 256u, wb.lo.y, ob);
    pb_put_d(mode, lid + 512u, wb.lo.z, ob);
    pb_put_d(mode, lid + 768u, wb.lo.w, ob);
    pb_put_d(mode, lid + 1024u, wb.hi.x, ob);
    pb_put_d(mode, lid + 1280u, wb.hi.y, ob);
    pb_put_d(mode, lid + 1536u, wb.hi.z, ob);
    pb_put_d(mode, lid + 1792u, wb.hi.w, ob);
}

// pa_put into buffer offset `oa`.
fn pa_put_d(mode: u32, e: u32, w: u32, oa: u32) {
    let h = vec2<f16>(unpack2x16float(w));
    if ((mode & 2u) != 0u) {
        let r = 2u * (e % 64u);
        let kk = e / 64u;
        coop_ad[oa + r * CA + kk] = h.x;
        coop_ad[oa + (r + 1u) * CA + kk] = h.y;
    } else {
        let at = oa + (e / 16u) * CA + 2u * (e % 16u);
        coop_ad[at] = h.x;
        coop_ad[at + 1u] = h.y;
    }
}

// pb_put into buffer offset `ob`.
fn pb_put_d(mode: u32, e: u32, w: u32, ob: u32) {
    let h = vec2<f16>(unpack2x16float(w));
    if ((mode & 4u) != 0u) {
        let jj = e / 16u;
        let kk = 2u * (e % 16u);
        coop_bd[ob + kk * CB + jj] = h.x;
        coop_bd[ob + (kk + 1u) * CB + jj] = h.y;
    } else {
        let at = ob + (e / 64u) * CB + 2u * (e % 64u);
        coop_bd[at] = h.x;
        coop_bd[at + 1u] = h.y;
    }
}

// coop_finish over coop_cd.
fn finish_d(b: u32, r0: u32, c0: u32, base: u32, gate: u32, lane: u32, width: u32, has: bool) {
    if (!has) {
        return;
    }
    for (var q = lane; q < 128u; q = q + width) {
        let r = q / 8u;
        let c = 2u * (q % 8u);
        let i = base + r * 16u + c;
        finish_pair(b, r0 + r, c0 + c, coop_cd[i], coop_cd[i + 1u], coop_cd[i + gate],
                    coop_cd[i + gate + 1u]);
    }
}

@compute @workgroup_size(256)
fn mm_coop16_db(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32,
                @builtin(subgroup_id) sg: u32, @builtin(num_subgroups) nsg: u32,
                @builtin(subgroup_invocation_id) lane: u32, @builtin(subgroup_size) width: u32) {
    let b = wid.z + p(39u);
    let ab = a_base(b);
    let bb = b_base(b);
    let row0 = wid.y * 128u;
    if (lid == 0u) {
        coop_cd[2047] = f32((8u + nsg - 1u) / nsg);
    }
    let passes = u32(workgroupUniformLoad(&coop_cd[2047]));
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
        var wa = words_zero();
        var wb = wa;
        // Step 0 into buffer 0.
        if (mode != 0u) {
            wa = fetch_a(mode, ab, row0, 0u, lid, cr);
            wb = fetch_b(mode, bb, wid.x, 0u, lid);
            put_words_d(mode, lid, wa, wb, 0u, 0u);
        } else {
            stage_d(ab, bb, row0, wid.x, 0u, lid, 0u, 0u);
        }
        workgroupBarrier();
        var cur = 0u;
        for (var k0 = 0u; k0 < dim_k(); k0 = k0 + 32u) {
            let kn = k0 + 32u;
            let more = kn < dim_k();
            if (mode != 0u && more) {
                wa = fetch_a(mode, ab, row0, kn, lid, cr);
                wb = fetch_b(mode, bb, wid.x, kn, lid);
            }
            let oa = cur * DA;
            let ob = cur * DB;
            for (var kk = 0u; kk < 32u; kk = kk + 16u) {
                let a0 = coopLoadT<coop_mat16x16<f16, A>>(&coop_ad[oa + ar * CA + kk], CA);
                let a1 = coopLoadT<coop_mat16x16<f16, A>>(&coop_ad[oa + (ar + 16u) * CA + kk], CA);
                let b0 = coopLoadT<coop_mat16x16<f16, B>>(&coop_bd[ob + kk * CB + bc], CB);
                let b1 = coopLoadT<coop_mat16x16<f16, B>>(&coop_bd[ob + kk * CB + bc + 16u], CB);
                let b2 = coopLoadT<coop_mat16x16<f16, B>>(&coop_bd[ob + kk * CB + bc + 32u], CB);
                let b3 = coopLoadT<coop_mat16x16<f16, B>>(&coop_bd[ob + kk * CB + bc + 48u], CB);
                c00 = coopMultiplyAdd(a0, b0, c00);
                c01 = coopMultiplyAdd(a0, b1, c01);
                c02 = coopMultiplyAdd(a0, b2, c02);
                c03 = coopMultiplyAdd(a0, b3, c03);
                c10 = coopMultiplyAdd(a1, b0, c10);
                c11 = coopMultiplyAdd(a1, b1, c11);
                c12 = coopMultiplyAdd(a1, b2, c12);
                c13 = coopMultiplyAdd(a1, b3, c13);
            }
            let nxt = 1u - cur;
            if (more) {
                if (mode != 0u) {
                    put_words_d(mode, lid, wa, wb, nxt * DA, nxt * DB);
                } else {
                    stage_d(ab, bb, row0, wid.x, kn, lid, nxt * DA, nxt * DB);
                }
            }
            workgroupBarrier();
            cur = nxt;
        }
        // Epilogue: subgroups with slots 0-3, then 4-7, each through 512 f32 of coop_cd.
        let base = (cs % 4u) * 512u;
        let r0 = row0 + ar;
        for (var part = 0u; part < 2u; part = part + 1u) {
            let mine = has && cs / 4u == part;
            if (g) {
                let oc = wid.x * 64u + (slot % 2u) * 32u;
                if (mine) {
                    coopStoreT(c00, &coop_cd[base], 16u);
                    coopStoreT(c02, &coop_cd[base + 256u], 16u);
                }
                workgroupBarrier();
                finish_d(b, r0, oc, base, 256u, lane, width, mine);
                workgroupBarrier();
                if (mine) {
                    coopStoreT(c01, &coop_cd[base], 16u);
                    coopStoreT(c03, &coop_cd[base + 256u], 16u);
                }
                workgroupBarrier();
                finish_d(b, r0, oc + 16u, base, 256u, lane, width, mine);
                workgroupBarrier();
                if (mine) {
                    coopStoreT(c10, &coop_cd[base], 16u);
                    coopStoreT(c12, &coop_cd[base + 256u], 16u);
                }
                workgroupBarrier();
                finish_d(b, r0 + 16u, oc, base, 256u, lane, width, mine);
                workgroupBarrier();
                if (mine) {
                    coopStoreT(c11, &coop_cd[base], 16u);
                    coopStoreT(c13, &coop_cd[base + 256u], 16u);
                }
                workgroupBarrier();
                finish_d(b, r0 + 16u, oc + 16u, base, 256u, lane, width, mine);
                workgroupBarrier();
            } else {
                let oc = wid.x * 128u + bc;
                if (mine) {
                    coopStoreT(c00, &coop_cd[base], 16u);
                    coopStoreT(c01, &coop_cd[base + 256u], 16u);
                }
                workgroupBarrier();
                finish_d(b, r0, oc, base, 0u, lane, width, mine);
                finish_d(b, r0, oc + 16u, base + 256u, 0u, lane, width, mine);
                workgroupBarrier();
                if (mine) {
                    coopStoreT(c02, &coop_cd[base], 16u);
                    coopStoreT(c03, &coop_cd[base + 256u], 16u);
                }
                workgroupBarrier();
                finish_d(b, r0, oc + 32u, base, 0u, lane, width, mine);
                finish_d(b, r0, oc + 48u, base + 256u, 0u, lane, width, mine);
                workgroupBarrier();
                if (mine) {
                    coopStoreT(c10, &coop_cd[base], 16u);
                    coopStoreT(c11, &coop_cd[base + 256u], 16u);
                }
                workgroupBarrier();
                finish_d(b, r0 + 16u, oc, base, 0u, lane, width, mine);
                finish_d(b, r0 + 16u, oc + 16u, base + 256u, 0u, lane, width, mine);
                workgroupBarrier();
                if (mine) {
                    coopStoreT(c12, &coop_cd[base], 16u);
                    coopStoreT(c13, &coop_cd[base + 256u], 16u);
                }
                workgroupBarrier();
                finish_d(b, r0 + 16u, oc + 32u, base, 0u, lane, width, mine);
                finish_d(b, r0 + 16u, oc + 48u, base + 256u, 0u, lane, width, mine);
                workgroupBarrier();
            }
        }
    }
}
