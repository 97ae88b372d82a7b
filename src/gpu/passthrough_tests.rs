//! Tests of the SPIR-V passthrough (`super`): every cooperative-matrix module form the runtime
//! can ask for is written, switched to the GLSL450 memory model, and covered by its layout.
use super::*;
use naga::proc::BoundsCheckPolicy::Restrict;

#[test]
fn coop_module_switches_to_glsl450() {
    let constants = |wg: f64, variant: f64| {
        [
            ("DT_IN", 1.0),
            ("DT_OUT", 1.0),
            ("WG", wg),
            ("VARIANT", variant),
        ]
    };
    let split_constants = |variant: f64| {
        [
            ("DT_IN", 1.0),
            ("DT_OUT", 0.0),
            ("WG", 256.0),
            ("VARIANT", variant),
        ]
    };
    let head_dims_40 = f64::from(3 | (3 << 4));
    for (id, entry, c) in [
        (ShaderId::MatmulCoop16, "mm_coop16", constants(256.0, 0.0)),
        // VARIANT bit 6: the convolution gather compiled in.
        (ShaderId::MatmulCoop16, "mm_coop16", constants(256.0, 64.0)),
        // Timing-only variants (bits 7-9, with and without the gather).
        (ShaderId::MatmulCoop16, "mm_coop16", constants(256.0, 896.0)),
        (ShaderId::MatmulCoop16, "mm_coop16", constants(256.0, 960.0)),
        (ShaderId::MatmulCoop16, "mm_coop16", constants(256.0, 34.0)),
        // Word pairs fetched two K steps ahead (bit 10), with and without the gather.
        (
            ShaderId::MatmulCoop16,
            "mm_coop16",
            constants(256.0, 1024.0),
        ),
        (
            ShaderId::MatmulCoop16,
            "mm_coop16",
            constants(256.0, 1088.0),
        ),
        // No words held in registers (bit 11), with and without the gather.
        (
            ShaderId::MatmulCoop16,
            "mm_coop16",
            constants(256.0, 2048.0),
        ),
        (
            ShaderId::MatmulCoop16,
            "mm_coop16",
            constants(256.0, 2112.0),
        ),
        // Packed convolution rows (bit 12), alone and with bit 11.
        (
            ShaderId::MatmulCoop16,
            "mm_coop16",
            constants(256.0, 4160.0),
        ),
        (
            ShaderId::MatmulCoop16,
            "mm_coop16",
            constants(256.0, 6208.0),
        ),
        // The lean staging (bit 13; bit 14: B by k), products and split-K partials.
        (
            ShaderId::MatmulCoop16,
            "mm_coop16",
            constants(256.0, 8192.0),
        ),
        (
            ShaderId::MatmulCoop16,
            "mm_coop16",
            constants(256.0, 24576.0),
        ),
        (
            ShaderId::MatmulCoop16,
            "mm_coop16",
            split_constants(24576.0),
        ),
        // The lean B fetch of the convolution gather, with packed rows too.
        (
            ShaderId::MatmulCoop16,
            "mm_coop16",
            constants(256.0, 24640.0),
        ),
        (
            ShaderId::MatmulCoop16,
            "mm_coop16",
            constants(256.0, 28736.0),
        ),
        // The f32 output of split-K partial products, with and without the gather.
        (ShaderId::MatmulCoop16, "mm_coop16", split_constants(0.0)),
        (ShaderId::MatmulCoop16, "mm_coop16", split_constants(64.0)),
        // The double-buffered layout: products, the gather, split-K partials.
        (
            ShaderId::MatmulCoop16Double,
            "mm_coop16",
            constants(256.0, 0.0),
        ),
        (
            ShaderId::MatmulCoop16Double,
            "mm_coop16",
            constants(256.0, 64.0),
        ),
        (
            ShaderId::MatmulCoop16Double,
            "mm_coop16",
            split_constants(64.0),
        ),
        (
            ShaderId::AttentionCoop16,
            "attention_coop16",
            constants(128.0, head_dims_40),
        ),
        // mm_coop16t's tile shapes (src/gpu/kernels/coop16_tiles.rs): 4x2:2x4:32, and
        // 4x4:2x2:32:2 with B by k (16 slots: the epilogue in two rounds), and the split-K
        // partials of 2x1:2x2:64:2.
        (
            ShaderId::MatmulCoop16Tiles,
            "mm_coop16t",
            constants(256.0, 82468.0),
        ),
        (
            ShaderId::MatmulCoop16Tiles,
            "mm_coop16t",
            constants(512.0, 3220036.0),
        ),
        (
            ShaderId::MatmulCoop16Tiles,
            "mm_coop16t",
            [
                ("DT_IN", 1.0),
                ("DT_OUT", 0.0),
                ("WG", 64.0),
                ("VARIANT", 1188370.0),
            ],
        ),
        // The prefetch form (bit 11), head dims 40 and 80.
        (
            ShaderId::AttentionCoop16,
            "attention_coop16",
            constants(128.0, head_dims_40 + 2048.0),
        ),
        (
            ShaderId::AttentionCoop16,
            "attention_coop16",
            constants(128.0, f64::from(5 | (5 << 4) | 2048)),
        ),
        // The 128-row layout at head dims 40, plain and prefetching.
        (
            ShaderId::AttentionCoop16Rows128,
            "attention_coop16",
            constants(256.0, head_dims_40),
        ),
        (
            ShaderId::AttentionCoop16Rows128,
            "attention_coop16",
            constants(256.0, head_dims_40 + 2048.0),
        ),
        // Subgroups of 8 lanes (lavapipe), both layouts, plain and prefetching.
        (
            ShaderId::AttentionCoop16Sg8,
            "attention_coop16",
            constants(32.0, f64::from(5 | (5 << 4) | 2048)),
        ),
        (
            ShaderId::AttentionCoop16Rows128Sg8,
            "attention_coop16",
            constants(64.0, head_dims_40),
        ),
        // The one-pass form (bit 12), alone and with the prefetch form, both layouts.
        (
            ShaderId::AttentionCoop16,
            "attention_coop16",
            constants(128.0, f64::from(5 | (5 << 4) | 4096)),
        ),
        (
            ShaderId::AttentionCoop16Rows128,
            "attention_coop16",
            constants(256.0, head_dims_40 + 2048.0 + 4096.0),
        ),
        (
            ShaderId::AttentionCoop16Sg8,
            "attention_coop16",
            constants(32.0, head_dims_40 + 2048.0 + 4096.0),
        ),
        // Timing-only bits 8-10 of the attention kernel.
        (
            ShaderId::AttentionCoop16,
            "attention_coop16",
            constants(128.0, head_dims_40 + 1792.0),
        ),
        // The lean form (bit 13; written without bounds checks): head dims 40 and 80, every
        // layout and subgroup size, with the timing-only bits, two-pass and one-pass.
        (
            ShaderId::AttentionCoop16,
            "attention_coop16",
            constants(128.0, head_dims_40 + 8192.0),
        ),
        (
            ShaderId::AttentionCoop16,
            "attention_coop16",
            constants(128.0, f64::from(5 | (5 << 4) | 8192 | 1792)),
        ),
        (
            ShaderId::AttentionCoop16Rows128,
            "attention_coop16",
            constants(256.0, head_dims_40 + 8192.0),
        ),
        (
            ShaderId::AttentionCoop16Sg8,
            "attention_coop16",
            constants(32.0, f64::from(5 | (5 << 4) | 8192)),
        ),
        (
            ShaderId::AttentionCoop16Rows128Sg8,
            "attention_coop16",
            constants(64.0, head_dims_40 + 8192.0 + 4096.0),
        ),
        // The lean form one-pass (bit 12 too).
        (
            ShaderId::AttentionCoop16,
            "attention_coop16",
            constants(128.0, head_dims_40 + 8192.0 + 4096.0),
        ),
    ] {
        // mm_coop16 also without bounds checks (`XPU_COOP16_UNCHECKED=1`), the attention's
        // lean form always.
        let variant = c
            .iter()
            .find(|(name, _)| *name == "VARIANT")
            .map_or(0.0, |v| v.1);
        let unchecked = id == ShaderId::MatmulCoop16
            || (ShaderId::ATTENTION_COOP16.contains(&id) && (variant as u32) & ATTENTION_LEAN != 0);
        let words = spirv(id.file(), &id.source(), entry, &c, unchecked).unwrap();
        // Every form stages f16 words: their unpacks are folded into bitcasts (none left).
        let (module, info) = resolve(id.file(), &id.source(), entry, &c).unwrap();
        let plain = write_spirv(id.file(), &module, &info, entry, [Restrict, Restrict]).unwrap();
        let unpacks = crate::gpu::spirv_fold::fold_unpack_half(&plain).unwrap().1;
        assert!(unpacks > 0, "{entry} {variant}: no f16 word unpack to fold");
        let left = crate::gpu::spirv_fold::fold_unpack_half(&words).unwrap().1;
        let on = crate::gpu::spirv_fold::enabled();
        assert_eq!(left, if on { 0 } else { unpacks }, "{entry} {variant}");
        let mut i = 5;
        let mut model = None;
        while i < words.len() {
            let count = (words[i] >> 16) as usize;
            let opcode = words[i] & 0xffff;
            if opcode == OP_CAPABILITY {
                assert_ne!(words[i + 1], CAPABILITY_VULKAN_MEMORY_MODEL);
            }
            if opcode == OP_MEMORY_MODEL {
                model = Some(words[i + 2]);
            }
            i += count;
        }
        assert_eq!(model, Some(MEMORY_MODEL_GLSL450), "{entry}");
    }
}

