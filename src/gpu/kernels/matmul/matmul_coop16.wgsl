// matmul_coop16.wgsl: f16 cooperative-matrix products with f32 accumulation (composed as
// common.wgsl + matmul.wgsl + this file + the convolution gather's addressing
// matmul_coop16_gather.wgsl + the word-pair staging matmul_coop16_words.wgsl; the runtime
// hoists the `enable` lines). Needs the adapter features EXPERIMENTAL_COOPERATIVE_MATRIX
// (reporting 16x16x16 F16->F32), SHADER_F16 and SUBGROUP, and 34.5 KiB of workgroup memory.
// This is the path NVIDIA's Vulkan driver exposes (tensor cores); the 8x8 f32 kernel of
// matmul_coop.wgsl is for adapters that report 8x8 f32 (Apple).
//
// A workgroup of 256 invocations computes a 128x128 tile of virtual product columns. The tile
// is eight 32x64 slots (4 rows x 2 columns); subgroup s owns slot s and keeps its 2x4 grid of
// 16x16 f32 accumulators in registers through the whole K loop. With fewer than eight subgroups
// (subgroups wider than 32) the workgroup makes ceil(8 / subgroups) passes, each re-staging the
// K range for the next slots, so any subgroup size gives the same result.
// Per K step of 32 the workgroup stages A [128 rows][32 k] (row stride 40) and B [32 k][128
// columns] (row stride 136) as f16 (strides padded by 16 bytes against bank conflicts, every
// tile load 16-byte aligned). Inputs of any dtype are read through the prelude's loads and
// rounded to f16, so only F16 operands are exact; the selector sends only F16 here.
// GEGLU: within each 64-column slot the first 32 virtual columns are h and the last 32 the gate g
// of the same 32 output columns, so one subgroup holds both halves of its outputs.
// VARIANT bit 6 selects the convolution gather (below); every other bit is 0.
// Workgroup layout: every workgroup variable is an array whose size is a multiple of 16 bytes, so
// every tile a cooperative load or store addresses is 16-byte aligned whatever order the driver
// lays the variables out in. On an H100 a 4-byte `u32` workgroup scalar (the pass count) put the
// arrays 4 bytes off alignment, and the driver's cooperative loads and stores then addressed 4
// bytes before the intended element, so the products came out shifted.
// Epilogue: each accumulator tile (and its gate tile) goes through the subgroup's 512 f32 of
// `coop_c`, and the subgroup's lanes finish column pairs with the shared fused epilogue.
// Staging forms measured slower on an H100 or H200 than the word pairs used here:
// `array<vec2<f16>>` views of the operands, `vec2<f16>` workgroup tiles (one 32-bit store per
// word; 4096^3 2.58 against 2.41 ms), no staging at all (each subgroup loading its fragments
// from the storage buffers; 4096^3 3.59 against 2.43 ms), and 16-byte quads of 8 f16 through
// `array<vec4<u32>>` views (4096^3 2.72 against 2.51 ms).
// Split K (matmul.wgsl's header, src/gpu/kernels/matmul/split_k.rs): a workgroup may cover one K
// range of its tile and write f32 partials.
// The convolution gather's addressing (`conv_pixel`, `conv_tap`, `conv_at`) comes from
// matmul_coop16_gather.wgsl, the word-pair staging (`Words`, `words_zero`, `fetch_a`,
// `fetch_b`, `put_words`) from matmul_coop16_words.wgsl (u32 words).

enable f16;
enable wgpu_cooperative_matrix;

const CA: u32 = 40u;
const CB: u32 = 136u;

// One A tile [128][CA] and one B tile [32][CB] in f16, refilled between two barriers per K step
// while the next step's words wait in registers, and 512 f32 of coop_c per subgroup (the
// epilogue finishes two 16x16 tiles per round, or a tile and its GEGLU gate tile).
const C_PER_SG: u32 = 512u;

var<workgroup> coop_a: array<f16, 5120>;
var<workgroup> coop_b: array<f16, 4352>;
var<workgroup> coop_c: array<f32, 4096>;

