//! The implicit-GEMM convolution on both kernel paths against direct f64 loops: channel counts
//! that are not multiples of 16 and K that spans several K blocks (runs cut mid-tap), groups
//! down to depthwise, stride/dilation/padding, a channel-slice input view (offset, pixel stride
//! larger than C), 16-bit inputs, and the whole epilogue with a strided residual.

use super::*;
use crate::desc::ConvGeom;
use crate::Conv2dParams;
use half::{bf16, f16};

pub(super) fn rand_vec(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

/// `x` as NHWC values (`[n][h][w][c]`), weight OIHW; returns NHWC `act(conv + b) + res`.
pub(super) fn direct(x: &[f32], w: &[f32], g: &ConvGeom, bias: &[f32], res: &[f32]) -> Vec<f64> {
    let p = g.p;
    let (cg, og) = (g.c / p.groups, g.o / p.groups);
    let mut out = vec![0.0; g.m() * g.o];
    for b in 0..g.n {
        for oy in 0..g.ho {
            for ox in 0..g.wo {
                let m = (b * g.ho + oy) * g.wo + ox;
                for oc in 0..g.o {
                    let mut acc = bias[oc] as f64;
                    for ci in 0..cg {
                        let ch = oc / og * cg + ci;
                        for ky in 0..g.kh {
                            for kx in 0..g.kw {
                                let iy = (oy * p.stride.0 + ky * p.dilation.0) as isize
                                    - p.padding.0 as isize;
                                let ix = (ox * p.stride.1 + kx * p.dilation.1) as isize
                                    - p.padding.1 as isize;
                                if iy < 0 || ix < 0 || iy as usize >= g.h || ix as usize >= g.w {
                                    continue;
                                }
                                let xv =
                                    x[((b * g.h + iy as usize) * g.w + ix as usize) * g.c + ch];
                                let wv = w[((oc * cg + ci) * g.kh + ky) * g.kw + kx];
                                acc += xv as f64 * wv as f64;
                            }
                        }
                    }
                    let silu = acc / (1.0 + (-acc).exp());
                    out[m * g.o + oc] = silu + res[m * (g.o + 1) + oc] as f64;
                }
            }
        }
    }
    out
}

pub(super) fn case(x: [usize; 4], w: [usize; 4], p: Conv2dParams) -> ConvGeom {
    match ConvGeom::new("test", &x, &w, p) {
        Ok(g) => g,
        Err(e) => panic!("bad test case: {e}"),
    }
}

pub(super) fn pad(p: usize) -> Conv2dParams {
    Conv2dParams {
        padding: (p, p),
        ..Default::default()
    }
}

/// `wide` as f32, f16 and bf16 storage.
pub(super) fn sources(wide: &[f32]) -> [CpuStorage; 3] {
    [
        CpuStorage::F32(wide.to_vec()),
        CpuStorage::F16(wide.iter().map(|&v| f16::from_f32(v)).collect()),
        CpuStorage::BF16(wide.iter().map(|&v| bf16::from_f32(v)).collect()),
    ]
}

/// `x` rounded to `src`'s dtype and widened back (the values a 16-bit input holds).
pub(super) fn rounded_like(src: &CpuStorage, x: &[f32]) -> Vec<f32> {
    match src {
        CpuStorage::F16(_) => x.iter().map(|&v| f16::from_f32(v).to_f32()).collect(),
        CpuStorage::BF16(_) => x.iter().map(|&v| bf16::from_f32(v).to_f32()).collect(),
        _ => x.to_vec(),
    }
}

/// Odd channel counts, K over several blocks, 1×1, depthwise, stride/dilation/groups.
fn cases() -> [ConvGeom; 5] {
    [
        case([2, 33, 7, 5], [5, 33, 3, 3], pad(1)),
        case([1, 70, 5, 6], [40, 70, 3, 3], pad(1)),
        case([1, 17, 13, 9], [3, 17, 1, 1], Conv2dParams::default()),
        case(
            [1, 6, 9, 7],
            [6, 1, 3, 3],
            Conv2dParams {
                groups: 6,
                ..pad(1)
            },
        ),
        case(
            [2, 8, 11, 13],
            [6, 4, 3, 2],
            Conv2dParams {
                stride: (2, 3),
                padding: (2, 1),
                dilation: (2, 1),
                groups: 2,
            },
        ),
    ]
}

/// The input as channels 1..C+1 of a wider NHWC tensor (offset 1, pixel stride C + 3): the
/// wide values, the dense NHWC values, and the view's layout.
pub(super) fn channel_slice_input(g: &ConvGeom, seed: u64) -> (Vec<f32>, Vec<f32>, Layout) {
    let cs = g.c + 3;
    let wide = rand_vec(g.n * g.h * g.w * cs, seed);
    let x: Vec<f32> = (0..g.n * g.h * g.w)
        .flat_map(|px| wide[px * cs + 1..px * cs + 1 + g.c].to_vec())
        .collect();
    let xl = Layout::from_parts(
        vec![g.n, g.c, g.h, g.w],
        vec![g.h * g.w * cs, 1, g.w * cs, cs],
        1,
    );
    (wide, x, xl)
}

#[test]
fn implicit_gemm_matches_direct_loops_on_both_paths() -> Result<()> {
    let cases = cases();
    let mut paths = vec![GemmPath::Fallback, GemmPath::Avx2];
    if gemm::gemm_path(DType::F32) == GemmPath::Avx512 {
        paths.push(GemmPath::Avx512);
    }
    for (ci, g) in cases.iter().enumerate() {
        let (wide, x, xl) = channel_slice_input(g, ci as u64);
        let wshape = [g.o, g.c / g.p.groups, g.kh, g.kw];
        let w = rand_vec(wshape.iter().product(), 100 + ci as u64);
        let bias = rand_vec(g.o, 200 + ci as u64);
        let res = rand_vec(g.m() * (g.o + 1), 300 + ci as u64);
        let packed = PackedConv::new(&w, wshape, g.p.groups)?;
        let want = direct(&x, &w, g, &bias, &res);
        for src in &sources(&wide) {
            // 16-bit inputs: compare against the reference on the rounded input values.
            let xr = rounded_like(src, &x);
            let want16 = direct(&xr, &w, g, &bias, &res);
            let want = if matches!(src, CpuStorage::F32(_)) {
                &want
            } else {
                &want16
            };
            for &path in &paths {
                let ep = ConvEpilogue {
                    bias: Some(&bias),
                    activation: Activation::Silu,
                    residual: Some(Residual::F32(MatRef::new(&res, 0, g.m(), g.o, g.o + 1, 1))),
                    residual_image_stride: None,
                    out_dtype: DType::F32,
                    path,
                };
                let out = conv2d_nhwc(src, &xl, &packed, g, &ep)?;
                let Some(got) = out.into_f32() else {
                    panic!("f32 output expected");
                };
                for (i, (&a, &b)) in got.iter().zip(want.iter()).enumerate() {
                    assert!(
                        (a as f64 - b).abs() <= 1e-4 * (1.0 + b.abs()),
                        "case {ci} {:?} {path:?} [{i}]: {a} vs {b}",
                        src.dtype()
                    );
                }
            }
        }
    }
    Ok(())
}

/// bf16 weights packed for the bf16 method (AMX tiles, or `vdpbf16ps` pairs gathered by
/// `gemm_gather_dot`: odd channel counts whose pairs straddle taps, 1×1, depthwise,
/// strided/dilated/grouped, runs long enough for the transpose) give the direct result on the
/// rounded values, with the whole epilogue and a bf16 output; the panels refuse f32 inputs and
/// the portable path, and are not built at all without AMX or full-rate `vdpbf16ps`.
#[test]
fn amx_panels_match_direct_loops_for_bf16() -> Result<()> {
    let round = |v: &[f32]| -> Vec<f32> { v.iter().map(|&x| bf16::from_f32(x).to_f32()).collect() };
    for (ci, g) in cases().iter().enumerate() {
        let (wide, x, xl) = channel_slice_input(g, 40 + ci as u64);
        let wshape = [g.o, g.c / g.p.groups, g.kh, g.kw];
        let w = round(&rand_vec(wshape.iter().product(), 140 + ci as u64));
        let wb: Vec<bf16> = w.iter().map(|&v| bf16::from_f32(v)).collect();
        let Some(packed) = PackedConv::new_amx(&wb, wshape, g.p.groups)? else {
            let m = gemm::bf16_method();
            assert!(
                m != Bf16Method::Amx && m != Bf16Method::DotProduct,
                "bf16 panels expected for {m}"
            );
            continue;
        };
        assert!(packed.serves(DType::BF16) && !packed.serves(DType::F32));
        let bias = rand_vec(g.o, 240 + ci as u64);
        let res = rand_vec(g.m() * (g.o + 1), 340 + ci as u64);
        let want = direct(&round(&x), &w, g, &bias, &res);
        let src = CpuStorage::BF16(wide.iter().map(|&v| bf16::from_f32(v)).collect());
        for out_dtype in [DType::F32, DType::BF16] {
            let ep = ConvEpilogue {
                bias: Some(&bias),
                activation: Activation::Silu,
                residual: Some(Residual::F32(MatRef::new(&res, 0, g.m(), g.o, g.o + 1, 1))),
                residual_image_stride: None,
                out_dtype,
                path: GemmPath::Avx512,
            };
            let out = conv2d_nhwc(&src, &xl, &packed, g, &ep)?;
            let got: Vec<f32> = match out {
                CpuStorage::F32(ref v) => v.clone(),
                CpuStorage::BF16(ref v) => v.iter().map(|b| b.to_f32()).collect(),
                _ => panic!("unexpected output dtype {:?}", out.dtype()),
            };
            let tol = if out_dtype == DType::F32 { 1e-4 } else { 8e-3 };
            for (i, (&a, &b)) in got.iter().zip(want.iter()).enumerate() {
                assert!(
                    (a as f64 - b).abs() <= tol * (1.0 + b.abs()),
                    "case {ci} {out_dtype:?} [{i}]: {a} vs {b}"
                );
            }
        }
        // The portable path cannot run AMX panels: an error, never a wrong result (callers
        // check `serves` first and pack f32 panels instead).
        let ep = ConvEpilogue {
            bias: None,
            activation: Activation::None,
            residual: None,
            residual_image_stride: None,
            out_dtype: DType::F32,
            path: GemmPath::Fallback,
        };
        assert!(conv2d_nhwc(&src, &xl, &packed, g, &ep).is_err());
    }
    Ok(())
}

#[test]
fn mismatched_inputs_are_errors() -> Result<()> {
    let g = case([1, 4, 5, 5], [2, 4, 3, 3], Conv2dParams::default());
    let packed = PackedConv::new(&rand_vec(72, 1), [2, 4, 3, 3], 1)?;
    let ep = ConvEpilogue {
        bias: None,
        activation: Activation::None,
        residual: None,
        residual_image_stride: None,
        out_dtype: DType::F32,
        path: GemmPath::Fallback,
    };
    let x = CpuStorage::F32(rand_vec(100, 2));
    // NCHW strides (channel stride 25) are refused: the engine needs channel stride 1.
    assert!(conv2d_nhwc(&x, &Layout::contiguous(&[1, 4, 5, 5]), &packed, &g, &ep).is_err());
    let nhwc = Layout::from_parts(vec![1, 4, 5, 5], vec![100, 1, 20, 4], 1);
    assert!(
        conv2d_nhwc(&x, &nhwc, &packed, &g, &ep).is_err(),
        "view past the storage"
    );
    let other = PackedConv::new(&rand_vec(36, 1), [4, 1, 3, 3], 4)?;
    let nhwc = Layout::from_parts(vec![1, 4, 5, 5], vec![100, 1, 20, 4], 0);
    assert!(
        conv2d_nhwc(&x, &nhwc, &other, &g, &ep).is_err(),
        "other weight"
    );
    assert!(conv2d_nhwc(&CpuStorage::I32(vec![0; 100]), &nhwc, &packed, &g, &ep).is_err());
    assert!(PackedConv::new(&rand_vec(5, 1), [2, 4, 3, 3], 1).is_err());
    Ok(())
}

#[test]
fn layout_transposes_round_trip() {
    let v = rand_vec(2 * 5 * 7 * 3, 9);
    let s = CpuStorage::F32(v.clone());
    let l = Layout::from_parts(vec![2, 5, 7, 3], vec![105, 21, 3, 1], 0);
    let Some(nhwc) = nchw_to_nhwc(&s, &l).unwrap() else {
        panic!("dense NCHW converts");
    };
    let Some(back) = nhwc_to_nchw(&nhwc, [2, 7, 3, 5])
        .unwrap()
        .and_then(CpuStorage::into_f32)
    else {
        panic!("dense NHWC converts");
    };
    assert_eq!(back, v);
    let Some(n) = nhwc.into_f32() else {
        panic!("f32");
    };
    assert_eq!(n[1], v[21], "channel 1 of pixel 0");
    assert!(nchw_to_nhwc(&s, &l.transpose(2, 3)).unwrap().is_none());
}
