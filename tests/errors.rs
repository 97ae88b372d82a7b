//! Bad input gives a clear `xpu::Error` of the right kind (never a panic), and the message says
//! what was expected and what came.

mod common;

use xpu::{DType, Device, Error, Tensor};

fn cpu(shape: &[usize]) -> Tensor {
    Tensor::zeros(shape, DType::F32, Device::Cpu).unwrap()
}

#[test]
fn shape_errors() {
    let e = Tensor::from_vec(vec![1.0f32; 5], &[2, 3], Device::Cpu).unwrap_err();
    assert!(
        matches!(e, Error::ShapeMismatch { op: "from_vec", .. }),
        "{e}"
    );
    assert!(
        e.to_string().contains("6 elements") && e.to_string().contains("5 elements"),
        "{e}"
    );
    let e = cpu(&[2, 3]).add(&cpu(&[4])).unwrap_err();
    assert!(matches!(e, Error::ShapeMismatch { op: "add", .. }), "{e}");
    let e = cpu(&[2, 3]).matmul(&cpu(&[4, 5])).unwrap_err();
    assert!(
        matches!(e, Error::ShapeMismatch { op: "matmul", .. }) && e.to_string().contains("[4, 5]"),
        "{e}"
    );
    // A vector operand is promoted as torch.matmul does; its length must still match.
    assert!(matches!(
        cpu(&[3]).matmul(&cpu(&[4, 1])),
        Err(Error::ShapeMismatch { .. })
    ));
    assert!(matches!(
        cpu(&[]).matmul(&cpu(&[3])),
        Err(Error::ShapeMismatch { .. })
    ));
    assert!(matches!(
        cpu(&[2, 3]).reshape(&[4]),
        Err(Error::ShapeMismatch { op: "reshape", .. })
    ));
    assert!(matches!(
        cpu(&[2, 3]).broadcast_to(&[3, 3]),
        Err(Error::ShapeMismatch { .. })
    ));
    assert!(matches!(
        Tensor::cat(&[&cpu(&[2, 3]), &cpu(&[2, 4])], 0),
        Err(Error::ShapeMismatch { op: "cat", .. })
    ));
    assert!(matches!(
        Tensor::cat(&[], 0),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        cpu(&[2, 3]).narrow(1, 2, 2),
        Err(Error::InvalidArgument { op: "narrow", .. })
    ));
    assert!(matches!(
        cpu(&[2, 3]).permute(&[0, 0]),
        Err(Error::InvalidArgument { op: "permute", .. })
    ));
    assert!(matches!(
        cpu(&[2, 3]).to_scalar::<f32>(),
        Err(Error::ShapeMismatch { .. })
    ));
    assert!(matches!(
        cpu(&[2, 3]).chunk(0, 1),
        Err(Error::InvalidArgument { .. })
    ));
    assert!(matches!(
        Tensor::arange(0.0, 1.0, 0.0, DType::F32, Device::Cpu),
        Err(Error::InvalidArgument { .. })
    ));
}

#[test]
fn dim_errors() {
    let e = cpu(&[2, 3]).sum(2, false).unwrap_err();
    assert!(
        matches!(
            e,
            Error::DimOutOfRange {
                dim: 2,
                rank: 2,
                ..
            }
        ),
        "{e}"
    );
    assert!(matches!(
        cpu(&[2, 3]).softmax(-3),
        Err(Error::DimOutOfRange { dim: -3, .. })
    ));
    assert!(matches!(
        cpu(&[2, 3]).transpose(0, 5),
        Err(Error::DimOutOfRange { .. })
    ));
    // A 0-d tensor takes dim 0 or -1 (as in PyTorch), nothing else.
    assert!(matches!(
        cpu(&[]).sum(1, false),
        Err(Error::DimOutOfRange { .. })
    ));
}

