// attention_coop16_words.wgsl: the pair loads of attention_coop16.wgsl (composed after it): a
// u32 word of q (buf 0), k (1) or v (2), its two f16 converted through unpack2x16float.

// Word w of a row of `width` elements (pairs), 0 past the width or the row count.
fn pair_word(buf: u32, base: u32, row: u32, rows: u32, rs: u32, c: u32, width: u32) -> u32 {
    if (row >= rows || c >= width) {
        return 0u;
    }
    let i = (base + row * rs + c) / 2u;
    if (buf == 0u) {
        return src0[i];
    }
    if (buf == 1u) {
        return src1[i];
    }
    return src_v[i];
}

// The f16 pair at element c of a row (see pair_word).
fn pair_h(buf: u32, base: u32, row: u32, rows: u32, rs: u32, c: u32, width: u32) -> vec2<f16> {
    return vec2<f16>(unpack2x16float(pair_word(buf, base, row, rows, rs, c, width)));
}
