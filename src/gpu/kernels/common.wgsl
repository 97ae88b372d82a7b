// common.wgsl: the prelude of every xpu compute shader. The runtime composes each module as
// `common.wgsl` followed by one family file (never text substitution), and tests/shaders.rs
// validates exactly those compositions with naga.
//
// Conventions (mirrored by src/gpu/kernels/params.rs):
// - every tensor buffer is `array<u32>`: f32/i32 take one word per element, f16/bf16 two lanes
//   per word, u8 four lanes per word (little-endian lane order);
// - dtype codes: 0 f32, 1 f16, 2 bf16, 3 i32, 4 u8; DT_IN/DT_OUT select them per pipeline;
// - an invocation that writes 16- or 8-bit data writes whole words, so no two invocations ever
//   write the same word;
// - params (binding 0) is 64 u32 words: [0] count, [1] rank, [2] op, [3] extra,
//   [4..12) shape, [12..20) strides of src0, [20..28) strides of src1, [28] offset src0,
//   [29] offset src1, [30..32) two f32 scalars, [32..64) family-specific.

override DT_IN: u32 = 0u;
override DT_OUT: u32 = 0u;
override WG: u32 = 256u;
override VARIANT: u32 = 0u;

@group(0) @binding(0) var<uniform> params: array<vec4<u32>, 16>;
@group(0) @binding(1) var<storage, read_write> dst: array<u32>;
@group(0) @binding(2) var<storage, read> src0: array<u32>;
@group(0) @binding(3) var<storage, read> src1: array<u32>;

const F32_INF: u32 = 0x7f800000u;
const F32_NAN: u32 = 0x7fc00000u;

fn p(i: u32) -> u32 {
    return params[i >> 2u][i & 3u];
}

fn pf(i: u32) -> f32 {
    return bitcast<f32>(p(i));
}

fn inf() -> f32 {
    return bitcast<f32>(F32_INF);
}

fn nan() -> f32 {
    return bitcast<f32>(F32_NAN);
}

fn is_nan(x: f32) -> bool {
    return (bitcast<u32>(x) & 0x7fffffffu) > F32_INF;
}

// Elements per u32 word of a dtype.
fn epw(dt: u32) -> u32 {
    if (dt == 1u || dt == 2u) {
        return 2u;
    }
    if (dt == 4u) {
        return 4u;
    }
    return 1u;
}

// Raw bits of lane `lane` of `word` for dtype `dt` (zero-extended).
fn lane_bits(word: u32, lane: u32, dt: u32) -> u32 {
    let e = epw(dt);
    if (e == 1u) {
        return word;
    }
    let bits = 32u / e;
    return extractBits(word, lane * bits, bits);
}

// Value of the lane bits of dtype `dt` as f32.
fn bits_to_f32(b: u32, dt: u32) -> f32 {
    switch dt {
        case 0u: { return bitcast<f32>(b); }
        case 1u: { return unpack2x16float(b).x; }
        case 2u: { return bitcast<f32>(b << 16u); }
        case 3u: { return f32(bitcast<i32>(b)); }
        default: { return f32(b); }
    }
}

// bf16 bits of an f32, rounding to nearest even (NaN stays NaN).
fn f32_to_bf16_bits(v: f32) -> u32 {
    let b = bitcast<u32>(v);
    if (is_nan(v)) {
        return (b >> 16u) | 0x40u;
    }
    return (b + 0x7fffu + ((b >> 16u) & 1u)) >> 16u;
}

// Lane bits of dtype `dt` for an f32 value (saturating, NaN -> 0 for integers).
fn f32_to_bits(v: f32, dt: u32) -> u32 {
    switch dt {
        case 0u: { return bitcast<u32>(v); }
        case 1u: { return pack2x16float(vec2<f32>(v, 0.0)) & 0xffffu; }
        case 2u: { return f32_to_bf16_bits(v); }
        case 3u: {
            if (is_nan(v)) { return 0u; }
            return bitcast<u32>(i32(clamp(v, -2147483648.0, 2147483520.0)));
        }
        default: {
            if (is_nan(v)) { return 0u; }
            return u32(clamp(v, 0.0, 255.0));
        }
    }
}

// Element `i` (storage index) of src0 / src1 as f32, decoded from DT_IN.
fn load0(i: u32) -> f32 {
    let e = epw(DT_IN);
    return bits_to_f32(lane_bits(src0[i / e], i % e, DT_IN), DT_IN);
}

