//! Batched submission: the one open command encoder of a context.
//!
//! Ops record dispatches into the open encoder; the batch is submitted when a result is read
//! back, on `xpu::synchronize()`, or after `config::GpuConfig::batch` dispatches (default 64, at most
//! [`MAX_BATCH`]) — never once per op.
//! Kernel parameters go into a CPU-side arena of 256-byte slots that is written to one uniform
//! buffer with a single `write_buffer` right before the submit (wgpu applies queue writes before
//! the command buffers of the next submit, and after earlier submits, so each batch sees its own
//! parameters). Invariant: every buffer bound by the open batch is stamped with the batch id,
//! so an upload into a recycled buffer still read by the open batch flushes first.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::allocator::{PoolKind, PooledBuffer};
use super::context::Context;
use super::pipelines::PipelineKey;
use super::profile::{KernelTime, Profiler};
use crate::{Error, Result};

/// Most dispatches per submitted batch (also the number of parameter slots).
pub(crate) use crate::config::gpu::MAX_BATCH;
/// Bytes per parameter slot (WebGPU's largest `min_uniform_buffer_offset_alignment`).
pub(crate) const SLOT: usize = 256;
/// u32 words per parameter slot.
pub(crate) const PARAM_WORDS: usize = 64;

/// Dispatches per batch (`config::GpuConfig::batch`, 1 to [`MAX_BATCH`]).
fn batch_size() -> usize {
    crate::config::with(|c| c.gpu.batch.clamp(1, MAX_BATCH))
}

/// The open batch.
pub(crate) struct Stream {
    encoder: Option<wgpu::CommandEncoder>,
    params: Vec<u8>,
    arena: wgpu::Buffer,
    dispatches: usize,
    /// Dispatches after which the batch is submitted (at most [`MAX_BATCH`]).
    max_batch: usize,
    batch: u64,
    profiler: Option<Profiler>,
}

/// One compute dispatch: a pipeline, its parameters and its buffers by binding.
pub(crate) struct Dispatch<'a> {
    pub key: PipelineKey,
    pub pipeline: wgpu::ComputePipeline,
    pub params: [u32; PARAM_WORDS],
    pub bindings: &'a [(u32, &'a PooledBuffer)],
    pub workgroups: [u32; 3],
}

impl Stream {
    pub(crate) fn new(device: &wgpu::Device, queue: &wgpu::Queue, timestamps: bool) -> Stream {
        let arena = device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("xpu-params"),
            size: (MAX_BATCH * SLOT) as u64,
            usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        Stream {
            encoder: None,
            params: Vec::with_capacity(MAX_BATCH * SLOT),
            arena,
            dispatches: 0,
            max_batch: batch_size(),
            batch: 1,
            profiler: Profiler::from_env(device, queue, timestamps),
        }
    }

