//! The Vulkan side of `pipeline_stats`: one device with every feature the adapter supports
//! enabled (the dumped modules may use f16, 16-bit storage, subgroups and cooperative matrices)
//! plus `VK_KHR_pipeline_executable_properties`, and one pipeline per dumped module, created
//! with `CAPTURE_STATISTICS` and destroyed after its statistics are printed.

use std::error::Error;
use std::ffi::{CStr, CString};
use std::path::{Path, PathBuf};

use ash::vk;

type Res<T> = Result<T, Box<dyn Error>>;

const NVIDIA: u32 = 0x10de;

struct Args {
    dir: PathBuf,
    filter: Vec<String>,
    adapter: Option<usize>,
}

fn parse_args() -> Res<Args> {
    let mut dir = None;
    let mut filter = Vec::new();
    let mut adapter = None;
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--filter" => filter.push(it.next().ok_or("--filter needs a substring")?),
            "--adapter" => {
                let n = it.next().ok_or("--adapter needs an index")?;
                adapter = Some(
                    n.parse()
                        .map_err(|_| format!("--adapter: not an index: {n}"))?,
                );
            }
            "-h" | "--help" => {
                return Err(
                    "usage: pipeline_stats DIR [--filter SUBSTRING]... [--adapter N]".into(),
                )
            }
            _ if dir.is_none() => dir = Some(PathBuf::from(a)),
            _ => return Err(format!("unexpected argument {a}").into()),
        }
    }
    let dir = dir.ok_or("usage: pipeline_stats DIR (a folder written by spirv_dump)")?;
    Ok(Args {
        dir,
        filter,
        adapter,
    })
}

/// What `spirv_dump` wrote beside a module.
struct Description {
    entry: String,
    threads: u32,
    workgroup_bytes: u64,
    /// (group, binding, kind)
    bindings: Vec<(u32, u32, String)>,
}

fn read_description(path: &Path) -> Res<Description> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut d = Description {
        entry: String::new(),
        threads: 1,
        workgroup_bytes: 0,
        bindings: Vec::new(),
    };
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let num = |i: usize| -> Res<u64> {
            let s = f
                .get(i)
                .ok_or_else(|| format!("{}: short line `{line}`", path.display()))?;
            Ok(s.parse()?)
        };
        match f.first().copied() {
            Some("entry") => d.entry = f.get(1).unwrap_or(&"").to_string(),
            Some("workgroup_size") => d.threads = (num(1)? * num(2)? * num(3)?) as u32,
            Some("workgroup_bytes") => d.workgroup_bytes = num(1)?,
            Some("binding") => {
                let kind = f.get(3).ok_or("binding line without a kind")?.to_string();
                d.bindings.push((num(1)? as u32, num(2)? as u32, kind));
            }
            _ => {}
        }
    }
    if d.entry.is_empty() {
        return Err(format!("{}: no entry line", path.display()).into());
    }
    Ok(d)
}

/// Entry point: prints every dumped module's statistics.
pub fn run() -> Res<()> {
    let args = parse_args()?;
    let mut files: Vec<PathBuf> = std::fs::read_dir(&args.dir)
        .map_err(|e| format!("{}: {e}", args.dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "spv"))
        .filter(|p| {
            let name = p.file_name().map(|n| n.to_string_lossy().into_owned());
            let name = name.unwrap_or_default();
            args.filter.is_empty() || args.filter.iter().any(|f| name.contains(f.as_str()))
        })
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(format!("no .spv files in {}", args.dir.display()).into());
    }
    // SAFETY: loading the system's Vulkan loader; every handle below is created and destroyed
    // in order on this thread.
    let entry = unsafe { ash::Entry::load()? };
    let app = vk::ApplicationInfo::default().api_version(vk::API_VERSION_1_3);
    let instance = unsafe {
        entry.create_instance(
            &vk::InstanceCreateInfo::default().application_info(&app),
            None,
        )?
    };
    let result = with_instance(&instance, &args, &files);
    unsafe { instance.destroy_instance(None) };
    result
}

