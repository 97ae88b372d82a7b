//! `xpu`: one Tensor API on two devices.
//!
//! `Device::Xpu` drives a GPU through wgpu (Vulkan, Metal, DX12) with WGSL compute shaders;
//! `Device::Cpu` runs SIMD kernels (AVX-512 where the CPU has it, a portable path otherwise).
//! Data moves with [`Tensor::to`], as `.to("xpu")` does in PyTorch.
//!
//! ```
//! use xpu::{DType, Device, Tensor};
//! # fn main() -> xpu::Result<()> {
//! let a = Tensor::randn(&[64, 32], DType::F32, Device::Cpu, 42)?;
//! let w = Tensor::randn(&[32, 16], DType::F32, Device::Cpu, 7)?;
//! let y = a.matmul(&w)?.gelu()?.sum(-1, false)?;
//! assert_eq!(y.shape(), &[64]);
//! // With a GPU (or lavapipe) present, the same code runs on the Xpu:
//! if let Ok(a) = a.to(Device::Xpu) {
//!     let w = w.to(Device::Xpu)?;
//!     let y_xpu = a.matmul(&w)?.gelu()?.sum(-1, false)?.to_vec::<f32>()?;
//!     assert_eq!(y_xpu.len(), 64);
//! }
//! # Ok(())
//! # }
//! ```
//!
//! Architecture (data flows one way): the Tensor layer (`tensor/`, `ops/`) checks shapes,
//! dtypes and devices; `storage.rs` is the one place that matches on the device; `cpu/` and
//! `gpu/` hold the kernels. `docs/ARCHITECTURE.md` describes the layers.

#![warn(missing_docs)]

pub mod autotune;
mod backend;
pub mod config;
pub mod cpu;
pub(crate) mod desc;
mod device;
mod dtype;
mod error;
mod gpu;
mod json_values;
pub mod layout;
pub mod models;
pub mod nn;
pub mod ops;
pub mod schedulers;
mod tensor;

pub use backend::{memory_budget, MemoryBudget};
pub use desc::conv::Conv2dParams;
pub use desc::kinds::{BinaryOp, CmpOp, ReduceOp, UnaryOp};
pub use desc::matmul::{MatmulKernel, TileConfig};
pub use desc::Activation;
pub use device::Device;
pub use dtype::{DType, WithDType};
pub use error::{Error, Result};
pub use gpu::{AdapterSummary, KernelTime, MemoryStats, XpuFeatures};
pub use layout::Layout;
pub use ops::conv::Conv2dBuilder;
pub use ops::conv_transpose::ConvTranspose2dParams;
pub use ops::fused::MatmulBuilder;
pub use tensor::{MemoryFormat, Tensor};

/// Every key the autotuner measured or read from its cache in this process: candidates, their
/// times and the winner (see [`autotune`]).
pub fn autotune_report() -> Vec<autotune::TuneRecord> {
    autotune::report()
}

/// Every GPU adapter wgpu can see (name, backend, driver, the features `xpu` uses, limits);
/// the one `Device::Xpu` uses has `selected == true`.
pub fn devices() -> Vec<AdapterSummary> {
    gpu::context::list_adapters()
}

/// The adapter `Device::Xpu` uses, creating its context if needed.
pub fn xpu_adapter() -> Result<AdapterSummary> {
    Ok(gpu::ctx()?.summary().clone())
}

/// Features of the adapter `Device::Xpu` uses.
pub fn xpu_features() -> Result<XpuFeatures> {
    Ok(gpu::ctx()?.features())
}

/// True if `Device::Xpu` can be used (an adapter exists and opened).
pub fn xpu_available() -> bool {
    gpu::ctx().is_ok()
}

fn xpu_only(op: &'static str, device: Device) -> Result<()> {
    match device {
        Device::Xpu => Ok(()),
        Device::Cpu => Err(Error::invalid(
            op,
            "memory statistics are kept for Device::Xpu only; CPU tensors use the system allocator",
        )),
    }
}

/// Allocator statistics of a device (Xpu only), like `torch.cuda.memory_stats()`.
pub fn memory_stats(device: Device) -> Result<MemoryStats> {
    xpu_only("memory_stats", device)?;
    gpu::ctx()?.allocator.stats()
}

