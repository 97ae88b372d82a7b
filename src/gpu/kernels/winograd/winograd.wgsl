// winograd.wgsl: the transforms of a Winograd F(2x2, 3x3) convolution (composed as
// common.wgsl + this file). The 16 point products between them are ordinary batched matmuls.
//
// With d a 4x4 input tile, g a 3x3 filter and Y the 2x2 output tile:
//   Y = A^T [ (G g G^T) (.) (B^T d B) ] A,  summed over input channels per point, where
//   B^T = [1 0 -1 0; 0 1 1 0; 0 -1 1 0; 0 1 0 -1], G = [1 0 0; .5 .5 .5; .5 -.5 .5; 0 0 1],
//   A^T = [1 1 1 0; 0 1 -1 -1].
// Point p = 4*i + j of the transformed 4x4 tile. Tile t = (img, ty, tx) over N x ceil(Ho/2) x
// ceil(Wo/2), row-major; it reads input pixels (2ty - ph + i, 2tx - pw + j), zeros outside.
//
// Layouts (row-major, DT_OUT words for U and V; 16-bit rows padded to an even Cp with zeros
// so each invocation writes whole words):
//   U [16][Cp][O]   filters  (wino_filter: one invocation per word of a [Cp][O] plane)
//   V [16][T][Cp]   inputs   (wino_input: one invocation per (tile, word of channels))
//   M [16][T][O]    f32 point products (the matmul's output), read by wino_output, which
//                   applies the conv epilogue act(y + bias) + residual and writes the output
//                   through its strides (img, channel, pixel = oh*Wo + ow).
//
// params:
//   wino_filter: [0] words of a [Cp][O] plane, [32] C, [33] Cp, [34] O, [35..39) weight
//     strides (o, c, kh, kw), [39] weight offset.
//   wino_input: [0] T*Cp/epw invocations, [32] C, [33] Cp/epw (words per V row), [34] T,
//     [35] tiles per row (tw), [36] tiles per image, [37] H, [38] W, [39] pad h, [40] pad w,
//     [41..45) input strides (n, c, h, w), [45] input offset.
//   wino_output: [0] T*units invocations, [32] O, [33] units per tile (O, or O/2 with channel
//     pairs), [34] T, [35] tw, [36] tiles per image, [37] Ho, [38] Wo, [39..42) output strides
//     (img, channel, pixel), [42] flags, [43] bias offset, [44] bias stride, [45] residual
//     offset, [46..50) residual strides (n, o, h, w).
//   flags: bit0 bias, bit1 residual, bit2 16-bit pairs of channels (else, for 16-bit outputs,
//     pairs of pixels along a row: the host guarantees an even Wo), bits 8.. activation.
// Bindings: wino_output reads M (src0), the bias (src1) and the residual (binding 4); absent
// operands are bound to M and never read.

@group(0) @binding(4) var<storage, read> wino_res: array<u32>;

// The 16 points (row-major 4x4) of G g G^T for input channel c, output channel o.
fn filter_points(c: u32, o: u32) -> array<vec4<f32>, 4> {
    var out: array<vec4<f32>, 4>;
    if (c >= p(32u)) {
        return out; // a pad channel: zeros
    }
    let base = p(39u) + o * p(35u) + c * p(36u);
    // gg[a] = G applied along filter row a: (G g^T)^T, 4 values per filter row.
    var gg: array<vec4<f32>, 3>;
    for (var a = 0u; a < 3u; a = a + 1u) {
        let ra = base + a * p(37u);
        let g0 = load0(ra);
        let g1 = load0(ra + p(38u));
        let g2 = load0(ra + 2u * p(38u));
        gg[a] = vec4<f32>(g0, 0.5 * (g0 + g1 + g2), 0.5 * (g0 - g1 + g2), g2);
    }
    // Then G down the rows.
    out[0] = gg[0];
    out[1] = 0.5 * (gg[0] + gg[1] + gg[2]);
    out[2] = 0.5 * (gg[0] - gg[1] + gg[2]);
    out[3] = gg[2];
    return out;
}

