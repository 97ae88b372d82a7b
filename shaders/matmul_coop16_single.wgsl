// matmul_coop16_single.wgsl: mm_coop16's default workgroup layout (composed last, after
// matmul_coop16_words.wgsl): one A tile and one B tile, refilled between two barriers per K step
// while the next step's words wait in registers, and 512 f32 of coop_c per subgroup (the
// epilogue finishes two 16x16 tiles per round, or a tile and its GEGLU gate tile). 34.5 KiB.

const NBUF: u32 = 1u;
const C_PER_SG: u32 = 512u;

var<workgroup> coop_a: array<f16, 5120>;
var<workgroup> coop_b: array<f16, 4352>;
var<workgroup> coop_c: array<f32, 4096>;

@compute @workgroup_size(256)
fn mm_coop16(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32,
             @builtin(subgroup_id) sg: u32, @builtin(num_subgroups) nsg: u32,
             @builtin(subgroup_invocation_id) lane: u32, @builtin(subgroup_size) width: u32) {
    coop16_staged(wid, lid, sg, nsg, lane, width);
}
