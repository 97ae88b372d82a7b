// conv.wgsl: 2-D convolution as an implicit GEMM (composed as common.wgsl + this file).
//
// The product is out[m, c] = sum_k A[m, k] * B[k, c] per group g (grid z), with
//   m = (img, oh, ow) over N*Ho*Wo output pixels, c < O/g the group's output channels,
//   k = (ky, kx, ci) over the kh*kw taps and the C/g input channels of the group.
// A is never stored: each A tile is gathered from the input by index arithmetic (zero padding,
// stride, dilation) through the input's four strides, so NCHW and channels-last inputs need no
// copy; B is read from the weight [O, C/g, kh, kw] through its strides. The K loop walks the taps
// in the outer position and channel chunks of TK in the inner one, so a K step has one uniform
// tap (no per-element division); a row's input position is decoded once per kernel.
//
// Tiles follow matmul_tiled.wgsl: A [TK][TM] and B [TK][TN] tiles double-buffered in workgroup
// memory (one barrier per K step), an f32 register block per invocation, the fused epilogue in
// the store. Each invocation owns 2x2 micro-blocks (rows 2ty + q, columns 2tx + q; x and y
// swapped for NCHW outputs in the 16x16 configs, see bit5 below), so a 16-bit
// output word (two elements adjacent in memory: two pixels of one channel for NCHW outputs, two
// channels of one pixel for channels-last outputs) is always written whole by one invocation.
// - conv_narrow: 128x16 tile, TK 8, 8x32 invocations, 4x2 block (few output channels);
// - conv_large4, conv_medium4 (conv_vec4.wgsl, composed after this file): 128x128 and 64x64
//   tiles held as vec4 in workgroup memory.
// Every tile handles every shape (edges are bounds-checked); the host picks one by shape.
//
// Bindings: 1 dst (DT_OUT), 2 input (src0), 3 weight (src1), 4 bias, 5 residual (all DT_IN;
// absent operands are bound to the input and never read).
// params: [4..8) input strides (n, c, h, w), [8] input offset, [9..13) weight strides
// (o, c, kh, kw), [13] weight offset, [14] C/g, [15] H, [16] W, [17] O/g, [18] kh, [19] kw,
// [20] Ho, [21] Wo, [22] stride h, [23] stride w, [24] pad h, [25] pad w, [26] dilation h,
// [27] dilation w, [28] M = N*Ho*Wo, [29..32) output strides (img, channel, pixel = oh*Wo+ow),
// [32] flags, [33] bias offset, [34] bias stride, [35] residual offset, [36..40) residual
// strides (n, o, h, w), [40] first row tile of this dispatch, [41] first group.
// flags: bit0 bias, bit1 residual, bit2 A staged k-fastest (channels-last input), bit3 B staged
// k-fastest (weight contiguous in C), bit4 16-bit pairs along channels (else along pixels;
// the host guarantees an even pixel count or an even O/g respectively), bit5 pixels adjacent
// in the output (NCHW): the 16x16 configs then give x (the fastest invocation index) to the
// rows, so neighbouring invocations store neighbouring words; bits 8.. activation (0 none,
// 1 relu, 2 gelu, 3 gelu tanh, 4 silu). Epilogue: act(acc + bias) + residual.

@group(0) @binding(4) var<storage, read> conv_bias: array<u32>;
@group(0) @binding(5) var<storage, read> conv_res: array<u32>;

var<workgroup> conv_a: array<f32, 2048>;
var<workgroup> conv_b: array<f32, 2048>;

fn cg() -> u32 { return p(14u); }
fn og() -> u32 { return p(17u); }
fn conv_flag(bit: u32) -> bool { return (p(32u) & bit) != 0u; }

fn load_dt(word: u32, i: u32) -> f32 {
    return bits_to_f32(lane_bits(word, i % epw(DT_IN), DT_IN), DT_IN);
}