// One invocation per word of a [Cp][O] plane: it transforms the filters of its elements
// once (9 loads each) and writes their word in each of the 16 planes.
@compute @workgroup_size(WG)
fn wino_filter(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
    let w = linear_id(wid, nwg, lid);
    let e = epw(DT_OUT);
    let plane = p(33u) * p(34u);
    if (w * e >= plane) {
        return;
    }
    let o_n = p(34u);
    let i0 = w * e;
    var lo = filter_points(i0 / o_n, i0 % o_n);
    if (e == 1u) {
        for (var pt = 0u; pt < 16u; pt = pt + 1u) {
            dst[pt * plane + w] = bitcast<u32>(lo[pt / 4u][pt % 4u]);
        }
        return;
    }
    // 16-bit: the plane size is even (Cp is), so a word never straddles two planes.
    var hi = filter_points((i0 + 1u) / o_n, (i0 + 1u) % o_n);
    for (var pt = 0u; pt < 16u; pt = pt + 1u) {
        let bits = f32_to_bits(lo[pt / 4u][pt % 4u], DT_OUT)
            | (f32_to_bits(hi[pt / 4u][pt % 4u], DT_OUT) << 16u);
        dst[pt * plane / 2u + w] = bits;
    }
}

// B^T applied to a column (d0, d1, d2, d3).
fn bt(d: vec4<f32>) -> vec4<f32> {
    return vec4<f32>(d.x - d.z, d.y + d.z, d.z - d.y, d.y - d.w);
}

// The 16 transformed points of channel c of tile (img, ty, tx), point-major.
fn input_tile(img: u32, ty: u32, tx: u32, c: u32) -> array<vec4<f32>, 4> {
    let h = i32(p(37u));
    let wd = i32(p(38u));
    let y0 = 2 * i32(ty) - i32(p(39u));
    let x0 = 2 * i32(tx) - i32(p(40u));
    let base = p(45u) + img * p(41u) + c * p(42u);
    // d[i] = row i of the 4x4 tile.
    var d: array<vec4<f32>, 4>;
    for (var i = 0; i < 4; i = i + 1) {
        let y = y0 + i;
        var row = vec4<f32>(0.0);
        if (y >= 0 && y < h) {
            let rb = base + u32(y) * p(43u);
            for (var j = 0; j < 4; j = j + 1) {
                let x = x0 + j;
                if (x >= 0 && x < wd) {
                    row[j] = load0(rb + u32(x) * p(44u));
                }
            }
        }
        d[i] = row;
    }
    // Columns: (d B) row by row, then B^T down the columns.
    var r: array<vec4<f32>, 4>;
    for (var i = 0; i < 4; i = i + 1) {
        r[i] = bt(d[i]);
    }
    return array<vec4<f32>, 4>(r[0] - r[2], r[1] + r[2], r[2] - r[1], r[1] - r[3]);
}

@compute @workgroup_size(WG)
fn wino_input(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
              @builtin(local_invocation_index) lid: u32) {
    let w = linear_id(wid, nwg, lid);
    if (w >= p(0u)) {
        return;
    }
    let row_words = p(33u);
    let tiles = p(34u);
    let t = w / row_words;
    let cw = w % row_words;
    let img = t / p(36u);
    let tt = t % p(36u);
    let ty = tt / p(35u);
    let tx = tt % p(35u);
    let plane = tiles * row_words;
    let at = t * row_words + cw;
    if (DT_OUT == 0u) {
        var v = input_tile(img, ty, tx, cw);
        for (var i = 0u; i < 4u; i = i + 1u) {
            for (var j = 0u; j < 4u; j = j + 1u) {
                dst[(4u * i + j) * plane + at] = bitcast<u32>(v[i][j]);
            }
        }
        return;
    }
    let c0 = 2u * cw;
    var lo = input_tile(img, ty, tx, c0);
    var hi: array<vec4<f32>, 4>;
    if (c0 + 1u < p(32u)) {
        hi = input_tile(img, ty, tx, c0 + 1u);
    }
    for (var i = 0u; i < 4u; i = i + 1u) {
        for (var j = 0u; j < 4u; j = j + 1u) {
            let bits = f32_to_bits(lo[i][j], DT_OUT) | (f32_to_bits(hi[i][j], DT_OUT) << 16u);
            dst[(4u * i + j) * plane + at] = bits;
        }
    }
}

