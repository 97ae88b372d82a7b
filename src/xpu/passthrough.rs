//! Cooperative-matrix pipelines through SPIR-V passthrough (Vulkan).
//!
//! Why: naga 30 writes every module that uses cooperative matrices under the Vulkan memory
//! model, but emits its workgroup loads and stores without `NonPrivatePointer` and its barriers
//! without `MakeAvailable`/`MakeVisible`. Under that model the barriers then do not make one
//! invocation's workgroup-memory writes visible to another, and NVIDIA's compiler takes it at its
//! word: on an H100 both cooperative kernels read back zeros. The cooperative-matrix SPIR-V
//! extension does not need the Vulkan memory model, so for these shaders we let naga write the
//! SPIR-V itself (overrides resolved per pipeline, as wgpu would), switch the module to the
//! GLSL450 memory model (where the barriers' `AcquireRelease | WorkgroupMemory` semantics do
//! order plain workgroup accesses), and hand the words to the driver with
//! `create_shader_module_passthrough`, with an explicit bind-group layout (passthrough modules are
//! not reflected).
//!
//! Invariants: only used when the device has `PASSTHROUGH_SHADERS` on the Vulkan backend; the
//! layout is the matmul family's (binding 0 uniform params, 1 read-write output, 2..=6 read-only
//! operands), which every dispatch of these pipelines binds in full, and which covers every
//! binding the module declares (a binding missing from the layout crashed NVIDIA's driver at
//! pipeline creation in the twenty-seventh session; a test checks each module); any naga or
//! driver failure is an `Error::Shader`.

use crate::xpu::pipelines::{PipelineKey, ShaderId};
use crate::{Error, Result};

const OP_EXTENSION: u32 = 10;
const OP_MEMORY_MODEL: u32 = 14;
const OP_CAPABILITY: u32 = 17;
const CAPABILITY_VULKAN_MEMORY_MODEL: u32 = 5345;
const MEMORY_MODEL_GLSL450: u32 = 1;

/// Whether `key` is compiled through this module on `device`.
pub(crate) fn applies(device: &wgpu::Device, key: &PipelineKey) -> bool {
    (key.shader == ShaderId::MatmulCoop
        || ShaderId::MATMUL_COOP16.contains(&key.shader)
        || ShaderId::ATTENTION_COOP16.contains(&key.shader))
        && device
            .features()
            .contains(wgpu::Features::PASSTHROUGH_SHADERS)
}

/// `source` parsed and validated, with `constants` applied for entry point `entry` (what wgpu
/// does per pipeline before it writes SPIR-V).
pub(crate) fn resolve(
    file: &'static str,
    source: &str,
    entry: &str,
    constants: &[(&str, f64)],
) -> Result<(naga::Module, naga::valid::ModuleInfo)> {
    let fail = |msg: String| Error::Shader { shader: file, msg };
    let module =
        naga::front::wgsl::parse_str(source).map_err(|e| fail(e.emit_to_string(source)))?;
    let info = naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::all(),
    )
    .validate(&module)
    .map_err(|e| fail(e.emit_to_string(source)))?;
    let mut values = naga::back::PipelineConstants::default();
    for (name, v) in constants {
        values.insert((*name).to_string(), *v);
    }
    let (module, info) = naga::back::pipeline_constants::process_overrides(
        &module,
        &info,
        Some((naga::ShaderStage::Compute, entry)),
        &values,
    )
    .map_err(|e| fail(format!("overrides: {e}")))?;
    Ok((module.into_owned(), info.into_owned()))
}

/// SPIR-V 1.6 words of the resolved `module`'s compute entry point `entry`, with `buffer` as the
/// bounds-check policy of storage and uniform buffers (indices into arrays are always
/// restricted).
pub(crate) fn write_spirv(
    file: &'static str,
    module: &naga::Module,
    info: &naga::valid::ModuleInfo,
    entry: &str,
    buffer: naga::proc::BoundsCheckPolicy,
) -> Result<Vec<u32>> {
    use naga::back::spv;
    use naga::proc::{BoundsCheckPolicies, BoundsCheckPolicy};
    let options = spv::Options {
        lang_version: (1, 6),
        bounds_check_policies: BoundsCheckPolicies {
            index: BoundsCheckPolicy::Restrict,
            buffer,
            image_load: BoundsCheckPolicy::Restrict,
            binding_array: BoundsCheckPolicy::Unchecked,
        },
        zero_initialize_workgroup_memory: spv::ZeroInitializeWorkgroupMemoryMode::None,
        force_loop_bounding: false,
        ..spv::Options::default()
    };
    let pipeline = spv::PipelineOptions {
        shader_stage: naga::ShaderStage::Compute,
        entry_point: entry.to_string(),
    };
    spv::write_vec(module, info, &options, Some(&pipeline)).map_err(|e| Error::Shader {
        shader: file,
        msg: format!("SPIR-V: {e}"),
    })
}

/// SPIR-V words of `source`'s entry point `entry` with `constants` applied, under the GLSL450
/// memory model.
pub(crate) fn spirv(
    file: &'static str,
    source: &str,
    entry: &str,
    constants: &[(&str, f64)],
) -> Result<Vec<u32>> {
    let (module, info) = resolve(file, source, entry, constants)?;
    words_of(file, &module, &info, entry)
}