fn load1(i: u32) -> f32 {
    let e = epw(DT_IN);
    return bits_to_f32(lane_bits(src1[i / e], i % e, DT_IN), DT_IN);
}

fn load0_bits(i: u32) -> u32 {
    let e = epw(DT_IN);
    return lane_bits(src0[i / e], i % e, DT_IN);
}

// Places lane bits at lane `lane` of a word of dtype `dt`.
fn place(bits: u32, lane: u32, dt: u32) -> u32 {
    let e = epw(dt);
    if (e == 1u) {
        return bits;
    }
    return bits << (lane * (32u / e));
}

// Storage offset of logical (row-major) index `i` over the shape in params[4..4+rank], with the
// strides at params[strides_at..].
fn strided(i: u32, strides_at: u32) -> u32 {
    var idx = i;
    var off = 0u;
    let rank = p(1u);
    for (var d = rank; d > 0u; d = d - 1u) {
        let size = p(3u + d);
        off = off + (idx % size) * p(strides_at + d - 1u);
        idx = idx / size;
    }
    return off;
}

// Attention kernels: storage offset (in output words) of output row `row` of head `bh`, the
// output laid out as the caller asked (contiguous, or PyTorch's empty_like(q) order):
// params[60] inner head-dim size, [61] outer and [62] inner head strides, [63] row stride.
fn out_row(bh: u32, row: u32) -> u32 {
    let inner = p(60u);
    return (bh / inner) * p(61u) + (bh % inner) * p(62u) + row * p(63u);
}

// Linear invocation id over a 2-D grid of 1-D workgroups of WG invocations.
fn linear_id(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
    return (wid.y * nwg.x + wid.x) * WG + lid;
}

// Activations shared by the elementwise ops and the fused epilogues.

// erf(z) for |z| < 1 as z times a polynomial in u = 2 z^2 - 1 (the CPU kernels' ERF_SMALL
// Chebyshev fit, src/cpu/simd/fallback.rs: relative error ~3e-8, where 1 - erfc would lose the
// relative accuracy of small results).
fn erf_small(z: f32) -> f32 {
    let u = 2.0 * z * z - 1.0;
    return z * (9.654687643e-1 + u * (-1.405360997e-1 + u * (1.985249668e-2 + u * (-2.285419498e-3
        + u * (2.175135451e-4 + u * (-1.766906826e-5 + u * 1.230605449e-6))))));
}

// erfc(|x|) by a Numerical-Recipes style Chebyshev fit (|rel err| < 1.2e-7 everywhere;
// Abramowitz-Stegun 7.1.26 is only 1.5e-7 absolute).
fn erfc_abs(x: f32) -> f32 {
    let z = abs(x);
    let t = 1.0 / (1.0 + 0.5 * z);
    return t * exp(-z * z - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418
        + t * (-0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587
        + t * (-0.82215223 + t * 0.17087277)))))))));
}

fn erf_approx(x: f32) -> f32 {
    if (abs(x) < 1.0) {
        return erf_small(x);
    }
    let erf_abs = 1.0 - erfc_abs(x);
    return select(erf_abs, -erf_abs, x < 0.0);
}

// tanh: an odd minimax polynomial below 0.625 (the CPU kernels' TANH_SMALL, Cephes' tanhf),
// where (1 - e) / (1 + e) would cancel; that form above (e = exp(-2|x|) never overflows).
fn tanh_stable(x: f32) -> f32 {
    let a = abs(x);
    if (a < 0.625) {
        let z = x * x;
        let p = -3.33332819422e-1 + z * (1.33314422036e-1 + z * (-5.37397155531e-2
            + z * (2.06390887954e-2 + z * -5.70498872745e-3)));
        return x + x * z * p;
    }
    let e = exp(-2.0 * a);
    let t = (1.0 - e) / (1.0 + e);
    return select(t, -t, x < 0.0);
}

fn sigmoid(x: f32) -> f32 {
    return 1.0 / (1.0 + exp(-x));
}