// An output pixel m (a GEMM row): image, pixel index, output row and column.
struct Pix {
    img: u32,
    pos: u32,
    oh: u32,
    ow: u32,
    ok: bool,
}

fn pix(m: u32) -> Pix {
    let wo = p(21u);
    let hw = p(20u) * wo;
    let img = m / hw;
    let pos = m - img * hw;
    let oh = pos / wo;
    return Pix(img, pos, oh, pos - oh * wo, m < p(28u));
}

// What a staged A row needs at every K step: the input offset of its image and group, and the
// top-left input position of its receptive field (negative inside the padding).
struct RowIn {
    base: u32,
    ih0: i32,
    iw0: i32,
    ok: bool,
}

fn row_in(m: u32, g: u32) -> RowIn {
    let q = pix(m);
    let base = p(8u) + q.img * p(4u) + g * cg() * p(5u);
    let ih0 = i32(q.oh * p(22u)) - i32(p(24u));
    let iw0 = i32(q.ow * p(23u)) - i32(p(25u));
    return RowIn(base, ih0, iw0, q.ok);
}

// A[m, (ky, kx, ci)] for a staged row (zero outside the input).
fn a_val(ri: RowIn, ky: u32, kx: u32, ci: u32) -> f32 {
    let ih = ri.ih0 + i32(ky * p(26u));
    let iw = ri.iw0 + i32(kx * p(27u));
    if (!ri.ok || ci >= cg() || ih < 0 || iw < 0 || u32(ih) >= p(15u) || u32(iw) >= p(16u)) {
        return 0.0;
    }
    return load0(ri.base + u32(ih) * p(6u) + u32(iw) * p(7u) + ci * p(5u));
}

// (row, k) of the e-th of the 4 A elements an invocation stages per step (TM * TK = 1024):
// rows fastest across invocations for NCHW inputs (consecutive pixels are adjacent), k fastest
// for channels-last inputs (consecutive channels are adjacent). The row is fixed per kernel.
fn a_slot(lid: u32, e: u32, tm: u32, tk: u32) -> vec2<u32> {
    if (conv_flag(4u)) {
        return vec2<u32>(lid / tk + (256u / tk) * e, lid % tk);
    }
    return vec2<u32>(lid % tm, lid / tm + (256u / tm) * e);
}

// K step s -> (ky, kx, first channel): taps outer, channel chunks of tk inner.
fn k_step(s: u32, tk: u32) -> vec3<u32> {
    let chunks = (cg() + tk - 1u) / tk;
    let tap = s / chunks;
    let ky = tap / p(19u);
    return vec3<u32>(ky, tap - ky * p(19u), (s - tap * chunks) * tk);
}

fn k_steps(tk: u32) -> u32 {
    return p(18u) * p(19u) * ((cg() + tk - 1u) / tk);
}

// Position of tile row/column `i` in the slice of K index `kk` of a staged tile (width w, a power
// of two): XOR-swizzled by kk, so invocations that stage different kk of one row hit different
// workgroup-memory banks, while a slice stays a permutation of itself (reads of one kk by
// consecutive invocations stay conflict-free).
fn swz(kk: u32, i: u32, tk: u32, w: u32) -> u32 {
    return i ^ ((kk * (32u / tk)) & (w - 1u));
}

// Gathers the A tile of K step `ks` into conv_a[buf*1024..] as [tk][tm].
fn stage_a(buf: u32, rows: array<RowIn, 4>, lid: u32, ks: vec3<u32>, tm: u32, tk: u32) {
    for (var e = 0u; e < 4u; e = e + 1u) {
        let s = a_slot(lid, e, tm, tk);
        let v = a_val(rows[e], ks.x, ks.y, ks.z + s.y);
        conv_a[buf * 1024u + s.y * tm + swz(s.y, s.x, tk, tm)] = v;
    }
}

