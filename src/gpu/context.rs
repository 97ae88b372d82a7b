//! One lazily created GPU context per process: instance, adapter, device, queue, the features we
//! use and the adapter's real limits.
//!
//! Invariants: the context is created at most once (a failure is remembered and returned again,
//! so tests see the same error every time); it is `Send + Sync` and shared through `Arc`; all
//! recording goes through [`Context::stream`], one mutex around the open command encoder, so ops
//! from many threads are serialised in one queue order. wgpu's uncaptured-error handler is
//! replaced: device errors are recorded (and surfaced as `Error::Gpu`) instead of panicking.

use std::sync::{Arc, Mutex, OnceLock};

use super::allocator::Allocator;
use super::pipelines::PipelineCache;
use super::stream::Stream;
use crate::{Error, Result};

/// What `xpu::devices()` reports for one adapter.
#[derive(Clone, Debug)]
pub struct AdapterSummary {
    /// Index in enumeration order (what `XPU_ADAPTER` accepts).
    pub index: usize,
    /// Adapter name as the driver reports it.
    pub name: String,
    /// Backend (Vulkan, Metal, Dx12).
    pub backend: String,
    /// Device type (discrete, integrated, cpu, ...).
    pub device_type: String,
    /// Driver name and version.
    pub driver: String,
    /// Features `xpu` uses that this adapter has (`SHADER_F16`, `SUBGROUP`, ...).
    pub features: Vec<&'static str>,
    /// Largest buffer, in bytes.
    pub max_buffer_size: u64,
    /// Largest storage-buffer binding, in bytes.
    pub max_storage_binding: u64,
    /// Workgroup memory, in bytes.
    pub max_workgroup_memory: u32,
    /// Invocations per workgroup.
    pub max_invocations: u32,
    /// True if this is the adapter `Device::Xpu` uses.
    pub selected: bool,
    /// The matrix-product path each float dtype takes on this adapter.
    pub matmul_paths: Vec<(crate::DType, String)>,
    /// Cooperative-matrix shapes the driver reports, as `MxNxK ab->cr` (e.g. `16x16x16
    /// F16->F32`); empty without `EXPERIMENTAL_COOPERATIVE_MATRIX`.
    pub cooperative_matrix_configs: Vec<String>,
    /// Smallest and largest subgroup size the driver reports (32 and 32 on NVIDIA, 8 and 8 on
    /// lavapipe; wgpu's 4 and 128 where the driver does not say).
    pub subgroup_sizes: (u32, u32),
}

/// Features that `xpu` can use when present.
#[derive(Clone, Copy, Debug, Default)]
pub struct XpuFeatures {
    /// `f16` arithmetic in shaders.
    pub shader_f16: bool,
    /// Subgroup operations.
    pub subgroup: bool,
    /// Cooperative matrices (experimental in wgpu).
    pub cooperative_matrix: bool,
    /// The driver reports 8x8x8 f32 cooperative matrices (what `matmul_coop.wgsl` uses).
    pub coop_f32_8x8: bool,
    /// The driver reports 16x16x16 f16 cooperative matrices with f32 accumulation, and f16
    /// shaders and the workgroup memory `matmul_coop16.wgsl` needs are there too.
    pub coop_f16_16x16: bool,
    /// GPU timestamps.
    pub timestamp_query: bool,
    /// The adapter's subgroup size where it is fixed (the driver's smallest and largest are
    /// equal: 32 on NVIDIA, 8 on lavapipe); 0 where it varies or is unknown.
    pub fixed_subgroup_size: u32,
}

const WANTED: [(wgpu::Features, &str); 5] = [
    (wgpu::Features::SHADER_F16, "SHADER_F16"),
    (wgpu::Features::SUBGROUP, "SUBGROUP"),
    (
        wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX,
        "EXPERIMENTAL_COOPERATIVE_MATRIX",
    ),
    (wgpu::Features::TIMESTAMP_QUERY, "TIMESTAMP_QUERY"),
    // Cooperative-matrix shaders go to the driver as SPIR-V (see `xpu::passthrough`).
    (wgpu::Features::PASSTHROUGH_SHADERS, "PASSTHROUGH_SHADERS"),
];

/// Workgroup memory of `matmul_coop16.wgsl`: f16 A and B tiles and the f32 epilogue scratch
/// (and 4 bytes to spare).
pub(crate) const COOP16_WORKGROUP_BYTES: u32 = 2 * (5120 + 4352) + 4 * 4096 + 4;

