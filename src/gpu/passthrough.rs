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
//! not reflected). The words also go through one peephole, `super::spirv_fold` (an f16 word's
//! unpack and narrowing as one bitcast).
//!
//! Invariants: only used when the device has `PASSTHROUGH_SHADERS` on the Vulkan backend; the
//! modules keep naga's bounds checks (`Restrict` for array and buffer indices); the layout is the
//! matmul family's (binding 0 uniform params, 1 read-write output, 2..=6 read-only operands),
//! which every dispatch of these pipelines binds in full, and which covers every binding the
//! module declares (a binding missing from the layout crashed NVIDIA's driver at pipeline
//! creation; a test checks each module); any naga or driver failure is an `Error::Shader`.

use crate::gpu::pipelines::{PipelineKey, ShaderId};
use crate::{Error, Result};

const OP_EXTENSION: u32 = 10;
const OP_MEMORY_MODEL: u32 = 14;
const OP_CAPABILITY: u32 = 17;
const CAPABILITY_VULKAN_MEMORY_MODEL: u32 = 5345;
const MEMORY_MODEL_GLSL450: u32 = 1;

/// Whether `key` is compiled through this module on `device`.
pub(crate) fn applies(device: &wgpu::Device, key: &PipelineKey) -> bool {
    ShaderId::COOPERATIVE.contains(&key.shader)
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

/// SPIR-V 1.6 words of the resolved `module`'s compute entry point `entry`, with `index` as the
/// bounds-check policy of indices into arrays and `buffer` as that of storage and uniform
/// buffers.
pub(crate) fn write_spirv(
    file: &'static str,
    module: &naga::Module,
    info: &naga::valid::ModuleInfo,
    entry: &str,
    [index, buffer]: [naga::proc::BoundsCheckPolicy; 2],
) -> Result<Vec<u32>> {
    use naga::back::spv;
    use naga::proc::{BoundsCheckPolicies, BoundsCheckPolicy};
    let options = spv::Options {
        lang_version: (1, 6),
        bounds_check_policies: BoundsCheckPolicies {
            index,
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
/// memory model, its f16 word unpacks folded into bitcasts (`super::spirv_fold`).
pub(crate) fn spirv(
    file: &'static str,
    source: &str,
    entry: &str,
    constants: &[(&str, f64)],
) -> Result<Vec<u32>> {
    use naga::proc::BoundsCheckPolicy::Restrict;
    let (module, info) = resolve(file, source, entry, constants)?;
    let words = write_spirv(file, &module, &info, entry, [Restrict, Restrict])?;
    let fail = |msg| Error::Shader { shader: file, msg };
    let words = glsl450_memory_model(&words).map_err(fail)?;
    Ok(super::spirv_fold::fold_unpack_half(&words).map_err(fail)?.0)
}

/// The SPIR-V of entry point `entry` of the shader module named `name` (a
/// [`ShaderId::file`]) with `constants` applied: for the cooperative-matrix modules the very
/// words [`pipeline`] hands the driver, for the others naga's SPIR-V with the bounds-check
/// policies wgpu uses on a device with robust buffer access (what wgpu's own writer produces,
/// up to its options). For diagnostics (`xpu::shader_spirv`).
pub(crate) fn module_spirv(name: &str, entry: &str, constants: &[(&str, f64)]) -> Result<Vec<u32>> {
    use naga::proc::BoundsCheckPolicy::{Restrict, Unchecked};
    let Some(id) = ShaderId::ALL.into_iter().find(|id| id.file() == name) else {
        return Err(Error::invalid(
            "shader_spirv",
            format!("no shader module is named {name:?} (see xpu::shader_sources())"),
        ));
    };
    let source = id.source();
    if ShaderId::COOPERATIVE.contains(&id) {
        return spirv(id.file(), &source, entry, constants);
    }
    let (module, info) = resolve(id.file(), &source, entry, constants)?;
    write_spirv(id.file(), &module, &info, entry, [Restrict, Unchecked])
}

/// The module with `OpMemoryModel ... Vulkan` turned into GLSL450 and the Vulkan memory model's
/// capability and extension dropped; everything else unchanged.
fn glsl450_memory_model(words: &[u32]) -> std::result::Result<Vec<u32>, String> {
    let mut out = words[..SPIRV_HEADER.min(words.len())].to_vec();
    for (_, inst) in instructions(words)? {
        let opcode = inst[0] & 0xffff;
        let drop = match opcode {
            OP_CAPABILITY => inst.get(1) == Some(&CAPABILITY_VULKAN_MEMORY_MODEL),
            OP_EXTENSION => literal_string(&inst[1..]) == "SPV_KHR_vulkan_memory_model",
            _ => false,
        };
        if !drop {
            let start = out.len();
            out.extend_from_slice(inst);
            if opcode == OP_MEMORY_MODEL && inst.len() == 3 {
                out[start + 2] = MEMORY_MODEL_GLSL450;
            }
        }
    }
    Ok(out)
}

/// Words of a SPIR-V module's header.
pub(crate) const SPIRV_HEADER: usize = 5;

/// The instructions of a SPIR-V module after its header, each with the index of its first
/// word (word count in the high 16 bits of that word, opcode in the low); an error names a
/// module shorter than its header or an instruction whose word count is 0 or runs past the end.
pub(crate) fn instructions(words: &[u32]) -> std::result::Result<Vec<(usize, &[u32])>, String> {
    if words.len() < SPIRV_HEADER {
        return Err("SPIR-V module shorter than its header".into());
    }
    let mut all = Vec::new();
    let mut i = SPIRV_HEADER;
    while i < words.len() {
        let count = (words[i] >> 16) as usize;
        if count == 0 || i + count > words.len() {
            return Err(format!("malformed SPIR-V instruction at word {i}"));
        }
        all.push((i, &words[i..i + count]));
        i += count;
    }
    Ok(all)
}

/// A SPIR-V literal string (UTF-8, nul-terminated, packed little-endian in words).
pub(crate) fn literal_string(words: &[u32]) -> String {
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
#[path = "passthrough_tests.rs"]
mod tests;
