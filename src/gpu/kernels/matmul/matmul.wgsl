// matmul.wgsl: the matrix-product family prelude and the simple engine. Composed after
// common.wgsl; matmul_tiled.wgsl, matmul_coop.wgsl and the other product kernels are composed after this
// file (common + matmul + family), so they share its loads, tile staging and fused epilogue.
//
// Bindings: 1 dst, 2 A (src0), 3 B (src1), 4 C, 5 bias, 6 residual (C/bias/residual bound to a
// dummy buffer when absent; all operands have dtype DT_IN, the output DT_OUT).
// params: [4..12) batch shape, [12..) A / [20..) B batch strides, [28] A offset, [29] B offset,
// [30] alpha, [31] beta, [32] M, [33] N (output columns), [34] K, [35] A row stride,
// [36] A col stride, [37] B row stride, [38] B col stride, [39] first batch of this dispatch,
// [40] flags (bit0 C, bit1 bias, bit2 residual, bit3 GEGLU, bits 8.. activation code),
// [41] C offset, [42] C row stride, [43] C col stride, [44] residual offset, [45] residual row
// stride, [46] residual col stride, [47] bias offset, [48] bias stride, [49] output row pitch
// (elements; even for 16-bit outputs, so a word never straddles rows), [50] product columns,
// [51..51+rank) C batch strides, [51+rank..51+2*rank) residual batch strides.
// Split K ([2] splits S > 1, [3] K per split, a multiple of 32; kernels that read them say so):
// workgroup z is (batch in the dispatch) * S + split, the split's K range its own, and its f32
// partial product goes to output batch b * S + split of a [batch, S, M, params[50]] buffer,
// with the identity epilogue; the `epilogue` pass then sums the S partials of each output.
// GEGLU: the product has 2N columns [h | g]; a tile of TN virtual columns holds TN/2 columns of
// h then the same TN/2 columns of g, so one invocation owns both halves of its outputs.

@group(0) @binding(4) var<storage, read> src_c: array<u32>;
@group(0) @binding(5) var<storage, read> src_bias: array<u32>;
@group(0) @binding(6) var<storage, read> src_res: array<u32>;

// Two buffers of 1024 f32 each per operand (double-buffered tiles), 16 KiB in all.
var<workgroup> sa: array<f32, 2048>;
var<workgroup> sb: array<f32, 2048>;

fn dim_m() -> u32 { return p(32u); }
fn dim_n() -> u32 { return p(33u); }
fn dim_k() -> u32 { return p(34u); }
fn is_geglu() -> bool { return (p(40u) & 8u) != 0u; }

fn load_at(word: u32, i: u32) -> f32 {
    return bits_to_f32(lane_bits(word, i % epw(DT_IN), DT_IN), DT_IN);
}

fn load_c(i: u32) -> f32 { return load_at(src_c[i / epw(DT_IN)], i); }
fn load_bias(i: u32) -> f32 { return load_at(src_bias[i / epw(DT_IN)], i); }
fn load_res(i: u32) -> f32 { return load_at(src_res[i / epw(DT_IN)], i); }

// Split K of workgroup z (see the header): (batch, output batch, first k, end k); without a
// split (S <= 1) the batch z + first, the same output batch and the whole K.
fn split_k(z: u32) -> vec4<u32> {
    let s = max(p(2u), 1u);
    let j = z % s;
    let b = z / s + p(39u);
    let kb = select(0u, j * p(3u), s > 1u);
    let ke = select(dim_k(), min(dim_k(), kb + p(3u)), s > 1u);
    return vec4<u32>(b, b * s + j, kb, ke);
}

// Storage offsets of batch `b` in A and B.
fn a_base(b: u32) -> u32 { return strided(b, 12u) + p(28u); }
fn b_base(b: u32) -> u32 { return strided(b, 20u) + p(29u); }

// Product column of virtual tile column `jj` of column tile `tile` (width `tn`), and whether
// its output column is inside N.
fn prod_col(tile: u32, jj: u32, tn: u32) -> vec2<u32> {
    let n = dim_n();
    if (is_geglu()) {
        let half = tn / 2u;
        let oc = tile * half + jj % half;
        return vec2<u32>(oc + select(0u, n, jj >= half), u32(oc < n));
    }
    let oc = tile * tn + jj;
    return vec2<u32>(oc, u32(oc < n));
}

// True when the output columns of column tile `tile` (width `tn`) are all inside N.
fn cols_full(tile: u32, tn: u32) -> bool {
    let w = select(tn, tn / 2u, is_geglu());
    return (tile + 1u) * w <= dim_n();
}

