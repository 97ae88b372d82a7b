//! GPU kernel profiler: GPU time per pipeline, from timestamp queries.
//!
//! Off unless the process starts with `XPU_PROFILE=1` (or `XPU_PROFILE=shapes`) and the adapter
//! has `TIMESTAMP_QUERY`. With `shapes` every pipeline's time is further split by problem: the
//! dispatch grid and, for the matrix-product family (whose parameter words 32-34 are M, N, K),
//! the product's dimensions — so a profile says which layer shapes a kernel is slow on. When on, every compute pass of a batch writes a begin and an end timestamp; at each flush
//! the batch's timestamps are resolved, read back (the flush then waits for the GPU, so
//! profiled runs are slower end to end but each kernel's time is its own) and added to a
//! per-pipeline total. Invariant: `labels.len()` is the number of timed passes of the open
//! batch, at most [`MAX_BATCH`], and pass `i` writes queries `2i` and `2i + 1`. Without `shapes` every label's
//! [`Problem`] is `None`, so the totals are per pipeline exactly as before.

use std::collections::HashMap;

use super::pipelines::{PipelineKey, ShaderId};
use super::stream::{MAX_BATCH, PARAM_WORDS};
use crate::{Error, Result};

/// GPU time spent in one pipeline over the profiled period.
#[derive(Clone, Debug, PartialEq)]
pub struct KernelTime {
    /// Shader file, entry point, dtypes and variant of the pipeline.
    pub kernel: String,
    /// Dispatches recorded.
    pub dispatches: u64,
    /// Total GPU time in milliseconds (sum of begin-to-end pass times).
    pub total_ms: f64,
}

/// What `XPU_PROFILE=shapes` adds to a pass's label: its workgroup grid and, for the product
/// family, `[m, n, k]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Problem {
    grid: [u32; 3],
    mnk: Option<[u32; 3]>,
}

/// A timed pass: its pipeline and (with `shapes`) its problem.
type Label = (PipelineKey, Option<Problem>);

/// Timestamp queries of the open batch and the running totals.
pub(crate) struct Profiler {
    queries: wgpu::QuerySet,
    resolve: wgpu::Buffer,
    readback: wgpu::Buffer,
    labels: Vec<Label>,
    totals: HashMap<Label, (u64, f64)>,
    period_ns: f64,
    by_shape: bool,
}

/// Whether `shader` reads `[m, n, k]` from parameter words 32-34 (`kernels/matmul/matmul.wgsl`'s
/// `dim_m`, `dim_n`, `dim_k`): the products and the tensor-core convolution gather.
fn product_family(shader: ShaderId) -> bool {
    matches!(
        shader,
        ShaderId::Matmul
            | ShaderId::MatmulTiled
            | ShaderId::MatmulCoop
            | ShaderId::MatmulCoop16
            | ShaderId::MatmulSubgroup
            | ShaderId::MatmulVec4
    )
}

