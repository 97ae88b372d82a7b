// matmul_coop16_double.wgsl: mm_coop16 with two tile pairs in workgroup memory (an experiment,
// `XPU_COOP16_DOUBLE=1`; composed last, after matmul_coop16_words.wgsl). 45 KiB: two A tiles
// (2 x 5120 f16), two B tiles (2 x 4352 f16) and 256 f32 of coop_c per subgroup.
//
// Why: on the H200 (twenty-seventh session) the single layout's time was the sum of its
// staging (~1.7 ms at 4096^3) and the rest (~0.9 ms): nothing of the staging overlapped the
// products. Here each K step computes from one tile pair while the words of the next step,
// fetched one step earlier, are stored into the other pair, and the step after next is
// fetched; one barrier per K step instead of two. A pair is rewritten only after the barrier
// that follows the last products reading it: step i writes pair (i+1)%2, which step i-1 read
// before the barrier ending step i-1.
// The epilogue finishes one 16x16 tile per round (256 f32 per subgroup), so GEGLU products,
// whose tiles need their gate tile beside them, never come here (the host sends them to the
// single layout). VARIANT bits 2, 3 (identity tiles), 6 (the convolution gather) and 12 (its
// packed rows) apply as
// in the single layout; the single layout's timing-only bits do not.

const NBUF: u32 = 2u;
const C_PER_SG: u32 = 256u;

var<workgroup> coop_a: array<f16, 10240>;
var<workgroup> coop_b: array<f16, 8704>;
var<workgroup> coop_c: array<f32, 2048>;

@compute @workgroup_size(256)
fn mm_coop16(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32,
             @builtin(subgroup_id) sg: u32, @builtin(num_subgroups) nsg: u32,
             @builtin(subgroup_invocation_id) lane: u32, @builtin(subgroup_size) width: u32) {
    let sk = split_k(wid.z);
    let ab = a_base(sk.x);
    let bb = b_base(sk.x);
    let row0 = wid.y * 128u;
    let full = row0 + 128u <= dim_m() && cols_full(wid.x, 128u);
    let passes = coop16_passes(lid, nsg);
    let mode = pairs_mode(ab, bb);
    var cr = ConvRows(vec4<i32>(), vec4<i32>(), vec4<i32>(), vec4<i32>(), vec4<u32>(), vec4<u32>());
    if ((mode & 8u) != 0u) {
        cr = conv_rows(ab, row0, lid);
    }
    for (var round = 0u; round < passes; round = round + 1u) {
        let slot = sg + round * nsg;
        // As in the single layout: a subgroup without a slot multiplies slot 7's tiles and
        // keeps nothing (cooperative loads must stay in uniform control flow).
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
        // Prologue: the first K step into pair 0, the second step's words into registers.
        var wa = words_zero();
        var wb = wa;
        if (mode != 0u) {
            put_words(mode, lid, fetch_a(mode, ab, row0, sk.z, lid, cr),
                      fetch_b(mode, bb, wid.x, sk.z, lid), 0u);
            if (sk.z + 32u < sk.w) {
                wa = fetch_a(mode, ab, row0, sk.z + 32u, lid, cr);
                wb = fetch_b(mode, bb, wid.x, sk.z + 32u, lid);
            }
        } else {
            coop_stage(ab, bb, row0, wid.x, sk.z, lid, full && sk.z + 32u <= dim_k(), 0u);
        }
        workgroupBarrier();
        var buf = 0u;
        for (var k0 = sk.z; k0 < sk.w; k0 = k0 + 32u) {
            let oa = buf * A_TILE + ar * CA;
            let ob = buf * B_TILE + bc;
            for (var kk = 0u; kk < 32u; kk = kk + 16u) {
                // Each B fragment loaded just before its two products (fewer live fragments).
                let a0 = coopLoadT<coop_mat16x16<f16, A>>(&coop_a[oa + kk], CA);
                let a1 = coopLoadT<coop_mat16x16<f16, A>>(&coop_a[oa + 16u * CA + kk], CA);
                let b0 = coopLoadT<coop_mat16x16<f16, B>>(&coop_b[ob + kk * CB], CB);
                c00 = coopMultiplyAdd(a0, b0, c00);
                c10 = coopMultiplyAdd(a1, b0, c10);
                let b1 = coopLoadT<coop_mat16x16<f16, B>>(&coop_b[ob + kk * CB + 16u], CB);
                c01 = coopMultiplyAdd(a0, b1, c01);
                c11 = coopMultiplyAdd(a1, b1, c11);
                let b2 = coopLoadT<coop_mat16x16<f16, B>>(&coop_b[ob + kk * CB + 32u], CB);
                c02 = coopMultiplyAdd(a0, b2, c02);
                c12 = coopMultiplyAdd(a1, b2, c12);
                let b3 = coopLoadT<coop_mat16x16<f16, B>>(&coop_b[ob + kk * CB + 48u], CB);
                c03 = coopMultiplyAdd(a0, b3, c03);
                c13 = coopMultiplyAdd(a1, b3, c13);
            }
            // The next step into the other pair (its words arrived during these products),
            // then the step after next fetched.
            let kn = k0 + 32u;
            if (kn < sk.w) {
                if (mode != 0u) {
                    put_words(mode, lid, wa, wb, 1u - buf);
                    if (kn + 32u < sk.w) {
                        wa = fetch_a(mode, ab, row0, kn + 32u, lid, cr);
                        wb = fetch_b(mode, bb, wid.x, kn + 32u, lid);
                    }
                } else {
                    coop_stage(ab, bb, row0, wid.x, kn, lid, full && kn + 32u <= dim_k(), 1u - buf);
                }
            }
            workgroupBarrier();
            buf = 1u - buf;
        }
        let has = slot < 8u;
        let base = cs * C_PER_SG;
        let r0 = row0 + ar;
        let oc = wid.x * 128u + bc;
        coop16_tile_out(c00, sk.y, r0, oc, base, lane, width, has);
        coop16_tile_out(c01, sk.y, r0, oc + 16u, base, lane, width, has);
        coop16_tile_out(c02, sk.y, r0, oc + 32u, base, lane, width, has);
        coop16_tile_out(c03, sk.y, r0, oc + 48u, base, lane, width, has);
        coop16_tile_out(c10, sk.y, r0 + 16u, oc, base, lane, width, has);
        coop16_tile_out(c11, sk.y, r0 + 16u, oc + 16u, base, lane, width, has);
        coop16_tile_out(c12, sk.y, r0 + 16u, oc + 32u, base, lane, width, has);
        coop16_tile_out(c13, sk.y, r0 + 16u, oc + 48u, base, lane, width, has);
    }
}

// One accumulator tile through the subgroup's 256 f32 of coop_c and the fused epilogue (output
// rows r0.., columns c0..); a subgroup without a slot takes part in the barriers only.
fn coop16_tile_out(c: coop_mat16x16<f32, C>, b: u32, r0: u32, c0: u32, base: u32, lane: u32,
                   width: u32, has: bool) {
    if (has) {
        coopStoreT(c, &coop_c[base], 16u);
    }
    workgroupBarrier();
    coop_finish(b, r0, c0, base, 0u, lane, width, has);
    workgroupBarrier();
}
