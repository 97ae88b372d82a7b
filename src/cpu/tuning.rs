//! What the autotuner needs to know about the CPU: the device part of its keys.
//!
//! Invariant: the id changes whenever something that changes kernel speed does: the processor
//! model, the instruction set level in force, the bf16 product method and the thread count.

/// The autotuner's device text for the CPU in this thread's configuration, e.g.
/// `cpu Intel(R) Xeon(R) Platinum 8488C avx512 amx t2`.
pub(crate) fn device_id() -> String {
    let level = match super::simd_level() {
        super::SimdLevel::Avx512 => "avx512",
        super::SimdLevel::Avx2 => "avx2",
        super::SimdLevel::Fallback => "portable",
    };
    let bf16 = match super::gemm::bf16_method() {
        super::gemm::Bf16Method::Amx => "amx",
        super::gemm::Bf16Method::DotProduct => "bf16dot",
        super::gemm::Bf16Method::Widen => "widen",
        super::gemm::Bf16Method::Portable => "portable",
    };
    format!(
        "cpu {} {level} {bf16} t{}",
        model(),
        rayon::current_num_threads()
    )
}

/// The processor's name, read once per process (`cpuid` traps to the hypervisor on virtual
/// machines, and the id is built on every tuned call).
fn model() -> &'static str {
    static MODEL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    MODEL.get_or_init(model_name)
}

/// The processor's brand string (`cpuid` leaves 0x80000002–4), or the architecture's name.
fn model_name() -> String {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::__cpuid;
        // Leaf 0x80000000 gives the highest extended leaf, checked before the brand leaves
        // are read.
        let max = __cpuid(0x8000_0000).eax;
        if max >= 0x8000_0004 {
            let mut bytes = Vec::with_capacity(48);
            for leaf in 0x8000_0002u32..=0x8000_0004 {
                let r = __cpuid(leaf);
                for word in [r.eax, r.ebx, r.ecx, r.edx] {
                    bytes.extend_from_slice(&word.to_le_bytes());
                }
            }
            let name = String::from_utf8_lossy(&bytes);
            let name = name.trim_matches(char::from(0)).split_whitespace();
            return name.collect::<Vec<_>>().join(" ");
        }
    }
    std::env::consts::ARCH.to_string()
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_device_id_names_the_processor_and_threads() {
        let id = super::device_id();
        assert!(id.starts_with("cpu "), "{id}");
        assert!(
            id.ends_with(&format!(" t{}", rayon::current_num_threads())),
            "{id}"
        );
        assert!(!id.contains('\t') && !id.contains('\n'), "{id}");
    }
}
