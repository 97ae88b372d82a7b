// elementwise.wgsl: copy/cast, unary and binary ops, comparisons and selection (where) over
// strided inputs into a contiguous output.
// Each invocation writes one output word (1, 2 or 4 elements, see common.wgsl). params[0] is the
// number of output elements; VARIANT is the op code (UnaryOp::code / BinaryOp::code). Composed
// after elementwise_math.wgsl (sin/cos, pow, log, erf).

fn max_nan(a: f32, b: f32) -> f32 {
    if (is_nan(a) || is_nan(b)) {
        return nan();
    }
    return max(a, b);
}

fn min_nan(a: f32, b: f32) -> f32 {
    if (is_nan(a) || is_nan(b)) {
        return nan();
    }
    return min(a, b);
}

fn unary_op(op: u32, x: f32, a: f32, b: f32) -> f32 {
    switch op {
        case 0u: { return -x; }
        case 1u: { return abs(x); }
        case 2u: { return exp(x); }
        case 3u: {
            if (x < 0.0) { return nan(); }
            if (x == 0.0) { return -inf(); }
            return log_accurate(x);
        }
        case 4u: {
            if (x < 0.0) { return nan(); }
            return sqrt(x);
        }
        case 5u: {
            if (x < 0.0) { return nan(); }
            if (x == 0.0) { return select(inf(), -inf(), bitcast<u32>(x) != 0u); }
            return inverseSqrt(x);
        }
        case 6u: { return tanh_stable(x); }
        case 7u: { return sigmoid(x); }
        case 8u: { return select(max(x, 0.0), x, is_nan(x)); }
        case 9u: { return gelu_erf(x); }
        case 10u: { return gelu_tanh(x); }
        case 11u: { return silu(x); }
        case 12u: { return sincos_reduced(x, false); }
        case 13u: { return sincos_reduced(x, true); }
        case 14u: { return x * a + b; }
        case 15u: { return powf(x, a); }
        case 16u: { return max_nan(x, a); }
        case 17u: { return min_nan(x, a); }
        case 18u: { return 1.0 / x; }
        case 19u: { return x * x; }
        case 20u: { return floor(x); }
        case 21u: { return ceil(x); }
        case 22u: { return round(x); }
        case 23u: { return trunc(x); }
        case 24u: { return select(0.0, 1.0, x > 0.0) - select(0.0, 1.0, x < 0.0); }
        default: { return erf_accurate(x); }
    }
}

fn binary_op(op: u32, a: f32, b: f32) -> f32 {
    switch op {
        case 0u: { return a + b; }
        case 1u: { return a - b; }
        case 2u: { return a * b; }
        case 3u: { return a / b; }
        case 4u: { return max_nan(a, b); }
        case 5u: { return min_nan(a, b); }
        default: { return powf(a, b); }
    }
}

fn ipow(a: i32, b: i32) -> i32 {
    if (b < 0) {
        return 0;
    }
    var result = 1;
    var base = a;
    var e = u32(b);
    loop {
        if (e == 0u) { break; }
        if ((e & 1u) == 1u) { result = result * base; }
        base = base * base;
        e = e >> 1u;
    }
    return result;
}

fn binary_op_i32(op: u32, a: i32, b: i32) -> i32 {
    switch op {
        case 0u: { return a + b; }
        case 1u: { return a - b; }
        case 2u: { return a * b; }
        case 3u: {
            if (b == 0) { return 0; }
            if (b == -1) { return 0 - a; }
            return a / b;
        }
        case 4u: { return max(a, b); }
        case 5u: { return min(a, b); }
        default: { return ipow(a, b); }
    }
}

// Casts between integer dtypes wrap like Rust's `as`; float<->int convert through f32.
fn convert_bits(b: u32) -> u32 {
    if (DT_IN == DT_OUT) {
        return b;
    }
    let in_int = DT_IN == 3u || DT_IN == 4u;
    let out_int = DT_OUT == 3u || DT_OUT == 4u;
    if (in_int && out_int) {
        return select(b, b & 0xffu, DT_OUT == 4u);
    }
    return f32_to_bits(bits_to_f32(b, DT_IN), DT_OUT);
}

@compute @workgroup_size(WG)
fn copy_cast(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
             @builtin(local_invocation_index) lid: u32) {
    let w = linear_id(wid, nwg, lid);
    let e = epw(DT_OUT);
    let n = p(0u);
    if (w * e >= n) {
        return;
    }
    var word = 0u;
    for (var lane = 0u; lane < e; lane = lane + 1u) {
        let i = w * e + lane;
        if (i < n) {
            word = word | place(convert_bits(load0_bits(strided(i, 12u) + p(28u))), lane, DT_OUT);
        }
    }
    dst[w] = word;
}

// Tiled transpose for copy_cast (src/gpu/kernels/elementwise.rs, `transpose_plan`): the view's
// innermost output dim A (the last of the coalesced shape) is strided in the input, and dim B
// (params[32]) has input stride 1. A workgroup moves one 32 (B) x 32 (A) tile of one batch
// index (every other dim; params[33] is the number of tiles): its lanes read along B, where the
// input is contiguous, into workgroup memory (row stride 33 against bank conflicts), and write
// whole output words along A (A's size is a whole number of output words: one tile a word).
var<workgroup> tt_tile: array<u32, 1056>;

