// matmul_tiled.wgsl: cooperative-tile matrix products with the fused epilogue (composed as
// common.wgsl + matmul.wgsl + this file). Every entry point has 256 invocations; grid: x the
// column tiles, y the row tiles, z the batch (from params[39]).
//
// Tile configs (invocation (tx, ty) of a 2-D workgroup; register block accumulated in f32):
// - mm_large:  128x128 tile, TK 8, 16x16 invocations, rows ty+16i (i<8), columns
//              2tx+q+32j (q<2, j<4): an 8x8 block;
// - mm_medium: 64x64 tile, TK 16, 16x16 invocations, rows ty+16i (i<4), columns 2tx+q+32j
//              (j<2): a 4x4 block;
// - mm_skinny: 16x128 tile, TK 8, 32x8 invocations, rows ty+8i (i<2), columns 2tx+q+64j
//              (j<2): a 2x4 block;
// - mm_gemv:   4 rows (meant for M <= 4) by 64 (B row-major) or 8 (B column-major) virtual
//              columns per workgroup; the K range is split over 4 or 32 lanes and reduced in
//              workgroup memory.
// A and B tiles are double-buffered in sa/sb (two [TK][TM] / [TK][TN] buffers, one barrier
// per K step); tiles fully inside the matrices load without bounds checks. Each invocation
// owns pairs of adjacent columns (c even), so it writes whole output words; GEGLU virtual
// columns put h at jj and g at jj + TN/2, which the column layouts above give to the same
// invocation.

// K loop shared by the 2-D configs: stages tile t+1 while computing on tile t.
fn full_step(k0: u32, tk: u32, rows_full: bool, cols_ok: bool) -> bool {
    return rows_full && cols_ok && k0 + tk <= dim_k();
}

@compute @workgroup_size(16, 16)
fn mm_large(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) l: vec3<u32>,
            @builtin(local_invocation_index) lid: u32) {
    let b = wid.z + p(39u);
    let ab = a_base(b);
    let bb = b_base(b);
    let row0 = wid.y * 128u;
    let rows_full = row0 + 128u <= dim_m();
    let cf = cols_full(wid.x, 128u);
    let nt = (dim_k() + 7u) / 8u;
    var acc: array<f32, 64>;
    stage_a(0u, ab, row0, 0u, 128u, 8u, lid, full_step(0u, 8u, rows_full, true));
    stage_b(0u, bb, wid.x, 0u, 128u, 8u, lid, full_step(0u, 8u, true, cf));
    workgroupBarrier();
    for (var t = 0u; t < nt; t = t + 1u) {
        let cur = (t & 1u) * 1024u;
        if (t + 1u < nt) {
            let k1 = (t + 1u) * 8u;
            stage_a(1u - (t & 1u), ab, row0, k1, 128u, 8u, lid, full_step(k1, 8u, rows_full, true));
            stage_b(1u - (t & 1u), bb, wid.x, k1, 128u, 8u, lid, full_step(k1, 8u, true, cf));
        }
        for (var kk = 0u; kk < 8u; kk = kk + 1u) {
            var av: array<f32, 8>;
            var bv: array<f32, 8>;
            for (var i = 0u; i < 8u; i = i + 1u) {
                av[i] = sa[cur + kk * 128u + l.y + 16u * i];
                bv[i] = sb[cur + kk * 128u + 2u * l.x + (i & 1u) + 32u * (i >> 1u)];
            }
            for (var i = 0u; i < 8u; i = i + 1u) {
                for (var j = 0u; j < 8u; j = j + 1u) {
                    acc[i * 8u + j] = fma(av[i], bv[j], acc[i * 8u + j]);
                }
            }
        }
        workgroupBarrier();
    }
    let g = is_geglu();
    let jn = select(4u, 2u, g);
    let cw = select(128u, 64u, g);
    for (var i = 0u; i < 8u; i = i + 1u) {
        let r = row0 + l.y + 16u * i;
        for (var j = 0u; j < jn; j = j + 1u) {
            let c = wid.x * cw + 2u * l.x + 32u * j;
            let h = i * 8u + 2u * j;
            let gi = select(h, h + 4u, g);
            finish_pair(b, r, c, acc[h], acc[h + 1u], acc[gi], acc[gi + 1u]);
        }
    }
}

