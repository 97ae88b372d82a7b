//! Transparent huge pages for large CPU buffers.
//!
//! A fresh multi-megabyte buffer from the allocator is a new anonymous mapping (or fresh heap
//! pages): the kernel faults in and zeroes each 4 KiB page on first write. In an f32 SD 1.5
//! UNet step on a Zen 5 (whose FMA pipes are twice Zen 4's, so everything else weighs more)
//! those faults took about 12% of the samples: 300,000 faults a step for ~1.25 GB of buffers
//! that missed the recycling pool ([`super::pool`]). Most Linux systems ship
//! `transparent_hugepage/enabled = madvise`: huge pages only where a program asks. We ask for
//! large buffers, so the same bytes fault 512 times less often (the zeroing itself remains),
//! and the GEMM's packed weights and activations take fewer TLB entries.
//!
//! Invariants:
//! - Only the 2 MiB-aligned interior of a buffer of at least [`MIN_BYTES`] is advised;
//!   `MADV_HUGEPAGE` changes how the kernel backs the range, never what it reads, so a buffer's
//!   contents (zeroed or written) are unaffected and a failed call is ignored.
//! - Linux only; elsewhere [`advise`] does nothing. `XPU_CPU_HUGEPAGES=0` turns it off (read
//!   once per process).

/// Smallest buffer advised: it must hold at least one whole 2 MiB-aligned huge page wherever
/// the allocator puts it.
pub(crate) const MIN_BYTES: usize = 4 << 20;

/// The huge page size of x86-64 and of aarch64 with 4 KiB base pages.
#[cfg(target_os = "linux")]
const HUGE_PAGE: usize = 2 << 20;

/// Whether large buffers are advised (`config::CpuConfig::hugepages`; default yes).
pub(crate) fn enabled() -> bool {
    crate::config::with(|c| c.cpu.hugepages)
}

/// The 2 MiB-aligned byte range inside `[start, start + len)`, if any.
#[cfg(any(target_os = "linux", test))]
fn aligned_interior(start: usize, len: usize, page: usize) -> Option<(usize, usize)> {
    let a = start.checked_next_multiple_of(page)?;
    let b = start.checked_add(len)? / page * page;
    (b > a).then_some((a, b - a))
}

/// Asks the kernel to back `buf`'s aligned interior with huge pages (large buffers only).
/// Call it before the buffer's pages are first written, so they fault in as huge pages.
pub(crate) fn advise<T>(buf: &[T]) {
    let len = std::mem::size_of_val(buf);
    if len < MIN_BYTES || !enabled() {
        return;
    }
    #[cfg(target_os = "linux")]
    if let Some((a, n)) = aligned_interior(buf.as_ptr() as usize, len, HUGE_PAGE) {
        // SAFETY: [a, a + n) lies inside `buf`'s allocation and is page aligned; MADV_HUGEPAGE
        // only changes how the range is backed, never its contents, so no Rust value observes
        // the call. Its result is ignored: without THP the buffer keeps normal pages.
        unsafe {
            libc::madvise(a as *mut libc::c_void, n, libc::MADV_HUGEPAGE);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_interior_is_whole_aligned_pages_inside_the_buffer() {
        const P: usize = 2 << 20;
        assert_eq!(aligned_interior(P, 3 * P, P), Some((P, 3 * P)));
        assert_eq!(aligned_interior(P + 16, 3 * P, P), Some((2 * P, 2 * P)));
        assert_eq!(aligned_interior(P + 16, P, P), None);
        assert_eq!(aligned_interior(16, 2 * P - 32, P), None);
        assert_eq!(aligned_interior(usize::MAX - 8, 4, P), None);
    }

    /// On Linux with THP in `madvise` (or `always`) mode, a large buffer's mapping is eligible
    /// for huge pages after `alloc::zeroed`; the contents are zeros and writable either way.
    #[test]
    fn large_buffers_are_advised_for_huge_pages() {
        let n = 16 << 20;
        let mut v: Vec<u8> = crate::cpu::alloc::zeroed("test", n).unwrap();
        assert!(v.iter().all(|&x| x == 0));
        v.iter_mut().step_by(4096).for_each(|x| *x = 1);
        assert_eq!(v.iter().map(|&x| x as usize).sum::<usize>(), n / 4096);
        #[cfg(target_os = "linux")]
        {
            let mode = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
                .unwrap_or_default();
            if !mode.contains("[madvise]") && !mode.contains("[always]") || !enabled() {
                eprintln!("THP mode {mode:?} (or XPU_CPU_HUGEPAGES=0): eligibility not checked");
                return;
            }
            let addr = v.as_ptr() as usize + n / 2;
            let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap_or_default();
            let eligible = thp_eligible(&smaps, addr);
            assert_eq!(
                eligible,
                Some(true),
                "no THP-eligible mapping holds {addr:#x}"
            );
        }
    }

    /// The `THPeligible` field of the `/proc/self/smaps` entry whose range holds `addr`.
    #[cfg(target_os = "linux")]
    fn thp_eligible(smaps: &str, addr: usize) -> Option<bool> {
        let mut inside = false;
        for line in smaps.lines() {
            let first = line.split_whitespace().next().unwrap_or("");
            if let Some((lo, hi)) = first.split_once('-') {
                if let (Ok(lo), Ok(hi)) =
                    (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
                {
                    inside = lo <= addr && addr < hi;
                    continue;
                }
            }
            if inside {
                if let Some(v) = line.strip_prefix("THPeligible:") {
                    return Some(v.trim() == "1");
                }
            }
        }
        None
    }
}