// Stages the A tile rows [row0, row0+tm) x k [k0, k0+tk) into sa[buf*1024..] as [tk][tm].
// `full`: the tile is inside the matrix (no bounds checks). Row-major A is read k-fastest,
// column-major A row-fastest, so consecutive invocations read consecutive addresses.
fn stage_a(buf: u32, base: u32, row0: u32, k0: u32, tm: u32, tk: u32, lid: u32, full: bool) {
    let rs = p(35u);
    let cs = p(36u);
    let by_k = cs == 1u;
    for (var e = lid; e < tm * tk; e = e + 256u) {
        let r = select(e % tm, e / tk, by_k);
        let kk = select(e / tm, e % tk, by_k);
        var v = 0.0;
        if (full || (row0 + r < dim_m() && k0 + kk < dim_k())) {
            v = load0(base + (row0 + r) * rs + (k0 + kk) * cs);
        }
        sa[buf * 1024u + kk * tm + r] = v;
    }
}

// Stages the B tile of column tile `tile` (tn virtual columns) x k [k0, k0+tk) into
// sb[buf*1024..] as [tk][tn]; read column-fastest unless B is column-major.
fn stage_b(buf: u32, base: u32, tile: u32, k0: u32, tn: u32, tk: u32, lid: u32, full: bool) {
    let rs = p(37u);
    let cs = p(38u);
    let by_k = rs == 1u && cs != 1u;
    for (var e = lid; e < tn * tk; e = e + 256u) {
        let jj = select(e % tn, e / tk, by_k);
        let kk = select(e / tn, e % tk, by_k);
        let pc = prod_col(tile, jj, tn);
        var v = 0.0;
        if (full || (pc.y != 0u && k0 + kk < dim_k())) {
            v = load1(base + (k0 + kk) * rs + pc.x * cs);
        }
        sb[buf * 1024u + kk * tn + jj] = v;
    }
}

// Activation codes: 0 none, 1 relu, 2 gelu (erf), 3 gelu (tanh), 4 silu.
fn activate(x: f32) -> f32 {
    return activation_by_code(p(40u) >> 8u, x);
}

// The fused epilogue of output (batch b, row r, column c) from the f32 product value `h`
// (and, for GEGLU, the gate's product value `g`).
fn epilogue_value(b: u32, r: u32, c: u32, h: f32, g: f32) -> f32 {
    let flags = p(40u);
    let alpha = pf(30u);
    var v = alpha * h;
    if (is_geglu()) {
        var gv = alpha * g;
        if ((flags & 2u) != 0u) {
            v = v + load_bias(p(47u) + c * p(48u));
            gv = gv + load_bias(p(47u) + (c + dim_n()) * p(48u));
        }
        v = v * activate(gv);
    } else {
        if ((flags & 1u) != 0u) {
            let off = p(41u) + strided(b, 51u) + r * p(42u) + c * p(43u);
            v = v + pf(31u) * load_c(off);
        }
        if ((flags & 2u) != 0u) {
            v = v + load_bias(p(47u) + c * p(48u));
        }
        v = activate(v);
    }
    if ((flags & 4u) != 0u) {
        let off = p(44u) + strided(b, 51u + p(1u)) + r * p(45u) + c * p(46u);
        v = v + load_res(off);
    }
    return v;
}

// Writes outputs (b, r, c) and (b, r, c+1) with c even (the second only if `two`): one f32 word
// each, or one packed word for 16-bit outputs (the row pitch is even, so the pair is one word,
// owned by exactly this invocation; a missing second lane is written as zero padding).
fn store_pair(b: u32, r: u32, c: u32, v0: f32, v1: f32, two: bool) {
    let o = (b * dim_m() + r) * p(49u) + c;
    if (DT_OUT == 0u) {
        dst[o] = bitcast<u32>(v0);
        if (two) {
            dst[o + 1u] = bitcast<u32>(v1);
        }
    } else {
        let hi = select(0u, f32_to_bits(v1, DT_OUT), two);
        dst[o / 2u] = f32_to_bits(v0, DT_OUT) | (hi << 16u);
    }
}

// Applies the epilogue to the values of output columns (c, c+1) and stores them.
fn finish_pair(b: u32, r: u32, c: u32, h0: f32, h1: f32, g0: f32, g1: f32) {
    let n = dim_n();
    if (r >= dim_m() || c >= n) {
        return;
    }
    let two = c + 1u < n;
    let v0 = epilogue_value(b, r, c, h0, g0);
    var v1 = 0.0;
    if (two) {
        v1 = epilogue_value(b, r, c + 1u, h1, g1);
    }
    store_pair(b, r, c, v0, v1, two);
}

