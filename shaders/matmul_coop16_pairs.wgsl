// matmul_coop16_pairs.wgsl: an experimental form of mm_coop16 whose workgroup tiles are arrays
// of `vec2<f16>` (composed after matmul_coop16.wgsl and matmul_coop16_words.wgsl, whose
// helpers it reuses: coop_col, pairs_mode, conv_rows, fetch_a/fetch_b, coop_finish and coop_c);
// chosen only with `XPU_COOP16_PAIRS=1` until a GPU measures it (`run_gpu.sh pairs`).
//
// Why: mm_coop16 writes every staged word as two 16-bit workgroup stores (its tiles are arrays
// of f16 scalars, which is what `coopLoad` takes in WGSL's eyes). SPIR-V's cooperative loads
// also take pointers to vectors (the stride then counts vectors), so here a word whose two f16
// lie along a tile row is one 32-bit store. B staged by k (transposed weights: nn Linear, the
// convolutions' `[O][kh][kw][C]` weights) is kept column by column, `[128 columns][32 k]`
// (column stride 40), and read by column-major cooperative loads; B by columns keeps mm_coop16's
// `[32 k][128 columns]` (row stride 136) and row-major loads. A is `[128 rows][32 k]` (row
// stride 40) as in mm_coop16; A by rows (column-major A) still stores halves one by one.
// Every tile offset and stride is a multiple of 16 bytes. Workgroup memory: 10 + 10 + 16 KiB.
// Same products in the same order as mm_coop16 (same bits); VARIANT bit 6 selects the
// convolution gather, the diagnostic bits are ignored.

const PCA: u32 = 20u;
const PCB: u32 = 68u;
const PCBK: u32 = 20u;

var<workgroup> coop_pa: array<vec2<f16>, 2560>;
var<workgroup> coop_pb: array<vec2<f16>, 2560>;

// Writes f16 `v` at element `i` (in halves) of the A or B tile.
fn pa_half(i: u32, v: f16) {
    coop_pa[i / 2u][i % 2u] = v;
}

fn pb_half(i: u32, v: f16) {
    coop_pb[i / 2u][i % 2u] = v;
}

// mm_coop16's per-element staging (any layout; B as [k][columns]).
fn stage_p(ab: u32, bb: u32, row0: u32, tile: u32, k0: u32, lid: u32) {
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
        pa_half(r * CA + kk, f16(v));
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
        pb_half(kk * CB + jj, f16(v));
    }
}

// The step's staged words into the tiles.
fn put_pairs(mode: u32, lid: u32, wa: Words, wb: Words) {
    pa_put_p(mode, lid, wa.lo.x);
    pa_put_p(mode, lid + 256u, wa.lo.y);
    pa_put_p(mode, lid + 512u, wa.lo.z);
    pa_put_p(mode, lid + 768u, wa.lo.w);
    pa_put_p(mode, lid + 1024u, wa.hi.x);
    pa_put_p(mode, lid + 1280u, wa.hi.y);
    pa_put_p(mode, lid + 1536u, wa.hi.z);
    pa_put_p(mode, lid + 1792u, wa.hi.w);
    pb_put_p(mode, lid, wb.lo.x);
    pb_put_p(mode, lid + 256u, wb.lo.y);
    pb_put_p(mode, lid + 512u, wb.lo.z);
    pb_put_p(mode, lid + 768u, wb.lo.w);
    pb_put_p(mode, lid + 1024u, wb.hi.x);
    pb_put_p(mode, lid + 1280u, wb.hi.y);
    pb_put_p(mode, lid + 1536u, wb.hi.z);
    pb_put_p(mode, lid + 1792u, wb.hi.w);
}

// Word e of the A tile (layouts as pa_word): one vec2 store when the pair lies along k.
fn pa_put_p(mode: u32, e: u32, w: u32) {
    let h = vec2<f16>(unpack2x16float(w));
    if ((mode & 2u) != 0u) {
        let r = 2u * (e % 64u);
        let kk = e / 64u;
        pa_half(r * CA + kk, h.x);
        pa_half((r + 1u) * CA + kk, h.y);
    } else {
        coop_pa[(e / 16u) * PCA + e % 16u] = h;
    }
}

// Word e of the B tile: by k into [columns][k] (one vec2 store), by columns into [k][columns].
fn pb_put_p(mode: u32, e: u32, w: u32) {
    let h = vec2<f16>(unpack2x16float(w));
    if ((mode & 4u) != 0u) {
        coop_pb[(e / 16u) * PCBK + e % 16u] = h;
    } else {
        coop_pb[(e / 64u) * PCB + e % 64u] = h;
    }
}