/// The process-wide GPU context.
pub struct Context {
    pub(crate) device: wgpu::Device,
    pub(crate) queue: wgpu::Queue,
    pub(crate) limits: wgpu::Limits,
    pub(crate) features: XpuFeatures,
    pub(crate) summary: AdapterSummary,
    pub(crate) allocator: Allocator,
    pub(crate) pipelines: PipelineCache,
    pub(crate) stream: Mutex<Stream>,
    pub(crate) device_errors: Arc<Mutex<Vec<String>>>,
}

static CONTEXT: OnceLock<std::result::Result<Arc<Context>, String>> = OnceLock::new();

fn instance() -> wgpu::Instance {
    wgpu::Instance::new(wgpu::InstanceDescriptor {
        backends: wgpu::Backends::VULKAN | wgpu::Backends::METAL | wgpu::Backends::DX12,
        ..wgpu::InstanceDescriptor::new_without_display_handle_from_env()
    })
}

fn type_rank(t: wgpu::DeviceType) -> u8 {
    match t {
        wgpu::DeviceType::DiscreteGpu => 0,
        wgpu::DeviceType::IntegratedGpu => 1,
        wgpu::DeviceType::VirtualGpu => 2,
        wgpu::DeviceType::Other => 3,
        wgpu::DeviceType::Cpu => 4,
    }
}

/// The features `xpu` uses that `adapter` offers (all of them are requested on its device).
fn adapter_features(adapter: &wgpu::Adapter) -> XpuFeatures {
    let has = adapter.features();
    let limits = adapter.limits();
    let info = adapter.get_info();
    let coop = has.contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX);
    let configs = if coop {
        adapter.cooperative_matrix_properties()
    } else {
        Vec::new()
    };
    use wgpu::CooperativeScalarType as Coop;
    let reports = |size: u32, ab: Coop, cr: Coop| {
        configs.iter().any(|p| {
            (p.m_size, p.n_size, p.k_size) == (size, size, size)
                && p.ab_type == ab
                && p.cr_type == cr
        })
    };
    let shader_f16 = has.contains(wgpu::Features::SHADER_F16);
    XpuFeatures {
        shader_f16,
        subgroup: has.contains(wgpu::Features::SUBGROUP),
        cooperative_matrix: coop,
        coop_f32_8x8: reports(8, Coop::F32, Coop::F32),
        coop_f16_16x16: (reports(16, Coop::F16, Coop::F32)
            || (assume_coop16() && reports(8, Coop::F16, Coop::F32)))
            && shader_f16
            && limits.max_compute_workgroup_storage_size >= COOP16_WORKGROUP_BYTES,
        timestamp_query: has.contains(wgpu::Features::TIMESTAMP_QUERY),
        fixed_subgroup_size: if info.subgroup_min_size == info.subgroup_max_size {
            info.subgroup_min_size
        } else {
            0
        },
    }
}

/// `config::GpuConfig::coop16_assume` (`XPU_COOP16_ASSUME=1`): a driver that reports 8x8x8
/// f16->f32 cooperative matrices is taken to run the 16x16x16 ones too. Mesa's lavapipe 26 does
/// (it also offers NV flexible dimensions of granularity 8), so the tensor-core kernels and
/// their tests run on a CPU; the kernels' self-checks still guard every use. Read once, when
/// the context is created.
fn assume_coop16() -> bool {
    crate::config::with(|c| c.gpu.coop16_assume)
}

fn summarise(index: usize, adapter: &wgpu::Adapter) -> AdapterSummary {
    let info = adapter.get_info();
    let limits = adapter.limits();
    let feats = adapter.features();
    AdapterSummary {
        index,
        name: info.name,
        backend: format!("{:?}", info.backend),
        device_type: format!("{:?}", info.device_type),
        driver: format!("{} {}", info.driver, info.driver_info)
            .trim()
            .to_string(),
        features: WANTED
            .iter()
            .filter(|(f, _)| feats.contains(*f))
            .map(|(_, n)| *n)
            .collect(),
        max_buffer_size: limits.max_buffer_size,
        max_storage_binding: limits.max_storage_buffer_binding_size,
        max_workgroup_memory: limits.max_compute_workgroup_storage_size,
        max_invocations: limits.max_compute_invocations_per_workgroup,
        selected: false,
        matmul_paths: super::kernels::matmul::select::paths(&adapter_features(adapter)),
        cooperative_matrix_configs: adapter
            .cooperative_matrix_properties()
            .iter()
            .map(|p| {
                format!(
                    "{}x{}x{} {:?}->{:?}",
                    p.m_size, p.n_size, p.k_size, p.ab_type, p.cr_type
                )
            })
            .collect(),
        subgroup_sizes: (info.subgroup_min_size, info.subgroup_max_size),
    }
}

