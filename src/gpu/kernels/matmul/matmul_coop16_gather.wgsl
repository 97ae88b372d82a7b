// matmul_coop16_gather.wgsl: the convolution gather's addressing of the tensor-core products
// (composed after matmul_coop16.wgsl, before its word-pair staging; and before
// matmul_coop16_tiles.wgsl).
// matmul_coop16.wgsl's header gives the params and what the host guarantees (channels-last f16
// input, C and the input's offset and strides even, so a word holds channels ci, ci+1 of one
// pixel and one tap).

// Input base index, top row and left column of output pixel m.
fn conv_pixel(ab: u32, m: u32) -> vec3<i32> {
    if (m >= dim_m()) {
        return vec3<i32>(0, -1073741824, 0);
    }
    let img = m / p(15u);
    let rem = m % p(15u);
    let oh = rem / p(16u);
    let ow = rem % p(16u);
    return vec3<i32>(i32(ab + img * p(24u)), i32(oh * p(18u)) - i32(p(20u)),
                     i32(ow * p(19u)) - i32(p(21u)));
}

// Column k of the implicit im2col matrix: the tap's row and column offsets and the channel.
fn conv_tap(k: u32) -> vec3<i32> {
    let tap = k / p(12u);
    return vec3<i32>(i32((tap / p(17u)) * p(22u)), i32((tap % p(17u)) * p(23u)),
                     i32(k % p(12u)));
}

// Input element of channel t.z at tap offsets (t.x, t.y) from a row's top-left position
// (ih0, iw0), or CONV_OUTSIDE where the tap falls in the padding.
const CONV_OUTSIDE: u32 = 0xffffffffu;

fn conv_at(base: u32, ih0: i32, iw0: i32, t: vec3<i32>) -> u32 {
    let ih = ih0 + t.x;
    let iw = iw0 + t.y;
    if (ih < 0 || iw < 0 || ih >= i32(p(13u)) || iw >= i32(p(14u))) {
        return CONV_OUTSIDE;
    }
    return base + u32(ih) * p(25u) + u32(iw) * p(26u) + u32(t.z);
}