/// Every binding a passthrough module declares is in its explicit layout (passthrough
/// modules are not reflected, and the driver is not obliged to report the difference).
#[test]
fn layouts_cover_every_declared_binding() {
    for id in [ShaderId::MatmulCoop]
        .into_iter()
        .chain(ShaderId::MATMUL_COOP16)
        .chain(ShaderId::ATTENTION_COOP16)
    {
        let module = naga::front::wgsl::parse_str(&id.source()).unwrap();
        for (_, var) in module.global_variables.iter() {
            if let Some(b) = &var.binding {
                assert_eq!(b.group, 0, "{id:?}");
                assert!(b.binding <= LAST_BINDING, "{id:?} binding {}", b.binding);
            }
        }
    }
}

#[test]
fn malformed_modules_are_errors() {
    assert!(glsl450_memory_model(&[0; 3]).is_err());
    assert!(glsl450_memory_model(&[0x0723_0203, 0, 0, 0, 0, 0]).is_err());
}

/// Every workgroup variable of the cooperative modules is a whole number of 16-byte lines,
/// so the tiles cooperative loads and stores address stay aligned in any variable order
/// (a 4-byte scalar shifted every tile address by -4 bytes on the H100's driver).
#[test]
fn coop_workgroup_variables_keep_16_byte_alignment() {
    for id in [ShaderId::MatmulCoop]
        .into_iter()
        .chain(ShaderId::MATMUL_COOP16)
        .chain(ShaderId::ATTENTION_COOP16)
    {
        let source = id.source();
        let module = naga::front::wgsl::parse_str(&source).unwrap();
        let mut layouter = naga::proc::Layouter::default();
        layouter.update(module.to_ctx()).unwrap();
        let mut seen = 0;
        for (_, var) in module.global_variables.iter() {
            if var.space == naga::AddressSpace::WorkGroup {
                let size = layouter[var.ty].size;
                assert_eq!(size % 16, 0, "{:?}: {:?} is {size} bytes", id, var.name);
                seen += 1;
            }
        }
        assert!(seen > 0, "{id:?} declares no workgroup memory");
    }
}