@compute @workgroup_size(256)
fn mm_coop16p(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32,
              @builtin(subgroup_id) sg: u32, @builtin(num_subgroups) nsg: u32,
              @builtin(subgroup_invocation_id) lane: u32, @builtin(subgroup_size) width: u32) {
    let b = wid.z + p(39u);
    let ab = a_base(b);
    let bb = b_base(b);
    let row0 = wid.y * 128u;
    let g = is_geglu();
    let mode = pairs_mode(ab, bb);
    // B staged [columns][k] and read column-major (pairs along k), else [k][columns]. The flag
    // goes through workgroup memory, as the pass count does: naga counts values computed by
    // functions from their arguments as non-uniform, and cooperative loads must be reached in
    // uniform control flow.
    if (lid == 0u) {
        coop_c[4095] = f32((8u + nsg - 1u) / nsg);
        coop_c[4094] = select(0.0, 1.0, mode != 0u && (mode & 4u) != 0u);
    }
    let passes = u32(workgroupUniformLoad(&coop_c[4095]));
    let b_cols = workgroupUniformLoad(&coop_c[4094]) != 0.0;
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
        if (mode != 0u) {
            wa = fetch_a(mode, ab, row0, 0u, lid, cr);
            wb = fetch_b(mode, bb, wid.x, 0u, lid);
        }
        for (var k0 = 0u; k0 < dim_k(); k0 = k0 + 32u) {
            if (mode != 0u) {
                put_pairs(mode, lid, wa, wb);
            } else {
                stage_p(ab, bb, row0, wid.x, k0, lid);
            }
            workgroupBarrier();
            let kn = k0 + 32u;
            if (mode != 0u && kn < dim_k()) {
                wa = fetch_a(mode, ab, row0, kn, lid, cr);
                wb = fetch_b(mode, bb, wid.x, kn, lid);
            }
            for (var kk = 0u; kk < 32u; kk = kk + 16u) {
                let a0 = coopLoadT<coop_mat16x16<f16, A>>(&coop_pa[ar * PCA + kk / 2u], PCA);
                let a1 = coopLoadT<coop_mat16x16<f16, A>>(
                    &coop_pa[(ar + 16u) * PCA + kk / 2u], PCA);
                var b0 = coop_mat16x16<f16, B>();
                var b1 = b0;
                var b2 = b0;
                var b3 = b0;
                if (b_cols) {
                    b0 = coopLoad<coop_mat16x16<f16, B>>(&coop_pb[bc * PCBK + kk / 2u], PCBK);
                    b1 = coopLoad<coop_mat16x16<f16, B>>(
                        &coop_pb[(bc + 16u) * PCBK + kk / 2u], PCBK);
                    b2 = coopLoad<coop_mat16x16<f16, B>>(
                        &coop_pb[(bc + 32u) * PCBK + kk / 2u], PCBK);
                    b3 = coopLoad<coop_mat16x16<f16, B>>(
                        &coop_pb[(bc + 48u) * PCBK + kk / 2u], PCBK);
                } else {
                    b0 = coopLoadT<coop_mat16x16<f16, B>>(&coop_pb[kk * PCB + bc / 2u], PCB);
                    b1 = coopLoadT<coop_mat16x16<f16, B>>(&coop_pb[kk * PCB + bc / 2u + 8u], PCB);
                    b2 = coopLoadT<coop_mat16x16<f16, B>>(&coop_pb[kk * PCB + bc / 2u + 16u], PCB);
                    b3 = coopLoadT<coop_mat16x16<f16, B>>(&coop_pb[kk * PCB + bc / 2u + 24u], PCB);
                }
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
        // Epilogue as mm_coop16's (coop_c and coop_finish are shared).
        let base = cs * 512u;
        let r0 = row0 + ar;
        if (g) {
            let oc = wid.x * 64u + (slot % 2u) * 32u;
            if (has) {
                coopStoreT(c00, &coop_c[base], 16u);
                coopStoreT(c02, &coop_c[base + 256u], 16u);
            }
            workgroupBarrier();
            coop_finish(b, r0, oc, base, 256u, lane, width, has);
            workgroupBarrier();
            if (has) {
                coopStoreT(c01, &coop_c[base], 16u);
                coopStoreT(c03, &coop_c[base + 256u], 16u);
            }
            workgroupBarrier();
            coop_finish(b, r0, oc + 16u, base, 256u, lane, width, has);
            workgroupBarrier();
            if (has) {
                coopStoreT(c10, &coop_c[base], 16u);
                coopStoreT(c12, &coop_c[base + 256u], 16u);
            }
            workgroupBarrier();
            coop_finish(b, r0 + 16u, oc, base, 256u, lane, width, has);
            workgroupBarrier();
            if (has) {
                coopStoreT(c11, &coop_c[base], 16u);
                coopStoreT(c13, &coop_c[base + 256u], 16u);
            }
            workgroupBarrier();
            coop_finish(b, r0 + 16u, oc + 16u, base, 256u, lane, width, has);
            workgroupBarrier();
        } else {
            let oc = wid.x * 128u + bc;
            if (has) {
                coopStoreT(c00, &coop_c[base], 16u);
                coopStoreT(c01, &coop_c[base + 256u], 16u);
            }
            workgroupBarrier();
            coop_finish(b, r0, oc, base, 0u, lane, width, has);
            coop_finish(b, r0, oc + 16u, base + 256u, 0u, lane, width, has);
            workgroupBarrier();
            if (has) {
                coopStoreT(c02, &coop_c[base], 16u);
                coopStoreT(c03, &coop_c[base + 256u], 16u);
            }
            workgroupBarrier();
            coop_finish(b, r0, oc + 32u, base, 0u, lane, width, has);
            coop_finish(b, r0, oc + 48u, base + 256u, 0u, lane, width, has);
            workgroupBarrier();
            if (has) {
                coopStoreT(c10, &coop_c[base], 16u);
                coopStoreT(c11, &coop_c[base + 256u], 16u);
            }
            workgroupBarrier();
            coop_finish(b, r0 + 16u, oc, base, 0u, lane, width, has);
            coop_finish(b, r0 + 16u, oc + 16u, base + 256u, 0u, lane, width, has);
            workgroupBarrier();
            if (has) {
                coopStoreT(c12, &coop_c[base], 16u);
                coopStoreT(c13, &coop_c[base + 256u], 16u);
            }
            workgroupBarrier();
            coop_finish(b, r0 + 16u, oc + 32u, base, 0u, lane, width, has);
            coop_finish(b, r0 + 16u, oc + 48u, base + 256u, 0u, lane, width, has);
            workgroupBarrier();
        }
    }
}
