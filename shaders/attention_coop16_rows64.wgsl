// attention_coop16_rows64.wgsl: the default workgroup layout of attention_coop16.wgsl (composed
// after it and its pair loads): four subgroups (128 invocations at 32 lanes), 64 query rows,
// head dims up to 80 (five 16-column tiles). Q [64][88] f16, K and V [32 keys][88] f16,
// S [4][16][32] f32, P [4][16][40] f16 (the lean form: P^T [4][32][24]), the
// one-pass form's row scales and flag: 36.3 KiB.

const SUBGROUPS: u32 = 4u;
const THREADS: u32 = SUBGROUPS * SG;
const ROWS: u32 = 64u;
const MAX_TILES: u32 = 5u;
const AQ: u32 = 88u;
const AV: u32 = 88u;
const AP: u32 = 40u;
// The lean form's P^T: halves per key (48-byte rows: its column-major tile loads meet no bank
// conflicts).
const PS: u32 = 24u;

var<workgroup> aq: array<f16, 5632>;
var<workgroup> ak: array<f16, 2816>;
var<workgroup> av: array<f16, 2816>;
var<workgroup> as_s: array<f32, 2048>;
// P [4][16][AP], or the lean form's P^T [4][32][PS].
var<workgroup> ap: array<f16, 3072>;
// One-pass form: each row's O scale, and whether any row raised its max this block.
var<workgroup> a_scale: array<f32, 64>;
var<workgroup> a_flag: array<atomic<u32>, 4>;
