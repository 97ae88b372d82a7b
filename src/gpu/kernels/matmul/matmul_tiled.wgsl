// matmul_tiled.wgsl: cooperative-tile matrix products with the fused epilogue (composed as
// common.wgsl + matmul.wgsl + this file). Every entry point has 256 invocations; grid: x the
// column tiles, y the row tiles, z the batch (from params[39]).
//
// Tile configs (invocation (tx, ty) of a 2-D workgroup; register block accumulated in f32):
// - mm_skinny: 16x128 tile, TK 8, 32x8 invocations, rows ty+8i (i<2), columns 2tx+q+64j
//              (j<2): a 2x4 block;
// - mm_gemv:   4 rows (meant for M <= 4) by 64 (B row-major) or 8 (B column-major) virtual
//              columns per workgroup; the K range is split over 4 or 32 lanes and reduced in
//              workgroup memory.
// The 128x128 and 64x64 tiles (mm_large4, mm_medium4) are in matmul_vec4.wgsl, composed after
// this file; finish_row8 / finish_row4 below serve them.
// A and B tiles are double-buffered in sa/sb (two [TK][TM] / [TK][TN] buffers, one barrier
// per K step); tiles fully inside the matrices load without bounds checks. Each invocation
// owns pairs of adjacent columns (c even), so it writes whole output words; GEGLU virtual
// columns put h at jj and g at jj + TN/2, which the column layouts above give to the same
// invocation.

// K loop shared by the 2-D configs: stages tile t+1 while computing on tile t.
fn full_step(k0: u32, tk: u32, rows_full: bool, cols_ok: bool) -> bool {
    return rows_full && cols_ok && k0 + tk <= dim_k();
}

// Register blocks are vec4 variables indexed only by constants: an accumulator array indexed
// in a loop is demoted to local memory by some drivers (NVIDIA's Vulkan compiler does not
// unroll naga's loops), which made every FMA a memory round trip (0.8 TFLOP/s on an H100).

// Finishes one row of an 8x8 block: `lo` holds columns (c, c+1, c+32, c+33), `hi` (c+64,
// c+65, c+96, c+97) of the 128-wide tile, c = 2 lx. GEGLU: lo is h, hi the gate g of 64
// output columns.
fn finish_row8(b: u32, r: u32, tile: u32, lx: u32, lo: vec4<f32>, hi: vec4<f32>) {
    if (is_geglu()) {
        let c = tile * 64u + 2u * lx;
        finish_pair(b, r, c, lo.x, lo.y, hi.x, hi.y);
        finish_pair(b, r, c + 32u, lo.z, lo.w, hi.z, hi.w);
    } else {
        let c = tile * 128u + 2u * lx;
        finish_pair(b, r, c, lo.x, lo.y, 0.0, 0.0);
        finish_pair(b, r, c + 32u, lo.z, lo.w, 0.0, 0.0);
        finish_pair(b, r, c + 64u, hi.x, hi.y, 0.0, 0.0);
        finish_pair(b, r, c + 96u, hi.z, hi.w, 0.0, 0.0);
    }
}

// Finishes one row of a block whose vec4 holds columns (c, c+1, c+gap, c+gap+1) of a tile
// 2*gap wide, c = 2 lx. GEGLU: (x, y) is h and (z, w) the gate of gap output columns.
fn finish_row4(b: u32, r: u32, tile: u32, lx: u32, gap: u32, v: vec4<f32>) {
    if (is_geglu()) {
        finish_pair(b, r, tile * gap + 2u * lx, v.x, v.y, v.z, v.w);
    } else {
        let c = tile * 2u * gap + 2u * lx;
        finish_pair(b, r, c, v.x, v.y, 0.0, 0.0);
        finish_pair(b, r, c + gap, v.z, v.w, 0.0, 0.0);
    }
}

