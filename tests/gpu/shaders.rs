//! Every WGSL module is parsed and validated with naga, exactly as the runtime composes it,
//! with no GPU needed; and every override constant each kernel is built with exists.

fn validate(file: &str, source: &str) -> naga::Module {
    let module = naga::front::wgsl::parse_str(source)
        .unwrap_or_else(|e| panic!("{file}: {}", e.emit_to_string(source)));
    let mut validator = naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::all(),
    );
    validator
        .validate(&module)
        .unwrap_or_else(|e| panic!("{file}: {}", e.emit_to_string(source)));
    module
}

#[test]
fn every_shader_parses_and_validates() {
    let sources = xpu::shader_sources();
    assert!(sources.len() >= 3);
    for (file, source) in &sources {
        let module = validate(file, source);
        assert!(!module.entry_points.is_empty(), "{file} has no entry point");
        let overrides: Vec<_> = module
            .overrides
            .iter()
            .filter_map(|(_, o)| o.name.clone())
            .collect();
        for name in ["DT_IN", "DT_OUT", "WG", "VARIANT"] {
            assert!(
                overrides.iter().any(|o| o == name),
                "{file} lacks override {name}"
            );
        }
    }
}

#[test]
fn shader_files_on_disk_are_the_ones_compiled() {
    // Guards against a shader added to a kernel family folder but never wired into the runtime:
    // each `.wgsl` file under src/gpu/kernels names a shader module, or (a part composed into
    // modules, like common.wgsl) its text appears, `enable` lines aside, in a composed module.
    let sources = xpu::shader_sources();
    let mut files = Vec::new();
    wgsl_files(&repo_root().join("src/gpu/kernels"), &mut files);
    assert!(files.len() >= sources.len(), "{files:?}");
    for path in files {
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        if sources.iter().any(|(f, _)| *f == name) {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let body: String = text
            .lines()
            .filter(|l| !l.trim_start().starts_with("enable "))
            .map(|l| format!("{l}\n"))
            .collect();
        assert!(
            sources.iter().any(|(_, src)| src.contains(&body)),
            "{} is not compiled by the runtime",
            path.display()
        );
    }
}

/// Every `.wgsl` file under `dir`, recursively.
fn wgsl_files(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            wgsl_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "wgsl") {
            out.push(path);
        }
    }
}

/// Workgroup memory of each entry point of shader `name`, counted over the variables it uses.
fn workgroup_bytes(name: &str) -> Vec<(String, u32)> {
    let sources = xpu::shader_sources();
    let (_, source) = sources
        .iter()
        .find(|(f, _)| *f == name)
        .expect("the shader is compiled by the runtime");
    let module = naga::front::wgsl::parse_str(source).unwrap();
    let info = naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::all(),
    )
    .validate(&module)
    .unwrap();
    module
        .entry_points
        .iter()
        .enumerate()
        .map(|(i, ep)| {
            let uses = info.get_entry_point(i);
            let bytes: u32 = module
                .global_variables
                .iter()
                .filter(|(h, g)| g.space == naga::AddressSpace::WorkGroup && !uses[*h].is_empty())
                .map(|(_, g)| module.types[g.ty].inner.size(module.to_ctx()))
                .sum();
            (ep.name.clone(), bytes)
        })
        .collect()
}

#[test]
fn attention_workgroup_memory_fits_the_webgpu_minimum() {
    // The fused FMA attention kernel must run on any adapter: WebGPU guarantees 16 KiB of
    // workgroup memory, and its tiles are sized for head dims up to 160 within that. Counted
    // per entry point (the variables it uses).
    for name in ["attention_vec4.wgsl"] {
        for (entry, bytes) in workgroup_bytes(name) {
            assert!(
                bytes > 0 && bytes <= 16 * 1024,
                "{name} {entry}: {bytes} bytes of workgroup memory"
            );
        }
    }
}

#[test]
fn tensor_core_workgroup_memory_fits_48_kib() {
    // The tensor-core kernels run where NVIDIA's Vulkan driver reports 48 KiB of workgroup
    // memory (and WebGPU guarantees only 16 KiB: these run only on adapters that report
    // cooperative matrices, after requesting the adapter's own limit).
    for name in [
        "matmul_coop16.wgsl",
        "attention_coop16.wgsl",
        "attention_coop16_sg8.wgsl",
    ] {
        for (entry, bytes) in workgroup_bytes(name) {
            if entry.contains("coop16") {
                assert!(
                    bytes > 0 && bytes <= 48 * 1024,
                    "{name} {entry}: {bytes} bytes of workgroup memory"
                );
            }
        }
    }
    let mm = workgroup_bytes("matmul_coop16.wgsl");
    assert!(
        mm.iter().any(|(e, b)| e == "mm_coop16" && *b == 35328),
        "{mm:?}"
    );
    let attention = workgroup_bytes("attention_coop16.wgsl");
    assert!(
        attention
            .iter()
            .any(|(e, b)| e == "attention_coop16" && *b == 35840),
        "{attention:?}"
    );
}

/// The repository root: where the tests were built, or the current directory when that path
/// does not exist (test binaries carried to another machine run from the repository root).
fn repo_root() -> std::path::PathBuf {
    let built = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    if built.join("tests").is_dir() {
        built
    } else {
        std::path::PathBuf::from(".")
    }
}
