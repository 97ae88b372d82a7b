//! The three linear maps of Winograd F(2×2, 3×3) (Lavin & Gray's matrices), see [`super::winograd`].
//!
//! Invariants: the input and output maps only add and subtract (exact up to the rounding of
//! each addition, in a fixed order); the filter map runs in f64. Inner vectors are `L`
//! channels wide so the compiler keeps them in 8-lane registers.

/// `G g Gᵀ` with `G = [[1, 0, 0], [½, ½, ½], [½, −½, ½], [0, 0, 1]]`, row-major 4×4.
pub(super) fn filter_transform(g: &[f64; 9]) -> [f64; 16] {
    let col = |a: f64, b: f64, c: f64| [a, (a + b + c) / 2.0, (a - b + c) / 2.0, c];
    // G g: 4×3, column by column.
    let gg: [[f64; 4]; 3] = std::array::from_fn(|j| col(g[j], g[3 + j], g[6 + j]));
    let mut out = [0f64; 16];
    for i in 0..4 {
        let row = col(gg[0][i], gg[1][i], gg[2][i]);
        out[i * 4..i * 4 + 4].copy_from_slice(&row);
    }
    out
}

/// Lanes of the transforms' inner vectors.
pub(super) const L: usize = 8;

/// `Bᵀ d B` for 4×4 tiles of `L` channels, with `Bᵀ = [[1,0,−1,0],[0,1,1,0],[0,−1,1,0],[0,1,0,−1]]`.
#[inline(always)]
pub(super) fn input_transform(d: &[[f32; L]; 16]) -> [[f32; L]; 16] {
    let mut t = [[0f32; L]; 16];
    for j in 0..4 {
        for l in 0..L {
            let (d0, d1, d2, d3) = (d[j][l], d[4 + j][l], d[8 + j][l], d[12 + j][l]);
            t[j][l] = d0 - d2;
            t[4 + j][l] = d1 + d2;
            t[8 + j][l] = d2 - d1;
            t[12 + j][l] = d1 - d3;
        }
    }
    let mut v = [[0f32; L]; 16];
    for i in 0..4 {
        for l in 0..L {
            let r = i * 4;
            let (t0, t1, t2, t3) = (t[r][l], t[r + 1][l], t[r + 2][l], t[r + 3][l]);
            v[r][l] = t0 - t2;
            v[r + 1][l] = t1 + t2;
            v[r + 2][l] = t2 - t1;
            v[r + 3][l] = t1 - t3;
        }
    }
    v
}

/// `Aᵀ m A` for 4×4 tiles of `L` channels, with `Aᵀ = [[1,1,1,0],[0,1,−1,−1]]`: row-major 2×2.
#[inline(always)]
pub(super) fn output_transform(m: &[[f32; L]; 16]) -> [[f32; L]; 4] {
    let mut s = [[0f32; L]; 8];
    for j in 0..4 {
        for l in 0..L {
            let (m0, m1, m2, m3) = (m[j][l], m[4 + j][l], m[8 + j][l], m[12 + j][l]);
            s[j][l] = m0 + m1 + m2;
            s[4 + j][l] = m1 - m2 - m3;
        }
    }
    let mut y = [[0f32; L]; 4];
    for i in 0..2 {
        for l in 0..L {
            let r = i * 4;
            let (s0, s1, s2, s3) = (s[r][l], s[r + 1][l], s[r + 2][l], s[r + 3][l]);
            y[i * 2][l] = s0 + s1 + s2;
            y[i * 2 + 1][l] = s1 - s2 - s3;
        }
    }
    y
}