// Output column and whether it is inside N for virtual column jj of column tile `tile`.
fn coop_col(tile: u32, jj: u32) -> vec2<u32> {
    let n = dim_n();
    if (is_geglu()) {
        let w = jj % 64u;
        let oc = tile * 64u + (jj / 64u) * 32u + w % 32u;
        return vec2<u32>(oc + select(0u, n, w >= 32u), u32(oc < n));
    }
    let oc = tile * 128u + jj;
    return vec2<u32>(oc, u32(oc < n));
}

// Stages the K step at k0 element by element (where the word pairs do not apply): A rows
// row0.. and B virtual columns of tile `tile`, as f16.
fn coop_stage(ab: u32, bb: u32, row0: u32, tile: u32, k0: u32, lid: u32, full: bool) {
    let ars = p(35u);
    let acs = p(36u);
    let a_by_k = acs == 1u;
    for (var e = lid; e < 4096u; e = e + 256u) {
        let r = select(e % 128u, e / 32u, a_by_k);
        let kk = select(e / 128u, e % 32u, a_by_k);
        var v = 0.0;
        if (full || (row0 + r < dim_m() && k0 + kk < dim_k())) {
            v = load0(ab + (row0 + r) * ars + (k0 + kk) * acs);
        }
        coop_a[r * CA + kk] = f16(v);
    }
    let brs = p(37u);
    let bcs = p(38u);
    let b_by_k = brs == 1u && bcs != 1u;
    for (var e = lid; e < 4096u; e = e + 256u) {
        let jj = select(e % 128u, e / 32u, b_by_k);
        let kk = select(e / 128u, e % 32u, b_by_k);
        let pc = coop_col(tile, jj);
        var v = 0.0;
        if (full || (pc.y != 0u && k0 + kk < dim_k())) {
            v = load1(bb + (k0 + kk) * brs + pc.x * bcs);
        }
        coop_b[kk * CB + jj] = f16(v);
    }
}

// Word-pair staging (the fast path): each invocation moves 8 words (16 f16) of A and 8 of B
// per K step, read with plain u32 loads and held in registers while the previous step's products
// run. It applies when every pair of f16 a word holds lies along one tile axis: K even, A and B
// batch bases even, A row-major with an even row stride (pairs along k) or column-major with an
// even column stride (pairs along rows), B likewise (pairs along columns or along k), and N even
// for GEGLU (the gate half starts N columns on). A pair's second element then lies outside the
// matrix only where the first does (K even), or in a row/column no output keeps.
// Word e (0..2048) of a tile: A by k: row e/16, k 2(e%16); A by rows: rows 2(e%64), k e/64;
// B by columns: k e/64, columns 2(e%64); B by k: column e/16, k 2(e%16).
fn pairs_mode(ab: u32, bb: u32) -> u32 {
    let ars = p(35u);
    let acs = p(36u);
    let brs = p(37u);
    let bcs = p(38u);
    let a_k = acs == 1u && ars % 2u == 0u;
    let a_r = !a_k && ars == 1u && acs % 2u == 0u;
    let b_c = bcs == 1u && brs % 2u == 0u;
    let b_k = !b_c && brs == 1u && bcs % 2u == 0u;
    let ok = (a_k || a_r) && (b_c || b_k) && dim_k() % 2u == 0u && ab % 2u == 0u
        && bb % 2u == 0u && (!is_geglu() || dim_n() % 2u == 0u);
    if (is_conv()) {
        return 13u;
    }
    // bit 0: on; bit 1: A by rows; bit 2: B by k; bit 3: A gathered by the convolution.
    return select(0u, 1u | select(0u, 2u, a_r) | select(0u, 4u, b_k), ok);
}

