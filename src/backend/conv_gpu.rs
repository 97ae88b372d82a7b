//! The Xpu convolution engine's storage-level entry: the kernel the autotuner picks (family
//! `gpu_conv2d`) among the implicit GEMM on FMAs (`gemm`: `gpu::kernels::conv`), the same
//! implicit GEMM on f16 tensor cores (`coop16`: `gpu::kernels::conv::coop`, and the tile shapes
//! of `mm_coop16t` beside it, `coop16t_*`; each with its K split as the `gpu_split_k` family
//! picks) and Winograd F(2×2, 3×3) (`winograd`: `conv_gpu_winograd`),
//! for `ConvTile::Auto`; a forced tile runs its kernel alone.
//!
//! Invariants: every operand is checked to live on the Xpu before any GPU work is recorded; the
//! Tensor layer (`ops::conv_xpu`) has validated shapes and dtypes and broadcast the residual.
//! Every candidate writes the same output layout (`out_strides`), so results compare as flat
//! buffers.

use super::conv_gpu_winograd as winograd;
use super::{tuning, Storage};
use crate::desc::ConvTile;
use crate::desc::{Activation, ConvGeom};
use crate::gpu::kernels::conv::{self as kernels, coop, ConvLaunch, Operand};
use crate::gpu::kernels::matmul::coop16_tiles::{Coop16Tiles, TileLimits, TILE_SHAPES};
use crate::gpu::XpuStorage;
use crate::{Device, Error, Layout, Result};

/// The autotuner's family of the Xpu convolution kernels.
pub(crate) const GPU_CONV: &str = "gpu_conv2d";

/// A candidate of [`GPU_CONV`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kernel {
    /// The implicit GEMM on FMAs (the launch's tile; `Auto` by shape).
    Gemm,
    /// The implicit GEMM on f16 tensor cores.
    Coop16,
    /// The implicit GEMM on f16 tensor cores with tile shape `TILE_SHAPES[i]` (`mm_coop16t`).
    Coop16Tiles(u8),
    /// Winograd F(2×2, 3×3).
    Winograd,
}

impl Kernel {
    fn name(self) -> &'static str {
        match self {
            Kernel::Gemm => "gemm",
            Kernel::Coop16 => "coop16",
            Kernel::Coop16Tiles(i) => TILE_SHAPES[usize::from(i) % TILE_SHAPES.len()].0,
            Kernel::Winograd => "winograd",
        }
    }

    /// The tile shape of a `mm_coop16t` candidate.
    fn tiles(self) -> Option<Coop16Tiles> {
        match self {
            Kernel::Coop16Tiles(i) => Some(TILE_SHAPES[usize::from(i) % TILE_SHAPES.len()].1),
            _ => None,
        }
    }
}

/// The kernels that can run `l` and the index of the static rule's: for `ConvTile::Auto` the
/// FMA implicit GEMM always, the tensor-core one where eligible and with it the tile shapes of
/// `mm_coop16t` that fit the adapter and gather at most 16 rows per invocation, Winograd where
/// it fits; the rule takes Winograd where `auto_uses_winograd` says, else the tensor cores
/// (`mm_coop16`) where eligible, else the FMAs. A forced tile lists its one kernel.
fn candidates(l: &ConvLaunch) -> (Vec<Kernel>, usize) {
    match l.tile {
        ConvTile::Winograd => (vec![Kernel::Winograd], 0),
        ConvTile::Auto => {
            let tensor_cores = coop::eligible(l);
            let mut list = vec![Kernel::Gemm];
            if tensor_cores {
                list.push(Kernel::Coop16);
                let limits = &l.input.0.ctx.limits;
                let limits = TileLimits {
                    invocations: limits.max_compute_invocations_per_workgroup,
                    workgroup_bytes: limits.max_compute_workgroup_storage_size,
                };
                let fitting = TILE_SHAPES.iter().enumerate();
                let fitting = fitting.filter(|(_, (_, t))| t.fits(&limits) && t.gathers());
                list.extend(fitting.map(|(i, _)| Kernel::Coop16Tiles(i as u8)));
            }
            if winograd::fits(l) {
                list.push(Kernel::Winograd);
            }
            let rule = if winograd::auto_uses_winograd(l, tensor_cores) {
                Kernel::Winograd
            } else if tensor_cores {
                Kernel::Coop16
            } else {
                Kernel::Gemm
            };
            let at = list.iter().position(|&k| k == rule).unwrap_or(0);
            (list, at)
        }
        _ => (vec![Kernel::Gemm], 0),
    }
}

/// The autotuner's problem text of an Xpu convolution: dtype, batch and spatial sizes bucketed,
/// channels, kernel, stride, padding, dilation and groups exact, the input's and output's
/// formats, and whether Winograd filters come prepared.
fn conv_problem(c: &GpuConv) -> String {
    use crate::autotune::bucket;
    let g = &c.geom;
    let st = c.input.1.strides();
    let input = if c.input.1.is_contiguous() {
        "nchw"
    } else if st.get(1) == Some(&1) {
        "nhwc"
    } else {
        "strided"
    };
    let output = if c.out_strides[1] == 1 {
        "nhwc"
    } else {
        "nchw"
    };
    format!(
        "{} n {} c {} o {} hw {}x{} k {}x{} s {}x{} p {}x{} d {}x{} g {} in {input} out {output}{}",
        c.input.0.dtype(),
        bucket(g.n),
        g.c,
        g.o,
        bucket(g.h),
        bucket(g.w),
        g.kh,
        g.kw,
        g.p.stride.0,
        g.p.stride.1,
        g.p.padding.0,
        g.p.padding.1,
        g.p.dilation.0,
        g.p.dilation.1,
        g.p.groups,
        if c.winograd_filters.is_some() {
            " filters"
        } else {
            ""
        }
    )
}

