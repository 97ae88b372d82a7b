//! Caching buffer allocator after PyTorch's CUDA caching allocator.
//!
//! Requests are rounded up to size classes (256-byte granules below 1 MiB, then four classes per
//! power of two), and a dropped tensor's buffer goes back to the free list of its class instead of
//! being destroyed. Reuse is safe without fences because every use of a buffer is recorded into
//! the single queue in order: a kernel that writes a reused buffer runs after every earlier kernel
//! that read it. The one exception is `queue.write_buffer`, which wgpu runs before the *next*
//! submit; `Stream::upload` flushes first when the target was used by the open batch.
//!
//! Three pools never mix: storage (tensors), staging (MAP_READ for read-back) and the uniform
//! arena, which lives in `stream.rs`. Invariants: `allocated` counts the class sizes of buffers
//! held by live tensors, `reserved` counts those plus the cached ones; a memory limit (API or
//! `config::Config::memory_limit`, `XPU_MEMORY_LIMIT`) bounds `reserved`: past it the cache is emptied and the request retried
//! once, then `Error::OutOfMemory`. In steady state a model step creates no new wgpu buffers.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::{Error, Result};

/// Memory statistics of a device, in the spirit of `torch.cuda.memory_stats()`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryStats {
    /// Bytes held by live tensors (size classes, not requested sizes).
    pub allocated: u64,
    /// Bytes held by the allocator in all: live plus cached storage and staging buffers.
    pub reserved: u64,
    /// Highest `allocated` since the start or the last `reset_peak_memory_stats()`.
    pub peak_allocated: u64,
    /// Number of wgpu buffers ever created by the allocator.
    pub buffers_created: u64,
    /// Allocations served from the cache.
    pub cache_hits: u64,
    /// Allocations that needed a new wgpu buffer.
    pub cache_misses: u64,
    /// The memory limit in force, if any.
    pub limit: Option<u64>,
}

/// Which pool a buffer belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum PoolKind {
    /// Tensor storage: STORAGE | COPY_SRC | COPY_DST.
    Storage,
    /// Read-back: MAP_READ | COPY_DST.
    Staging,
}

impl PoolKind {
    fn usage(self) -> wgpu::BufferUsages {
        match self {
            PoolKind::Storage => {
                wgpu::BufferUsages::STORAGE
                    | wgpu::BufferUsages::COPY_SRC
                    | wgpu::BufferUsages::COPY_DST
            }
            PoolKind::Staging => wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
        }
    }
}

/// Rounds a request to its size class.
pub(crate) fn size_class(bytes: u64) -> u64 {
    let bytes = bytes.max(4);
    if bytes <= 1 << 20 {
        return bytes.div_ceil(256) * 256;
    }
    let pow = 63 - (bytes - 1).leading_zeros(); // 2^pow < bytes <= 2^(pow+1)
    let step = 1u64 << (pow - 2);
    bytes.div_ceil(step) * step
}

#[derive(Default)]
struct PoolState {
    /// Cached buffers by (pool, size class), with the id of the last batch that used each.
    free: BTreeMap<(PoolKind, u64), Vec<(wgpu::Buffer, u64)>>,
    stats: MemoryStats,
    cached: u64,
}

/// The caching allocator of one context.
pub(crate) struct Allocator {
    state: Arc<Mutex<PoolState>>,
    max_buffer_size: u64,
}

/// A buffer on loan from the allocator; returns to its pool when dropped.
pub(crate) struct PooledBuffer {
    buffer: wgpu::Buffer,
    class: u64,
    kind: PoolKind,
    pool: Arc<Mutex<PoolState>>,
    /// Id of the last batch that bound this buffer (see `Stream`).
    pub(crate) last_batch: AtomicU64,
}

impl PooledBuffer {
    /// The wgpu buffer.
    pub(crate) fn raw(&self) -> &wgpu::Buffer {
        &self.buffer
    }

    /// Size in bytes (the size class).
    pub(crate) fn size(&self) -> u64 {
        self.class
    }
}

impl Drop for PooledBuffer {
    fn drop(&mut self) {
        // wgpu buffers are reference-counted handles: the clone keeps the GPU buffer alive.
        let buffer = self.buffer.clone();
        if let Ok(mut st) = self.pool.lock() {
            if self.kind == PoolKind::Storage {
                st.stats.allocated = st.stats.allocated.saturating_sub(self.class);
            }
            st.cached += self.class;
            let stamp = self.last_batch.load(Ordering::Relaxed);
            st.free
                .entry((self.kind, self.class))
                .or_default()
                .push((buffer, stamp));
        }
    }
}

