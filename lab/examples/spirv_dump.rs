//! Writes the SPIR-V of xpu's kernels (the words the backend compiles, `xpu::shader_spirv`:
//! for the cooperative-matrix kernels the very words handed to the driver) into a folder, each
//! `NAME.spv` beside a `NAME.txt` description that `pipeline_stats` reads: the entry point, the
//! workgroup size, the workgroup memory in bytes and every binding (`binding GROUP BINDING
//! uniform|storage|readonly`). No GPU is needed.
//!
//! ```text
//! cargo run --release -p xpu-lab --example spirv_dump -- DIR [--filter SUBSTRING]...
//!     [--pipeline MODULE:ENTRY:DT_IN:DT_OUT:WG:VARIANT]...
//! ```
//!
//! Without `--pipeline` it writes the pipelines an SD UNet step runs most (the tensor-core
//! product, its convolution gather and split-K partials, the tensor-core attention at head dims
//! 40, 64 and 80, the vec4 FMA tiles, the FMA attention); `--pipeline` names others (dtype
//! codes: 0 f32, 1 f16, 2 bf16; `VARIANT` as the launchers set it), e.g.
//! `attention_coop16_sg8.wgsl:attention_coop16:1:0:32:85`. `--filter` keeps the pipelines whose
//! file name contains one of the substrings.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// One pipeline: module, entry point and its override constants.
#[derive(Clone, Debug, PartialEq)]
struct Pipeline {
    module: String,
    entry: String,
    dt_in: u32,
    dt_out: u32,
    workgroup: u32,
    variant: u32,
}

impl Pipeline {
    fn new(module: &str, entry: &str, [dt_in, dt_out, workgroup, variant]: [u32; 4]) -> Self {
        Pipeline {
            module: module.into(),
            entry: entry.into(),
            dt_in,
            dt_out,
            workgroup,
            variant,
        }
    }

    /// `MODULE:ENTRY:DT_IN:DT_OUT:WG:VARIANT`.
    fn parse(text: &str) -> Res<Self> {
        let f: Vec<&str> = text.split(':').collect();
        let bad = || format!("expected MODULE:ENTRY:DT_IN:DT_OUT:WG:VARIANT, got {text:?}");
        if f.len() != 6 {
            return Err(bad().into());
        }
        let n = |i: usize| -> Res<u32> { f[i].parse().map_err(|_| bad().into()) };
        Ok(Pipeline::new(f[0], f[1], [n(2)?, n(3)?, n(4)?, n(5)?]))
    }

    fn constants(&self) -> [(&'static str, f64); 4] {
        [
            ("DT_IN", f64::from(self.dt_in)),
            ("DT_OUT", f64::from(self.dt_out)),
            ("WG", f64::from(self.workgroup)),
            ("VARIANT", f64::from(self.variant)),
        ]
    }

    fn file_name(&self) -> String {
        let stem = self.module.trim_end_matches(".wgsl");
        format!(
            "{stem}-{}-{}-{}-wg{}-v{}",
            self.entry, self.dt_in, self.dt_out, self.workgroup, self.variant
        )
    }
}

const F32: u32 = 0;
const F16: u32 = 1;

/// The default set: the kernels an SD UNet step spends most of its GPU time in.
fn defaults() -> Vec<Pipeline> {
    let mut all = vec![
        // mm_coop16: f16 products, their split-K partials (f32 out), the convolution gather.
        Pipeline::new("matmul_coop16.wgsl", "mm_coop16", [F16, F16, 256, 0]),
        Pipeline::new("matmul_coop16.wgsl", "mm_coop16", [F16, F32, 256, 0]),
        Pipeline::new("matmul_coop16.wgsl", "mm_coop16", [F16, F16, 256, 64]),
        Pipeline::new("matmul_coop16.wgsl", "mm_coop16", [F16, F32, 256, 64]),
    ];
    // The tensor-core attention (32-lane subgroups) at head dims 40, 64 and 80.
    for tiles in [3, 4, 5] {
        let variant = tiles | tiles << 4;
        all.push(Pipeline::new(
            "attention_coop16.wgsl",
            "attention_coop16",
            [F16, F32, 128, variant],
        ));
    }
    for dt in [F32, F16] {
        for entry in ["mm_large4", "mm_medium4"] {
            all.push(Pipeline::new("matmul_vec4.wgsl", entry, [dt, dt, 256, 0]));
        }
        for entry in ["conv_large4", "conv_medium4"] {
            all.push(Pipeline::new("conv_vec4.wgsl", entry, [dt, dt, 256, 0]));
        }
        all.push(Pipeline::new(
            "attention_vec4.wgsl",
            "attention4",
            [dt, F32, 256, 5],
        ));
    }
    all
}

struct Args {
    dir: PathBuf,
    filter: Vec<String>,
    pipelines: Vec<Pipeline>,
}

fn parse_args(args: impl Iterator<Item = String>) -> Res<Args> {
    let usage = "usage: spirv_dump DIR [--filter SUBSTRING]... \
                 [--pipeline MODULE:ENTRY:DT_IN:DT_OUT:WG:VARIANT]...";
    let mut dir = None;
    let mut filter = Vec::new();
    let mut pipelines = Vec::new();
    let mut it = args;
    while let Some(a) = it.next() {
        match a.as_str() {
            "--filter" => filter.push(it.next().ok_or("--filter needs a substring")?),
            "--pipeline" => {
                let p = it.next().ok_or("--pipeline needs a description")?;
                pipelines.push(Pipeline::parse(&p)?);
            }
            "-h" | "--help" => return Err(usage.into()),
            _ if dir.is_none() => dir = Some(PathBuf::from(a)),
            _ => return Err(format!("unexpected argument {a}; {usage}").into()),
        }
    }
    if pipelines.is_empty() {
        pipelines = defaults();
    }
    Ok(Args {
        dir: dir.ok_or(usage)?,
        filter,
        pipelines,
    })
}

/// The description file of `entry` in the WGSL `source` with `constants` applied.
fn describe(source: &str, entry: &str, constants: &[(&str, f64)]) -> Res<String> {
    let module = naga::front::wgsl::parse_str(source).map_err(|e| e.emit_to_string(source))?;
    let info = naga::valid::Validator::new(
        naga::valid::ValidationFlags::all(),
        naga::valid::Capabilities::all(),
    )
    .validate(&module)
    .map_err(|e| e.emit_to_string(source))?;
    let mut values = naga::back::PipelineConstants::default();
    for (name, v) in constants {
        values.insert((*name).to_string(), *v);
    }
    let (module, _) = naga::back::pipeline_constants::process_overrides(
        &module,
        &info,
        Some((naga::ShaderStage::Compute, entry)),
        &values,
    )
    .map_err(|e| format!("overrides: {e}"))?;
    let mut out = String::new();
    writeln!(out, "entry {entry}")?;
    let ep = module
        .entry_points
        .iter()
        .find(|e| e.name == entry)
        .ok_or_else(|| format!("no entry point {entry}"))?;
    let [x, y, z] = ep.workgroup_size;
    writeln!(out, "workgroup_size {x} {y} {z}")?;
    let mut layouter = naga::proc::Layouter::default();
    layouter.update(module.to_ctx())?;
    let mut workgroup_bytes = 0u64;
    for (_, var) in module.global_variables.iter() {
        match var.space {
            naga::AddressSpace::WorkGroup => workgroup_bytes += u64::from(layouter[var.ty].size),
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
                    writeln!(out, "binding {} {} {kind}", b.group, b.binding)?;
                }
            }
            _ => {}
        }
    }
    writeln!(out, "workgroup_bytes {workgroup_bytes}")?;
    Ok(out)
}

