//! SPIR-V dumps of the pipelines a process creates, for the driver's own statistics.
//!
//! Why: the tensor-core kernels' timings on NVIDIA (BENCHMARKS.md, twenty-seventh and
//! twenty-eighth sessions) leave open how many workgroups share a streaming multiprocessor,
//! which the register count decides and only the driver knows. With `XPU_DUMP_SPIRV=DIR` every
//! pipeline this process asks for also writes, under DIR, `<Shader>-<entry>-<in>-<out>-wg<WG>-
//! v<VARIANT>.spv` (the SPIR-V the driver compiles: for the passthrough kernels the very words
//! handed to it, for the others naga's output with wgpu's options on a robust-buffer-access-2
//! device) and a `.txt` beside it: the workgroup size, the workgroup memory in bytes and every
//! binding (`binding GROUP BINDING uniform|storage|readonly`). `examples/pipeline_stats` then
//! compiles each file with `VK_KHR_pipeline_executable_properties` and prints the statistics
//! (NVIDIA: register count) and the occupancy they allow.
//!
//! Invariants: nothing is written unless the variable is set; a file is written whole or the
//! pipeline request fails with `Error::Io` naming it (a dump asked for is never silently
//! partial); dumping changes no pipeline.

use std::fmt::Write as _;
use std::path::PathBuf;

use super::passthrough;
use super::pipelines::PipelineKey;
use crate::{Error, Result};

/// The dump folder, when `XPU_DUMP_SPIRV` names one.
pub(crate) fn folder() -> Option<PathBuf> {
    std::env::var_os("XPU_DUMP_SPIRV")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
}

/// The dump's base name for `key`.
pub(crate) fn base_name(key: &PipelineKey) -> String {
    format!(
        "{:?}-{}-{:?}-{:?}-wg{}-v{}",
        key.shader, key.entry, key.dt_in, key.dt_out, key.workgroup, key.variant
    )
}

/// Writes `key`'s SPIR-V and description into `dir`.
pub(crate) fn dump(
    dir: &std::path::Path,
    key: &PipelineKey,
    source: &str,
    constants: &[(&str, f64)],
    through_passthrough: bool,
) -> Result<()> {
    let file = key.shader.file();
    let (module, info) = passthrough::resolve(file, source, key.entry, constants)?;
    let words = if through_passthrough {
        passthrough::words_of(file, &module, &info, key.entry, passthrough::unchecked(key))?
    } else {
        passthrough::write_spirv(
            file,
            &module,
            &info,
            key.entry,
            [
                naga::proc::BoundsCheckPolicy::Restrict,
                naga::proc::BoundsCheckPolicy::Unchecked,
            ],
        )?
    };
    let text = describe(&module, key.entry);
    std::fs::create_dir_all(dir).map_err(|source| Error::Io {
        context: format!("XPU_DUMP_SPIRV: creating {}", dir.display()),
        source,
    })?;
    let base = dir.join(base_name(key));
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    // The description first: a reader that finds the module finds its description.
    write_whole(&base.with_extension("txt"), text.as_bytes())?;
    write_whole(&base.with_extension("spv"), &bytes)
}

/// Writes `path` through a temporary file and a rename, so that processes dumping the same
/// pipeline at once (test binaries run side by side) never leave a half-written file.
fn write_whole(path: &std::path::Path, bytes: &[u8]) -> Result<()> {
    let io = |source| Error::Io {
        context: format!("XPU_DUMP_SPIRV: writing {}", path.display()),
        source,
    };
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(format!(".tmp{}", std::process::id()));
    std::fs::write(&tmp, bytes).map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)
}

/// The description file: entry point, workgroup size, workgroup memory and bindings.
fn describe(module: &naga::Module, entry: &str) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "entry {entry}");
    if let Some(ep) = module.entry_points.iter().find(|e| e.name == entry) {
        let [x, y, z] = ep.workgroup_size;
        let _ = writeln!(out, "workgroup_size {x} {y} {z}");
    }
    let mut layouter = naga::proc::Layouter::default();
    let sized = layouter.update(module.to_ctx()).is_ok();
    let mut workgroup_bytes = 0u64;
    for (_, var) in module.global_variables.iter() {
        match var.space {
            naga::AddressSpace::WorkGroup if sized => {
                workgroup_bytes += u64::from(layouter[var.ty].size);
            }
            naga::AddressSpace::Uniform | naga::AddressSpace::Storage { .. } => {
                if let Some(b) = &var.binding {
                    let kind = match var.space {
                        naga::AddressSpace::Uniform => "uniform",
                        naga::AddressSpace::Storage { access }
                            if access.contains(naga::StorageAccess::STORE) =>
                        {
                            "storage"
                        }
                        _ => "readonly",
                    };
                    let _ = writeln!(out, "binding {} {} {kind}", b.group, b.binding);
                }
            }
            _ => {}
        }
    }
    if sized {
        let _ = writeln!(out, "workgroup_bytes {workgroup_bytes}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::pipelines::ShaderId;
    use crate::DType;

    #[test]
    fn dumps_words_and_description() {
        let dir = std::env::temp_dir().join(format!("xpu-spirv-dump-{}", std::process::id()));
        let key = PipelineKey {
            shader: ShaderId::MatmulCoop16,
            entry: "mm_coop16",
            dt_in: DType::F16,
            dt_out: DType::F16,
            workgroup: 256,
            variant: 0,
        };
        let constants = [
            ("DT_IN", 1.0),
            ("DT_OUT", 1.0),
            ("WG", 256.0),
            ("VARIANT", 0.0),
        ];
        for through in [true, false] {
            dump(&dir, &key, &key.shader.source(), &constants, through).unwrap();
            let base = dir.join(base_name(&key));
            let spv = std::fs::read(base.with_extension("spv")).unwrap();
            assert_eq!(spv.len() % 4, 0);
            assert_eq!(&spv[..4], &0x0723_0203u32.to_le_bytes());
            if through {
                // The very words the passthrough pipeline hands to the driver.
                let words = passthrough::spirv(
                    key.shader.file(),
                    &key.shader.source(),
                    key.entry,
                    &constants,
                    false,
                )
                .unwrap();
                let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
                assert_eq!(spv, bytes);
            }
            let txt = std::fs::read_to_string(base.with_extension("txt")).unwrap();
            assert!(txt.contains("workgroup_size 256 1 1"), "{txt}");
            // coop_a 5120 f16 + coop_b 4352 f16 + coop_c 4096 f32 (the shader's header).
            assert!(txt.contains("workgroup_bytes 35328"), "{txt}");
            assert!(txt.contains("binding 0 0 uniform"), "{txt}");
            assert!(txt.contains("binding 0 1 storage"), "{txt}");
            assert!(txt.contains("binding 0 2 readonly"), "{txt}");
        }
        // Written through temporary files that are renamed: only the two files remain.
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        let base = base_name(&key);
        assert_eq!(names, vec![format!("{base}.spv"), format!("{base}.txt")]);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
