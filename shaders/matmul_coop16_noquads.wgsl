// matmul_coop16_noquads.wgsl: the default mm_coop16 composition's quad hooks (composed after
// matmul_coop16_words.wgsl): no quads, no operand views (the experiment is
// matmul_coop16_quads.wgsl).

fn quads_a(mode: u32) -> bool {
    return false;
}

fn quads_b(mode: u32) -> bool {
    return false;
}

fn quad_a(mode: u32, ab: u32, row0: u32, k0: u32, q: u32) -> vec4<u32> {
    return vec4<u32>();
}

fn quad_b(mode: u32, bb: u32, tile: u32, k0: u32, q: u32) -> vec4<u32> {
    return vec4<u32>();
}

fn conv_quads(k0: u32, lid: u32, cr: ConvRows) -> Words {
    return Words(vec4<u32>(), vec4<u32>());
}
