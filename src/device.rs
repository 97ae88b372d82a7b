//! Where a tensor lives.
//!
//! `Device::Xpu` is the default GPU adapter (chosen once per process, see [`crate::devices`]);
//! `Device::Cpu` is host memory with the SIMD kernels of `crate::cpu`.

/// A compute device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Device {
    /// Host memory and the CPU kernels (AVX-512 where available, portable otherwise).
    #[default]
    Cpu,
    /// The GPU through wgpu (Vulkan, Metal or DX12) and WGSL compute shaders.
    Xpu,
}

impl Device {
    /// Parses `cpu` or `xpu` (as used by the examples' `--device`).
    pub fn parse(name: &str) -> Option<Device> {
        match name.to_ascii_lowercase().as_str() {
            "cpu" => Some(Device::Cpu),
            "xpu" | "gpu" => Some(Device::Xpu),
            _ => None,
        }
    }
}

impl std::fmt::Display for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Device::Cpu => "cpu",
            Device::Xpu => "xpu",
        })
    }
}