// Stages the B tile (weights of columns col0..col0+tn of group g at K step `ks`) into
// conv_b[buf*1024..] as [tk][tn]; k fastest when the weight is contiguous in C.
fn stage_b(buf: u32, g: u32, col0: u32, lid: u32, ks: vec3<u32>, tn: u32, tk: u32) {
    let kfast = conv_flag(8u);
    let tap_off = p(13u) + ks.x * p(11u) + ks.y * p(12u);
    for (var e = lid; e < tn * tk; e = e + 256u) {
        let jj = select(e % tn, e / tk, kfast);
        let kk = select(e / tn, e % tk, kfast);
        let c = col0 + jj;
        let ci = ks.z + kk;
        var v = 0.0;
        if (c < og() && ci < cg()) {
            v = load1(tap_off + (g * og() + c) * p(9u) + ci * p(10u));
        }
        conv_b[buf * 1024u + kk * tn + swz(kk, jj, tk, tn)] = v;
    }
}

fn conv_activate(x: f32) -> f32 {
    return activation_by_code(p(32u) >> 8u, x);
}

// The fused epilogue of output (pixel q, channel o): act(acc + bias) + residual.
fn conv_value(q: Pix, o: u32, acc: f32) -> f32 {
    var v = acc;
    if (conv_flag(1u)) {
        let i = p(33u) + o * p(34u);
        v = v + load_dt(conv_bias[i / epw(DT_IN)], i);
    }
    v = conv_activate(v);
    if (conv_flag(2u)) {
        let i = p(35u) + q.img * p(36u) + o * p(37u) + q.oh * p(38u) + q.ow * p(39u);
        v = v + load_dt(conv_res[i / epw(DT_IN)], i);
    }
    return v;
}

fn out_at(q: Pix, o: u32) -> u32 {
    return q.img * p(29u) + o * p(30u) + q.pos * p(31u);
}

// Stores the 2x2 micro-block at GEMM rows (r, r+1), group columns (c, c+1) of group g, with
// r and c even. f32: one word per element; 16-bit: two words, each holding the pair adjacent
// in memory (the first element decides: the host guarantees its partner exists with it).
fn store_block(g: u32, r: u32, c: u32, v00: f32, v01: f32, v10: f32, v11: f32) {
    let q0 = pix(r);
    let q1 = pix(r + 1u);
    let o = g * og() + c;
    let c0 = c < og();
    let c1 = c + 1u < og();
    if (DT_OUT == 0u) {
        if (q0.ok && c0) { dst[out_at(q0, o)] = bitcast<u32>(conv_value(q0, o, v00)); }
        if (q0.ok && c1) { dst[out_at(q0, o + 1u)] = bitcast<u32>(conv_value(q0, o + 1u, v01)); }
        if (q1.ok && c0) { dst[out_at(q1, o)] = bitcast<u32>(conv_value(q1, o, v10)); }
        if (q1.ok && c1) {
            dst[out_at(q1, o + 1u)] = bitcast<u32>(conv_value(q1, o + 1u, v11));
        }
        return;
    }
    if (!q0.ok || !c0) {
        return;
    }
    if (conv_flag(16u)) {
        // Channel pairs of one pixel: (q0, o | o+1) and (q1, o | o+1).
        let lo0 = f32_to_bits(conv_value(q0, o, v00), DT_OUT);
        let hi0 = f32_to_bits(conv_value(q0, o + 1u, v01), DT_OUT);
        dst[out_at(q0, o) / 2u] = lo0 | (hi0 << 16u);
        if (q1.ok) {
            let lo1 = f32_to_bits(conv_value(q1, o, v10), DT_OUT);
            let hi1 = f32_to_bits(conv_value(q1, o + 1u, v11), DT_OUT);
            dst[out_at(q1, o) / 2u] = lo1 | (hi1 << 16u);
        }
    } else {
        // Pixel pairs of one channel: (q0 | q1, o) and (q0 | q1, o+1).
        let lo0 = f32_to_bits(conv_value(q0, o, v00), DT_OUT);
        let hi0 = f32_to_bits(conv_value(q1, o, v10), DT_OUT);
        dst[out_at(q0, o) / 2u] = lo0 | (hi0 << 16u);
        if (c1) {
            let lo1 = f32_to_bits(conv_value(q0, o + 1u, v01), DT_OUT);
            let hi1 = f32_to_bits(conv_value(q1, o + 1u, v11), DT_OUT);
            dst[out_at(q0, o + 1u) / 2u] = lo1 | (hi1 << 16u);
        }
    }
}

