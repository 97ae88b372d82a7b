//! Winograd F(2,3) and F(4,3) against the direct f64 loops of `tests.rs`: input sizes down to one pixel,
//! odd sizes whose last tiles are partial, paddings 0, 1, 2 (and different per axis), blocks
//! of tile rows that cross images, a channel-slice input view, 16-bit inputs and outputs, and
//! the whole epilogue (bias, SiLU, strided and per-image residuals) on every kernel path.

use super::tests::{case, channel_slice_input, direct, rand_vec, rounded_like, sources};
use super::winograd::{run_blocked, Operands, Tile};
use super::*;
use crate::Conv2dParams;
use half::bf16;

fn params(ph: usize, pw: usize) -> Conv2dParams {
    Conv2dParams {
        padding: (ph, pw),
        ..Default::default()
    }
}

fn paths() -> Vec<GemmPath> {
    let mut paths = vec![GemmPath::Fallback, GemmPath::Avx2];
    if gemm::gemm_path(DType::F32) == GemmPath::Avx512 {
        paths.push(GemmPath::Avx512);
    }
    paths
}

/// `(input [N, C, H, W], outputs, padding (h, w))`.
const CASES: [([usize; 4], usize, (usize, usize)); 7] = [
    ([1, 16, 1, 1], 16, (1, 1)),
    ([2, 17, 7, 5], 33, (1, 1)),
    ([1, 33, 13, 9], 16, (0, 0)),
    ([1, 20, 6, 6], 24, (2, 2)),
    ([2, 24, 3, 4], 17, (1, 0)),
    ([1, 16, 3, 3], 20, (0, 0)),
    ([3, 18, 5, 7], 19, (2, 1)),
];

const TILES: [Tile; 2] = [Tile::F2, Tile::F4];

/// Bias, SiLU and a residual read from `res` (rows of `O + 1` values, so its row stride is not
/// the output's), f32 output, on `path`.
fn full_epilogue<'a>(
    bias: &'a [f32],
    res: &'a [f32],
    g: &crate::desc::ConvGeom,
    path: GemmPath,
) -> ConvEpilogue<'a> {
    ConvEpilogue {
        bias: Some(bias),
        activation: Activation::Silu,
        residual: Some(Residual::F32(MatRef::new(res, 0, g.m(), g.o, g.o + 1, 1))),
        residual_image_stride: None,
        out_dtype: DType::F32,
        path,
    }
}

/// A layer's Winograd packs as the static rule makes them (operands by the bf16 method,
/// F(4,3) where allowed).
fn layer_winograd<S: ToF32>(
    w: &[S],
    shape: [usize; 4],
    params: crate::Conv2dParams,
) -> crate::Result<PackedConv> {
    let operands = super::winograd::Operands::for_source::<S>();
    let tile = super::winograd::choose_tile(shape[1], shape[0], operands);
    PackedConv::new_winograd_on(w, shape, params, operands, tile)
}

#[test]
fn winograd_matches_direct_loops_on_every_path_and_block_size() -> Result<()> {
    for (ci, &(x, o, (ph, pw))) in CASES.iter().enumerate() {
        for tile in TILES {
            f32_case(ci, (x, o, (ph, pw)), tile)?;
        }
    }
    Ok(())
}

fn f32_case(
    ci: usize,
    (x, o, (ph, pw)): ([usize; 4], usize, (usize, usize)),
    tile: Tile,
) -> Result<()> {
    let g = case(x, [o, x[1], 3, 3], params(ph, pw));
    let (wide, xv, xl) = channel_slice_input(&g, 40 + ci as u64);
    let w = rand_vec(o * g.c * 9, 140 + ci as u64);
    let bias = rand_vec(o, 240 + ci as u64);
    let res = rand_vec(g.m() * (o + 1), 340 + ci as u64);
    let packed = PackedConv::new_winograd_on(&w, [o, g.c, 3, 3], g.p, Operands::F32, tile)?;
    let Panels::Winograd(wg) = &packed.panels else {
        panic!("Winograd panels expected");
    };
    assert_eq!(wg.tile, tile);
    for src in &sources(&wide) {
        let xr = rounded_like(src, &xv);
        let want = direct(&xr, &w, &g, &bias, &res);
        for path in paths() {
            let ep = full_epilogue(&bias, &res, &g, path);
            // One tile row per block, a few, and everything in one block.
            for block in [1, 3 * tile.points() * (g.c + o), usize::MAX / 2] {
                let mut got = vec![f32::NAN; g.m() * o];
                match src {
                    CpuStorage::F32(v) => {
                        run_blocked(path, (v, &xl), wg, &g, &ep, &mut got, block)?
                    }
                    CpuStorage::F16(v) => {
                        run_blocked(path, (v, &xl), wg, &g, &ep, &mut got, block)?
                    }
                    CpuStorage::BF16(v) => {
                        run_blocked(path, (v, &xl), wg, &g, &ep, &mut got, block)?
                    }
                    _ => unreachable!(),
                }
                for (i, (&a, &b)) in got.iter().zip(&want).enumerate() {
                    assert!(
                        (a as f64 - b).abs() <= 1e-4 * (1.0 + b.abs()),
                        "case {ci} {tile:?} {:?} {path:?} block {block} [{i}]: {a} vs {b}",
                        src.dtype()
                    );
                }
            }
        }
    }
    Ok(())
}

