// attention.wgsl: the fused attention family's prelude (composed as common.wgsl + this file +
// attention_vec4.wgsl, the FMA kernel; the tensor-core kernel attention_coop16.wgsl reads the
// same bindings and params): flash-attention style, the Lq x Lk score matrix never exists. Each
// workgroup takes a tile of query rows of one head, forms each key block's scores, applies scale
// and mask, keeps the running row max / sum (online softmax, f32) and adds P.V to a running
// output; the helpers here load v and the mask and form masked scores and probabilities.
//
// Bindings: 1 dst (f32 words; rows of Dv placed by out_row), 2 q (src0), 3 k (src1), 4 v, 5 mask
// (bound to q and never read when absent). q, k, v have dtype DT_IN; the mask is u8 (boolean,
// nonzero keeps) or DT_IN (additive; values below -2.35e38, e.g. -inf or f32::MIN, drop the
// key), selected by params[43].
// params: [0] workgroups (heads * q tiles), [1] rank of the (jointly coalesced) head dims,
// [4..12) head dims, [12..) q / [20..) k head strides, [28] q offset, [29] k offset,
// [30] scale (f32), [32] Lq, [33] Lk, [34] D, [35] Dv, [36] q row stride, [37] q col stride,
// [38] k row stride, [39] k col stride, [40] v row stride, [41] v col stride, [42] v offset,
// [43] mask kind (0 none, 1 u8 boolean, 2 additive), [44] mask row stride, [45] mask col
// stride, [46] mask offset, [47] q tiles per head, [48..54) v head strides, [54..60) mask head
// strides, [60..64) output row placement (out_row in common.wgsl).
// Rows whose keys are all masked out (or Lk == 0) are written as 0, as PyTorch does.

@group(0) @binding(4) var<storage, read> src_v: array<u32>;
@group(0) @binding(5) var<storage, read> src_mask: array<u32>;

const BQ: u32 = 32u;
const BK: u32 = 32u;
const DC: u32 = 40u;
const OC: u32 = 20u;
// "Masked out": below every finite score the kernel can form, and finite (no inf arithmetic).
const NEG: f32 = -3.0e38;
const DROP: f32 = -2.35e38;

fn load_v(i: u32) -> f32 {
    let e = epw(DT_IN);
    return bits_to_f32(lane_bits(src_v[i / e], i % e, DT_IN), DT_IN);
}

// Mask element i: x = 1 to keep the key (0 drops it), y = the additive term.
fn mask_at(i: u32) -> vec2<f32> {
    if (p(43u) == 1u) {
        let keep = lane_bits(src_mask[i / 4u], i % 4u, 4u) != 0u;
        return vec2<f32>(select(0.0, 1.0, keep), 0.0);
    }
    let e = epw(DT_IN);
    let a = bits_to_f32(lane_bits(src_mask[i / e], i % e, DT_IN), DT_IN);
    return vec2<f32>(select(0.0, 1.0, a >= DROP), a);
}

// Register blocks are vectors indexed by constants only: a per-invocation array indexed in a
// loop is demoted to local memory by some drivers (NVIDIA's Vulkan compiler does not unroll
// naga's loops), which made the FMA attention ~30x slower than its arithmetic on an H100.

// Scaled and masked score of key j (NEG when the key is dropped or out of range).
fn masked_score(x: f32, j: u32, row: u32, row_ok: bool, lk: u32, mb: u32, scale: f32) -> f32 {
    var keep = row_ok && j < lk;
    var add = 0.0;
    if (keep && p(43u) != 0u) {
        let mk = mask_at(mb + row * p(44u) + j * p(45u));
        keep = mk.x != 0.0;
        add = mk.y;
    }
    return select(NEG, x * scale + add, keep);
}

fn prob(x: f32, m_new: f32) -> f32 {
    return select(0.0, exp(x - m_new), x > NEG);
}

