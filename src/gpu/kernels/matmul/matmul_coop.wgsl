// matmul_coop.wgsl: the hardware cooperative-matrix path (composed as common.wgsl + matmul.wgsl
// + this file; the runtime hoists the `enable` line to the top of the module). Needs the
// adapter features EXPERIMENTAL_COOPERATIVE_MATRIX (8x8 f32 tiles) and SUBGROUP.
//
// A workgroup of 256 invocations computes a 32x32 output tile. Per K step of 32 it stages the
// A tile ([32 k][32 rows], i.e. column-major, in sa[0..1024)) and the B tile ([32 k][32
// virtual columns], row-major, in sb[0..1024)) as f32, then each subgroup takes the 8x8
// product tiles t = subgroup_id, subgroup_id + num_subgroups, ... of the 4x4 grid and does
// C += A_t * B_t with coopMultiplyAdd, C kept row-major in sa[1024..2048). After the K loop
// every invocation finishes column pairs from that f32 tile with the shared fused epilogue.

enable wgpu_cooperative_matrix;

@compute @workgroup_size(256)
fn mm_coop(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32,
           @builtin(subgroup_id) sg: u32, @builtin(num_subgroups) nsg: u32) {
    let b = wid.z + p(39u);
    let ab = a_base(b);
    let bb = b_base(b);
    let row0 = wid.y * 32u;
    let rows_full = row0 + 32u <= dim_m();
    let cf = cols_full(wid.x, 32u);
    for (var i = lid; i < 1024u; i = i + 256u) {
        sa[1024u + i] = 0.0;
    }
    for (var k0 = 0u; k0 < dim_k(); k0 = k0 + 32u) {
        let kf = k0 + 32u <= dim_k();
        stage_a(0u, ab, row0, k0, 32u, 32u, lid, rows_full && kf);
        stage_b(0u, bb, wid.x, k0, 32u, 32u, lid, cf && kf);
        workgroupBarrier();
        for (var t = sg; t < 16u; t = t + nsg) {
            let r0 = (t / 4u) * 8u;
            let c0 = (t % 4u) * 8u;
            var acc = coopLoadT<coop_mat8x8<f32, C>>(&sa[1024u + r0 * 32u + c0], 32u);
            for (var kk = 0u; kk < 32u; kk = kk + 8u) {
                let am = coopLoad<coop_mat8x8<f32, A>>(&sa[kk * 32u + r0], 32u);
                let bm = coopLoadT<coop_mat8x8<f32, B>>(&sb[kk * 32u + c0], 32u);
                acc = coopMultiplyAdd(am, bm, acc);
            }
            coopStoreT(acc, &sa[1024u + r0 * 32u + c0], 32u);
        }
        workgroupBarrier();
    }
    let g = is_geglu();
    let pairs = select(16u, 8u, g);
    for (var q = lid; q < 32u * pairs; q = q + 256u) {
        let r = q / pairs;
        let jj = 2u * (q % pairs);
        let at = 1024u + r * 32u + jj;
        let gs = select(0u, 16u, g);
        let c = wid.x * pairs * 2u + jj;
        finish_pair(b, row0 + r, c, sa[at], sa[at + 1u], sa[at + gs], sa[at + gs + 1u]);
    }
}