#[test]
fn dtype_errors() {
    let a = cpu(&[3]);
    let b = Tensor::zeros(&[3], DType::F16, Device::Cpu).unwrap();
    let e = a.add(&b).unwrap_err();
    assert!(
        matches!(
            e,
            Error::DTypeMismatch {
                expected: DType::F32,
                got: DType::F16,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("f32") && e.to_string().contains("f16"));
    let e = a.to_vec::<i32>().unwrap_err();
    assert!(
        matches!(e, Error::DTypeMismatch { op: "to_vec", .. }),
        "{e}"
    );
    let i = Tensor::zeros(&[2, 2], DType::I32, Device::Cpu).unwrap();
    assert!(matches!(
        i.matmul(&i),
        Err(Error::UnsupportedDType {
            dtype: DType::I32,
            ..
        })
    ));
    if common::xpu() {
        let gi = i.to(Device::Xpu).unwrap();
        let e = gi.exp().unwrap_err();
        assert!(
            matches!(
                e,
                Error::UnsupportedDType {
                    op: "exp",
                    dtype: DType::I32,
                    device: Device::Xpu,
                    ..
                }
            ),
            "{e}"
        );
        assert!(matches!(
            gi.matmul(&gi),
            Err(Error::UnsupportedDType { .. })
        ));
        let u = Tensor::zeros(&[4], DType::U8, Device::Xpu).unwrap();
        assert!(matches!(u.sum_all(), Err(Error::UnsupportedDType { .. })));
    }
}

#[test]
fn device_errors() {
    if !common::xpu() {
        return;
    }
    let a = cpu(&[3]);
    let g = a.to(Device::Xpu).unwrap();
    for r in [
        a.add(&g),
        g.mul(&a),
        a.matmul(&g),
        Tensor::cat(&[&a, &g], 0),
    ] {
        let e = r.unwrap_err();
        assert!(matches!(e, Error::DeviceMismatch { .. }), "{e}");
        assert!(e.to_string().contains(".to(device)"), "{e}");
    }
}

/// Runs this same test binary in a child process with an adapter filter that matches nothing.
#[test]
fn no_adapter_error_says_how_to_install_a_driver() {
    if std::env::var("XPU_EXPECT_NO_ADAPTER").is_ok() {
        let e = Tensor::zeros(&[1], DType::F32, Device::Xpu).unwrap_err();
        assert!(matches!(e, Error::NoAdapter { .. }), "{e}");
        assert!(e.to_string().contains("mesa-vulkan-drivers"), "{e}");
        assert!(!xpu::xpu_available());
        return;
    }
    common::rerun_with_env(
        "no_adapter_error_says_how_to_install_a_driver",
        &[
            ("XPU_EXPECT_NO_ADAPTER", "1".as_ref()),
            ("XPU_ADAPTER", "no-such-adapter-anywhere".as_ref()),
        ],
    );
}

#[test]
fn shader_failures_are_errors_with_the_compiler_message() {
    if !common::xpu() {
        return;
    }
    let e = xpu::compile_wgsl(
        "@compute @workgroup_size(1) fn main() { let x: u32 = undefined_thing; }",
    )
    .unwrap_err();
    assert!(matches!(e, Error::Shader { .. }), "{e}");
    assert!(e.to_string().contains("undefined_thing"), "{e}");
    // The runtime keeps working afterwards.
    let t = Tensor::ones(&[3], DType::F32, Device::Xpu).unwrap();
    assert_eq!(t.sum_all().unwrap().to_scalar::<f32>().unwrap(), 3.0);
    assert!(xpu::compile_wgsl("@compute @workgroup_size(1) fn main() {}").is_ok());
}

/// A storage larger than one storage binding may be (the adapter's
/// `max_storage_buffer_binding_size`, 128 MiB on lavapipe) is an error in the kernels that read
/// it, never a silently clipped binding (matmul used to read zeros past the limit); one just
/// under the limit computes exactly. Runs where the limit is small enough to allocate.
#[test]
fn storage_past_the_binding_limit_is_an_error_not_zeros() {
    if !common::xpu() {
        return;
    }
    let limit = xpu::xpu_adapter().unwrap().max_storage_binding;
    if limit > 512 << 20 {
        eprintln!("binding limit {limit} bytes: too large to exercise here");
        return;
    }
    const K: usize = 64;
    let rows_under = (limit as usize / 4 - 1024) / K;
    let rows_over = (limit as usize / 4 + 1024) / K;
    let w = Tensor::full(0.5, &[K, 1], DType::F32, Device::Xpu).unwrap();
    for (rows, fits) in [(rows_under, true), (rows_over, false)] {
        let a = Tensor::ones(&[rows, K], DType::F32, Device::Cpu)
            .unwrap()
            .to(Device::Xpu)
            .unwrap();
        let bias = Tensor::full(1.0, &[1], DType::F32, Device::Xpu).unwrap();
        for (what, r) in [("matmul", a.matmul(&w)), ("add", a.add(&bias))] {
            match (fits, r) {
                (true, Ok(t)) => {
                    let want = if what == "matmul" {
                        K as f32 / 2.0
                    } else {
                        2.0
                    };
                    let v = t.to_vec::<f32>().unwrap();
                    let bad = v.iter().position(|&x| x != want);
                    assert!(
                        bad.is_none(),
                        "{what}: element {bad:?} of {} differs",
                        v.len()
                    );
                }
                (false, Err(e)) => {
                    assert!(matches!(e, Error::OutOfMemory { .. }), "{what}: {e}");
                    assert!(e.to_string().contains(&limit.to_string()), "{what}: {e}");
                }
                (fits, r) => panic!(
                    "{what} of {rows}x{K} (fits: {fits}): unexpected {:?}",
                    r.map(|t| t.shape().to_vec())
                ),
            }
        }
    }
}

/// The message of `r`'s error (empty when it succeeded).
fn message<T>(r: xpu::Result<T>) -> String {
    r.err().map(|e| e.to_string()).unwrap_or_default()
}

/// Asserts that `msg` holds every one of `parts` (the parameter, the value, the rule).
#[track_caller]
fn says(what: &str, msg: &str, parts: &[&str]) {
    for p in parts {
        assert!(msg.contains(p), "{what}: {p:?} missing from {msg:?}");
    }
}

/// Each parameter check names the parameter, the value given and the rule it breaks: one
/// failed check per message, never a sentence that lists every rule.
#[test]
fn parameter_checks_name_the_parameter_the_value_and_the_rule() {
    use xpu::{Conv2dParams, ConvTranspose2dParams};
    for dev in common::devices() {
        let t = |shape: &[usize]| Tensor::zeros(shape, DType::F32, dev).unwrap();
        let x = t(&[1, 4, 8, 8]);
        let w = t(&[6, 4, 3, 3]);
        let conv = |w: &Tensor, p: Conv2dParams| message(x.conv2d(w, None, p));
        let p = Conv2dParams::default();
        let cases = [
            (
                conv(
                    &w,
                    Conv2dParams {
                        stride: (0, 1),
                        ..p
                    },
                ),
                vec!["stride must be positive", "(0, 1)"],
            ),
            (
                conv(
                    &w,
                    Conv2dParams {
                        dilation: (1, 0),
                        ..p
                    },
                ),
                vec!["dilation must be positive", "(1, 0)"],
            ),
            (
                conv(&w, Conv2dParams { groups: 0, ..p }),
                vec!["groups must be positive", "got 0"],
            ),
            (
                conv(&t(&[6, 1, 3, 3]), Conv2dParams { groups: 3, ..p }),
                vec!["input channels C", "divisible by groups = 3", "got 4"],
            ),
            (
                conv(&t(&[5, 2, 3, 3]), Conv2dParams { groups: 2, ..p }),
                vec!["output channels O", "divisible by groups = 2", "got 5"],
            ),
            (
                conv(&t(&[6, 3, 3, 3]), p),
                vec![
                    "weight dim 1 must equal input channels / groups = 4 / 1 = 4",
                    "got 3",
                ],
            ),
            (
                conv(&t(&[6, 4, 0, 3]), p),
                vec!["kernel size", "at least 1", "(0, 3)"],
            ),
            (
                conv(&t(&[6, 4, 9, 9]), p),
                vec![
                    "dilated kernel 9x9",
                    "does not fit the padded input 8x8",
                    "at least",
                ],
            ),
        ];
        for (msg, parts) in &cases {
            says(&format!("conv2d on {dev:?}"), msg, parts);
            // One rule per message.
            assert!(!msg.contains("need non-zero"), "{msg}");
        }
        let wt = t(&[4, 2, 3, 3]);
        let ct = |p: ConvTranspose2dParams| message(x.conv_transpose2d(&wt, None, p));
        let q = ConvTranspose2dParams::default();
        says(
            "conv_transpose2d stride",
            &ct(ConvTranspose2dParams {
                stride: (1, 0),
                ..q
            }),
            &["stride must be positive", "(1, 0)"],
        );
        says(
            "conv_transpose2d groups",
            &ct(ConvTranspose2dParams { groups: 3, ..q }),
            &["input channels Cin", "divisible by groups = 3", "got 4"],
        );
        says(
            "conv_transpose2d output_padding",
            &ct(ConvTranspose2dParams {
                stride: (2, 2),
                output_padding: (2, 0),
                ..q
            }),
            &[
                "output_padding must be smaller than the stride (2, 2)",
                "(2, 0)",
            ],
        );
        says(
            "max_pool2d kernel",
            &message(x.max_pool2d((0, 2), (1, 1), (0, 0))),
            &["kernel_size must be positive", "(0, 2)"],
        );
        says(
            "max_pool2d stride",
            &message(x.max_pool2d((2, 2), (2, 0), (0, 0))),
            &["stride must be positive", "(2, 0)"],
        );
        says(
            "avg_pool2d padding",
            &message(x.avg_pool2d((3, 3), (1, 1), (2, 0), true)),
            &[
                "padding must be at most half the kernel_size (3, 3)",
                "(1, 1)",
                "got (2, 0)",
            ],
        );
        says(
            "upsample scale",
            &message(x.upsample_nearest2d(0)),
            &["scale must be positive", "got 0"],
        );
        says(
            "bilinear size",
            &message(x.interpolate_bilinear([0, 4], false)),
            &["size must be positive", "(0, 4)"],
        );
        let ts = t(&[2]);
        says(
            "timestep_embedding dim",
            &message(ts.timestep_embedding(1, true, 0.0, DType::F32)),
            &["dim must be at least 2", "got 1"],
        );
        // Attention: which dim of which operand disagrees.
        let q4 = t(&[1, 2, 5, 8]);
        says(
            "attention head dim",
            &message(q4.scaled_dot_product_attention(
                &t(&[1, 2, 7, 6]),
                &t(&[1, 2, 7, 8]),
                None,
                None,
            )),
            &["q's head dim D = 8", "(got 6)"],
        );
        says(
            "attention keys",
            &message(q4.scaled_dot_product_attention(
                &t(&[1, 2, 7, 8]),
                &t(&[1, 2, 6, 8]),
                None,
                None,
            )),
            &["k's key count Lk = 7", "(got 6)"],
        );
        says(
            "attention leading dims",
            &message(q4.scaled_dot_product_attention(
                &t(&[1, 3, 7, 8]),
                &t(&[1, 3, 7, 8]),
                None,
                None,
            )),
            &["broadcast against [1, 2]", "[1, 3]"],
        );
        says(
            "matmul inner dims",
            &message(t(&[2, 3]).matmul(&t(&[4, 5]))),
            &["K = 3", "inner dims must agree", "rhs [4, 5] with 4 rows"],
        );
    }
}