/// Through `conv2d_nhwc`: a bf16 output is the f32 result rounded once, and a per-image
/// residual (a `[N, O, 1, 1]` broadcast, row stride 0) steps with the image.
#[test]
fn winograd_rounds_16_bit_outputs_and_steps_per_image_residuals() -> Result<()> {
    let g = case([2, 19, 6, 5], [21, 19, 3, 3], params(1, 1));
    let (wide, xv, xl) = channel_slice_input(&g, 7);
    let w = rand_vec(21 * 19 * 9, 8);
    let bias = rand_vec(21, 10);
    let per_image = rand_vec(2 * 21, 9);
    let packed = layer_winograd(&w, [21, 19, 3, 3], g.p)?;
    let ep = |out_dtype| ConvEpilogue {
        bias: Some(&bias),
        activation: Activation::Silu,
        residual: Some(Residual::F32(MatRef::new(
            &per_image,
            0,
            g.ho * g.wo,
            21,
            0,
            1,
        ))),
        residual_image_stride: Some(21),
        out_dtype,
        path: gemm::gemm_path(DType::F32),
    };
    let x = CpuStorage::F32(wide);
    let Some(f) = conv2d_nhwc(&x, &xl, &packed, &g, &ep(DType::F32))?.into_f32() else {
        panic!("f32 output expected");
    };
    let half_out = conv2d_nhwc(&x, &xl, &packed, &g, &ep(DType::BF16))?;
    let CpuStorage::BF16(h) = &half_out else {
        panic!("bf16 output expected");
    };
    // The reference's residual rows (O + 1 columns) hold each image's broadcast row.
    let mut res = vec![0.0; g.m() * 22];
    for m in 0..g.m() {
        let b = m / (g.ho * g.wo);
        res[m * 22..m * 22 + 21].copy_from_slice(&per_image[b * 21..b * 21 + 21]);
    }
    let want = direct(&xv, &w, &g, &bias, &res);
    for (i, ((&a, &r), &b)) in f.iter().zip(h).zip(&want).enumerate() {
        assert_eq!(bf16::from_f32(a), r, "[{i}] rounding");
        assert!(
            (a as f64 - b).abs() <= 1e-4 * (1.0 + b.abs()),
            "[{i}]: {a} vs {b}"
        );
    }
    Ok(())
}

#[test]
fn winograd_refuses_bf16_operands_with_f4_tiles() {
    let w = rand_vec(16 * 16 * 9, 2);
    let p = PackedConv::new_winograd_on(&w, [16, 16, 3, 3], params(1, 1), Operands::Bf16, Tile::F4);
    assert!(p.is_err());
    assert_eq!(
        super::winograd::choose_tile(16, 16, Operands::Bf16),
        Tile::F2
    );
}

#[test]
fn winograd_refuses_other_geometry() {
    let w = rand_vec(4 * 4 * 9, 1);
    let strided = Conv2dParams {
        stride: (2, 2),
        ..params(1, 1)
    };
    assert!(layer_winograd(&w, [4, 4, 3, 3], strided).is_err());
    assert!(layer_winograd(&w[..4 * 4 * 4], [4, 4, 2, 2], params(1, 1)).is_err());
    assert!(layer_winograd(&w[..10], [4, 4, 3, 3], params(1, 1)).is_err());
}

