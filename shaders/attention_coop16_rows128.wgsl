// attention_coop16_rows128.wgsl: the experimental workgroup layout of attention_coop16.wgsl
// (`XPU_ATTN_ROWS128=1`, composed after it and its pair loads): eight subgroups (256
// invocations at 32 lanes), 128 query rows, head dims up to 48 (three 16-column tiles: SD
// 1.5's first level). Each staged key block then serves twice the query rows of the default layout, with
// half the loads per invocation. Q [128][56] f16, K and V [32 keys][56] f16, S [8][16][32] f32,
// P [8][16][40] f16, the one-pass form's row scales and flag: 47.5 KiB (rows of 112 bytes keep
// every tile 16-byte aligned).

const SUBGROUPS: u32 = 8u;
const THREADS: u32 = SUBGROUPS * SG;
const ROWS: u32 = 128u;
const MAX_TILES: u32 = 3u;
const AQ: u32 = 56u;
const AV: u32 = 56u;
const AP: u32 = 40u;
// The lean form's P^T: halves per key (fits the P array; its tile loads meet 2-way bank conflicts).
const PS: u32 = 16u;

var<workgroup> aq: array<f16, 7168>;
var<workgroup> ak: array<f16, 1792>;
var<workgroup> av: array<f16, 1792>;
var<workgroup> as_s: array<f32, 4096>;
// P [8][16][AP], or the lean form's P^T [8][32][PS].
var<workgroup> ap: array<f16, 5120>;
// One-pass form: each row's O scale, and whether any row raised its max this block.
var<workgroup> a_scale: array<f32, 128>;
var<workgroup> a_flag: array<atomic<u32>, 4>;
