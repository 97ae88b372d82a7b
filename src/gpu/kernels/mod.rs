//! The WGSL kernels, one folder per family (`matmul`, `conv`, `winograd`, `attention`, `norm`,
//! `reduce`, `elementwise`): each holds its selection rules, its launchers and its `.wgsl`
//! files, which `crate::gpu::pipelines::ShaderId` registers; `common.wgsl` is the prelude every
//! module starts with. Each launcher validates what the shader cannot (dtype support, 32-bit
//! index range), builds the parameter block and records one or more dispatches; none of them
//! waits for the GPU.

pub(crate) mod attention;
pub(crate) mod conv;
pub(crate) mod elementwise;
pub(crate) mod matmul;
pub(crate) mod norm;
pub(crate) mod params;
pub(crate) mod reduce;
pub(crate) mod self_check;
pub(crate) mod winograd;

use super::pipelines::{PipelineKey, ShaderId};
use super::stream::Dispatch;
use super::{poisoned, XpuStorage};
use crate::{DType, Error, Result};

/// Records one dispatch of `key` with `inputs` at bindings 2, 3, … (binding 1 is the output);
/// errors name the kernel's entry point.
pub(crate) fn launch(
    out: &XpuStorage,
    key: PipelineKey,
    params: params::Params,
    inputs: &[&XpuStorage],
    workgroups: [u32; 3],
) -> Result<()> {
    let bindings: Vec<(u32, &XpuStorage)> = (2..).zip(inputs.iter().copied()).collect();
    let groups = workgroups.map(|g| g as usize);
    dispatch(out, key, params, &bindings, groups, key.entry)
}

/// Refuses storages larger than one storage binding may be (the adapter's
/// `max_storage_buffer_binding_size`): the stream binds at most that many bytes of a buffer, so
/// a kernel would read zeros (or drop writes) past it instead of failing.
pub(crate) fn check_bindings<'a>(storages: impl Iterator<Item = &'a XpuStorage>) -> Result<()> {
    for s in storages {
        let ctx = &s.ctx;
        let max_binding = ctx.limits.max_storage_buffer_binding_size;
        let bytes = (s.len * s.dtype.size_in_bytes()) as u64;
        if bytes > max_binding {
            return Err(crate::Error::OutOfMemory {
                requested: bytes,
                allocated: ctx.allocator.stats()?.allocated,
                limit: max_binding,
            });
        }
    }
    Ok(())
}

/// A key with the default 1-D workgroup size.
pub(crate) fn key(
    shader: ShaderId,
    entry: &'static str,
    dt_in: DType,
    dt_out: DType,
    variant: u32,
) -> PipelineKey {
    PipelineKey {
        shader,
        entry,
        dt_in,
        dt_out,
        workgroup: 256,
        variant,
    }
}

/// Records one dispatch with explicit bindings (binding 1 is `out`).
pub(crate) fn dispatch(
    out: &XpuStorage,
    key: PipelineKey,
    params: params::Params,
    inputs: &[(u32, &XpuStorage)],
    groups: [usize; 3],
    op: &'static str,
) -> Result<()> {
    let ctx = &out.ctx;
    let max = ctx.limits.max_compute_workgroups_per_dimension as usize;
    if groups.iter().any(|&g| g > max) {
        return Err(Error::invalid(
            op,
            format!("a grid of {groups:?} workgroups exceeds the adapter's {max} per dimension"),
        ));
    }
    check_bindings(std::iter::once(out).chain(inputs.iter().map(|(_, s)| *s)))?;
    let pipeline = ctx.pipelines.get(&ctx.device, key)?;
    let mut bindings = vec![(1u32, &*out.buffer)];
    bindings.extend(inputs.iter().map(|(b, s)| (*b, &*s.buffer)));
    let mut stream = ctx.stream.lock().map_err(|_| poisoned())?;
    stream.dispatch(
        ctx,
        Dispatch {
            key,
            pipeline,
            params: params.0,
            bindings: &bindings,
            workgroups: groups.map(|g| g as u32),
        },
    )
}