// The simple engine: a 16x16 workgroup computes a 64x64 tile of the f32 product (all product
// columns, contiguous [batch, M, params[50]]), each invocation a 4x4 register block, with
// [16][64] tiles of A and B staged per K step. The `epilogue` entry point then finishes it.
// Reads split K (see the header): f32 partials per split, summed by the epilogue pass.
@compute @workgroup_size(16, 16)
fn matmul(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid3: vec3<u32>,
          @builtin(local_invocation_index) lid: u32) {
    let m = dim_m();
    let np = p(50u);
    let k = dim_k();
    let sk = split_k(wid.z);
    let batch = sk.x;
    let ab = a_base(batch);
    let bb = b_base(batch);
    let row0 = wid.y * 64u;
    let col0 = wid.x * 64u;
    var acc: array<f32, 16>;
    for (var k0 = sk.z; k0 < sk.w; k0 = k0 + 16u) {
        // Plain bounds-checked loads over the product columns (no GEGLU mapping here).
        for (var e = lid; e < 1024u; e = e + 256u) {
            let ar = e / 16u;
            let ak = e % 16u;
            var va = 0.0;
            if (row0 + ar < m && k0 + ak < k) {
                va = load0(ab + (row0 + ar) * p(35u) + (k0 + ak) * p(36u));
            }
            sa[ak * 64u + ar] = va;
            let bk = e / 64u;
            let bc = e % 64u;
            var vb = 0.0;
            if (k0 + bk < k && col0 + bc < np) {
                vb = load1(bb + (k0 + bk) * p(37u) + (col0 + bc) * p(38u));
            }
            sb[bk * 64u + bc] = vb;
        }
        workgroupBarrier();
        for (var kk = 0u; kk < 16u; kk = kk + 1u) {
            for (var i = 0u; i < 4u; i = i + 1u) {
                let a = sa[kk * 64u + lid3.y + 16u * i];
                for (var j = 0u; j < 4u; j = j + 1u) {
                    acc[i * 4u + j] = fma(a, sb[kk * 64u + lid3.x + 16u * j], acc[i * 4u + j]);
                }
            }
        }
        workgroupBarrier();
    }
    for (var i = 0u; i < 4u; i = i + 1u) {
        let r = row0 + lid3.y + 16u * i;
        for (var j = 0u; j < 4u; j = j + 1u) {
            let c = col0 + lid3.x + 16u * j;
            if (r < m && c < np) {
                dst[(sk.y * m + r) * np + c] = bitcast<u32>(acc[i * 4u + j]);
            }
        }
    }
}

// The unfused epilogue pass over an f32 product in src0 (contiguous [batch, M, params[50]], or
// [batch, S, M, params[50]] partial products summed here when params[2] = S > 1): one
// invocation per output word (one element, or two adjacent columns of one row for 16-bit
// outputs). params[0] is the number of output words.
@compute @workgroup_size(WG)
fn epilogue(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) lid: u32) {
    let w = linear_id(wid, nwg, lid);
    if (w >= p(0u)) {
        return;
    }
    let e = w * epw(DT_OUT);
    let pitch = p(49u);
    let c = e % pitch;
    let row = e / pitch;
    let r = row % dim_m();
    let b = row / dim_m();
    let np = p(50u);
    let gsh = select(0u, dim_n(), is_geglu());
    let splits = max(p(2u), 1u);
    let pair = c + 1u < dim_n();
    var h0 = 0.0;
    var g0 = 0.0;
    var h1 = 0.0;
    var g1 = 0.0;
    for (var j = 0u; j < splits; j = j + 1u) {
        let src = ((b * splits + j) * dim_m() + r) * np + c;
        h0 = h0 + bitcast<f32>(src0[src]);
        g0 = g0 + bitcast<f32>(src0[src + gsh]);
        if (pair) {
            h1 = h1 + bitcast<f32>(src0[src + 1u]);
            g1 = g1 + bitcast<f32>(src0[src + 1u + gsh]);
        }
    }
    if (DT_OUT == 0u) {
        if (c < dim_n()) {
            dst[w] = bitcast<u32>(epilogue_value(b, r, c, h0, g0));
        }
    } else {
        finish_pair(b, r, c, h0, h1, g0, g1);
    }
}