// Stores the micro-blocks of rows (r, r+1) whose accumulators hold columns (c, c+1, c+32,
// c+33): `v0` of row r, `v1` of row r+1 (the epilogues of the 16x16 configs).
fn store_band(g: u32, r: u32, c: u32, v0: vec4<f32>, v1: vec4<f32>) {
    store_block(g, r, c, v0.x, v0.y, v1.x, v1.y);
    store_block(g, r, c + 32u, v0.z, v0.w, v1.z, v1.w);
}

// The staged rows of one invocation (fixed for the whole K loop).
fn staged_rows(lid: u32, row0: u32, g: u32, tm: u32, tk: u32) -> array<RowIn, 4> {
    var rows: array<RowIn, 4>;
    for (var e = 0u; e < 4u; e = e + 1u) {
        rows[e] = row_in(row0 + a_slot(lid, e, tm, tk).x, g);
    }
    return rows;
}

@compute @workgroup_size(8, 32)
fn conv_narrow(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) l: vec3<u32>,
               @builtin(local_invocation_index) lid: u32) {
    let g = wid.z + p(41u);
    let row0 = (wid.y + p(40u)) * 128u;
    let col0 = wid.x * 16u;
    let rows = staged_rows(lid, row0, g, 128u, 8u);
    let nt = k_steps(8u);
    var c0 = vec2<f32>(0.0);
    var c1 = vec2<f32>(0.0);
    var c2 = vec2<f32>(0.0);
    var c3 = vec2<f32>(0.0);
    if (nt > 0u) {
        let ks = k_step(0u, 8u);
        stage_a(0u, rows, lid, ks, 128u, 8u);
        stage_b(0u, g, col0, lid, ks, 16u, 8u);
    }
    workgroupBarrier();
    for (var t = 0u; t < nt; t = t + 1u) {
        let cur = (t & 1u) * 1024u;
        if (t + 1u < nt) {
            let ks = k_step(t + 1u, 8u);
            stage_a(1u - (t & 1u), rows, lid, ks, 128u, 8u);
            stage_b(1u - (t & 1u), g, col0, lid, ks, 16u, 8u);
        }
        for (var kk = 0u; kk < 8u; kk = kk + 1u) {
            let base = cur + kk * 128u;
            let a0 = conv_a[base + swz(kk, 2u * l.y + 0u, 8u, 128u)];
            let a1 = conv_a[base + swz(kk, 2u * l.y + 1u, 8u, 128u)];
            let a2 = conv_a[base + swz(kk, 2u * l.y + 64u, 8u, 128u)];
            let a3 = conv_a[base + swz(kk, 2u * l.y + 65u, 8u, 128u)];
            let bv = vec2<f32>(conv_b[cur + kk * 16u + swz(kk, 2u * l.x, 8u, 16u)],
                               conv_b[cur + kk * 16u + swz(kk, 2u * l.x + 1u, 8u, 16u)]);
            c0 = fma(vec2<f32>(a0), bv, c0);
            c1 = fma(vec2<f32>(a1), bv, c1);
            c2 = fma(vec2<f32>(a2), bv, c2);
            c3 = fma(vec2<f32>(a3), bv, c3);
        }
        workgroupBarrier();
    }
    let c = col0 + 2u * l.x;
    store_block(g, row0 + 2u * l.y, c, c0.x, c0.y, c1.x, c1.y);
    store_block(g, row0 + 2u * l.y + 64u, c, c2.x, c2.y, c3.x, c3.y);
}