/// Index of the adapter to use: `XPU_ADAPTER` (an index or part of the name), else the best type.
fn choose(adapters: &[wgpu::Adapter]) -> std::result::Result<usize, String> {
    if adapters.is_empty() {
        return Err("no Vulkan, Metal or DX12 adapter was found".into());
    }
    if let Some(want) = crate::config::with(|c| c.adapter.clone()) {
        if let Ok(i) = want.parse::<usize>() {
            return if i < adapters.len() {
                Ok(i)
            } else {
                Err(format!(
                    "XPU_ADAPTER={i} but only {} adapters exist",
                    adapters.len()
                ))
            };
        }
        let lower = want.to_lowercase();
        return adapters
            .iter()
            .position(|a| a.get_info().name.to_lowercase().contains(&lower))
            .ok_or_else(|| format!("XPU_ADAPTER={want:?} matches no adapter name"));
    }
    let mut best = 0;
    for (i, a) in adapters.iter().enumerate() {
        if type_rank(a.get_info().device_type) < type_rank(adapters[best].get_info().device_type) {
            best = i;
        }
    }
    Ok(best)
}

fn create() -> std::result::Result<Arc<Context>, String> {
    let instance = instance();
    let adapters = pollster::block_on(instance.enumerate_adapters(wgpu::Backends::all()));
    let index = choose(&adapters)?;
    let adapter = &adapters[index];
    let mut summary = summarise(index, adapter);
    summary.selected = true;
    let available = adapter.features();
    let mut required = wgpu::Features::empty();
    for (f, _) in WANTED {
        if available.contains(f) {
            required |= f;
        }
    }
    let experimental = if required.contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX) {
        // SAFETY: cooperative matrices are only used through kernels tested against the tiled
        // path; wgpu asks for this token to acknowledge the feature is experimental.
        unsafe { wgpu::ExperimentalFeatures::enabled() }
    } else {
        wgpu::ExperimentalFeatures::disabled()
    };
    let limits = adapter.limits();
    let (device, queue) = pollster::block_on(adapter.request_device(&wgpu::DeviceDescriptor {
        label: Some("xpu"),
        required_features: required,
        required_limits: limits.clone(),
        experimental_features: experimental,
        memory_hints: wgpu::MemoryHints::Performance,
        trace: wgpu::Trace::Off,
    }))
    .map_err(|e| format!("adapter {:?} refused a device: {e}", summary.name))?;
    let device_errors = Arc::new(Mutex::new(Vec::new()));
    let sink = device_errors.clone();
    device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
        if let Ok(mut v) = sink.lock() {
            v.push(e.to_string());
        }
    }));
    let features = adapter_features(adapter);
    let allocator = Allocator::new(limits.max_buffer_size);
    let stream = Stream::new(&device, &queue, features.timestamp_query);
    Ok(Arc::new(Context {
        device,
        queue,
        limits,
        features,
        summary,
        allocator,
        pipelines: PipelineCache::default(),
        stream: Mutex::new(stream),
        device_errors,
    }))
}

/// The shared context, created on first use.
pub fn context() -> Result<Arc<Context>> {
    CONTEXT
        .get_or_init(create)
        .clone()
        .map_err(|msg| Error::NoAdapter { msg })
}

/// Every adapter wgpu can see, with the one `Device::Xpu` uses marked.
pub fn list_adapters() -> Vec<AdapterSummary> {
    let instance = instance();
    let adapters = pollster::block_on(instance.enumerate_adapters(wgpu::Backends::all()));
    let chosen = choose(&adapters).ok();
    adapters
        .iter()
        .enumerate()
        .map(|(i, a)| {
            let mut s = summarise(i, a);
            s.selected = Some(i) == chosen;
            s
        })
        .collect()
}

impl Context {
    /// Takes the first recorded device error, if any, as an `Error::Gpu`.
    pub(crate) fn take_device_error(&self) -> Result<()> {
        let mut errs = self
            .device_errors
            .lock()
            .map_err(|_| Error::Gpu("error log poisoned".into()))?;
        if errs.is_empty() {
            return Ok(());
        }
        let all = errs.drain(..).collect::<Vec<_>>().join("; ");
        Err(Error::Gpu(all))
    }

    /// The adapter's summary (as listed by `xpu::devices()`).
    pub fn summary(&self) -> &AdapterSummary {
        &self.summary
    }

    /// Features in use.
    pub fn features(&self) -> XpuFeatures {
        self.features
    }
}