fn wino_flag(bit: u32) -> bool {
    return (p(42u) & bit) != 0u;
}

fn wino_activate(x: f32) -> f32 {
    return activation_by_code(p(42u) >> 8u, x);
}

// The 2x2 outputs (row-major) of channel o of tile t, before the epilogue.
fn output_tile(t: u32, o: u32) -> vec4<f32> {
    let plane = p(34u) * p(32u);
    let at = t * p(32u) + o;
    var m: array<vec4<f32>, 4>;
    for (var i = 0u; i < 4u; i = i + 1u) {
        for (var j = 0u; j < 4u; j = j + 1u) {
            m[i][j] = bitcast<f32>(src0[(4u * i + j) * plane + at]);
        }
    }
    // A^T down the columns, then A along the rows.
    let r0 = m[0] + m[1] + m[2];
    let r1 = m[1] - m[2] - m[3];
    return vec4<f32>(r0.x + r0.y + r0.z, r0.y - r0.z - r0.w, r1.x + r1.y + r1.z,
                     r1.y - r1.z - r1.w);
}

// act(y + bias) + residual of output (img, o, oh, ow).
fn wino_value(img: u32, o: u32, oh: u32, ow: u32, y: f32) -> f32 {
    var v = y;
    if (wino_flag(1u)) {
        v = v + load1(p(43u) + o * p(44u));
    }
    v = wino_activate(v);
    if (wino_flag(2u)) {
        let i = p(45u) + img * p(46u) + o * p(47u) + oh * p(48u) + ow * p(49u);
        let e = epw(DT_IN);
        v = v + bits_to_f32(lane_bits(wino_res[i / e], i % e, DT_IN), DT_IN);
    }
    return v;
}

fn wino_out_at(img: u32, o: u32, oh: u32, ow: u32) -> u32 {
    return img * p(39u) + o * p(40u) + (oh * p(38u) + ow) * p(41u);
}

@compute @workgroup_size(WG)
fn wino_output(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
    let w = linear_id(wid, nwg, lid);
    if (w >= p(0u)) {
        return;
    }
    let units = p(33u);
    let t = w / units;
    let u = w % units;
    let img = t / p(36u);
    let tt = t % p(36u);
    let oh0 = 2u * (tt / p(35u));
    let ow0 = 2u * (tt % p(35u));
    let ho = p(37u);
    let wo = p(38u);
    if (DT_OUT == 0u || !wino_flag(4u)) {
        let o = u;
        let y = output_tile(t, o);
        for (var dy = 0u; dy < 2u; dy = dy + 1u) {
            let oh = oh0 + dy;
            if (oh >= ho) {
                break;
            }
            let v0 = wino_value(img, o, oh, ow0, y[2u * dy]);
            let has1 = ow0 + 1u < wo;
            var v1 = 0.0;
            if (has1) {
                v1 = wino_value(img, o, oh, ow0 + 1u, y[2u * dy + 1u]);
            }
            let at = wino_out_at(img, o, oh, ow0);
            if (DT_OUT == 0u) {
                dst[at] = bitcast<u32>(v0);
                if (has1) {
                    dst[wino_out_at(img, o, oh, ow0 + 1u)] = bitcast<u32>(v1);
                }
            } else {
                // Pixel pairs: (ow0, ow0 + 1) share a word (Wo is even).
                dst[at / 2u] = f32_to_bits(v0, DT_OUT) | (f32_to_bits(v1, DT_OUT) << 16u);
            }
        }
        return;
    }
    // Channel pairs (o, o + 1) of one pixel share a word.
    let o = 2u * u;
    let ya = output_tile(t, o);
    let yb = output_tile(t, o + 1u);
    for (var k = 0u; k < 4u; k = k + 1u) {
        let oh = oh0 + k / 2u;
        let ow = ow0 + k % 2u;
        if (oh < ho && ow < wo) {
            let lo = f32_to_bits(wino_value(img, o, oh, ow, ya[k]), DT_OUT);
            let hi = f32_to_bits(wino_value(img, o + 1u, oh, ow, yb[k]), DT_OUT);
            dst[wino_out_at(img, o, oh, ow) / 2u] = lo | (hi << 16u);
        }
    }
}
