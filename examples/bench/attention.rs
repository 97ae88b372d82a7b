//! The attention family (fused against unfused, with peak memory) and the counting allocator
//! behind its Cpu `peak_mem_mb` column.

use super::{time, Opts, Row};
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use xpu::{DType, Device, Tensor};

/// Heap bytes in use and their high-water mark, kept by [`CountingAlloc`] (the Cpu figure of
/// the `peak_mem_mb` column).
static HEAP_NOW: AtomicUsize = AtomicUsize::new(0);
static HEAP_PEAK: AtomicUsize = AtomicUsize::new(0);

/// The system allocator, counting live bytes (two relaxed atomics per call).
struct CountingAlloc;

impl CountingAlloc {
    fn grew(by: usize) {
        let now = HEAP_NOW.fetch_add(by, Ordering::Relaxed) + by;
        HEAP_PEAK.fetch_max(now, Ordering::Relaxed);
    }
}

// SAFETY: every call forwards to `System` unchanged; only counters are updated.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc(layout);
        if !p.is_null() {
            Self::grew(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc_zeroed(layout);
        if !p.is_null() {
            Self::grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout);
        HEAP_NOW.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = System.realloc(ptr, layout, new_size);
        if !p.is_null() {
            HEAP_NOW.fetch_sub(layout.size(), Ordering::Relaxed);
            Self::grew(new_size);
        }
        p
    }
}

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

/// Peak memory in MB that `f` needs above what is in use when it starts: the Xpu allocator's
/// peak, or on Cpu the heap's (every allocation of the process, counted by [`CountingAlloc`]).
fn peak_mem_mb(device: Device, f: impl Fn() -> xpu::Result<Tensor>) -> xpu::Result<f64> {
    if device == Device::Xpu {
        xpu::synchronize()?;
        xpu::reset_peak_memory_stats()?;
        let before = xpu::memory_stats(device)?.allocated;
        let t = f()?;
        xpu::synchronize()?;
        drop(t);
        let peak = xpu::memory_stats(device)?.peak_allocated;
        return Ok(peak.saturating_sub(before) as f64 / 1e6);
    }
    xpu::empty_cache()?; // recycled CPU buffers would hide the op's own allocations
    let before = HEAP_NOW.load(Ordering::Relaxed);
    HEAP_PEAK.store(before, Ordering::Relaxed);
    drop(f()?);
    Ok(HEAP_PEAK.load(Ordering::Relaxed).saturating_sub(before) as f64 / 1e6)
}

/// SD 1.5's largest attention: batch 2, 8 heads, 4096 tokens, head dim 40; self-attention and
/// cross-attention to 77 text tokens, fused and unfused (materialised scores).
pub(super) fn attention(
    o: &Opts,
    device: Device,
    dtype: DType,
    peak_flops: Option<f64>,
    rows: &mut Vec<Row>,
) -> xpu::Result<()> {
    // A software Vulkan driver (lavapipe) would take minutes at SD's size; a hardware GPU runs it.
    let software_xpu =
        device == Device::Xpu && xpu::xpu_adapter().map_or(true, |a| a.device_type == "Cpu");
    let (b, h, l, d) = if o.quick || software_xpu {
        (1, 2, 512, 40)
    } else {
        (2, 8, 4096, 40)
    };
    for (name, lk) in [("attention_self", l), ("attention_cross", 77)] {
        let q = Tensor::randn(&[b, h, l, d], dtype, device, 1)?;
        let k = Tensor::randn(&[b, h, lk, d], dtype, device, 2)?;
        let v = Tensor::randn(&[b, h, lk, d], dtype, device, 3)?;
        let flops = 2.0 * (b * h * l * lk * 2 * d) as f64;
        let fused = || q.scaled_dot_product_attention(&k, &v, None, None);
        let unfused = || q.scaled_dot_product_attention_unfused(&k, &v, None, None);
        let (fused_ms, unfused_ms) = (
            time(device, o.quick, fused)?,
            time(device, o.quick, unfused)?,
        );
        let (fused_mem, unfused_mem) = (peak_mem_mb(device, fused)?, peak_mem_mb(device, unfused)?);
        for (variant, ms, mem) in [
            ("fused", fused_ms, fused_mem),
            ("unfused", unfused_ms, unfused_mem),
        ] {
            let mut row = Row::flops(
                name,
                variant,
                device,
                dtype,
                vec![b, h, l, lk, d],
                ms,
                flops,
                peak_flops,
            );
            row.speedup = Some(unfused_ms / ms);
            row.peak_mem_mb = Some(mem);
            rows.push(row);
        }
    }
    Ok(())
}