/// The tensor-core convolution on `kernel` (`mm_coop16`, or `mm_coop16t` with a tile shape)
/// with K split as the autotuner picks (family `gpu_split_k`).
fn coop_tuned(l: &ConvLaunch, kernel: Kernel, tol: f32) -> Result<XpuStorage> {
    let shape = kernel.tiles();
    let (tiles, k) = coop::split_facts_on(l, shape.as_ref());
    let split = tuning::SplitProblem {
        kernel: if shape.is_some() {
            kernel.name()
        } else {
            "conv_coop16"
        },
        dtype: l.input.0.dtype,
        tiles,
        k,
        plans: shape.is_none(),
    };
    tuning::tuned_splits(&split, &mut |s| coop::conv2d_on(l, s, shape), tol)
}

/// One Xpu convolution: the operands as storages with their layouts (the residual broadcast
/// to the output), the epilogue, the output strides and the tile choice.
pub(crate) struct GpuConv<'a> {
    pub geom: ConvGeom,
    pub input: (&'a Storage, &'a Layout),
    pub weight: (&'a Storage, &'a Layout),
    pub bias: Option<(&'a Storage, &'a Layout)>,
    pub residual: Option<(&'a Storage, &'a Layout)>,
    pub activation: Activation,
    /// `[batch, channel, pixel]` strides of the output.
    pub out_strides: [usize; 3],
    pub tile: ConvTile,
    /// Winograd filters prepared from this weight, if the caller keeps them.
    pub winograd_filters: Option<(&'a Storage, &'a Layout)>,
}

fn xpu_operand<'a>(op: &'static str, (s, l): (&'a Storage, &'a Layout)) -> Result<Operand<'a>> {
    match s {
        Storage::Xpu(x) => Ok((x, l)),
        Storage::Cpu(_) => Err(Error::DeviceMismatch {
            op,
            lhs: Device::Xpu,
            rhs: Device::Cpu,
        }),
    }
}

/// Runs `c` on the Xpu on the kernel the autotuner picks (see the module docs); returns the
/// output storage (`[N, O, Ho, Wo]` at `c.out_strides`).
pub(crate) fn conv2d_gpu(c: &GpuConv) -> Result<Storage> {
    let op = "conv2d";
    let launch = ConvLaunch {
        shape: c.geom,
        input: xpu_operand(op, c.input)?,
        weight: xpu_operand(op, c.weight)?,
        bias: c.bias.map(|b| xpu_operand(op, b)).transpose()?,
        residual: c.residual.map(|r| xpu_operand(op, r)).transpose()?,
        activation: c.activation,
        out_strides: c.out_strides,
        tile: c.tile,
    };
    kernels::check(&launch)?;
    let (list, rule) = candidates(&launch);
    let tol = tuning::gpu_tolerance(launch.input.0.dtype);
    let mut exec = |i: usize| match list[i] {
        Kernel::Gemm => kernels::conv2d(&launch),
        k @ (Kernel::Coop16 | Kernel::Coop16Tiles(_)) => coop_tuned(&launch, k, tol),
        Kernel::Winograd => match winograd::conv2d(&launch, c.winograd_filters) {
            // Winograd's temporaries (transformed inputs and point products) take several
            // times the output's memory; where they do not fit, an automatic choice runs the
            // implicit GEMM, which needs only the output (the temporaries are released on the
            // way out). A measurement records the failure instead.
            Err(Error::OutOfMemory { .. })
                if c.tile == ConvTile::Auto && !crate::autotune::measuring() =>
            {
                if list.contains(&Kernel::Coop16) {
                    let (tiles, k) = coop::split_facts(&launch);
                    let splits = crate::gpu::kernels::matmul::split_k::rule(tiles, k, true);
                    coop::conv2d(&launch, splits)
                } else {
                    kernels::conv2d(&launch)
                }
            }
            r => r,
        },
    };
    let g = &launch.shape;
    if g.n * g.o * g.ho * g.wo == 0 {
        // No output element: nothing to choose.
        return Ok(Storage::Xpu(exec(rule)?));
    }
    let names: Vec<&'static str> = list.iter().map(|k| k.name()).collect();
    let key = tuning::gpu_key(GPU_CONV, &conv_problem(c))?;
    let out = tuning::run_tuned_gpu(&key, &names, rule, &mut exec, tol)?;
    Ok(Storage::Xpu(out))
}

/// Winograd filters `[16, Cp, O]` of an Xpu weight `[O, C, 3, 3]` (see `conv_gpu_winograd`).
pub(crate) fn winograd_filters(weight: (&Storage, &Layout)) -> Result<(Storage, Layout)> {
    winograd::transform_filters(weight)
}

/// Test hook: 16-bit Winograd operands on every adapter (see `gpu::kernels::winograd`).
pub(crate) fn set_winograd_sixteen_bit_operands(on: bool) {
    crate::gpu::kernels::winograd::set_sixteen_bit_operands(on)
}
