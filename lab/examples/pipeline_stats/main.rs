//! The driver's statistics of the pipelines `spirv_dump` wrote: register counts and the
//! occupancy they allow.
//!
//! ```text
//! cargo run --release -p xpu-lab --example spirv_dump -- /tmp/spv
//! cargo run --release -p xpu-lab --example pipeline_stats -- /tmp/spv [--filter coop16]
//! ```
//!
//! Each `.spv` file is compiled on the first Vulkan adapter that is not a CPU (or the first,
//! or `--adapter N`) with `VK_KHR_pipeline_executable_properties`, its bind-group layout taken
//! from the `.txt` beside it, and every statistic the driver reports is printed (NVIDIA:
//! "Register Count" among others; lavapipe: instruction counts). On NVIDIA adapters it also
//! prints how many workgroups of that size, registers and workgroup memory fit on one
//! streaming multiprocessor by Hopper's limits (65536 registers allocated per warp in blocks of
//! 256, 64 warps, 32 blocks, 228 KiB of shared memory with 1 KiB reserved per block) — the
//! figure that decides how much memory latency the other workgroups can hide. Linux only: it
//! talks to Vulkan directly through `ash` (the loader wgpu uses), not through wgpu, because
//! wgpu cannot ask a pipeline for its statistics.

#[cfg(target_os = "linux")]
mod stats;

#[cfg(target_os = "linux")]
fn main() {
    if let Err(e) = stats::run() {
        eprintln!("pipeline_stats: {e}");
        std::process::exit(1);
    }
}

#[cfg(not(target_os = "linux"))]
fn main() {
    eprintln!("pipeline_stats: Linux only (it loads the Vulkan loader through ash)");
    std::process::exit(1);
}
