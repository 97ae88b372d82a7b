//! CPU backend settings: the instruction set cap, the bf16 product method, huge pages and the
//! caller-first start of short products. Choices between kernels are the autotuner's
//! (`AutotuneConfig`), forced there by name.

use super::parse::{choice, switch, Warnings};

/// The widest instruction set the CPU kernels may use (`XPU_CPU_SIMD`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CpuIsa {
    /// The best the processor has: AVX-512 (with AMX or AVX512_BF16 for bf16), else AVX2 + FMA,
    /// else portable code (the default).
    #[default]
    Auto,
    /// At most AVX2 + FMA (`avx2`).
    Avx2,
    /// Portable code only (`portable`; also `fallback`, `scalar`, `none`, `off`).
    Portable,
}

/// How bf16 products multiply on the CPU (`XPU_CPU_BF16`): the method layers are packed for.
/// Under [`CpuBf16::Auto`] the autotuner may move a layer's product to another method
/// (`cpu_bf16_product`); a configured method is used everywhere and never tuned.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CpuBf16 {
    /// AMX tiles where the processor has them, else the faster of `vdpbf16ps` dot products and
    /// widening to f32, as measured once (the default).
    #[default]
    Auto,
    /// AVX512_BF16 dot products (`dot`).
    Dot,
    /// Widen to f32 and multiply with FMA (`widen`).
    Widen,
}

/// CPU backend settings.
#[derive(Clone, Debug, PartialEq)]
pub struct CpuConfig {
    /// Instruction set cap (`XPU_CPU_SIMD`).
    pub isa: CpuIsa,
    /// bf16 product method (`XPU_CPU_BF16`).
    pub bf16: CpuBf16,
    /// Advise huge pages for large buffers on Linux (`XPU_CPU_HUGEPAGES=0` turns it off).
    pub hugepages: bool,
}

impl Default for CpuConfig {
    fn default() -> CpuConfig {
        CpuConfig {
            isa: CpuIsa::Auto,
            bf16: CpuBf16::Auto,
            hugepages: true,
        }
    }
}

impl CpuConfig {
    pub(super) fn from_lookup(
        lookup: &dyn Fn(&str) -> Option<String>,
        warn: &mut Warnings,
    ) -> CpuConfig {
        let d = CpuConfig::default();
        let isa = choice(
            lookup,
            "XPU_CPU_SIMD",
            &[
                ("auto", CpuIsa::Auto),
                ("avx512", CpuIsa::Auto),
                ("avx2", CpuIsa::Avx2),
                ("portable", CpuIsa::Portable),
                ("fallback", CpuIsa::Portable),
                ("scalar", CpuIsa::Portable),
                ("none", CpuIsa::Portable),
                ("off", CpuIsa::Portable),
            ],
            warn,
        );
        let bf16 = choice(
            lookup,
            "XPU_CPU_BF16",
            &[
                ("auto", CpuBf16::Auto),
                ("dot", CpuBf16::Dot),
                ("widen", CpuBf16::Widen),
            ],
            warn,
        );
        CpuConfig {
            isa: isa.unwrap_or(d.isa),
            bf16: bf16.unwrap_or(d.bf16),
            hugepages: switch(lookup, "XPU_CPU_HUGEPAGES", warn).unwrap_or(d.hugepages),
        }
    }
}
