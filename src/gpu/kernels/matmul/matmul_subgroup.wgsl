// matmul_subgroup.wgsl: GEMV with subgroup reductions (composed as common.wgsl + matmul.wgsl +
// this file; used only on adapters with SUBGROUP, for B whose columns are contiguous in K,
// e.g. a transposed [N, K] weight).
//
// A workgroup of 256 invocations covers 4 rows (grid y) and 16 virtual columns (grid x). Each
// subgroup takes columns jj = subgroup_id, subgroup_id + num_subgroups, ... (so a subgroup
// never mixes columns, whatever its size); its lanes stride K by the subgroup size, read
// consecutive addresses of the column, and subgroupAdd reduces the four row sums. Lane 0
// writes them to sb ([row][column]); then invocation q < 4 * pairs finishes row q / pairs,
// column pair q % pairs with the shared fused epilogue, as mm_gemv does.
// 16 columns per workgroup, not 64: on an H100 the time embedding's products (M = 2, K = 1280,
// N = 320..1280) ran 20 workgroups of 64 columns, each subgroup walking 8 columns one after the
// other (0.08-0.12 ms each, 24 per UNet step); 16 columns give four times the workgroups and a
// quarter of the serial walk.

@compute @workgroup_size(256)
fn mm_gemv_sg(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32,
              @builtin(subgroup_id) sg: u32, @builtin(num_subgroups) nsg: u32,
              @builtin(subgroup_invocation_id) lane: u32,
              @builtin(subgroup_size) sgsize: u32) {
    let b = wid.z + p(39u);
    let row0 = wid.y * 4u;
    let ab = a_base(b) + row0 * p(35u);
    let bb = b_base(b);
    let m = dim_m() - row0;
    let k = dim_k();
    let a_rs = p(35u);
    let a_cs = p(36u);
    for (var jj = sg; jj < 16u; jj = jj + nsg) {
        let pc = prod_col(wid.x, jj, 16u);
        var acc = vec4<f32>(0.0);
        if (pc.y != 0u) {
            let bcol = bb + pc.x * p(38u);
            for (var kk = lane; kk < k; kk = kk + sgsize) {
                let bv = load1(bcol + kk * p(37u));
                let ak = ab + kk * a_cs;
                acc.x = fma(load0(ak), bv, acc.x);
                if (m > 1u) { acc.y = fma(load0(ak + a_rs), bv, acc.y); }
                if (m > 2u) { acc.z = fma(load0(ak + 2u * a_rs), bv, acc.z); }
                if (m > 3u) { acc.w = fma(load0(ak + 3u * a_rs), bv, acc.w); }
            }
        }
        let sum = subgroupAdd(acc);
        if (lane == 0u) {
            for (var r = 0u; r < 4u; r = r + 1u) {
                sb[r * 256u + jj] = sum[r];
            }
        }
    }
    workgroupBarrier();
    let g = is_geglu();
    let pairs = select(8u, 4u, g);
    if (lid < 4u * pairs) {
        let r = lid / pairs;
        let q = lid % pairs;
        let base = r * 256u + 2u * q;
        let gs = select(0u, 8u, g);
        let c = wid.x * pairs * 2u + 2u * q;
        finish_pair(b, row0 + r, c, sb[base], sb[base + 1u], sb[base + gs], sb[base + gs + 1u]);
    }
}