@compute @workgroup_size(32, 8)
fn mm_skinny(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) l: vec3<u32>,
             @builtin(local_invocation_index) lid: u32) {
    let b = wid.z + p(39u);
    let ab = a_base(b);
    let bb = b_base(b);
    let row0 = wid.y * 16u;
    let rows_full = row0 + 16u <= dim_m();
    let cf = cols_full(wid.x, 128u);
    let nt = (dim_k() + 7u) / 8u;
    var c0l = vec4<f32>(0.0);
    var c1l = vec4<f32>(0.0);
    stage_a(0u, ab, row0, 0u, 16u, 8u, lid, full_step(0u, 8u, rows_full, true));
    stage_b(0u, bb, wid.x, 0u, 128u, 8u, lid, full_step(0u, 8u, true, cf));
    workgroupBarrier();
    for (var t = 0u; t < nt; t = t + 1u) {
        let cur = (t & 1u) * 1024u;
        if (t + 1u < nt) {
            let k1 = (t + 1u) * 8u;
            stage_a(1u - (t & 1u), ab, row0, k1, 16u, 8u, lid, full_step(k1, 8u, rows_full, true));
            stage_b(1u - (t & 1u), bb, wid.x, k1, 128u, 8u, lid, full_step(k1, 8u, true, cf));
        }
        for (var kk = 0u; kk < 8u; kk = kk + 1u) {
            let ao = cur + kk * 16u + l.y;
            let bo = cur + kk * 128u + 2u * l.x;
            let a0 = sa[ao + 0u];
            let a1 = sa[ao + 8u];
            let bv = vec4<f32>(sb[bo], sb[bo + 1u], sb[bo + 64u], sb[bo + 65u]);
            c0l = fma(vec4<f32>(a0), bv, c0l);
            c1l = fma(vec4<f32>(a1), bv, c1l);
        }
        workgroupBarrier();
    }
    finish_row4(b, row0 + l.y + 0u, wid.x, l.x, 64u, c0l);
    finish_row4(b, row0 + l.y + 8u, wid.x, l.x, 64u, c1l);
}

// GEMV-style product, 4 rows per workgroup (grid y covers M; meant for M <= 4). VARIANT 1: B column-major (8 columns x 32 K lanes, lanes
// fastest); VARIANT 0: 64 columns x 4 K lanes, columns fastest. Partial sums go to sa
// ([row][lane-major 256]), the reduced product to sb ([row][virtual column]); then invocation
// q < 4 * cols/2 finishes row q / (cols/2), column pair q % (cols/2).
@compute @workgroup_size(256)
fn mm_gemv(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let b = wid.z + p(39u);
    let row0 = wid.y * 4u;
    let ab = a_base(b) + row0 * p(35u);
    let bb = b_base(b);
    let m = dim_m() - row0;
    let k = dim_k();
    let lanes = select(4u, 32u, VARIANT == 1u);
    let cols = 256u / lanes;
    let jj = select(lid % cols, lid / lanes, VARIANT == 1u);
    let s = select(lid / cols, lid % lanes, VARIANT == 1u);
    let pc = prod_col(wid.x, jj, cols);
    var acc = vec4<f32>(0.0);
    if (pc.y != 0u) {
        let a_rs = p(35u);
        let a_cs = p(36u);
        let bcol = bb + pc.x * p(38u);
        for (var kk = s; kk < k; kk = kk + lanes) {
            let bv = load1(bcol + kk * p(37u));
            let ak = ab + kk * a_cs;
            acc.x = fma(load0(ak), bv, acc.x);
            if (m > 1u) { acc.y = fma(load0(ak + a_rs), bv, acc.y); }
            if (m > 2u) { acc.z = fma(load0(ak + 2u * a_rs), bv, acc.z); }
            if (m > 3u) { acc.w = fma(load0(ak + 3u * a_rs), bv, acc.w); }
        }
    }
    let slot = jj * lanes + s;
    for (var r = 0u; r < 4u; r = r + 1u) {
        sa[r * 256u + slot] = acc[r];
    }
    workgroupBarrier();
    if (lid < 4u * cols) {
        let r = lid / cols;
        let c = lid % cols;
        var sum = 0.0;
        for (var i = 0u; i < lanes; i = i + 1u) {
            sum = sum + sa[r * 256u + c * lanes + i];
        }
        sb[r * 256u + c] = sum;
    }
    workgroupBarrier();
    let g = is_geglu();
    let pairs = select(cols, cols / 2u, g) / 2u;
    if (lid < 4u * pairs) {
        let r = lid / pairs;
        let q = lid % pairs;
        let base = r * 256u + 2u * q;
        let gs = select(0u, cols / 2u, g);
        let c = wid.x * pairs * 2u + 2u * q;
        finish_pair(b, row0 + r, c, sb[base], sb[base + 1u], sb[base + gs], sb[base + gs + 1u]);
    }
}
