// matmul_coop16_quads.wgsl: the 16-byte quad loads of mm_coop16's staging (composed after
// matmul_coop16_words.wgsl, for ShaderId::MatmulCoop16Wide, chosen by `XPU_COOP16_WIDE=1`
// until a GPU measures it: `benches/gpu/run_gpu.sh wide`).
//
// Why: on an H200 the K step's global loads cost about a third of the 4096^3 product (timing
// variants, twenty-seventh session), at 16 single-word loads per invocation and step. Where pairs_mode allows (its bits 4 and 5), an
// invocation instead reads its eight words of A (or B) as two 16-byte quads through second
// views of the operands (bindings 7 and 8, `array<vec4<u32>>`, the buffers of bindings 2 and
// 3): quad q holds words 4q..4q+3 of the tile's word order, so the workgroup stores are the
// same. The convolution gather reads its A in quads too (8 channels of one pixel and tap; an
// invocation then gathers 2 rows instead of 8). Every dispatch of this form binds the views
// (src/xpu/kernels/mod.rs).

@group(0) @binding(7) var<storage, read> src0_q: array<vec4<u32>>;
@group(0) @binding(8) var<storage, read> src1_q: array<vec4<u32>>;

fn quads_a(mode: u32) -> bool {
    return (mode & 16u) != 0u;
}

fn quads_b(mode: u32) -> bool {
    return (mode & 32u) != 0u;
}

// Quad q of the A tile: A by k, row q/4 and k 8(q%4); A by rows, rows 8(q%16) and k q/16.
fn quad_a(mode: u32, ab: u32, row0: u32, k0: u32, q: u32) -> vec4<u32> {
    var r = q / 4u;
    var kk = 8u * (q % 4u);
    if ((mode & 2u) != 0u) {
        r = 8u * (q % 16u);
        kk = q / 16u;
    }
    if (row0 + r >= dim_m() || k0 + kk >= dim_k()) {
        return vec4<u32>();
    }
    return src0_q[(ab + (row0 + r) * p(35u) + (k0 + kk) * p(36u)) / 8u];
}

// The convolution's A quads of an invocation at the K step k0: channels ci..ci+7 of one tap
// (k = k0 + 8(lid%4)) for its two rows (select_conv_rows), zero outside the input or past K.
fn conv_quads(k0: u32, lid: u32, cr: ConvRows) -> Words {
    let k = k0 + 8u * (lid % 4u);
    if (k >= dim_k()) {
        return Words(vec4<u32>(), vec4<u32>());
    }
    let t = conv_tap(k);
    return Words(conv_quad(cr.base_lo.x, cr.ih_lo.x, cr.iw_lo.x, t),
                 conv_quad(cr.base_lo.y, cr.ih_lo.y, cr.iw_lo.y, t));
}

fn conv_quad(base: u32, ih0: i32, iw0: i32, t: vec3<i32>) -> vec4<u32> {
    let at = conv_at(base, ih0, iw0, t);
    if (at == CONV_OUTSIDE) {
        return vec4<u32>();
    }
    return src0_q[at / 8u];
}

// Quad q of the B tile: B by columns, k q/16 and columns 8(q%16); B by k, column q/4 and k
// 8(q%4).
fn quad_b(mode: u32, bb: u32, tile: u32, k0: u32, q: u32) -> vec4<u32> {
    var jj = 8u * (q % 16u);
    var kk = q / 16u;
    if ((mode & 4u) != 0u) {
        jj = q / 4u;
        kk = 8u * (q % 4u);
    }
    let pc = coop_col(tile, jj);
    if (pc.y == 0u || k0 + kk >= dim_k()) {
        return vec4<u32>();
    }
    return src1_q[(bb + (k0 + kk) * p(37u) + pc.x * p(38u)) / 8u];
}