/// bf16 operands ([`winograd::Operands::Bf16`]): the transformed filters and inputs rounded to
/// bf16, the point GEMMs on the bf16 kernels of every path. Checked against the direct loops on
/// the bf16 weights and inputs within a bf16 tolerance: 2⁻⁶ of the output's largest magnitude
/// (two extra roundings of 2⁻⁹ each, summed over the 16 points; the worst case seen is 0.55%),
/// and shown to be a different computation from the f32 operands (which match to 1e-4). F(2,3)
/// only: F(4,3)'s transform coefficients (up to 8, and sixths in the filters) turned the same
/// roundings into errors of 5% of the output's magnitude, so that pair is refused.
#[test]
fn winograd_bf16_operands_match_direct_loops_on_every_path() -> Result<()> {
    for (ci, &(x, o, (ph, pw))) in CASES.iter().enumerate() {
        let g = case(x, [o, x[1], 3, 3], params(ph, pw));
        let (wide, xv, xl) = channel_slice_input(&g, 60 + ci as u64);
        let w: Vec<bf16> = rand_vec(o * g.c * 9, 160 + ci as u64)
            .iter()
            .map(|&v| bf16::from_f32(v))
            .collect();
        let wf: Vec<f32> = w.iter().map(|v| v.to_f32()).collect();
        let bias = rand_vec(o, 260 + ci as u64);
        let res = rand_vec(g.m() * (o + 1), 360 + ci as u64);
        let packed =
            PackedConv::new_winograd_on(&w, [o, g.c, 3, 3], g.p, Operands::Bf16, Tile::F2)?;
        let Panels::Winograd(wg) = &packed.panels else {
            panic!("Winograd panels expected");
        };
        assert_eq!(wg.operands(), Operands::Bf16);
        let xh: Vec<bf16> = wide.iter().map(|&v| bf16::from_f32(v)).collect();
        let xr: Vec<f32> = xv.iter().map(|&v| bf16::from_f32(v).to_f32()).collect();
        let want = direct(&xr, &wf, &g, &bias, &res);
        let scale = want.iter().fold(1.0f64, |m, v| m.max(v.abs()));
        for path in paths() {
            let ep = full_epilogue(&bias, &res, &g, path);
            for block in [1, 3 * 16 * (g.c + o), usize::MAX / 2] {
                let mut got = vec![f32::NAN; g.m() * o];
                run_blocked(path, (&xh, &xl), wg, &g, &ep, &mut got, block)?;
                let worst = got
                    .iter()
                    .zip(&want)
                    .map(|(&a, &b)| (a as f64 - b).abs())
                    .fold(0.0, f64::max);
                assert!(
                    worst <= scale / 64.0,
                    "case {ci} {path:?} block {block}: max error {worst} of {scale}"
                );
                // Rounded operands: not the f32 result (a test that cannot tell the two
                // apart would not show which operands ran).
                assert!(worst > 1e-6 * scale, "case {ci}: bf16 operands did not run");
            }
        }
    }
    Ok(())
}

/// bf16 layers take bf16 operands exactly where the bf16 method is `vdpbf16ps`; f32 and f16
/// layers never do.
#[test]
fn winograd_operands_follow_the_bf16_method() -> Result<()> {
    let w = rand_vec(16 * 16 * 9, 3);
    let wh: Vec<bf16> = w.iter().map(|&v| bf16::from_f32(v)).collect();
    let operands = |p: &PackedConv| match &p.panels {
        Panels::Winograd(wg) => wg.operands(),
        _ => panic!("Winograd panels expected"),
    };
    let dot = bf16_method() == Bf16Method::DotProduct;
    let f = layer_winograd(&w, [16, 16, 3, 3], params(1, 1))?;
    let h = layer_winograd(&wh, [16, 16, 3, 3], params(1, 1))?;
    assert_eq!(operands(&f), Operands::F32);
    let want = if dot { Operands::Bf16 } else { Operands::F32 };
    assert_eq!(operands(&h), want);
    Ok(())
}

