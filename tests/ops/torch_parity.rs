//! Parity with PyTorch: every case of tests/fixtures/ops.safetensors (made by
//! tests/fixtures/make_op_fixtures.py, whose parameters are repeated here by case name) is run on
//! every device, NCHW and channels-last where it applies, and compared with PyTorch's output.

use crate::common;
use common::fixtures::{get, load};
use common::{assert_close, devices, values};
use std::collections::HashMap;
use xpu::{Conv2dParams, ConvTranspose2dParams, DType, Tensor, UnaryOp};

type Fixtures = HashMap<String, Tensor>;

fn fixtures() -> Fixtures {
    load("ops.safetensors")
}

/// Tolerances (atol, rtol) for comparing with PyTorch in a dtype, scaled by the output's magnitude.
fn tol(dtype: DType, scale: f64) -> (f64, f64) {
    match dtype {
        DType::F32 => (2e-5 * scale, 1e-4),
        DType::F16 => (4e-3 * scale, 4e-3),
        _ => (3e-2 * scale, 2e-2),
    }
}

fn check(what: &str, got: &Tensor, want: &Tensor) {
    assert_eq!(got.shape(), want.shape(), "{what}: shape");
    let (g, w) = (values(got), values(want));
    // The finite magnitudes set the scale (an infinity would make every tolerance infinite).
    let scale = w
        .iter()
        .filter(|x| x.is_finite())
        .fold(1e-30f64, |m, x| m.max(x.abs()));
    let (atol, rtol) = tol(want.dtype(), scale);
    assert_close(what, &g, &w, atol, rtol);
}

fn channels_last(x: &Tensor) -> Tensor {
    x.permute(&[0, 2, 3, 1])
        .unwrap()
        .contiguous()
        .unwrap()
        .permute(&[0, 3, 1, 2])
        .unwrap()
}

#[test]
fn conv2d_matches_torch() {
    let fx = fixtures();
    // (case, stride, padding, dilation, groups) as in make_op_fixtures.py
    let cases = [
        ("conv_3x3_s1p1", 1, 1, 1, 1),
        ("conv_3x3_s2p1", 2, 1, 1, 1),
        ("conv_1x1", 1, 0, 1, 1),
        ("conv_3x3_d2_g3", 1, 2, 2, 3),
        ("conv_5x5_s2p2", 2, 2, 1, 1),
        ("conv_1px", 1, 1, 1, 1),
        ("conv_3x3_s1p1_bf16", 1, 1, 1, 1),
        ("conv_3x3_s1p1_f16", 1, 1, 1, 1),
    ];
    for device in devices() {
        for (case, s, p, d, g) in cases {
            let x = get(&fx, case, "x").to(device).unwrap();
            let w = get(&fx, case, "weight").to(device).unwrap();
            let b = fx
                .get(&format!("{case}.bias"))
                .map(|b| b.to(device).unwrap());
            let params = Conv2dParams {
                stride: (s, s),
                padding: (p, p),
                dilation: (d, d),
                groups: g,
            };
            for (layout, input) in [("nchw", x.clone()), ("nhwc", channels_last(&x))] {
                let y = input.conv2d(&w, b.as_ref(), params).unwrap();
                check(
                    &format!("{case} {layout} {device:?}"),
                    &y,
                    get(&fx, case, "out"),
                );
            }
        }
    }
}

#[test]
fn norms_match_torch() {
    let fx = fixtures();
    for device in devices() {
        for (case, groups, eps) in [
            ("group_norm_32c", 8, 1e-5),
            ("group_norm_6c", 3, 1e-6),
            ("group_norm_bf16", 8, 1e-5),
        ] {
            let x = get(&fx, case, "x").to(device).unwrap();
            let w = get(&fx, case, "weight").to(device).unwrap();
            let b = get(&fx, case, "bias").to(device).unwrap();
            let y = x.group_norm(groups, Some(&w), Some(&b), eps).unwrap();
            check(&format!("{case} {device:?}"), &y, get(&fx, case, "out"));
            if let Some(want) = fx.get(&format!("{case}.out_silu")) {
                let y = x.group_norm_silu(groups, Some(&w), Some(&b), eps).unwrap();
                check(&format!("{case} silu {device:?}"), &y, want);
                let y = channels_last(&x)
                    .group_norm_silu(groups, Some(&w), Some(&b), eps)
                    .unwrap();
                check(&format!("{case} silu nhwc {device:?}"), &y, want);
            }
        }
        let case = "layer_norm";
        let x = get(&fx, case, "x").to(device).unwrap();
        let w = get(&fx, case, "weight").to(device).unwrap();
        let b = get(&fx, case, "bias").to(device).unwrap();
        let y = x.layer_norm(Some(&w), Some(&b), 1e-5).unwrap();
        check(&format!("{case} {device:?}"), &y, get(&fx, case, "out"));
    }
}

