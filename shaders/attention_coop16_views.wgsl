// attention_coop16_views.wgsl: experimental pair loads for attention_coop16.wgsl (composed
// after it in place of attention_coop16_words.wgsl): q, k and v pairs read through second,
// `array<vec2<f16>>` views (bindings 7, 8, 9, bound to the same buffers as 2, 3, 4), with no
// f16 -> f32 -> f16 conversions (see matmul_coop16_views.wgsl). Used only when
// `XPU_COOP16_VIEWS=1`, after the attention self-check passed with it.

@group(0) @binding(7) var<storage, read> src0h: array<vec2<f16>>;
@group(0) @binding(8) var<storage, read> src1h: array<vec2<f16>>;
@group(0) @binding(9) var<storage, read> src_vh: array<vec2<f16>>;

// The f16 pair at element c of a row of `width` elements of q (buf 0), k (1) or v (2), zero
// past the width or the row count.
fn pair_h(buf: u32, base: u32, row: u32, rows: u32, rs: u32, c: u32, width: u32) -> vec2<f16> {
    if (row >= rows || c >= width) {
        return vec2<f16>();
    }
    let i = (base + row * rs + c) / 2u;
    if (buf == 0u) {
        return src0h[i];
    }
    if (buf == 1u) {
        return src1h[i];
    }
    return src_vh[i];
}