// Convolution gather (VARIANT bit 6 and flags bit 4, set by src/gpu/kernels/conv/coop.rs): A is
// the implicit im2col matrix of a channels-last f16 input, row m = output pixel (image, oh, ow),
// column k = (ky, kx, ci) with ci fastest; B is the weight stored [O][kh][kw][C] (B by k, column
// stride K). params [12] C, [13] H, [14] W, [15] Ho*Wo, [16] Wo, [17] kw, [18..20) stride h/w,
// [20..22) padding h/w, [22..24) dilation h/w, [24] image stride, [25] row stride, [26] pixel
// stride of the input (channel stride 1). The host guarantees C, the input offset and its three
// strides even, so a word holds channels ci, ci+1 of one pixel and one tap. Each invocation's
// eight A words per K step share one k (2(lid%16)) and take rows lid/16 + 16i, whose input
// positions are decoded once per workgroup (rows past M get a row that is never inside).
// The gather is chosen by VARIANT bit 6 (a pipeline constant, so products compile without it:
// its 24 registers of decoded row positions stay live through the K loop otherwise); the flags
// bit 4 says the same for readers of the params.
fn is_conv() -> bool { return (VARIANT & 64u) != 0u; }

struct ConvRows {
    ih_lo: vec4<i32>,
    ih_hi: vec4<i32>,
    iw_lo: vec4<i32>,
    iw_hi: vec4<i32>,
    base_lo: vec4<u32>,
    base_hi: vec4<u32>,
}

// The eight rows an invocation gathers (lid/16 + 16i): their input bases and top-left positions.
fn conv_rows(ab: u32, row0: u32, lid: u32) -> ConvRows {
    let r = row0 + lid / 16u;
    let q0 = conv_pixel(ab, r);
    let q1 = conv_pixel(ab, r + 16u);
    let q2 = conv_pixel(ab, r + 32u);
    let q3 = conv_pixel(ab, r + 48u);
    let q4 = conv_pixel(ab, r + 64u);
    let q5 = conv_pixel(ab, r + 80u);
    let q6 = conv_pixel(ab, r + 96u);
    let q7 = conv_pixel(ab, r + 112u);
    return ConvRows(vec4<i32>(q0.y, q1.y, q2.y, q3.y), vec4<i32>(q4.y, q5.y, q6.y, q7.y),
                    vec4<i32>(q0.z, q1.z, q2.z, q3.z), vec4<i32>(q4.z, q5.z, q6.z, q7.z),
                    vec4<u32>(u32(q0.x), u32(q1.x), u32(q2.x), u32(q3.x)),
                    vec4<u32>(u32(q4.x), u32(q5.x), u32(q6.x), u32(q7.x)));
}

// Finishes one 16x16 output tile from coop_c[base..base+256) (h) and, for GEGLU (gate = 256),
// the gate tile after it: the subgroup's lanes take column pairs in turn.
fn coop_finish(b: u32, r0: u32, c0: u32, base: u32, gate: u32, lane: u32, width: u32,
               has: bool) {
    if (!has) {
        return;
    }
    for (var q = lane; q < 128u; q = q + width) {
        let r = q / 8u;
        let c = 2u * (q % 8u);
        let i = base + r * 16u + c;
        finish_pair(b, r0 + r, c0 + c, coop_c[i], coop_c[i + 1u], coop_c[i + gate],
                    coop_c[i + gate + 1u]);
    }
}

// The number of passes over the eight slots (ceil(8 / subgroups)), workgroup-uniform. It goes
// through coop_c's last element (no scalar workgroup variable: see the layout note at the top).
fn coop16_passes(lid: u32, nsg: u32) -> u32 {
    if (lid == 0u) {
        coop_c[8u * C_PER_SG - 1u] = f32((8u + nsg - 1u) / nsg);
    }
    return u32(workgroupUniformLoad(&coop_c[8u * C_PER_SG - 1u]));
}