#[test]
fn resize_pad_and_embedding_match_torch() {
    let fx = fixtures();
    for device in devices() {
        let on = |case: &str, name: &str| get(&fx, case, name).to(device).unwrap();
        let y = on("upsample2", "x").upsample_nearest2d(2).unwrap();
        check("upsample2", &y, get(&fx, "upsample2", "out"));
        for (case, size) in [("interp_5x20", [5, 20]), ("interp_3x4", [3, 4])] {
            let y = on(case, "x").interpolate_nearest(&size).unwrap();
            check(case, &y, get(&fx, case, "out"));
        }
        let y = on("pad_1230", "x").pad(&[1, 2, 0, 3], 0.5).unwrap();
        check("pad", &y, get(&fx, "pad_1230", "out"));
        for (case, dim, flip, shift) in [
            ("timestep_320_flip", 320, true, 0.0),
            ("timestep_33_shift1", 33, false, 1.0),
        ] {
            let y = on(case, "t")
                .timestep_embedding(dim, flip, shift, DType::F32)
                .unwrap();
            // sin/cos of arguments up to 999 rad: f32 argument rounding dominates.
            let (g, w) = (values(&y), values(get(&fx, case, "out")));
            assert_close(&format!("{case} {device:?}"), &g, &w, 2e-4, 0.0);
        }
    }
}

#[test]
fn attention_matches_torch() {
    let fx = fixtures();
    for device in devices() {
        for case in [
            "sdpa_self_77x40",
            "sdpa_cross_65x77x64",
            "sdpa_80_float_mask",
            "sdpa_160_bool_mask",
            "sdpa_1_token",
            "sdpa_self_bf16",
        ] {
            let on = |name: &str| get(&fx, case, name).to(device).unwrap();
            let mask = fx
                .get(&format!("{case}.mask"))
                .map(|m| m.to(device).unwrap());
            let (q, k, v) = (on("q"), on("k"), on("v"));
            let want = get(&fx, case, "out");
            let fused = q
                .scaled_dot_product_attention(&k, &v, mask.as_ref(), None)
                .unwrap();
            check(&format!("{case} fused {device:?}"), &fused, want);
            let unfused = q
                .scaled_dot_product_attention_unfused(&k, &v, mask.as_ref(), None)
                .unwrap();
            check(&format!("{case} unfused {device:?}"), &unfused, want);
        }
    }
}

#[test]
fn ffn_activations_and_matmul_match_torch() {
    let fx = fixtures();
    for device in devices() {
        let on = |case: &str, name: &str| get(&fx, case, name).to(device).unwrap();
        let c = "ffn_geglu";
        let (b1, b2) = (on(c, "b1"), on(c, "b2"));
        let y = on(c, "x")
            .ffn_geglu(&on(c, "w1"), Some(&b1), &on(c, "w2"), Some(&b2), None)
            .unwrap();
        check(&format!("ffn {device:?}"), &y, get(&fx, c, "out"));
        let x = on("act", "x");
        check("gelu", &x.gelu().unwrap(), get(&fx, "act", "gelu"));
        check(
            "gelu_tanh",
            &x.gelu_tanh().unwrap(),
            get(&fx, "act", "gelu_tanh"),
        );
        check("silu", &x.silu().unwrap(), get(&fx, "act", "silu"));
        check("sigmoid", &x.sigmoid().unwrap(), get(&fx, "act", "sigmoid"));
        check(
            "softmax",
            &x.softmax(-1).unwrap(),
            get(&fx, "act", "softmax"),
        );
        let y = on("matmul", "a").matmul(&on("matmul", "b")).unwrap();
        check(&format!("matmul {device:?}"), &y, get(&fx, "matmul", "out"));
    }
}

