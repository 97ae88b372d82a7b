//! How much memory a device can still give: [`memory_budget`], read before a large piece of
//! work (a UNet step) so that a request that cannot fit is refused at once, naming the bytes
//! asked and what fits, instead of running for minutes and then failing (or being killed).
//!
//! Sources: on the Cpu (Linux) the system's `MemAvailable + SwapFree` (`/proc/meminfo`),
//! lowered to what the process's address-space limit (`RLIMIT_AS`, against its current
//! `VmSize`) and its cgroup's `memory.max` (against `memory.current`) still leave; elsewhere
//! the Cpu budget is unknown. On the Xpu the allocator's limit less what live tensors hold
//! (when a limit is set), the adapter's largest buffer, and, for a software adapter whose
//! "device memory" is host memory (lavapipe), the Cpu's figure too.
//!
//! Invariants: every figure is an upper bound the library can read cheaply (no allocation is
//! tried); an unknown figure is `None`, and [`MemoryBudget::check`] never refuses on an unknown
//! figure, so only requests that certainly cannot fit are refused.

use crate::{Device, Error, Result};

/// What memory a device can still give, as far as the library can tell (see
/// [`memory_budget`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryBudget {
    /// The device.
    pub device: Device,
    /// Bytes new tensors may take in all; `None` when unknown (a GPU without a memory limit,
    /// a Cpu on a system whose figures `xpu` does not read).
    pub available: Option<u64>,
    /// The largest single buffer (`None`: no limit short of the address space).
    pub max_buffer: Option<u64>,
    /// Where `available` comes from (for messages).
    pub basis: String,
}

impl MemoryBudget {
    /// Errors with [`Error::MemoryExceeded`] when `total` bytes in all (its largest buffer
    /// `largest` bytes) cannot fit: more than [`MemoryBudget::available`] or a buffer larger
    /// than [`MemoryBudget::max_buffer`]. `what` names the request in the message. Unknown
    /// figures never refuse.
    pub fn check(&self, op: &'static str, what: &str, total: u64, largest: u64) -> Result<()> {
        if let Some(max) = self.max_buffer {
            if largest > max {
                return Err(Error::MemoryExceeded {
                    op,
                    device: self.device,
                    what: format!("{what}: its largest buffer"),
                    needed: largest,
                    fits: max,
                    basis: "the adapter's largest buffer".into(),
                });
            }
        }
        if let Some(avail) = self.available {
            if total > avail {
                return Err(Error::MemoryExceeded {
                    op,
                    device: self.device,
                    what: what.to_string(),
                    needed: total,
                    fits: avail,
                    basis: self.basis.clone(),
                });
            }
        }
        Ok(())
    }
}

/// What memory `device` can still give (see the module docs for the sources). Fails only when
/// the Xpu cannot be opened.
pub fn memory_budget(device: Device) -> Result<MemoryBudget> {
    match device {
        Device::Cpu => Ok(host_budget()),
        Device::Xpu => {
            let ctx = crate::gpu::ctx()?;
            let summary = ctx.summary();
            let stats = ctx.allocator.stats()?;
            let mut budget = MemoryBudget {
                device,
                available: stats.limit.map(|l| l.saturating_sub(stats.allocated)),
                max_buffer: Some(summary.max_buffer_size),
                basis: "the Xpu allocator's limit less the bytes live tensors hold".into(),
            };
            if summary.device_type == "Cpu" {
                // A software adapter keeps its buffers in host memory.
                let host = host_budget();
                if let Some(h) = host.available {
                    if budget.available.is_none_or(|a| h < a) {
                        budget.available = Some(h);
                        budget.basis =
                            format!("{} (the adapter's memory is host memory)", host.basis);
                    }
                }
            }
            Ok(budget)
        }
    }
}