fn with_instance(instance: &ash::Instance, args: &Args, files: &[PathBuf]) -> Res<()> {
    let devices = unsafe { instance.enumerate_physical_devices()? };
    let props: Vec<vk::PhysicalDeviceProperties> = devices
        .iter()
        .map(|&d| unsafe { instance.get_physical_device_properties(d) })
        .collect();
    let index = match args.adapter {
        Some(i) if i < devices.len() => i,
        Some(i) => return Err(format!("--adapter {i}: only {} adapters", devices.len()).into()),
        None => props
            .iter()
            .position(|p| p.device_type != vk::PhysicalDeviceType::CPU)
            .unwrap_or(0),
    };
    let pd = *devices.get(index).ok_or("no Vulkan adapter")?;
    let p = props[index];
    let name = p.device_name_as_c_str().unwrap_or(c"?").to_string_lossy();
    println!(
        "adapter {index}: {name} (vendor {:#06x}, driver {:#x}, Vulkan {}.{})",
        p.vendor_id,
        p.driver_version,
        vk::api_version_major(p.api_version),
        vk::api_version_minor(p.api_version)
    );
    let exts = unsafe { instance.enumerate_device_extension_properties(pd)? };
    let has = |n: &CStr| exts.iter().any(|e| e.extension_name_as_c_str() == Ok(n));
    // Without the extension (lavapipe) the modules are still compiled, which checks the dump.
    let stats = has(ash::khr::pipeline_executable_properties::NAME);
    if !stats {
        println!("(no VK_KHR_pipeline_executable_properties: modules compiled, no statistics)");
    }
    let coop = has(ash::khr::cooperative_matrix::NAME);
    let mut names = Vec::new();
    if stats {
        names.push(ash::khr::pipeline_executable_properties::NAME.as_ptr());
    }
    if coop {
        names.push(ash::khr::cooperative_matrix::NAME.as_ptr());
    }
    // Every supported feature on: the query fills the chain, which then creates the device.
    let mut f11 = vk::PhysicalDeviceVulkan11Features::default();
    let mut f12 = vk::PhysicalDeviceVulkan12Features::default();
    let mut f13 = vk::PhysicalDeviceVulkan13Features::default();
    let mut fcoop = vk::PhysicalDeviceCooperativeMatrixFeaturesKHR::default();
    let mut fexec = vk::PhysicalDevicePipelineExecutablePropertiesFeaturesKHR::default();
    let mut features = vk::PhysicalDeviceFeatures2::default()
        .push_next(&mut f11)
        .push_next(&mut f12);
    if stats {
        features = features.push_next(&mut fexec);
    }
    if p.api_version >= vk::API_VERSION_1_3 {
        features = features.push_next(&mut f13);
    }
    if coop {
        features = features.push_next(&mut fcoop);
    }
    unsafe { instance.get_physical_device_features2(pd, &mut features) };
    let family = unsafe { instance.get_physical_device_queue_family_properties(pd) }
        .iter()
        .position(|q| q.queue_flags.contains(vk::QueueFlags::COMPUTE))
        .ok_or("no compute queue family")? as u32;
    let priorities = [1.0f32];
    let queues = [vk::DeviceQueueCreateInfo::default()
        .queue_family_index(family)
        .queue_priorities(&priorities)];
    let info = vk::DeviceCreateInfo::default()
        .queue_create_infos(&queues)
        .enabled_extension_names(&names)
        .push_next(&mut features);
    let device = unsafe { instance.create_device(pd, &info, None)? };
    let exec =
        stats.then(|| ash::khr::pipeline_executable_properties::Device::new(instance, &device));
    let mut failures = 0;
    for file in files {
        let label = file
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        match pipeline_stats(&device, &exec, file) {
            Ok((d, lines, regs)) => {
                println!(
                    "{label}: {} threads, {} B workgroup memory",
                    d.threads, d.workgroup_bytes
                );
                for l in lines {
                    println!("    {l}");
                }
                if let (true, Some(r)) = (p.vendor_id == NVIDIA, regs) {
                    println!("    {}", hopper_occupancy(d.threads, r, d.workgroup_bytes));
                }
            }
            Err(e) => {
                failures += 1;
                println!("{label}: FAILED: {e}");
            }
        }
    }
    unsafe { device.destroy_device(None) };
    if failures > 0 {
        return Err(format!("{failures} of {} modules failed", files.len()).into());
    }
    Ok(())
}