@compute @workgroup_size(256)
fn mm_coop16(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32,
             @builtin(subgroup_id) sg: u32, @builtin(num_subgroups) nsg: u32,
             @builtin(subgroup_invocation_id) lane: u32, @builtin(subgroup_size) width: u32) {
    // Split K (matmul.wgsl's header): this workgroup's batch, output batch and K range.
    let sk = split_k(wid.z);
    let b = sk.x;
    let ab = a_base(b);
    let bb = b_base(b);
    let row0 = wid.y * 128u;
    let rows_full = row0 + 128u <= dim_m();
    let cf = cols_full(wid.x, 128u);
    let passes = coop16_passes(lid, nsg);
    let mode = pairs_mode(ab, bb);
    var cr = ConvRows(vec4<i32>(), vec4<i32>(), vec4<i32>(), vec4<i32>(), vec4<u32>(), vec4<u32>());
    if ((mode & 8u) != 0u) {
        cr = conv_rows(ab, row0, lid);
    }
    for (var round = 0u; round < passes; round = round + 1u) {
        let slot = sg + round * nsg;
        // naga requires cooperative loads in uniform control flow: a subgroup without a slot
        // multiplies slot 7's tiles too and keeps nothing (its stores are skipped).
        let cs = min(slot, 7u);
        let ar = (cs / 2u) * 32u;
        let bc = (cs % 2u) * 64u;
        var c00 = coop_mat16x16<f32, C>();
        var c01 = c00;
        var c02 = c00;
        var c03 = c00;
        var c10 = c00;
        var c11 = c00;
        var c12 = c00;
        var c13 = c00;
        // The pair path keeps the next K step's words in registers (fetched before the
        // products of this step, written to workgroup memory after them).
        var wa = words_zero();
        var wb = wa;
        if (mode != 0u) {
            wa = fetch_a(mode, ab, row0, sk.z, lid, cr);
            wb = fetch_b(mode, bb, wid.x, sk.z, lid);
        }
        for (var k0 = sk.z; k0 < sk.w; k0 = k0 + 32u) {
            if (mode != 0u) {
                put_words(mode, lid, wa, wb);
            } else {
                coop_stage(ab, bb, row0, wid.x, k0, lid, rows_full && cf && k0 + 32u <= dim_k());
            }
            workgroupBarrier();
            let kn = k0 + 32u;
            if (mode != 0u && kn < sk.w) {
                wa = fetch_a(mode, ab, row0, kn, lid, cr);
                wb = fetch_b(mode, bb, wid.x, kn, lid);
            }
            for (var kk = 0u; kk < 32u; kk = kk + 16u) {
                // Each B fragment is loaded just before its two products (fewer live
                // registers: Mesa's NAK compiler counts 152 instead of 168).
                let a0 = coopLoadT<coop_mat16x16<f16, A>>(&coop_a[ar * CA + kk], CA);
                let a1 = coopLoadT<coop_mat16x16<f16, A>>(&coop_a[(ar + 16u) * CA + kk], CA);
                let b0 = coopLoadT<coop_mat16x16<f16, B>>(&coop_b[kk * CB + bc], CB);
                c00 = coopMultiplyAdd(a0, b0, c00);
                c10 = coopMultiplyAdd(a1, b0, c10);
                let b1 = coopLoadT<coop_mat16x16<f16, B>>(&coop_b[kk * CB + bc + 16u], CB);
                c01 = coopMultiplyAdd(a0, b1, c01);
                c11 = coopMultiplyAdd(a1, b1, c11);
                let b2 = coopLoadT<coop_mat16x16<f16, B>>(&coop_b[kk * CB + bc + 32u], CB);
                c02 = coopMultiplyAdd(a0, b2, c02);
                c12 = coopMultiplyAdd(a1, b2, c12);
                let b3 = coopLoadT<coop_mat16x16<f16, B>>(&coop_b[kk * CB + bc + 48u], CB);
                c03 = coopMultiplyAdd(a0, b3, c03);
                c13 = coopMultiplyAdd(a1, b3, c13);
            }
            workgroupBarrier();
        }
        coop16_epilogue(sk.y, wid.x, row0, slot, lane, width, c00, c01, c02, c03, c10, c11, c12,
                        c13);
    }
}

