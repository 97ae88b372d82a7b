//! Tests of the SPIR-V passthrough (`super`): every cooperative-matrix module form the runtime
//! can ask for is written, switched to the GLSL450 memory model, and covered by its layout.
use super::*;
use naga::proc::BoundsCheckPolicy::Restrict;

#[test]
fn coop_module_switches_to_glsl450() {
    let constants = |dt_out: f64, wg: f64, variant: f64| {
        [
            ("DT_IN", 1.0),
            ("DT_OUT", dt_out),
            ("WG", wg),
            ("VARIANT", variant),
        ]
    };
    // Head-dim tiles of the tensor-core attention's VARIANT: q/k in bits 0..4, v in 4..8.
    let head_dims = |d: u32, dv: u32| f64::from(d | dv << 4);
    for (id, entry, c) in [
        // Products (f16 out), the convolution gather (VARIANT bit 6), and the f32 partials of
        // split K with and without the gather.
        (
            ShaderId::MatmulCoop16,
            "mm_coop16",
            constants(1.0, 256.0, 0.0),
        ),
        (
            ShaderId::MatmulCoop16,
            "mm_coop16",
            constants(1.0, 256.0, 64.0),
        ),
        (
            ShaderId::MatmulCoop16,
            "mm_coop16",
            constants(0.0, 256.0, 0.0),
        ),
        (
            ShaderId::MatmulCoop16,
            "mm_coop16",
            constants(0.0, 256.0, 64.0),
        ),
        // Head dims 40, 80 and 64/24, with subgroups of 32 and of 8 lanes.
        (
            ShaderId::AttentionCoop16,
            "attention_coop16",
            constants(0.0, 128.0, head_dims(3, 3)),
        ),
        (
            ShaderId::AttentionCoop16,
            "attention_coop16",
            constants(0.0, 128.0, head_dims(5, 5)),
        ),
        (
            ShaderId::AttentionCoop16Sg8,
            "attention_coop16",
            constants(0.0, 32.0, head_dims(4, 2)),
        ),
        (
            ShaderId::AttentionCoop16Sg8,
            "attention_coop16",
            constants(0.0, 32.0, head_dims(5, 5)),
        ),
    ] {
        let variant = c[3].1;
        let words = spirv(id.file(), &id.source(), entry, &c).unwrap();
        // Every form stages f16 words: their unpacks are folded into bitcasts (none left).
        let (module, info) = resolve(id.file(), &id.source(), entry, &c).unwrap();
        let plain = write_spirv(id.file(), &module, &info, entry, [Restrict, Restrict]).unwrap();
        let unpacks = crate::gpu::spirv_fold::fold_unpack_half(&plain).unwrap().1;
        assert!(unpacks > 0, "{entry} {variant}: no f16 word unpack to fold");
        let left = crate::gpu::spirv_fold::fold_unpack_half(&words).unwrap().1;
        assert_eq!(left, 0, "{entry} {variant}");
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
    for id in ShaderId::COOPERATIVE {
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
/// (a 4-byte scalar shifted every tile address by -4 bytes on an H100's driver).
#[test]
fn coop_workgroup_variables_keep_16_byte_alignment() {
    for id in ShaderId::COOPERATIVE {
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

/// `xpu::shader_spirv` gives the passthrough words for the cooperative modules, naga's SPIR-V
/// for the others, and an error for a name no module has.
#[test]
fn module_spirv_names_the_compiled_words() {
    let c = [
        ("DT_IN", 1.0),
        ("DT_OUT", 1.0),
        ("WG", 256.0),
        ("VARIANT", 64.0),
    ];
    let id = ShaderId::MatmulCoop16;
    let words = module_spirv(id.file(), "mm_coop16", &c).unwrap();
    assert_eq!(
        words,
        spirv(id.file(), &id.source(), "mm_coop16", &c).unwrap()
    );
    let f32s = [
        ("DT_IN", 0.0),
        ("DT_OUT", 0.0),
        ("WG", 256.0),
        ("VARIANT", 0.0),
    ];
    let tiled = module_spirv("matmul_vec4.wgsl", "mm_large4", &f32s).unwrap();
    assert_eq!(tiled[0], 0x0723_0203);
    assert!(module_spirv("no_such.wgsl", "main", &f32s).is_err());
}