/// A tool, not a check: writes the SPIR-V of the tensor-core attention's 32-lane form (the
/// one NVIDIA runs, which lavapipe's 8-lane subgroups never create) for NAK's instruction
/// counts (`benches/lavapipe_coop/kloop.sh`):
///   XPU_NAK_DUMP=DIR XPU_NAK_VARIANTS=51,8243 cargo test --release --lib \
///     dump_attention_for_nak -- --ignored
/// (`XPU_NAK_ROWS128=1` for the 128-row layout.) Fails unless every module was written.
#[test]
#[ignore = "a tool: writes SPIR-V dumps for benches/lavapipe_coop/kloop.sh"]
fn dump_attention_for_nak() {
    let dir = std::path::PathBuf::from(std::env::var_os("XPU_NAK_DUMP").expect("XPU_NAK_DUMP"));
    let variants = std::env::var("XPU_NAK_VARIANTS").expect("XPU_NAK_VARIANTS");
    let (shader, wg) = if std::env::var_os("XPU_NAK_ROWS128").is_some_and(|v| v == "1") {
        (ShaderId::AttentionCoop16Rows128, 256)
    } else {
        (ShaderId::AttentionCoop16, 128)
    };
    for v in variants.split(',') {
        let v: u32 = v.trim().parse().expect("XPU_NAK_VARIANTS: numbers");
        let key = PipelineKey {
            shader,
            entry: "attention_coop16",
            dt_in: crate::DType::F16,
            dt_out: crate::DType::F32,
            workgroup: wg,
            variant: v,
        };
        let c = [
            ("DT_IN", 1.0),
            ("DT_OUT", 0.0),
            ("WG", f64::from(wg)),
            ("VARIANT", f64::from(v)),
        ];
        crate::gpu::spirv_dump::dump(&dir, &key, &shader.source(), &c, true).unwrap();
        let base = dir.join(crate::gpu::spirv_dump::base_name(&key));
        assert!(base.with_extension("spv").is_file(), "{}", base.display());
    }
}