// Writes slot `slot`'s 2x4 accumulator tiles (rows row0 + its 32-row band, columns of column
// tile `tile`) through its 512 f32 of coop_c and the fused epilogue; a subgroup without a slot
// (slot >= 8) takes part in the barriers only.
fn coop16_epilogue(b: u32, tile: u32, row0: u32, slot: u32, lane: u32, width: u32,
                   c00: coop_mat16x16<f32, C>, c01: coop_mat16x16<f32, C>,
                   c02: coop_mat16x16<f32, C>, c03: coop_mat16x16<f32, C>,
                   c10: coop_mat16x16<f32, C>, c11: coop_mat16x16<f32, C>,
                   c12: coop_mat16x16<f32, C>, c13: coop_mat16x16<f32, C>) {
    let has = slot < 8u;
    let cs = min(slot, 7u);
    let ar = (cs / 2u) * 32u;
    let bc = (cs % 2u) * 64u;
    // Epilogue through this subgroup's 512 f32 of coop_c (only slots < 8 have one).
    let base = cs * C_PER_SG;
    let r0 = row0 + ar;
    if (is_geglu()) {
        let oc = tile * 64u + (slot % 2u) * 32u;
        if (has) {
            coopStoreT(c00, &coop_c[base], 16u);
            coopStoreT(c02, &coop_c[base + 256u], 16u);
        }
        workgroupBarrier();
        coop_finish(b, r0, oc, base, 256u, lane, width, has);
        workgroupBarrier();
        if (has) {
            coopStoreT(c01, &coop_c[base], 16u);
            coopStoreT(c03, &coop_c[base + 256u], 16u);
        }
        workgroupBarrier();
        coop_finish(b, r0, oc + 16u, base, 256u, lane, width, has);
        workgroupBarrier();
        if (has) {
            coopStoreT(c10, &coop_c[base], 16u);
            coopStoreT(c12, &coop_c[base + 256u], 16u);
        }
        workgroupBarrier();
        coop_finish(b, r0 + 16u, oc, base, 256u, lane, width, has);
        workgroupBarrier();
        if (has) {
            coopStoreT(c11, &coop_c[base], 16u);
            coopStoreT(c13, &coop_c[base + 256u], 16u);
        }
        workgroupBarrier();
        coop_finish(b, r0 + 16u, oc + 16u, base, 256u, lane, width, has);
        workgroupBarrier();
    } else {
        let oc = tile * 128u + bc;
        if (has) {
            coopStoreT(c00, &coop_c[base], 16u);
            coopStoreT(c01, &coop_c[base + 256u], 16u);
        }
        workgroupBarrier();
        coop_finish(b, r0, oc, base, 0u, lane, width, has);
        coop_finish(b, r0, oc + 16u, base + 256u, 0u, lane, width, has);
        workgroupBarrier();
        if (has) {
            coopStoreT(c02, &coop_c[base], 16u);
            coopStoreT(c03, &coop_c[base + 256u], 16u);
        }
        workgroupBarrier();
        coop_finish(b, r0, oc + 32u, base, 0u, lane, width, has);
        coop_finish(b, r0, oc + 48u, base + 256u, 0u, lane, width, has);
        workgroupBarrier();
        if (has) {
            coopStoreT(c10, &coop_c[base], 16u);
            coopStoreT(c11, &coop_c[base + 256u], 16u);
        }
        workgroupBarrier();
        coop_finish(b, r0 + 16u, oc, base, 0u, lane, width, has);
        coop_finish(b, r0 + 16u, oc + 16u, base + 256u, 0u, lane, width, has);
        workgroupBarrier();
        if (has) {
            coopStoreT(c12, &coop_c[base], 16u);
            coopStoreT(c13, &coop_c[base + 256u], 16u);
        }
        workgroupBarrier();
        coop_finish(b, r0 + 16u, oc + 32u, base, 0u, lane, width, has);
        coop_finish(b, r0 + 16u, oc + 48u, base + 256u, 0u, lane, width, has);
        workgroupBarrier();
    }
}
