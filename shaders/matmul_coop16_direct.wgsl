// matmul_coop16_direct.wgsl: an experimental form of mm_coop16 (composed after
// matmul_coop16.wgsl and matmul_coop16_words.wgsl, whose helpers it reuses) whose cooperative
// loads read B, and A where it can, straight from the operands' storage buffers instead of
// workgroup tiles; chosen only with `XPU_COOP16_DIRECT=1` until a GPU measures it
// (`benches/gpu/run_gpu.sh direct`).
//
// Why: on an H200 (twenty-seventh session, 4096^3 f16) mm_coop16 took 2.60 ms; its timing-only
// variants without the staging (global loads, 16-bit workgroup stores) took 0.92 ms, and
// without products 2.56 ms: the tensor cores wait on the staging, and a `vec2<f16>` staging
// (one 32-bit store per word) did not help. Here a subgroup loads its own fragments from
// global memory (the L1 cache serves the A fragments two subgroups share and the B fragments
// four share), with the next 16-k step's fragments loaded before this step's products, and no
// barrier in the K loop when A is direct too.
//
// Bindings 7 and 8 are f16 views of A and B (the same buffers as bindings 2 and 3). The direct
// loads apply per workgroup (a uniform choice) when its tile is whole (rows and columns inside
// M and N), K is a multiple of 16, and both operands are row- or column-major with their bases
// and leading strides multiples of 8 elements (16 bytes, as cooperative loads want) and the
// strides nonzero; everything else (edge tiles, the convolution gather) runs mm_coop16's body.
// Same products in the same order as mm_coop16 (f32 accumulation, 16-k steps in order).
// naga checks that cooperative loads take uniform pointers and strides, and treats function
// arguments as non-uniform: the loads are written out in the entry point.

@group(0) @binding(7) var<storage, read> src0_h: array<f16>;
@group(0) @binding(8) var<storage, read> src1_h: array<f16>;

fn direct_layout(rs: u32, cs: u32, base: u32) -> bool {
    let row_major = cs == 1u && rs >= 8u && rs % 8u == 0u;
    let col_major = rs == 1u && cs >= 8u && cs % 8u == 0u;
    return (row_major || col_major) && base % 8u == 0u;
}

// Whether this workgroup's fragments can all be loaded directly (uniform).
fn direct_ok(ab: u32, bb: u32, row0: u32, tile: u32) -> bool {
    return !is_conv() && dim_k() % 16u == 0u && row0 + 128u <= dim_m() && cols_full(tile, 128u)
        && direct_layout(p(35u), p(36u), ab) && direct_layout(p(37u), p(38u), bb)
        && (!is_geglu() || dim_n() % 8u == 0u);
}

@compute @workgroup_size(256)
fn mm_coop16d(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32,
              @builtin(subgroup_id) sg: u32, @builtin(num_subgroups) nsg: u32,
              @builtin(subgroup_invocation_id) lane: u32, @builtin(subgroup_size) width: u32) {
    let b = wid.z + p(39u);
    let row0 = wid.y * 128u;
    // Bit 0 direct, bit 1 A row-major, bit 2 B row-major; through workgroupUniformLoad, which
    // naga's uniformity analysis accepts (it takes values computed from the params as
    // non-uniform, and cooperative loads need uniform control flow).
    if (lid == 0u) {
        let direct = direct_ok(a_base(b), b_base(b), row0, wid.x);
        coop_c[4094] = f32(select(0u, 1u, direct) | select(0u, 2u, p(36u) == 1u)
                           | select(0u, 4u, p(38u) == 1u));
    }
    let form = u32(workgroupUniformLoad(&coop_c[4094]));
    if ((form & 1u) != 0u) {
        coop16_direct(wid, lid, sg, nsg, lane, width);
    } else {
        coop16_staged(wid, lid, sg, nsg, lane, width);
    }
}