/// The statistics of one module's pipeline, as printable lines, and its register count where
/// the driver reports one.
fn pipeline_stats(
    device: &ash::Device,
    exec: &Option<ash::khr::pipeline_executable_properties::Device>,
    file: &Path,
) -> Res<(Description, Vec<String>, Option<u64>)> {
    let d = read_description(&file.with_extension("txt"))?;
    let bytes = std::fs::read(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let words = ash::util::read_spv(&mut std::io::Cursor::new(bytes))?;
    let groups = d.bindings.iter().map(|b| b.0 + 1).max().unwrap_or(0);
    let mut sets = Vec::new();
    let mut made = Made::default();
    let result = (|| -> Res<(Vec<String>, Option<u64>)> {
        for g in 0..groups {
            let entries: Vec<vk::DescriptorSetLayoutBinding> = d
                .bindings
                .iter()
                .filter(|b| b.0 == g)
                .map(|b| {
                    let ty = if b.2 == "uniform" {
                        vk::DescriptorType::UNIFORM_BUFFER
                    } else {
                        vk::DescriptorType::STORAGE_BUFFER
                    };
                    vk::DescriptorSetLayoutBinding::default()
                        .binding(b.1)
                        .descriptor_type(ty)
                        .descriptor_count(1)
                        .stage_flags(vk::ShaderStageFlags::COMPUTE)
                })
                .collect();
            let info = vk::DescriptorSetLayoutCreateInfo::default().bindings(&entries);
            sets.push(unsafe { device.create_descriptor_set_layout(&info, None)? });
        }
        made.sets = sets.clone();
        let layout_info = vk::PipelineLayoutCreateInfo::default().set_layouts(&sets);
        made.layout = unsafe { device.create_pipeline_layout(&layout_info, None)? };
        let module_info = vk::ShaderModuleCreateInfo::default().code(&words);
        made.module = unsafe { device.create_shader_module(&module_info, None)? };
        let entry = CString::new(d.entry.clone())?;
        let stage = vk::PipelineShaderStageCreateInfo::default()
            .stage(vk::ShaderStageFlags::COMPUTE)
            .module(made.module)
            .name(&entry);
        let flags = if exec.is_some() {
            vk::PipelineCreateFlags::CAPTURE_STATISTICS_KHR
        } else {
            vk::PipelineCreateFlags::empty()
        };
        let info = vk::ComputePipelineCreateInfo::default()
            .stage(stage)
            .layout(made.layout)
            .flags(flags);
        let pipelines =
            unsafe { device.create_compute_pipelines(vk::PipelineCache::null(), &[info], None) }
                .map_err(|(_, e)| e)?;
        made.pipeline = *pipelines.first().ok_or("no pipeline created")?;
        match exec {
            Some(exec) => statistics(exec, made.pipeline),
            None => Ok((vec!["compiled".into()], None)),
        }
    })();
    made.destroy(device);
    let (lines, regs) = result?;
    Ok((d, lines, regs))
}

/// Handles to destroy after a module's statistics are read.
#[derive(Default)]
struct Made {
    sets: Vec<vk::DescriptorSetLayout>,
    layout: vk::PipelineLayout,
    module: vk::ShaderModule,
    pipeline: vk::Pipeline,
}

impl Made {
    fn destroy(&self, device: &ash::Device) {
        // SAFETY: each handle is null or was created on `device` and is used by nothing else.
        unsafe {
            device.destroy_pipeline(self.pipeline, None);
            device.destroy_shader_module(self.module, None);
            device.destroy_pipeline_layout(self.layout, None);
            for &s in &self.sets {
                device.destroy_descriptor_set_layout(s, None);
            }
        }
    }
}

fn statistics(
    exec: &ash::khr::pipeline_executable_properties::Device,
    pipeline: vk::Pipeline,
) -> Res<(Vec<String>, Option<u64>)> {
    let info = vk::PipelineInfoKHR::default().pipeline(pipeline);
    let executables = unsafe { exec.get_pipeline_executable_properties(&info)? };
    let mut lines = Vec::new();
    let mut regs = None;
    for (i, e) in executables.iter().enumerate() {
        let name = e
            .name_as_c_str()
            .map(|s| s.to_string_lossy())
            .unwrap_or_default();
        let mut line = format!("[{name}, subgroup {}]", e.subgroup_size);
        let info = vk::PipelineExecutableInfoKHR::default()
            .pipeline(pipeline)
            .executable_index(i as u32);
        for s in unsafe { exec.get_pipeline_executable_statistics(&info)? } {
            let stat = s
                .name_as_c_str()
                .map(|s| s.to_string_lossy())
                .unwrap_or_default();
            // SAFETY: `format` says which member of the union the driver wrote.
            let (text, number) = unsafe {
                match s.format {
                    vk::PipelineExecutableStatisticFormatKHR::BOOL32 => {
                        (format!("{}", s.value.b32 != 0), None)
                    }
                    vk::PipelineExecutableStatisticFormatKHR::INT64 => {
                        (format!("{}", s.value.i64), u64::try_from(s.value.i64).ok())
                    }
                    vk::PipelineExecutableStatisticFormatKHR::UINT64 => {
                        (format!("{}", s.value.u64), Some(s.value.u64))
                    }
                    _ => (format!("{:.3}", s.value.f64), None),
                }
            };
            // NVIDIA: "Register Count"; NVK (Mesa's NAK compiler): "Number of GPRs".
            let lower = stat.to_lowercase();
            if (lower.contains("register") || lower.contains("gprs")) && regs.is_none() {
                regs = number;
            }
            line.push_str(&format!(" {stat}={text}"));
        }
        lines.push(line);
    }
    Ok((lines, regs))
}

/// Workgroups of `threads` invocations using `regs` registers each and `smem` bytes of
/// workgroup memory that fit on one Hopper SM, and what limits them.
fn hopper_occupancy(threads: u32, regs: u64, smem: u64) -> String {
    let warps = u64::from(threads.div_ceil(32)).max(1);
    let regs_per_warp = (regs * 32).div_ceil(256) * 256;
    let by_regs = (65536 / regs_per_warp.max(1)) / warps;
    let by_warps = 64 / warps;
    let by_smem = (228 * 1024) / (smem + 1024);
    let limits = [
        (by_regs, "registers"),
        (by_warps, "warps"),
        (by_smem, "workgroup memory"),
        (32, "blocks"),
    ];
    let (n, why) = limits
        .iter()
        .min_by_key(|l| l.0)
        .copied()
        .unwrap_or((0, "?"));
    format!(
        "Hopper SM: {n} workgroups ({} warps of 64) resident at {regs} registers, limited by \
         {why} (registers allow {by_regs}, warps {by_warps}, workgroup memory {by_smem})",
        n * warps
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hopper_limits() {
        // 256 invocations at 128 registers: 16 warps' worth of registers per workgroup of 8
        // warps, so two workgroups; at 168 registers only one.
        let two = hopper_occupancy(256, 128, 35328);
        assert!(
            two.starts_with("Hopper SM: 2 workgroups (16 warps"),
            "{two}"
        );
        assert!(two.contains("limited by registers"), "{two}");
        let one = hopper_occupancy(256, 168, 35328);
        assert!(one.starts_with("Hopper SM: 1 workgroups"), "{one}");
        // Few registers: workgroup memory (47 KiB) decides.
        let smem = hopper_occupancy(128, 32, 48128);
        assert!(smem.contains("limited by workgroup memory"), "{smem}");
        assert!(smem.starts_with("Hopper SM: 4 workgroups"), "{smem}");
    }

    #[test]
    fn reads_what_the_dump_writes() {
        let dir = std::env::temp_dir().join(format!("xpu-stats-desc-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("m.txt");
        std::fs::write(
            &path,
            "entry mm\nworkgroup_size 16 16 1\nbinding 0 0 uniform\nbinding 0 2 readonly\nworkgroup_bytes 4096\n",
        )
        .unwrap();
        let d = read_description(&path).unwrap();
        assert_eq!(
            (d.entry.as_str(), d.threads, d.workgroup_bytes),
            ("mm", 256, 4096)
        );
        assert_eq!(
            d.bindings,
            vec![(0, 0, "uniform".into()), (0, 2, "readonly".into())]
        );
        std::fs::write(&path, "workgroup_size 1 1 1\n").unwrap();
        assert!(read_description(&path).is_err());
        std::fs::write(&path, "entry mm\nworkgroup_size 1 x 1\n").unwrap();
        assert!(read_description(&path).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