/// The passthrough words of an already resolved module (see [`spirv`]).
pub(crate) fn words_of(
    file: &'static str,
    module: &naga::Module,
    info: &naga::valid::ModuleInfo,
    entry: &str,
) -> Result<Vec<u32>> {
    let words = write_spirv(
        file,
        module,
        info,
        entry,
        naga::proc::BoundsCheckPolicy::Restrict,
    )?;
    glsl450_memory_model(&words).map_err(|msg| Error::Shader { shader: file, msg })
}

/// The module with `OpMemoryModel ... Vulkan` turned into GLSL450 and the Vulkan memory model's
/// capability and extension dropped; everything else unchanged.
fn glsl450_memory_model(words: &[u32]) -> std::result::Result<Vec<u32>, String> {
    const HEADER: usize = 5;
    if words.len() < HEADER {
        return Err("SPIR-V module shorter than its header".into());
    }
    let mut out = words[..HEADER].to_vec();
    let mut i = HEADER;
    while i < words.len() {
        let count = (words[i] >> 16) as usize;
        let opcode = words[i] & 0xffff;
        if count == 0 || i + count > words.len() {
            return Err(format!("malformed SPIR-V instruction at word {i}"));
        }
        let inst = &words[i..i + count];
        let drop = match opcode {
            OP_CAPABILITY => inst.get(1) == Some(&CAPABILITY_VULKAN_MEMORY_MODEL),
            OP_EXTENSION => literal_string(&inst[1..]) == "SPV_KHR_vulkan_memory_model",
            _ => false,
        };
        if !drop {
            let start = out.len();
            out.extend_from_slice(inst);
            if opcode == OP_MEMORY_MODEL && count == 3 {
                out[start + 2] = MEMORY_MODEL_GLSL450;
            }
        }
        i += count;
    }
    Ok(out)
}

/// A SPIR-V literal string (UTF-8, nul-terminated, packed little-endian in words).
fn literal_string(words: &[u32]) -> String {
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

/// The last read-only binding of every passthrough layout (2..=6: the matmul family's operands).
const LAST_BINDING: u32 = 6;

/// The matmul family's bind-group layout: 0 uniform params, 1 output, 2..=`last` read-only
/// operands.
fn matmul_layout(device: &wgpu::Device, last: u32) -> wgpu::PipelineLayout {
    let storage = |binding, read_only| wgpu::BindGroupLayoutEntry {
        binding,
        visibility: wgpu::ShaderStages::COMPUTE,
        ty: wgpu::BindingType::Buffer {
            ty: wgpu::BufferBindingType::Storage { read_only },
            has_dynamic_offset: false,
            min_binding_size: None,
        },
        count: None,
    };
    let mut entries = vec![wgpu::BindGroupLayoutEntry {
        binding: 0,
        visibility: wgpu::ShaderStages::COMPUTE,
        ty: wgpu::BindingType::Buffer {
            ty: wgpu::BufferBindingType::Uniform,
            has_dynamic_offset: false,
            min_binding_size: None,
        },
        count: None,
    }];
    entries.push(storage(1, false));
    entries.extend((2..=last).map(|b| storage(b, true)));
    let group = device.create_bind_group_layout(&wgpu::BindGroupLayoutDescriptor {
        label: Some("xpu matmul passthrough"),
        entries: &entries,
    });
    device.create_pipeline_layout(&wgpu::PipelineLayoutDescriptor {
        label: Some("xpu matmul passthrough"),
        bind_group_layouts: &[Some(&group)],
        immediate_size: 0,
    })
}

/// Compiles the pipeline of `key` from `source` through SPIR-V passthrough.
pub(crate) fn pipeline(
    device: &wgpu::Device,
    key: &PipelineKey,
    source: &str,
    constants: &[(&str, f64)],
) -> Result<wgpu::ComputePipeline> {
    let file = key.shader.file();
    let words = spirv(file, source, key.entry, constants)?;
    let internal = device.push_error_scope(wgpu::ErrorFilter::Internal);
    let scope = device.push_error_scope(wgpu::ErrorFilter::Validation);
    let entry_points = [wgpu::PassthroughShaderEntryPoint {
        name: key.entry.into(),
        workgroup_size: (key.workgroup, 1, 1),
    }];
    // SAFETY: the words are naga's own SPIR-V for a module naga validated, changed only in its
    // memory model (see the module docs); bindings match `matmul_layout`.
    let module = unsafe {
        device.create_shader_module_passthrough(wgpu::ShaderModuleDescriptorPassthrough {
            label: Some(file),
            entry_points: entry_points.as_slice().into(),
            spirv: Some(words.into()),
            ..Default::default()
        })
    };
    let layout = matmul_layout(device, LAST_BINDING);
    let pipeline = device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some(key.entry),
        layout: Some(&layout),
        module: &module,
        entry_point: Some(key.entry),
        compilation_options: wgpu::PipelineCompilationOptions {
            constants: &[],
            zero_initialize_workgroup_memory: false,
        },
        cache: None,
    });
    let errors = [
        pollster::block_on(scope.pop()),
        pollster::block_on(internal.pop()),
    ];
    match errors.into_iter().flatten().next() {
        Some(e) => Err(Error::Shader {
            shader: file,
            msg: format!("entry point {} (SPIR-V passthrough): {e}", key.entry),
        }),
        None => Ok(pipeline),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
            // mm_coop16t's tile shapes (src/xpu/kernels/coop16_tiles.rs): 4x2:2x4:32, and
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
        ] {
            let words = spirv(id.file(), &id.source(), entry, &c).unwrap();
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
}