#[test]
fn schedulers_match_diffusers() {
    use xpu::schedulers::{
        DdimScheduler, EulerDiscreteScheduler, Prediction, Scheduler, SchedulerConfig,
    };
    let fx = fixtures();
    for device in devices() {
        for (pred_name, prediction) in [
            ("epsilon", Prediction::Epsilon),
            ("v_prediction", Prediction::VPrediction),
        ] {
            for steps in [20usize, 7] {
                let config = SchedulerConfig {
                    prediction,
                    ..SchedulerConfig::stable_diffusion()
                };
                let picks = [0, 3, steps - 1];
                let ddim = DdimScheduler::new(config.clone(), steps).unwrap();
                let case = format!("ddim_{pred_name}_{steps}");
                let ts: Vec<f64> = values(get(&fx, &case, "timesteps"));
                assert_eq!(ddim.timesteps(), ts.as_slice(), "{case} timesteps");
                let sample = get(&fx, &case, "sample").to(device).unwrap();
                let out = get(&fx, &case, "model_out").to(device).unwrap();
                for i in picks {
                    let y = ddim.step(&out, i, &sample).unwrap();
                    check(
                        &format!("{case} step {i}"),
                        &y,
                        get(&fx, &case, &format!("step{i}")),
                    );
                }
                let euler = EulerDiscreteScheduler::new(config, steps).unwrap();
                let case = format!("euler_{pred_name}_{steps}");
                assert_eq!(
                    euler.timesteps(),
                    values(get(&fx, &case, "timesteps")).as_slice()
                );
                let sigmas = values(get(&fx, &case, "sigmas"));
                assert_close(&case, euler.sigmas(), &sigmas, 0.0, 4e-6);
                let init = values(get(&fx, &case, "init_noise_sigma"))[0];
                assert!(
                    (euler.init_noise_sigma() - init).abs() <= 1e-5 * init,
                    "{case} init sigma"
                );
                for i in picks {
                    let scaled = euler.scale_model_input(&sample, i).unwrap();
                    check(
                        &format!("{case} scaled {i}"),
                        &scaled,
                        get(&fx, &case, &format!("scaled{i}")),
                    );
                    let y = euler.step(&out, i, &sample).unwrap();
                    check(
                        &format!("{case} step {i}"),
                        &y,
                        get(&fx, &case, &format!("step{i}")),
                    );
                }
                assert!(euler.step(&out, steps, &sample).is_err());
                assert_eq!(sample.device(), device);
            }
        }
    }
}

#[test]
fn logsumexp_comparisons_where_and_index_select_match_torch() {
    let fx = fixtures();
    let c = "select_ops";
    for device in devices() {
        let on = |name: &str| get(&fx, c, name).to(device).unwrap();
        let (x, y) = (on("x"), on("y"));
        let exact = |what: &str, got: &Tensor, name: &str| {
            let want = get(&fx, c, name);
            assert_eq!(got.dtype(), want.dtype(), "{what} {device:?}: dtype");
            check(&format!("{what} {device:?}"), got, want);
            // Comparisons, selection and indexing copy values: they must agree exactly.
            let (g, w) = (values(got), values(want));
            let same = g
                .iter()
                .zip(&w)
                .all(|(a, b)| a == b || (a.is_nan() && b.is_nan()));
            assert!(same, "{what} {device:?}: not bit-exact");
        };
        let check_on = |what: &str, got: &Tensor, name: &str| {
            check(&format!("{what} {device:?}"), got, get(&fx, c, name));
        };
        check_on(
            "logsumexp -1",
            &x.logsumexp(-1, false).unwrap(),
            "logsumexp_last",
        );
        check_on(
            "logsumexp 0",
            &x.logsumexp(0, false).unwrap(),
            "logsumexp_first",
        );
        check_on(
            "log_softmax",
            &x.log_softmax(-1).unwrap(),
            "log_softmax_last",
        );
        exact("gt", &x.gt(&y).unwrap(), "gt");
        exact("le", &x.le(&y).unwrap(), "le");
        exact("eq", &x.eq(&y).unwrap(), "eq");
        let mask = x.gt(&y).unwrap();
        exact("where", &mask.where_cond(&x, &y).unwrap(), "where");
        let lt = x.lt(&y).unwrap();
        exact(
            "masked_fill",
            &x.masked_fill(&lt, -2.5).unwrap(),
            "masked_fill",
        );
        exact(
            "index_select",
            &x.index_select(1, &on("idx")).unwrap(),
            "index_select",
        );
    }
}

#[test]
fn pooling_and_triangles_match_torch() {
    let fx = fixtures();
    for device in devices() {
        let on = |name: &str| get(&fx, "pool", name).to(device).unwrap();
        let want = |name: &str| get(&fx, "pool", name);
        let x = on("x");
        for (what, input) in [("nchw", x.clone()), ("channels-last", channels_last(&x))] {
            let max = input.max_pool2d((3, 3), (2, 2), (1, 1)).unwrap();
            check(&format!("max_pool2d {what} {device:?}"), &max, want("max"));
            let avg = input.avg_pool2d((3, 3), (2, 2), (1, 1), true).unwrap();
            check(&format!("avg_pool2d {what} {device:?}"), &avg, want("avg"));
            let avg = input.avg_pool2d((3, 3), (2, 2), (1, 1), false).unwrap();
            check(
                &format!("avg_pool2d exclude {what} {device:?}"),
                &avg,
                want("avg_exclude"),
            );
        }
        let m = on("m");
        check(
            &format!("tril {device:?}"),
            &m.tril(-1).unwrap(),
            want("tril"),
        );
        check(
            &format!("triu {device:?}"),
            &m.triu(2).unwrap(),
            want("triu"),
        );
    }
}