@compute @workgroup_size(256)
fn copy_transpose(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                  @builtin(local_invocation_index) lid: u32) {
    let t = wid.y * nwg.x + wid.x;
    if (t >= p(33u)) {
        return;
    }
    let rank = p(1u);
    let da = rank - 1u;
    let db = p(32u);
    let sa = p(4u + da);
    let sb = p(4u + db);
    let ta = (sa + 31u) / 32u;
    let tb = (sb + 31u) / 32u;
    let in_tile = t % (ta * tb);
    let a0 = (in_tile % ta) * 32u;
    let b0 = (in_tile / ta) * 32u;
    // Batch index over the other dims, innermost first; output strides are contiguous ones.
    var bt = t / (ta * tb);
    var in_off = p(28u);
    var out_off = 0u;
    var out_stride_b = 0u;
    var acc = 1u;
    for (var d = rank; d > 0u; d = d - 1u) {
        let dim = d - 1u;
        let size = p(4u + dim);
        if (dim == db) {
            out_stride_b = acc;
        } else if (dim != da) {
            let i = bt % size;
            bt = bt / size;
            in_off = in_off + i * p(12u + dim);
            out_off = out_off + i * acc;
        }
        acc = acc * size;
    }
    let in_stride_a = p(12u + da);
    let lx = lid % 32u;
    let ly = lid / 32u;
    for (var i = 0u; i < 4u; i = i + 1u) {
        let ra = ly + 8u * i;
        let gb = b0 + lx;
        let ga = a0 + ra;
        var bits = 0u;
        if (gb < sb && ga < sa) {
            bits = convert_bits(load0_bits(in_off + gb + ga * in_stride_a));
        }
        tt_tile[lx * 33u + ra] = bits;
    }
    workgroupBarrier();
    let e = epw(DT_OUT);
    let wr = 32u / e;
    for (var q = lid; q < 32u * wr; q = q + 256u) {
        let rb = q / wr;
        let ga = a0 + (q % wr) * e;
        let gb = b0 + rb;
        if (gb < sb && ga < sa) {
            var word = 0u;
            for (var lane = 0u; lane < e; lane = lane + 1u) {
                word = word | place(tt_tile[rb * 33u + ga - a0 + lane], lane, DT_OUT);
            }
            dst[(out_off + gb * out_stride_b + ga) / e] = word;
        }
    }
}

@compute @workgroup_size(WG)
fn unary(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
         @builtin(local_invocation_index) lid: u32) {
    let w = linear_id(wid, nwg, lid);
    let e = epw(DT_OUT);
    let n = p(0u);
    if (w * e >= n) {
        return;
    }
    let a = pf(30u);
    let b = pf(31u);
    var word = 0u;
    for (var lane = 0u; lane < e; lane = lane + 1u) {
        let i = w * e + lane;
        if (i < n) {
            let at = strided(i, 12u) + p(28u);
            var bits: u32;
            if (DT_IN == 3u) {
                bits = bitcast<u32>(unary_op_i32(VARIANT, bitcast<i32>(src0[at]), a, b));
            } else {
                bits = f32_to_bits(unary_op(VARIANT, load0(at), a, b), DT_OUT);
            }
            word = word | place(bits, lane, DT_OUT);
        }
    }
    dst[w] = word;
}

@compute @workgroup_size(WG)
fn binary(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
          @builtin(local_invocation_index) lid: u32) {
    let w = linear_id(wid, nwg, lid);
    let e = epw(DT_OUT);
    let n = p(0u);
    if (w * e >= n) {
        return;
    }
    var word = 0u;
    for (var lane = 0u; lane < e; lane = lane + 1u) {
        let i = w * e + lane;
        if (i < n) {
            let ia = strided(i, 12u) + p(28u);
            let ib = strided(i, 20u) + p(29u);
            var bits: u32;
            if (DT_IN == 3u) {
                bits = bitcast<u32>(binary_op_i32(VARIANT, bitcast<i32>(src0[ia]), bitcast<i32>(src1[ib])));
            } else {
                bits = f32_to_bits(binary_op(VARIANT, load0(ia), load1(ib)), DT_OUT);
            }
            word = word | place(bits, lane, DT_OUT);
        }
    }
    dst[w] = word;
}

// Writes one part of a concatenation into `dst` (read-modify-write of whole words, so parts
// that share a word are merged exactly). params[32] inner size, [33] output size along the dim,
// [34] start of this part along the dim, [35] its size; shape/strides describe the part.
@compute @workgroup_size(WG)
fn cat_part(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
            @builtin(local_invocation_index) lid: u32) {
    let w = linear_id(wid, nwg, lid);
    let e = epw(DT_OUT);
    let n = p(0u);
    if (w * e >= n) {
        return;
    }
    let inner = p(32u);
    let out_dim = p(33u);
    let start = p(34u);
    let len = p(35u);
    var word = dst[w];
    var touched = false;
    for (var lane = 0u; lane < e; lane = lane + 1u) {
        let i = w * e + lane;
        if (i < n) {
            let coord = (i / inner) % out_dim;
            if (coord >= start && coord < start + len) {
                let outer = i / (inner * out_dim);
                let local = (outer * len + coord - start) * inner + i % inner;
                let bits = load0_bits(strided(local, 12u) + p(28u));
                if (e == 1u) {
                    word = bits;
                } else {
                    let width = 32u / e;
                    word = insertBits(word, bits, lane * width, width);
                }
                touched = true;
            }
        }
    }
    if (touched) {
        dst[w] = word;
    }
}