// The direct-load body (direct_ok holds for this workgroup). It reads the form word again
// (function arguments are non-uniform in naga's eyes) before anything else writes coop_c.
fn coop16_direct(wid: vec3<u32>, lid: u32, sg: u32, nsg: u32, lane: u32, width: u32) {
    let form = u32(workgroupUniformLoad(&coop_c[4094]));
    let a_rm = (form & 2u) != 0u;
    let b_rm = (form & 4u) != 0u;
    let b = wid.z + p(39u);
    let ab = a_base(b);
    let bb = b_base(b);
    let row0 = wid.y * 128u;
    let passes = coop16_passes(lid, nsg);
    let kd = dim_k();
    let ars = p(35u);
    let acs = p(36u);
    let brs = p(37u);
    let bcs = p(38u);
    // Row-major operands take row-major loads (stride = row stride), column-major ones
    // column-major loads (stride = column stride); element (r, k) of A is at ab + r ars + k acs.
    for (var round = 0u; round < passes; round = round + 1u) {
        let slot = sg + round * nsg;
        // Cooperative loads need uniform control flow: a subgroup without a slot loads and
        // multiplies slot 7's fragments too and keeps nothing.
        let cs = min(slot, 7u);
        let r0 = row0 + (cs / 2u) * 32u;
        let bc = (cs % 2u) * 64u;
        let n0 = coop_col(wid.x, bc).x;
        let n1 = coop_col(wid.x, bc + 16u).x;
        let n2 = coop_col(wid.x, bc + 32u).x;
        let n3 = coop_col(wid.x, bc + 48u).x;
        var c00 = coop_mat16x16<f32, C>();
        var c01 = c00;
        var c02 = c00;
        var c03 = c00;
        var c10 = c00;
        var c11 = c00;
        var c12 = c00;
        var c13 = c00;
        var a0 = coop_mat16x16<f16, A>();
        var a1 = a0;
        var b0 = coop_mat16x16<f16, B>();
        var b1 = b0;
        var b2 = b0;
        var b3 = b0;
        // Step s loads the fragments of k = s (the last step reloads k = K - 16, unused) and
        // multiplies those of k = s - 16 loaded by the step before (zeros at s = 0: naga takes
        // a branch on s as non-uniform, and adding 0 x 0 leaves the sums exact).
        for (var s = 0u; s <= kd; s = s + 16u) {
            let kn = min(s, kd - 16u);
            var na0 = a0;
            var na1 = a1;
            var nb0 = b0;
            var nb1 = b1;
            var nb2 = b2;
            var nb3 = b3;
            let ka = ab + kn * acs;
            if (a_rm) {
                na0 = coopLoadT<coop_mat16x16<f16, A>>(&src0_h[ka + r0 * ars], ars);
                na1 = coopLoadT<coop_mat16x16<f16, A>>(&src0_h[ka + (r0 + 16u) * ars], ars);
            } else {
                na0 = coopLoad<coop_mat16x16<f16, A>>(&src0_h[ka + r0], acs);
                na1 = coopLoad<coop_mat16x16<f16, A>>(&src0_h[ka + r0 + 16u], acs);
            }
            let kb = bb + kn * brs;
            if (b_rm) {
                nb0 = coopLoadT<coop_mat16x16<f16, B>>(&src1_h[kb + n0], brs);
                nb1 = coopLoadT<coop_mat16x16<f16, B>>(&src1_h[kb + n1], brs);
                nb2 = coopLoadT<coop_mat16x16<f16, B>>(&src1_h[kb + n2], brs);
                nb3 = coopLoadT<coop_mat16x16<f16, B>>(&src1_h[kb + n3], brs);
            } else {
                nb0 = coopLoad<coop_mat16x16<f16, B>>(&src1_h[kb + n0 * bcs], bcs);
                nb1 = coopLoad<coop_mat16x16<f16, B>>(&src1_h[kb + n1 * bcs], bcs);
                nb2 = coopLoad<coop_mat16x16<f16, B>>(&src1_h[kb + n2 * bcs], bcs);
                nb3 = coopLoad<coop_mat16x16<f16, B>>(&src1_h[kb + n3 * bcs], bcs);
            }
            c00 = coopMultiplyAdd(a0, b0, c00);
            c01 = coopMultiplyAdd(a0, b1, c01);
            c02 = coopMultiplyAdd(a0, b2, c02);
            c03 = coopMultiplyAdd(a0, b3, c03);
            c10 = coopMultiplyAdd(a1, b0, c10);
            c11 = coopMultiplyAdd(a1, b1, c11);
            c12 = coopMultiplyAdd(a1, b2, c12);
            c13 = coopMultiplyAdd(a1, b3, c13);
            a0 = na0;
            a1 = na1;
            b0 = nb0;
            b1 = nb1;
            b2 = nb2;
            b3 = nb3;
        }
        coop16_epilogue(b, wid.x, row0, slot, lane, width, c00, c01, c02, c03, c10, c11, c12,
                        c13);
    }
}