    fn encoder(&mut self, device: &wgpu::Device) -> &mut wgpu::CommandEncoder {
        self.encoder.get_or_insert_with(|| {
            device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("xpu-batch"),
            })
        })
    }

    fn stamp(&self, buf: &PooledBuffer) {
        buf.last_batch.store(self.batch, Ordering::Relaxed);
    }

    /// Records one dispatch (flushing first if the batch is full).
    pub(crate) fn dispatch(&mut self, ctx: &Context, d: Dispatch<'_>) -> Result<()> {
        if self.dispatches >= self.max_batch {
            self.flush(ctx);
        }
        let slot = self.params.len() as u64;
        self.params
            .extend_from_slice(bytemuck::cast_slice(&d.params));
        let layout = d.pipeline.get_bind_group_layout(0);
        let mut entries = vec![wgpu::BindGroupEntry {
            binding: 0,
            resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                buffer: &self.arena,
                offset: slot,
                size: std::num::NonZeroU64::new(SLOT as u64),
            }),
        }];
        let max_binding = ctx.limits.max_storage_buffer_binding_size;
        for (binding, buf) in d.bindings {
            self.stamp(buf);
            let size = buf.size().min(max_binding);
            entries.push(wgpu::BindGroupEntry {
                binding: *binding,
                resource: wgpu::BindingResource::Buffer(wgpu::BufferBinding {
                    buffer: buf.raw(),
                    offset: 0,
                    size: std::num::NonZeroU64::new(size),
                }),
            });
        }
        let bind_group = ctx.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &layout,
            entries: &entries,
        });
        let max = ctx.limits.max_compute_workgroups_per_dimension;
        if d.workgroups.iter().any(|&w| w > max) {
            return Err(Error::Gpu(format!(
                "dispatch of {:?} workgroups exceeds the adapter's limit of {max} per dimension",
                d.workgroups
            )));
        }
        let encoder = self.encoder.get_or_insert_with(|| {
            ctx.device
                .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                    label: Some("xpu-batch"),
                })
        });
        {
            let timestamp_writes = self
                .profiler
                .as_mut()
                .and_then(|p| p.next_pass(d.key, d.workgroups, &d.params));
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: None,
                timestamp_writes,
            });
            pass.set_pipeline(&d.pipeline);
            pass.set_bind_group(0, &bind_group, &[]);
            pass.dispatch_workgroups(d.workgroups[0], d.workgroups[1], d.workgroups[2]);
        }
        self.dispatches += 1;
        Ok(())
    }

    /// Records a buffer-to-buffer copy (sizes and offsets multiples of 4).
    pub(crate) fn copy(
        &mut self,
        ctx: &Context,
        src: &PooledBuffer,
        src_off: u64,
        dst: &PooledBuffer,
        dst_off: u64,
        bytes: u64,
    ) {
        self.stamp(src);
        self.stamp(dst);
        self.encoder(&ctx.device).copy_buffer_to_buffer(
            src.raw(),
            src_off,
            dst.raw(),
            dst_off,
            bytes,
        );
    }

    /// Records zero-filling a buffer.
    pub(crate) fn clear(&mut self, ctx: &Context, buf: &PooledBuffer) {
        self.stamp(buf);
        self.encoder(&ctx.device).clear_buffer(buf.raw(), 0, None);
    }

    /// Writes host bytes to the start of `buf`, in queue order with the recorded work.
    pub(crate) fn upload(&mut self, ctx: &Context, buf: &PooledBuffer, bytes: &[u8]) {
        if buf.last_batch.load(Ordering::Relaxed) == self.batch {
            // The open batch still reads this (recycled) buffer: submit it first, because
            // queue writes run before the next submit's command buffers.
            self.flush(ctx);
        }
        let rem = bytes.len() % 4;
        if rem == 0 {
            ctx.queue.write_buffer(buf.raw(), 0, bytes);
        } else {
            let mut padded = Vec::with_capacity(bytes.len() + 4 - rem);
            padded.extend_from_slice(bytes);
            padded.resize(bytes.len() + 4 - rem, 0);
            ctx.queue.write_buffer(buf.raw(), 0, &padded);
        }
    }

    /// Submits the open batch (no wait).
    pub(crate) fn flush(&mut self, ctx: &Context) {
        let Some(mut encoder) = self.encoder.take() else {
            return;
        };
        if !self.params.is_empty() {
            ctx.queue.write_buffer(&self.arena, 0, &self.params);
            self.params.clear();
        }
        let timed = self
            .profiler
            .as_ref()
            .is_some_and(|p| p.resolve(&mut encoder));
        ctx.queue.submit([encoder.finish()]);
        self.dispatches = 0;
        self.batch += 1;
        if timed {
            if let Some(p) = self.profiler.as_mut() {
                if let Err(e) = p.collect(&ctx.device) {
                    // Profiling is a diagnostic: a failed read-back drops the batch's times.
                    eprintln!("xpu profile: {e}");
                }
            }
        }
    }

    /// The profiler's per-pipeline totals since the last call (`None` when not profiling).
    pub(crate) fn take_profile(&mut self, ctx: &Context) -> Option<Vec<KernelTime>> {
        self.flush(ctx);
        self.profiler.as_mut().map(Profiler::take)
    }

    /// Copies `bytes` bytes from `src` at `offset` to the host; waits for the GPU.
    pub(crate) fn read(
        &mut self,
        ctx: &Context,
        src: &PooledBuffer,
        offset: u64,
        bytes: u64,
    ) -> Result<Vec<u8>> {
        if bytes == 0 {
            return Ok(Vec::new());
        }
        let padded = bytes.div_ceil(4) * 4;
        let staging: Arc<PooledBuffer> =
            ctx.allocator
                .alloc(&ctx.device, PoolKind::Staging, padded)?;
        self.copy(ctx, src, offset, &staging, 0, padded);
        self.flush(ctx);
        let (tx, rx) = std::sync::mpsc::channel();
        staging
            .raw()
            .map_async(wgpu::MapMode::Read, 0..padded, move |r| {
                let _ = tx.send(r);
            });
        ctx.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| Error::Gpu(format!("waiting for the GPU: {e}")))?;
        ctx.take_device_error()?;
        match rx.recv() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(Error::Gpu(format!("mapping a read-back buffer: {e}"))),
            Err(_) => return Err(Error::Gpu("read-back was never completed".into())),
        }
        let n = bytes as usize;
        let mut out = Vec::new();
        // The host copy is taken fallibly: a read-back too large for the host is an error.
        let reserved = out.try_reserve_exact(n).is_ok();
        if reserved {
            let view = staging
                .raw()
                .get_mapped_range(0..padded)
                .map_err(|e| Error::Gpu(format!("read-back range: {e}")))?;
            out.extend_from_slice(&view[..n]);
        }
        staging.raw().unmap();
        if !reserved {
            return Err(Error::CpuOutOfMemory {
                op: "read-back",
                requested: bytes,
            });
        }
        Ok(out)
    }

    /// Submits and waits for all work.
    pub(crate) fn synchronize(&mut self, ctx: &Context) -> Result<()> {
        self.flush(ctx);
        ctx.device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| Error::Gpu(format!("waiting for the GPU: {e}")))?;
        ctx.take_device_error()
    }
}