impl Profiler {
    /// A profiler when `XPU_PROFILE=1` and timestamps are supported, else `None`.
    pub(crate) fn from_env(
        device: &wgpu::Device,
        queue: &wgpu::Queue,
        timestamps: bool,
    ) -> Option<Profiler> {
        let mode = crate::config::with(|c| c.profile);
        let by_shape = mode == crate::config::Profile::Shapes;
        let wanted = mode != crate::config::Profile::Off;
        if !wanted || !timestamps {
            return None;
        }
        let count = 2 * MAX_BATCH as u32;
        let bytes = u64::from(count) * 8;
        Some(Profiler {
            queries: device.create_query_set(&wgpu::QuerySetDescriptor {
                label: Some("xpu-profile"),
                ty: wgpu::QueryType::Timestamp,
                count,
            }),
            resolve: device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("xpu-profile-resolve"),
                size: bytes,
                usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
                mapped_at_creation: false,
            }),
            readback: device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("xpu-profile-readback"),
                size: bytes,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            }),
            labels: Vec::with_capacity(MAX_BATCH),
            totals: HashMap::new(),
            period_ns: f64::from(queue.get_timestamp_period()),
            by_shape,
        })
    }

    /// The timestamp writes for the next pass, labelled `key` (and, with `shapes`, by its
    /// `grid` and `params`); `None` when the batch is full, which the stream prevents by
    /// flushing first.
    pub(crate) fn next_pass(
        &mut self,
        key: PipelineKey,
        grid: [u32; 3],
        params: &[u32; PARAM_WORDS],
    ) -> Option<wgpu::ComputePassTimestampWrites<'_>> {
        if self.labels.len() >= MAX_BATCH {
            return None;
        }
        let i = self.labels.len() as u32;
        let problem = self.by_shape.then(|| Problem {
            grid,
            mnk: product_family(key.shader).then(|| [params[32], params[33], params[34]]),
        });
        self.labels.push((key, problem));
        Some(wgpu::ComputePassTimestampWrites {
            query_set: &self.queries,
            beginning_of_pass_write_index: Some(2 * i),
            end_of_pass_write_index: Some(2 * i + 1),
        })
    }

    /// Records resolving the batch's timestamps into the read-back buffer (before the submit).
    pub(crate) fn resolve(&self, encoder: &mut wgpu::CommandEncoder) -> bool {
        let n = self.labels.len() as u32;
        if n == 0 {
            return false;
        }
        encoder.resolve_query_set(&self.queries, 0..2 * n, &self.resolve, 0);
        encoder.copy_buffer_to_buffer(&self.resolve, 0, &self.readback, 0, u64::from(n) * 16);
        true
    }

    /// Waits for the submitted batch, reads its timestamps and adds them to the totals.
    pub(crate) fn collect(&mut self, device: &wgpu::Device) -> Result<()> {
        let labels = std::mem::take(&mut self.labels);
        let n = labels.len() as u64;
        if n == 0 {
            return Ok(());
        }
        let slice = self.readback.slice(0..n * 16);
        let (tx, rx) = std::sync::mpsc::channel();
        slice.map_async(wgpu::MapMode::Read, move |r| {
            let _ = tx.send(r);
        });
        device
            .poll(wgpu::PollType::wait_indefinitely())
            .map_err(|e| Error::Gpu(format!("waiting for the GPU: {e}")))?;
        match rx.recv() {
            Ok(Ok(())) => {}
            _ => return Err(Error::Gpu("profile timestamps were not read back".into())),
        }
        let ticks: Result<Vec<u64>> = slice
            .get_mapped_range()
            .map(|view| {
                view.chunks_exact(8)
                    .map(|b| u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]))
                    .collect()
            })
            .map_err(|e| Error::Gpu(format!("profile read-back range: {e}")));
        self.readback.unmap();
        let ticks = ticks?;
        {
            for (key, pair) in labels.iter().zip(ticks.chunks_exact(2)) {
                let ns = pair[1].saturating_sub(pair[0]) as f64 * self.period_ns;
                let entry = self.totals.entry(*key).or_insert((0, 0.0));
                entry.0 += 1;
                entry.1 += ns;
            }
        }
        Ok(())
    }

    /// The totals so far, longest first, and clears them.
    pub(crate) fn take(&mut self) -> Vec<KernelTime> {
        let mut out: Vec<KernelTime> = self
            .totals
            .drain()
            .map(|((k, problem), (dispatches, ns))| KernelTime {
                kernel: format!(
                    "{}:{} {:?}->{:?} v{} wg{}{}",
                    k.shader.file(),
                    k.entry,
                    k.dt_in,
                    k.dt_out,
                    k.variant,
                    k.workgroup,
                    problem.map_or(String::new(), describe)
                ),
                dispatches,
                total_ms: ns * 1e-6,
            })
            .collect();
        out.sort_by(|a, b| b.total_ms.total_cmp(&a.total_ms));
        out
    }
}

/// ` mnk MxNxK grid XxYxZ` (the product dims only for the product family).
fn describe(p: Problem) -> String {
    let [x, y, z] = p.grid;
    match p.mnk {
        Some([m, n, k]) => format!(" mnk {m}x{n}x{k} grid {x}x{y}x{z}"),
        None => format!(" grid {x}x{y}x{z}"),
    }
}