/// Writes `p`'s `.txt` then `.spv` into `dir`.
fn dump(dir: &Path, p: &Pipeline, sources: &[(&'static str, String)]) -> Res<()> {
    let source = sources
        .iter()
        .find(|(name, _)| *name == p.module)
        .map(|(_, s)| s)
        .ok_or_else(|| format!("no shader module {:?}", p.module))?;
    let constants = p.constants();
    let text = describe(source, &p.entry, &constants)?;
    let words = xpu::shader_spirv(&p.module, &p.entry, &constants)?;
    let base = dir.join(p.file_name());
    std::fs::write(base.with_extension("txt"), text)?;
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    std::fs::write(base.with_extension("spv"), bytes)?;
    Ok(())
}

fn run() -> Res<()> {
    let args = parse_args(std::env::args().skip(1))?;
    std::fs::create_dir_all(&args.dir)?;
    let sources = xpu::shader_sources();
    let mut written = 0;
    for p in &args.pipelines {
        let name = p.file_name();
        if !args.filter.is_empty() && !args.filter.iter().any(|f| name.contains(f.as_str())) {
            continue;
        }
        dump(&args.dir, p, &sources).map_err(|e| format!("{name}: {e}"))?;
        println!("{}", args.dir.join(&name).with_extension("spv").display());
        written += 1;
    }
    if written == 0 {
        return Err("no pipeline matched the filters".into());
    }
    Ok(())
}

fn main() {
    if let Err(e) = run() {
        eprintln!("spirv_dump: {e}");
        std::process::exit(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_words_and_descriptions() {
        let dir = std::env::temp_dir().join(format!("xpu-spirv-dump-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let sources = xpu::shader_sources();
        let p = &defaults()[0];
        dump(&dir, p, &sources).unwrap();
        let base = dir.join(p.file_name());
        let spv = std::fs::read(base.with_extension("spv")).unwrap();
        assert_eq!(spv.len() % 4, 0);
        assert_eq!(&spv[..4], &0x0723_0203u32.to_le_bytes());
        let txt = std::fs::read_to_string(base.with_extension("txt")).unwrap();
        assert!(txt.contains("entry mm_coop16"), "{txt}");
        assert!(txt.contains("workgroup_size 256 1 1"), "{txt}");
        // coop_a 5120 f16 + coop_b 4352 f16 + coop_c 4096 f32 (the shader's header).
        assert!(txt.contains("workgroup_bytes 35328"), "{txt}");
        assert!(txt.contains("binding 0 0 uniform"), "{txt}");
        assert!(txt.contains("binding 0 1 storage"), "{txt}");
        assert!(txt.contains("binding 0 2 readonly"), "{txt}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn every_default_pipeline_is_written() {
        let sources = xpu::shader_sources();
        for p in defaults() {
            let source = &sources.iter().find(|(n, _)| *n == p.module).unwrap().1;
            describe(source, &p.entry, &p.constants()).unwrap();
            xpu::shader_spirv(&p.module, &p.entry, &p.constants()).unwrap();
        }
    }

    #[test]
    fn arguments_and_pipelines_parse() {
        let args = |v: &[&str]| parse_args(v.iter().map(|s| s.to_string()));
        let a = args(&["d", "--pipeline", "conv.wgsl:conv_narrow:0:0:256:0"]).unwrap();
        assert_eq!(
            a.pipelines,
            vec![Pipeline::new("conv.wgsl", "conv_narrow", [0, 0, 256, 0])]
        );
        assert_eq!(args(&["d"]).unwrap().pipelines, defaults());
        assert!(args(&[]).is_err());
        assert!(args(&["d", "--pipeline", "conv.wgsl:conv_narrow:0"]).is_err());
        assert!(xpu::shader_spirv("no_such.wgsl", "main", &[]).is_err());
    }
}