/// Releases every cached (unused) buffer: the Xpu allocator's, so `reserved` drops to what live
/// tensors hold (after waiting for queued GPU work), and the CPU's recycled large buffers (the
/// pool of tensor storages and the storage kept from dropped packed weights). Without an Xpu
/// adapter only the CPU's are released.
pub fn empty_cache() -> Result<()> {
    cpu::pool::clear();
    let Ok(ctx) = gpu::ctx() else {
        return Ok(());
    };
    gpu::synchronize()?;
    ctx.allocator.empty_cache()
}

/// Makes the process keep the host memory it frees for its own later allocations (glibc on
/// Linux: `mallopt` `M_MMAP_THRESHOLD` 1 GiB and `M_TRIM_THRESHOLD` at its maximum), so that a
/// phase that needs other buffer sizes than the one before it (a VAE decode after the denoising
/// loop) reuses pages already faulted in instead of asking the kernel for fresh, zeroed ones.
/// Where fresh pages are slow to come by (virtual machines whose host reclaims free guest
/// memory) that cost a 512x512 SD decode over a second. It changes the allocator of the whole
/// process: resident memory stays near its peak after large buffers are freed (the peak itself
/// moves little). Freed buffers are then reused as they are, so a zeroed allocation that
/// lands on one costs a fill where fresh pages came zeroed: `txt2img` calls it after loading
/// the models (whose transient buffers are written once), before generating. Meant for
/// programs, not libraries. Returns whether the allocator took the settings (false elsewhere,
/// where nothing changes).
pub fn retain_freed_host_memory() -> bool {
    cpu::alloc::retain_freed_memory()
}

/// Limits the bytes the Xpu allocator may reserve (`None` removes the limit). Also settable
/// with the environment variable `XPU_MEMORY_LIMIT` (e.g. `512M`, `2G`).
pub fn set_memory_limit(limit: Option<u64>) -> Result<()> {
    gpu::ctx()?.allocator.set_limit(limit)
}

/// Resets `peak_allocated` to the current `allocated`.
pub fn reset_peak_memory_stats() -> Result<()> {
    gpu::ctx()?.allocator.reset_peak()
}

/// Submits all queued GPU work and waits for it to finish (a no-op without an adapter in use).
pub fn synchronize() -> Result<()> {
    gpu::synchronize()
}

/// GPU time per kernel pipeline since the last call, longest first, when the process runs with
/// `XPU_PROFILE=1` (timestamp queries around every dispatch; each batch then waits for the GPU;
/// with `XPU_PROFILE=shapes` a row per pipeline and problem shape, its `kernel` ending in
/// ` mnk MxNxK grid XxYxZ` for products, ` grid XxYxZ` otherwise).
/// `Ok(None)` when profiling is off or the adapter has no timestamp queries.
pub fn xpu_profile() -> Result<Option<Vec<KernelTime>>> {
    gpu::take_profile()
}

/// Every WGSL module exactly as the runtime compiles it: `(file, source)`. For validation tests
/// and tools; not needed to use the library.
pub fn shader_sources() -> Vec<(&'static str, String)> {
    gpu::pipelines::ShaderId::ALL
        .iter()
        .map(|s| (s.file(), s.source()))
        .collect()
}

/// The SPIR-V words the Xpu backend compiles for entry point `entry` of the shader module
/// `module` (a name [`shader_sources`] lists) with the WGSL override constants `constants`
/// (`DT_IN`, `DT_OUT`, `WG`, `VARIANT`): for the cooperative-matrix kernels the words handed to
/// the driver. No GPU is needed. For diagnostics such as the driver's pipeline statistics.
#[doc(hidden)]
pub fn shader_spirv(module: &str, entry: &str, constants: &[(&str, f64)]) -> Result<Vec<u32>> {
    gpu::passthrough::module_spirv(module, entry, constants)
}

/// Compiles arbitrary WGSL on the Xpu the way the runtime compiles its own shaders, returning
/// `Error::Shader` with the compiler's message on failure. For tests and shader development.
#[doc(hidden)]
pub fn compile_wgsl(source: &str) -> Result<()> {
    let ctx = gpu::ctx()?;
    gpu::pipelines::compile_module(&ctx.device, "user.wgsl", source, false).map(drop)
}

/// The README's example, compiled and run as a doctest.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