/// Errors before any work when one buffer of `numel` elements of `dtype` cannot exist on
/// `device`: past what the host will allocate (Cpu), or past the adapter's largest buffer or
/// the allocator's limit (Xpu). For ops that compute on the host in proportion to their output
/// before allocating it.
pub(crate) fn ensure_buffer(
    op: &'static str,
    device: Device,
    numel: usize,
    dtype: crate::DType,
) -> Result<()> {
    match device {
        Device::Cpu => super::ensure_host_memory(op, numel, dtype),
        Device::Xpu => {
            let bytes = crate::layout::alloc_bytes(op, numel, dtype)? as u64;
            memory_budget(device)?.check(op, "its output", bytes, bytes)
        }
    }
}

/// The Cpu's budget: see the module docs.
fn host_budget() -> MemoryBudget {
    #[cfg_attr(not(target_os = "linux"), allow(unused_mut))]
    let mut budget = MemoryBudget {
        device: Device::Cpu,
        available: None,
        max_buffer: None,
        basis: String::new(),
    };
    #[cfg(target_os = "linux")]
    {
        let mut lower = |bytes: Option<u64>, basis: &str| {
            if let Some(b) = bytes {
                if budget.available.is_none_or(|a| b < a) {
                    budget.available = Some(b);
                    budget.basis = basis.to_string();
                }
            }
        };
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let field = |text: &str, key: &str| -> Option<u64> {
            let line = text.lines().find(|l| l.starts_with(key))?;
            let kb: u64 = line[key.len()..].split_whitespace().next()?.parse().ok()?;
            Some(kb.saturating_mul(1024))
        };
        let system = field(&meminfo, "MemAvailable:")
            .map(|a| a.saturating_add(field(&meminfo, "SwapFree:").unwrap_or(0)));
        lower(system, "the system's MemAvailable + SwapFree");
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        if let (Some(limit), Some(used)) = (address_space_limit(), field(&status, "VmSize:")) {
            lower(
                Some(limit.saturating_sub(used)),
                "the process's address-space limit (RLIMIT_AS) less its VmSize",
            );
        }
        let cgroup = |name: &str| {
            std::fs::read_to_string(format!("/sys/fs/cgroup/{name}"))
                .ok()
                .and_then(|s| s.trim().parse::<u64>().ok())
        };
        if let (Some(max), Some(current)) = (cgroup("memory.max"), cgroup("memory.current")) {
            lower(
                Some(max.saturating_sub(current)),
                "the cgroup's memory.max less memory.current",
            );
        }
    }
    budget
}

/// The soft `RLIMIT_AS` in bytes, `None` when unlimited.
#[cfg(target_os = "linux")]
fn address_space_limit() -> Option<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one `rlimit` through a valid pointer.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_AS, &mut lim) } == 0;
    (ok && lim.rlim_cur != libc::RLIM_INFINITY).then_some(lim.rlim_cur)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_known_figures_refuse() {
        let b = MemoryBudget {
            device: Device::Cpu,
            available: Some(1000),
            max_buffer: Some(100),
            basis: "test".into(),
        };
        assert!(b.check("t", "x", 1000, 100).is_ok());
        let e = b.check("t", "x", 1001, 10).unwrap_err();
        assert!(
            matches!(
                e,
                Error::MemoryExceeded {
                    needed: 1001,
                    fits: 1000,
                    ..
                }
            ),
            "{e}"
        );
        assert!(b.check("t", "x", 10, 101).is_err());
        let unknown = MemoryBudget {
            available: None,
            max_buffer: None,
            ..b
        };
        assert!(unknown.check("t", "x", u64::MAX, u64::MAX).is_ok());
    }

    #[test]
    #[cfg(target_os = "linux")]
    fn the_host_budget_is_read_on_linux() {
        let b = memory_budget(Device::Cpu).unwrap();
        let avail = b.available.expect("MemAvailable on Linux");
        assert!(avail > 0 && !b.basis.is_empty(), "{b:?}");
    }
}
