// matmul.wgsl: batched C = A @ B with strided A and B (transposed operands need no copy) and an
// f32 output, contiguous [batch, M, N]. The first, simple engine: a 16x16 workgroup computes a
// 64x64 tile, each invocation a 4x4 register block, with 64x16 / 16x64 tiles of A and B staged
// in workgroup memory per K step. Out-of-range rows/cols load zeros and are not stored.
// params: shape/strides slots hold the batch dims ([12..) A's batch strides, [20..) B's),
// [28] A offset, [29] B offset, [32] M, [33] N, [34] K, [35] A row stride, [36] A col stride,
// [37] B row stride, [38] B col stride, [39] first batch index of this dispatch.

const TM: u32 = 64u;
const TN: u32 = 64u;
const TK: u32 = 16u;

var<workgroup> tile_a: array<f32, 1024>; // [TK][TM]
var<workgroup> tile_b: array<f32, 1024>; // [TK][TN]

@compute @workgroup_size(16, 16)
fn matmul(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) lid3: vec3<u32>,
          @builtin(local_invocation_index) lid: u32) {
    let m = p(32u);
    let n = p(33u);
    let k = p(34u);
    let a_rs = p(35u);
    let a_cs = p(36u);
    let b_rs = p(37u);
    let b_cs = p(38u);
    let batch = wid.z + p(39u);
    let a_base = strided(batch, 12u) + p(28u);
    let b_base = strided(batch, 20u) + p(29u);
    let row0 = wid.y * TM;
    let col0 = wid.x * TN;
    var acc: array<f32, 16>;
    for (var i = 0u; i < 16u; i = i + 1u) {
        acc[i] = 0.0;
    }
    for (var k0 = 0u; k0 < k; k0 = k0 + TK) {
        for (var j = 0u; j < 4u; j = j + 1u) {
            let e = lid + j * 256u;
            // A tile: e -> (row, kk) with kk fastest, stored k-major.
            let ar = e / TK;
            let ak = e % TK;
            var va = 0.0;
            if (row0 + ar < m && k0 + ak < k) {
                va = load0(a_base + (row0 + ar) * a_rs + (k0 + ak) * a_cs);
            }
            tile_a[ak * TM + ar] = va;
            // B tile: e -> (kk, col) with col fastest.
            let bk = e / TN;
            let bc = e % TN;
            var vb = 0.0;
            if (k0 + bk < k && col0 + bc < n) {
                vb = load1(b_base + (k0 + bk) * b_rs + (col0 + bc) * b_cs);
            }
            tile_b[bk * TN + bc] = vb;
        }
        workgroupBarrier();
        for (var kk = 0u; kk < TK; kk = kk + 1u) {
            var a_reg: array<f32, 4>;
            var b_reg: array<f32, 4>;
            for (var i = 0u; i < 4u; i = i + 1u) {
                a_reg[i] = tile_a[kk * TM + lid3.y + 16u * i];
                b_reg[i] = tile_b[kk * TN + lid3.x + 16u * i];
            }
            for (var i = 0u; i < 4u; i = i + 1u) {
                for (var j = 0u; j < 4u; j = j + 1u) {
                    acc[i * 4u + j] = fma(a_reg[i], b_reg[j], acc[i * 4u + j]);
                }
            }
        }
        workgroupBarrier();
    }
    let c_base = batch * m * n;
    for (var i = 0u; i < 4u; i = i + 1u) {
        let r = row0 + lid3.y + 16u * i;
        for (var j = 0u; j < 4u; j = j + 1u) {
            let c = col0 + lid3.x + 16u * j;
            if (r < m && c < n) {
                dst[c_base + r * n + c] = bitcast<u32>(acc[i * 4u + j]);
            }
        }
    }
}