// Comparisons (VARIANT = CmpOp::code: 0 eq, 1 ne, 2 lt, 3 le, 4 gt, 5 ge) of two DT_IN operands
// into u8 0/1 (DT_OUT = u8, four elements per output word). Integers (i32, u8) compare as
// integers; floats as their exact f32 values, with NaN tested on the bits first (a NaN compares
// false except under ne, whatever the driver assumes about NaN in `<`).
fn cmp_f32(op: u32, a: f32, b: f32) -> bool {
    if (is_nan(a) || is_nan(b)) {
        return op == 1u;
    }
    switch op {
        case 0u: { return a == b; }
        case 1u: { return a != b; }
        case 2u: { return a < b; }
        case 3u: { return a <= b; }
        case 4u: { return a > b; }
        default: { return a >= b; }
    }
}

fn cmp_i32(op: u32, a: i32, b: i32) -> bool {
    switch op {
        case 0u: { return a == b; }
        case 1u: { return a != b; }
        case 2u: { return a < b; }
        case 3u: { return a <= b; }
        case 4u: { return a > b; }
        default: { return a >= b; }
    }
}

fn load1_bits(i: u32) -> u32 {
    let e = epw(DT_IN);
    return lane_bits(src1[i / e], i % e, DT_IN);
}

@compute @workgroup_size(WG)
fn compare(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_index) lid: u32) {
    let w = linear_id(wid, nwg, lid);
    let e = epw(DT_OUT);
    let n = p(0u);
    if (w * e >= n) {
        return;
    }
    var word = 0u;
    for (var lane = 0u; lane < e; lane = lane + 1u) {
        let i = w * e + lane;
        if (i < n) {
            let ia = strided(i, 12u) + p(28u);
            let ib = strided(i, 20u) + p(29u);
            var r: bool;
            if (DT_IN == 3u) {
                r = cmp_i32(VARIANT, bitcast<i32>(src0[ia]), bitcast<i32>(src1[ib]));
            } else if (DT_IN == 4u) {
                r = cmp_i32(VARIANT, i32(load0_bits(ia)), i32(load1_bits(ib)));
            } else {
                r = cmp_f32(VARIANT, load0(ia), load1(ib));
            }
            word = word | place(select(0u, 1u, r), lane, DT_OUT);
        }
    }
    dst[w] = word;
}

// where_cond: dst = mask ? src0 : src1, copied as bits (DT_IN == DT_OUT, any dtype). The u8
// mask (nonzero picks src0) is bound at 4, its strides at params[32..40) and offset at [40].
@group(0) @binding(4) var<storage, read> select_mask: array<u32>;

@compute @workgroup_size(WG)
fn select_where(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
    let w = linear_id(wid, nwg, lid);
    let e = epw(DT_OUT);
    let n = p(0u);
    if (w * e >= n) {
        return;
    }
    var word = 0u;
    for (var lane = 0u; lane < e; lane = lane + 1u) {
        let i = w * e + lane;
        if (i < n) {
            let im = strided(i, 32u) + p(40u);
            let keep = lane_bits(select_mask[im / 4u], im % 4u, 4u) != 0u;
            var bits: u32;
            if (keep) {
                bits = load0_bits(strided(i, 12u) + p(28u));
            } else {
                bits = load1_bits(strided(i, 20u) + p(29u));
            }
            word = word | place(bits, lane, DT_OUT);
        }
    }
    dst[w] = word;
}

// index_select and gather: output element i (output shape at params[4..12)) copies the source
// element at strided(i, src0 strides with the indexed dim's zeroed) + params[28] + index *
// params[34] (the indexed dim's source stride), index = src1[strided(i, src1 strides) +
// params[29]] (i32 words, checked in range on the host). index_select's index strides are zero
// but along the indexed dim. Values are copied as bits.
@compute @workgroup_size(WG)
fn index_select(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
                @builtin(local_invocation_index) lid: u32) {
    let w = linear_id(wid, nwg, lid);
    let e = epw(DT_OUT);
    let n = p(0u);
    if (w * e >= n) {
        return;
    }
    var word = 0u;
    for (var lane = 0u; lane < e; lane = lane + 1u) {
        let i = w * e + lane;
        if (i < n) {
            let index = u32(bitcast<i32>(src1[strided(i, 20u) + p(29u)]));
            let at = strided(i, 12u) + p(28u) + index * p(34u);
            word = word | place(load0_bits(at), lane, DT_OUT);
        }
    }
    dst[w] = word;
}