fn env_limit() -> Option<u64> {
    crate::config::with(|c| c.memory_limit)
}

impl Allocator {
    pub(crate) fn new(max_buffer_size: u64) -> Allocator {
        let state = PoolState {
            stats: MemoryStats {
                limit: env_limit(),
                ..MemoryStats::default()
            },
            ..PoolState::default()
        };
        Allocator {
            state: Arc::new(Mutex::new(state)),
            max_buffer_size,
        }
    }

    fn lock(&self) -> Result<std::sync::MutexGuard<'_, PoolState>> {
        self.state
            .lock()
            .map_err(|_| Error::Gpu("allocator lock poisoned".into()))
    }

    /// A buffer of at least `bytes` bytes from `kind`'s pool.
    pub(crate) fn alloc(
        &self,
        device: &wgpu::Device,
        kind: PoolKind,
        bytes: u64,
    ) -> Result<Arc<PooledBuffer>> {
        let class = size_class(bytes);
        let mut st = self.lock()?;
        let oom = |st: &PoolState, limit: u64| Error::OutOfMemory {
            requested: bytes,
            allocated: st.stats.allocated,
            limit,
        };
        if class > self.max_buffer_size {
            return Err(oom(&st, self.max_buffer_size));
        }
        let (buffer, stamp) = if let Some(cached) =
            st.free.get_mut(&(kind, class)).and_then(Vec::pop)
        {
            st.cached -= class;
            st.stats.cache_hits += 1;
            cached
        } else {
            if let Some(limit) = st.stats.limit {
                if st.stats.reserved + class > limit {
                    Self::release_cached(&mut st);
                    if st.stats.reserved + class > limit {
                        return Err(oom(&st, limit));
                    }
                }
            }
            let b = match Self::create(device, kind, class) {
                Ok(b) => b,
                Err(_) => {
                    // Out of device memory: free the cache and try once more.
                    Self::release_cached(&mut st);
                    Self::create(device, kind, class).map_err(|_| oom(&st, self.max_buffer_size))?
                }
            };
            st.stats.cache_misses += 1;
            st.stats.buffers_created += 1;
            st.stats.reserved += class;
            (b, 0)
        };
        if kind == PoolKind::Storage {
            st.stats.allocated += class;
            st.stats.peak_allocated = st.stats.peak_allocated.max(st.stats.allocated);
        }
        Ok(Arc::new(PooledBuffer {
            buffer,
            class,
            kind,
            pool: self.state.clone(),
            last_batch: AtomicU64::new(stamp),
        }))
    }

    fn create(
        device: &wgpu::Device,
        kind: PoolKind,
        class: u64,
    ) -> std::result::Result<wgpu::Buffer, ()> {
        let scope = device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let buffer = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(match kind {
                PoolKind::Storage => "xpu-storage",
                PoolKind::Staging => "xpu-staging",
            }),
            size: class,
            usage: kind.usage(),
            mapped_at_creation: false,
        });
        match pollster::block_on(scope.pop()) {
            None => Ok(buffer),
            Some(_) => Err(()),
        }
    }

    fn release_cached(st: &mut PoolState) {
        for bufs in std::mem::take(&mut st.free).into_values() {
            // Dropping (not destroying) the handles: wgpu frees each buffer once the work
            // already recorded or submitted with it is done.
            drop(bufs);
        }
        st.stats.reserved -= st.cached;
        st.cached = 0;
    }

    /// Destroys every cached (free) buffer.
    pub(crate) fn empty_cache(&self) -> Result<()> {
        let mut st = self.lock()?;
        Self::release_cached(&mut st);
        Ok(())
    }

    pub(crate) fn stats(&self) -> Result<MemoryStats> {
        Ok(self.lock()?.stats)
    }

    pub(crate) fn set_limit(&self, limit: Option<u64>) -> Result<()> {
        self.lock()?.stats.limit = limit;
        Ok(())
    }

    pub(crate) fn reset_peak(&self) -> Result<()> {
        let mut st = self.lock()?;
        st.stats.peak_allocated = st.stats.allocated;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn size_classes_round_up_and_are_stable() {
        assert_eq!(size_class(1), 256);
        assert_eq!(size_class(257), 512);
        assert_eq!(size_class(1 << 20), 1 << 20);
        let c = size_class((1 << 20) + 1);
        assert!(((1 << 20) + 1..=(1 << 20) + (1 << 18)).contains(&c));
        for b in [3u64 << 20, 100 << 20, 5 << 30] {
            let c = size_class(b);
            assert!(c >= b && (c - b) * 4 <= b, "{b} -> {c}");
            assert_eq!(size_class(c), c);
        }
    }
}