// Exact GELU (PyTorch's default): x * Phi(x) = 0.5 x erfc(-x / sqrt 2), through erfc for
// |x| >= sqrt 2 so that negative inputs keep their relative accuracy (1 + erf would cancel).
fn gelu_erf(x: f32) -> f32 {
    let z = x * 0.70710678118654752;
    if (abs(z) < 1.0) {
        return 0.5 * x * (1.0 + erf_small(z));
    }
    let r = erfc_abs(z);
    return 0.5 * x * select(2.0 - r, r, x < 0.0);
}

// GELU, tanh approximation (PyTorch's approximate="tanh"), as x * sigmoid(2u), which equals
// 0.5 x (1 + tanh u) without its cancellation for x < 0.
fn gelu_tanh(x: f32) -> f32 {
    let u = 0.79788456080286536 * (x + 0.044715 * x * x * x);
    return x * sigmoid(2.0 * u);
}

// SiLU (swish): x * sigmoid(x).
fn silu(x: f32) -> f32 {
    return x * sigmoid(x);
}

// The fused epilogues' activation by code (src/gpu/kernels/conv.rs `activation_code`):
// 0 none, 1 relu (NaN kept), 2 gelu (erf), 3 gelu (tanh), 4 silu.
fn activation_by_code(code: u32, x: f32) -> f32 {
    switch code {
        case 1u: { return select(max(x, 0.0), x, is_nan(x)); }
        case 2u: { return gelu_erf(x); }
        case 3u: { return gelu_tanh(x); }
        case 4u: { return silu(x); }
        default: { return x; }
    }
}

// The 8x8 f32 register block of the vec4 large tiles (matmul_vec4.wgsl, conv_vec4.wgsl): row i
// in (c{i}l, c{i}h), 4 + 4 columns. A struct of vectors named by constants, never an array
// indexed in a loop (which NVIDIA's Vulkan compiler demotes to local memory).
struct Block8 {
    c0l: vec4<f32>,
    c0h: vec4<f32>,
    c1l: vec4<f32>,
    c1h: vec4<f32>,
    c2l: vec4<f32>,
    c2h: vec4<f32>,
    c3l: vec4<f32>,
    c3h: vec4<f32>,
    c4l: vec4<f32>,
    c4h: vec4<f32>,
    c5l: vec4<f32>,
    c5h: vec4<f32>,
    c6l: vec4<f32>,
    c6h: vec4<f32>,
    c7l: vec4<f32>,
    c7h: vec4<f32>,
}

fn block8_zero() -> Block8 {
    let z = vec4<f32>(0.0);
    return Block8(z, z, z, z, z, z, z, z, z, z, z, z, z, z, z, z);
}

// acc + the outer product of rows (a_lo: rows 0-3, a_hi: rows 4-7) and columns (b_lo, b_hi).
fn block8_fma(acc: Block8, a_lo: vec4<f32>, a_hi: vec4<f32>, b_lo: vec4<f32>,
              b_hi: vec4<f32>) -> Block8 {
    var c = acc;
    c.c0l = fma(vec4<f32>(a_lo.x), b_lo, c.c0l);
    c.c0h = fma(vec4<f32>(a_lo.x), b_hi, c.c0h);
    c.c1l = fma(vec4<f32>(a_lo.y), b_lo, c.c1l);
    c.c1h = fma(vec4<f32>(a_lo.y), b_hi, c.c1h);
    c.c2l = fma(vec4<f32>(a_lo.z), b_lo, c.c2l);
    c.c2h = fma(vec4<f32>(a_lo.z), b_hi, c.c2h);
    c.c3l = fma(vec4<f32>(a_lo.w), b_lo, c.c3l);
    c.c3h = fma(vec4<f32>(a_lo.w), b_hi, c.c3h);
    c.c4l = fma(vec4<f32>(a_hi.x), b_lo, c.c4l);
    c.c4h = fma(vec4<f32>(a_hi.x), b_hi, c.c4h);
    c.c5l = fma(vec4<f32>(a_hi.y), b_lo, c.c5l);
    c.c5h = fma(vec4<f32>(a_hi.y), b_hi, c.c5h);
    c.c6l = fma(vec4<f32>(a_hi.z), b_lo, c.c6l);
    c.c6h = fma(vec4<f32>(a_hi.z), b_hi, c.c6h);
    c.c7l = fma(vec4<f32>(a_hi.w), b_lo, c.c7l);
    c.c7h = fma(vec4<f32>(a_hi.w), b_hi, c.c7h);
    return c;
}