#[test]
fn conv_transpose2d_matches_torch() {
    let fx = fixtures();
    // (case, stride, padding, output_padding, groups, dilation) as in make_op_fixtures.py.
    let cases = [
        ("convt_up2", (2, 2), (1, 1), (1, 1), 1, (1, 1)),
        ("convt_g2_d2", (3, 3), (2, 0), (1, 2), 2, (1, 2)),
    ];
    for device in devices() {
        for (c, stride, padding, output_padding, groups, dilation) in cases {
            let on = |name: &str| get(&fx, c, name).to(device).unwrap();
            let p = ConvTranspose2dParams {
                stride,
                padding,
                output_padding,
                dilation,
                groups,
            };
            let (w, b) = (on("weight"), on("bias"));
            for (what, x) in [
                ("nchw", on("x")),
                ("channels-last", channels_last(&on("x"))),
            ] {
                let y = x.conv_transpose2d(&w, Some(&b), p).unwrap();
                check(&format!("{c} {what} {device:?}"), &y, get(&fx, c, "out"));
            }
        }
    }
}

#[test]
fn rounding_sign_and_erf_match_torch() {
    let fx = fixtures();
    for device in devices() {
        let x = get(&fx, "rounding", "x").to(device).unwrap();
        let ops = [
            ("floor", UnaryOp::Floor),
            ("ceil", UnaryOp::Ceil),
            ("round", UnaryOp::Round),
            ("trunc", UnaryOp::Trunc),
            ("sign", UnaryOp::Sign),
        ];
        for (name, op) in ops {
            // Exact, signed zeros included (torch.round(-0.4) is -0.0).
            let got = x.unary(op).unwrap().to_vec::<f32>().unwrap();
            let want = get(&fx, "rounding", name).to_vec::<f32>().unwrap();
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "{name} on {device}");
        }
        check(
            &format!("erf {device:?}"),
            &x.erf().unwrap(),
            get(&fx, "rounding", "erf"),
        );
    }
}

#[test]
fn gather_and_flip_match_torch() {
    let fx = fixtures();
    for device in devices() {
        let x = get(&fx, "gather", "x").to(device).unwrap();
        let index = get(&fx, "gather", "index").to(device).unwrap();
        // Copies of PyTorch's values: exact.
        let got = x.gather(1, &index).unwrap();
        assert_eq!(
            values(&got),
            values(get(&fx, "gather", "out")),
            "gather {device}"
        );
        assert_eq!(
            values(&x.flip(&[0, 2]).unwrap()),
            values(get(&fx, "gather", "flip")),
            "flip {device}"
        );
    }
}

#[test]
fn var_and_std_match_torch() {
    let fx = fixtures();
    for device in devices() {
        let x = get(&fx, "moments", "x").to(device).unwrap();
        check(
            "var",
            &x.var(1, 1.0, false).unwrap(),
            get(&fx, "moments", "var1"),
        );
        check(
            "std keepdim",
            &x.std(0, 0.0, true).unwrap(),
            get(&fx, "moments", "std0_keep"),
        );
    }
}

#[test]
fn cumsum_matches_torch() {
    let fx = fixtures();
    for device in devices() {
        let x = get(&fx, "cumsum", "x").to(device).unwrap();
        check(
            "cumsum 0",
            &x.cumsum(0).unwrap(),
            get(&fx, "cumsum", "dim0"),
        );
        check(
            "cumsum 1",
            &x.cumsum(1).unwrap(),
            get(&fx, "cumsum", "dim1"),
        );
    }
}

#[test]
fn bilinear_interpolation_matches_torch() {
    let fx = fixtures();
    for device in devices() {
        for (h, w) in [(14, 20), (5, 13), (1, 4), (7, 10)] {
            let case = format!("bilinear_{h}x{w}");
            let x = get(&fx, &case, "x").to(device).unwrap();
            for (name, align) in [("out", false), ("out_ac", true)] {
                let want = get(&fx, &case, name);
                let got = x.interpolate_bilinear([h, w], align).unwrap();
                check(&format!("{case} {name} {device:?}"), &got, want);
                // Channels-last in, channels-last out, same values.
                let cl = channels_last(&x)
                    .interpolate_bilinear([h, w], align)
                    .unwrap();
                assert_eq!(cl.memory_format(), xpu::MemoryFormat::ChannelsLast);
                check(&format!("{case} {name} {device:?} cl"), &cl, want);
            }
        }
    }
}