/// The f32 filter transform written straight into the packed layout equals packing the
/// row-major `[C][O]` point matrices with `PackedB::new`, bit for bit, padding lanes included:
/// odd channel counts (partial last panels), more input channels than one K block holds, both
/// variants, every SIMD level's transform, and storage recycled from a dropped pack of NaNs.
#[test]
fn filters_transformed_into_packed_layout_match_the_packer() -> Result<()> {
    use super::winograd_math::{transform_filters, RowMajorSink};
    use super::winograd_pack::transform_packed_f32;
    use crate::cpu::gemm::{MatRef, PackedB, KCU_F32};
    use crate::cpu::simd::SimdLevel;
    let mut levels = vec![SimdLevel::Fallback, SimdLevel::Avx2];
    if crate::cpu::simd::Kernels::current().level() == SimdLevel::Avx512 {
        levels.push(SimdLevel::Avx512);
    }
    for (o, c) in [(16, 16), (33, 17), (47, 40), (65, KCU_F32 + 3)] {
        let w = rand_vec(o * c * 9, (o * 31 + c) as u64);
        for tile in [Tile::F2, Tile::F4] {
            let points = tile.points();
            // The intermediate the packer reads: u[ci][point][oi].
            let mut u = vec![0f32; points * c * o];
            let mut sink = RowMajorSink::new(&mut u, 0, points, o);
            transform_filters(SimdLevel::Fallback, &w, tile, (c, o), 0..c, &mut sink);
            let want: Vec<PackedB<f32>> = (0..points)
                .map(|p| PackedB::new(MatRef::new(&u, p * o, c, o, points * o, 1)))
                .collect::<Result<_>>()?;
            for &level in &levels {
                // Dirty storage for the recycled buffers: packs of NaN, dropped.
                let nans = vec![f32::NAN; c * o];
                let dirty: Vec<PackedB<f32>> = (0..points)
                    .map(|_| PackedB::new(MatRef::new(&nans, 0, c, o, o, 1)))
                    .collect::<Result<_>>()?;
                drop(dirty);
                let got = transform_packed_f32(&w, (o, c), tile, level)?;
                for (p, (g, e)) in got.iter().zip(&want).enumerate() {
                    let len = e.layout.len();
                    let (gb, eb) = (g.buf.slice::<f32>(len), e.buf.slice::<f32>(len));
                    assert_eq!(g.layout.len(), len);
                    assert!(
                        gb.iter().zip(eb).all(|(x, y)| x.to_bits() == y.to_bits()),
                        "{tile:?} {level:?} o {o} c {c} point {p}"
                    );
                }
            }
        }
    }
    Ok(())
}

/// The bf16 pair packs written by the transform equal `PackedB::new` over the intermediate
/// rounded with the same conversion, bit for bit: odd C (a last unit with one row), more rows
/// than one K block of pairs holds, odd O, both variants, every SIMD level's transform.
#[test]
fn filters_transformed_into_pair_layout_match_the_packer() -> Result<()> {
    use super::winograd_math::{transform_filters, RowMajorSink};
    use super::winograd_pack::transform_packed_bf16;
    use crate::cpu::gemm::tests::util::with_bf16_kind;
    use crate::cpu::gemm::{MatRef, PackKind, PackedB, KCU_BF16};
    use crate::cpu::simd::{Kernels, SimdLevel};
    let mut levels = vec![SimdLevel::Fallback, SimdLevel::Avx2];
    if Kernels::current().level() == SimdLevel::Avx512 {
        levels.push(SimdLevel::Avx512);
    }
    with_bf16_kind(Some(PackKind::Bf16), || {
        for (o, c) in [(16, 16), (33, 17), (47, 2 * KCU_BF16 + 5)] {
            let w = rand_vec(o * c * 9, (o * 7 + c) as u64);
            for tile in [Tile::F2, Tile::F4] {
                let points = tile.points();
                let mut u = vec![0f32; points * c * o];
                let mut sink = RowMajorSink::new(&mut u, 0, points, o);
                transform_filters(SimdLevel::Fallback, &w, tile, (c, o), 0..c, &mut sink);
                let mut h = vec![bf16::ZERO; u.len()];
                Kernels::current().f32_to_bf16(&u, &mut h);
                let want: Vec<PackedB<bf16>> = (0..points)
                    .map(|p| PackedB::new(MatRef::new(&h, p * o, c, o, points * o, 1)))
                    .collect::<Result<_>>()?;
                for &level in &levels {
                    let got = transform_packed_bf16(&w, (o, c), tile, level)?.ok_or_else(|| {
                        crate::Error::invalid("test", "the pair layout was forced")
                    })?;
                    for (p, (g, e)) in got.iter().zip(&want).enumerate() {
                        let len = e.layout.len();
                        assert_eq!(g.layout.len(), len);
                        assert!(
                            g.buf.slice::<u32>(len) == e.buf.slice::<u32>(len),
                            "{tile:?} {level:?} o {o} c {c} point {p}"
                        );
                    }
                }
            }
        }
        Ok(())
    })
}

#[test]
fn blocks_take_whole_multiples_of_the_thread_count() {
    use super::winograd::balanced_rows;
    assert_eq!(balanced_rows(5, 32, 2), 4);
    assert_eq!(balanced_rows(7, 32, 3), 6);
    assert_eq!(balanced_rows(1, 32, 2), 1);
    assert_eq!(balanced_rows(40, 32, 2), 32);
    assert_eq!(balanced_rows(33, 33, 2), 32);
    assert_eq!(balanced_rows(3, 3, 4), 3);
    assert_eq!(balanced_rows(0, 0, 0), 1);
}