@compute @workgroup_size(16, 16)
fn mm_medium(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_id) l: vec3<u32>,
             @builtin(local_invocation_index) lid: u32) {
    let b = wid.z + p(39u);
    let ab = a_base(b);
    let bb = b_base(b);
    let row0 = wid.y * 64u;
    let rows_full = row0 + 64u <= dim_m();
    let cf = cols_full(wid.x, 64u);
    let nt = (dim_k() + 15u) / 16u;
    var acc: array<f32, 16>;
    stage_a(0u, ab, row0, 0u, 64u, 16u, lid, full_step(0u, 16u, rows_full, true));
    stage_b(0u, bb, wid.x, 0u, 64u, 16u, lid, full_step(0u, 16u, true, cf));
    workgroupBarrier();
    for (var t = 0u; t < nt; t = t + 1u) {
        let cur = (t & 1u) * 1024u;
        if (t + 1u < nt) {
            let k1 = (t + 1u) * 16u;
            stage_a(1u - (t & 1u), ab, row0, k1, 64u, 16u, lid, full_step(k1, 16u, rows_full, true));
            stage_b(1u - (t & 1u), bb, wid.x, k1, 64u, 16u, lid, full_step(k1, 16u, true, cf));
        }
        for (var kk = 0u; kk < 16u; kk = kk + 1u) {
            var av: array<f32, 4>;
            var bv: array<f32, 4>;
            for (var i = 0u; i < 4u; i = i + 1u) {
                av[i] = sa[cur + kk * 64u + l.y + 16u * i];
                bv[i] = sb[cur + kk * 64u + 2u * l.x + (i & 1u) + 32u * (i >> 1u)];
            }
            for (var i = 0u; i < 4u; i = i + 1u) {
                for (var j = 0u; j < 4u; j = j + 1u) {
                    acc[i * 4u + j] = fma(av[i], bv[j], acc[i * 4u + j]);
                }
            }
        }
        workgroupBarrier();
    }
    let g = is_geglu();
    let jn = select(2u, 1u, g);
    let cw = select(64u, 32u, g);
    for (var i = 0u; i < 4u; i = i + 1u) {
        let r = row0 + l.y + 16u * i;
        for (var j = 0u; j < jn; j = j + 1u) {
            let c = wid.x * cw + 2u * l.x + 32u * j;
            let h = i * 4u + 2u * j;
            let gi = select(h, h + 2u, g);
            finish_pair(b, r, c, acc[h], acc[h + 1u], acc[gi], acc[gi + 1u]);
        }
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
    var acc: array<f32, 8>;
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
            var av: array<f32, 2>;
            var bv: array<f32, 4>;
            for (var i = 0u; i < 2u; i = i + 1u) {
                av[i] = sa[cur + kk * 16u + l.y + 8u * i];
            }
            for (var j = 0u; j < 4u; j = j + 1u) {
                bv[j] = sb[cur + kk * 128u + 2u * l.x + (j & 1u) + 64u * (j >> 1u)];
            }
            for (var i = 0u; i < 2u; i = i + 1u) {
                for (var j = 0u; j < 4u; j = j + 1u) {
                    acc[i * 4u + j] = fma(av[i], bv[j], acc[i * 4u + j]);
                }
            }
        }
        workgroupBarrier();
    }
    let g = is_geglu();
    let jn = select(2u, 1u, g);
    let cw = select(128u, 64u, g);
    for (var i = 0u; i < 2u; i = i + 1u) {
        let r = row0 + l.y + 8u * i;
        for (var j = 0u; j < jn; j = j + 1u) {
            let c = wid.x * cw + 2u * l.x + 64u * j;
            let h = i * 4u + 2u * j;
            let gi = select(h, h + 2u, g);
            finish_pair(b, r, c, acc[h], acc[h + 1u], acc[gi], acc[gi + 1u]);
        }
    }
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
