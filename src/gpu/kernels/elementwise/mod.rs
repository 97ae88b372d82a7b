//! Copy/cast, unary, binary and concatenation on Xpu (`elementwise.wgsl`; comparisons and
//! selection, in the same shader, are launched by [`select`], gathers by [`index`]).
//!
//! Every launcher reads strided inputs (any view) and writes a fresh contiguous output, one
//! 32-bit word per invocation. Unary ops run on float dtypes (and the Cpu's integer set on I32,
//! bit for bit as the Cpu computes it); binary ops on floats and I32;
//! copies, casts and concatenation on every dtype, bit-exact when the dtype is unchanged.
//! Copies of transposing views (see [`transpose_plan`]) run as 32×32 tiles through workgroup
//! memory instead of the per-word gather, with the same results: on a GPU the gather's lanes
//! each read their own memory segment there (the H100 took 2.3 ms for the tensor-core
//! convolution of an NCHW f16 2×320×64² input, 0.42 ms channels-last: the NCHW ↔ NHWC copies
//! around it are the only difference between the two calls, so most likely the gather's; not
//! yet measured on a GPU with the tiles); on lavapipe the tiles halved 16 Mi-element transposes.

mod index;
mod select;

use crate::desc::kinds::{BinaryOp, UnaryOp};
use crate::gpu::kernels::params::{grid, Params, EXTRA, OFFSET0, OFFSET1};
use crate::gpu::kernels::{key, launch};
use crate::gpu::pipelines::ShaderId;
use crate::gpu::XpuStorage;
use crate::layout::Layout;
use crate::{DType, Device, Error, Result};

fn words(len: usize, dtype: DType) -> usize {
    let per_word = 4 / dtype.size_in_bytes();
    len.div_ceil(per_word)
}

fn workgroups(out: &XpuStorage) -> [u32; 3] {
    grid(
        words(out.len, out.dtype).div_ceil(256),
        out.ctx.limits.max_compute_workgroups_per_dimension,
    )
}

/// Smallest extent of the two transposed dims for which [`transpose_plan`] tiles the copy: below
/// it most lanes of a 32×32 tile would idle, and the gather's reads are short runs anyway.
const TRANSPOSE_MIN_EXTENT: usize = 16;

/// How `copy_transpose` moves a view (see [`transpose_plan`]).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct TransposePlan {
    /// Dim of the coalesced shape whose input stride is 1.
    pub contiguous_dim: usize,
    /// Workgroups: 32×32 tiles of (that dim, the innermost dim) times the other dims' indices.
    pub tiles: usize,
}

/// Whether a copy of the view (`shape`, `strides`) into `dtype` runs as tiled transposes:
/// after merging the dims the view keeps contiguous, the innermost output dim is strided in the
/// input while another dim is contiguous there (`x.t()`, NCHW ↔ NHWC, `permute`s that move the
/// last axis), both extents are at least [`TRANSPOSE_MIN_EXTENT`], and the innermost extent is a
/// multiple of `dtype`'s elements per 32-bit word (each output word then lies in one tile).
/// Why: the element-wise gather reads one element per lane at a large stride there, so every
/// lane of a warp touches its own memory segment; the tile reads and writes whole runs.
/// The dims are merged by the same `coalesce_joint` that `Params::shape` applies to the
/// params block, so `contiguous_dim` indexes the shape the kernel sees.
pub(crate) fn transpose_plan(
    shape: &[usize],
    strides: &[usize],
    dtype: DType,
) -> Option<TransposePlan> {
    let (shape, strides) = crate::gpu::kernels::params::coalesce_joint(shape, &[strides]);
    let strides = strides.first()?;
    let rank = shape.len();
    let inner = rank.checked_sub(1)?;
    if strides[inner] == 1 || shape[inner] < TRANSPOSE_MIN_EXTENT {
        return None;
    }
    let per_word = 4 / dtype.size_in_bytes();
    if !shape[inner].is_multiple_of(per_word) {
        return None;
    }
    let contiguous_dim = (0..inner).rev().find(|&d| strides[d] == 1)?;
    if shape[contiguous_dim] < TRANSPOSE_MIN_EXTENT {
        return None;
    }
    let batches: usize = (0..inner)
        .filter(|&d| d != contiguous_dim)
        .map(|d| shape[d])
        .product();
    let tiles = shape[inner].div_ceil(32) * shape[contiguous_dim].div_ceil(32) * batches;
    Some(TransposePlan {
        contiguous_dim,
        tiles,
    })
}

impl XpuStorage {
    /// Gathers `layout` into a new contiguous storage of `dtype`.
    pub(crate) fn copy_cast(&self, layout: &Layout, dtype: DType) -> Result<XpuStorage> {
        let out = XpuStorage::alloc(&self.ctx, dtype, layout.numel())?;
        if out.len == 0 {
            return Ok(out);
        }
        let mut p = Params::new(out.len, "copy")?;
        p.shape("copy", layout.shape(), &[layout.strides()])?.set(
            OFFSET0,
            layout.offset(),
            "copy",
        )?;
        if let Some(plan) = transpose_plan(layout.shape(), layout.strides(), dtype) {
            p.set(EXTRA, plan.contiguous_dim, "copy")?
                .set(EXTRA + 1, plan.tiles, "copy")?;
            let k = key(
                ShaderId::Elementwise,
                "copy_transpose",
                self.dtype,
                dtype,
                0,
            );
            let groups = grid(
                plan.tiles,
                out.ctx.limits.max_compute_workgroups_per_dimension,
            );
            launch(&out, k, p, &[self], groups)?;
            return Ok(out);
        }
        let k = key(ShaderId::Elementwise, "copy_cast", self.dtype, dtype, 0);
        launch(&out, k, p, &[self], workgroups(&out))?;
        Ok(out)
    }

    /// A contiguous copy: a plain buffer copy when the view is contiguous and word-aligned,
    /// else the copy kernel.
    pub(crate) fn duplicate(&self, layout: &Layout) -> Result<XpuStorage> {
        let size = self.dtype.size_in_bytes();
        let bytes = crate::layout::alloc_bytes("copy", layout.numel(), self.dtype)?;
        let offset = layout.offset() * size;
        if !layout.is_contiguous() || !offset.is_multiple_of(4) || bytes == 0 {
            return self.copy_cast(layout, self.dtype);
        }
        let out = XpuStorage::alloc(&self.ctx, self.dtype, layout.numel())?;
        let mut stream = self.ctx.stream.lock().map_err(|_| crate::gpu::poisoned())?;
        stream.copy(
            &self.ctx,
            &self.buffer,
            offset as u64,
            &out.buffer,
            0,
            (bytes as u64).div_ceil(4) * 4,
        );
        Ok(out)
    }

    /// Applies a unary op to a float tensor, or one of the integer ops to an i32 tensor
    /// ([`check_i32_unary`]).
    pub(crate) fn unary(&self, layout: &Layout, op: UnaryOp) -> Result<XpuStorage> {
        if self.dtype == DType::I32 {
            check_i32_unary(op)?;
        } else if !self.dtype.is_float() {
            return Err(Error::UnsupportedDType {
                op: op.name(),
                dtype: self.dtype,
                device: Device::Xpu,
                hint: "; cast with to_dtype(DType::F32) first".into(),
            });
        }
        let out = XpuStorage::alloc(&self.ctx, self.dtype, layout.numel())?;
        if out.len == 0 {
            return Ok(out);
        }
        let [a, b] = op.params();
        let mut p = Params::new(out.len, op.name())?;
        p.shape(op.name(), layout.shape(), &[layout.strides()])?
            .set(OFFSET0, layout.offset(), op.name())?
            .scalars(a, b);
        let k = key(
            ShaderId::Elementwise,
            "unary",
            self.dtype,
            self.dtype,
            op.code(),
        );
        launch(&out, k, p, &[self], workgroups(&out))?;
        Ok(out)
    }

    /// Applies a binary op; both layouts are already broadcast to the output shape.
    pub(crate) fn binary(
        &self,
        lhs: &Layout,
        rhs: &XpuStorage,
        rhs_layout: &Layout,
        op: BinaryOp,
    ) -> Result<XpuStorage> {
        self.check_same_context(rhs, op.name())?;
        if !(self.dtype.is_float() || self.dtype == DType::I32) {
            return Err(Error::UnsupportedDType {
                op: op.name(),
                dtype: self.dtype,
                device: Device::Xpu,
                hint: "; binary ops take f32, f16, bf16 or i32".into(),
            });
        }
        let out = XpuStorage::alloc(&self.ctx, self.dtype, lhs.numel())?;
        if out.len == 0 {
            return Ok(out);
        }
        let mut p = Params::new(out.len, op.name())?;
        p.shape(
            op.name(),
            lhs.shape(),
            &[lhs.strides(), rhs_layout.strides()],
        )?
        .set(OFFSET0, lhs.offset(), op.name())?
        .set(OFFSET1, rhs_layout.offset(), op.name())?;
        let k = key(
            ShaderId::Elementwise,
            "binary",
            self.dtype,
            self.dtype,
            op.code(),
        );
        launch(&out, k, p, &[self, rhs], workgroups(&out))?;
        Ok(out)
    }

    /// Concatenates parts (same dtype, shapes equal but along `dim`) into a contiguous tensor.
    pub(crate) fn cat(
        parts: &[(&XpuStorage, &Layout)],
        dim: usize,
        out_shape: &[usize],
    ) -> Result<XpuStorage> {
        let Some((first, _)) = parts.first() else {
            return Err(Error::invalid("cat", "expected at least one tensor"));
        };
        let numel: usize = out_shape.iter().product();
        let out = XpuStorage::alloc(&first.ctx, first.dtype, numel)?;
        if numel == 0 {
            return Ok(out);
        }
        let inner: usize = out_shape[dim + 1..].iter().product();
        let mut start = 0;
        for (storage, layout) in parts {
            first.check_same_context(storage, "cat")?;
            let len = layout.shape()[dim];
            if layout.numel() > 0 {
                let mut p = Params::new(numel, "cat")?;
                // The part's own shape is not coalesced across the cat dim: index math needs it
                // only to map a logical index of the part to storage.
                p.shape("cat", layout.shape(), &[layout.strides()])?
                    .set(OFFSET0, layout.offset(), "cat")?
                    .set(EXTRA, inner, "cat")?
                    .set(EXTRA + 1, out_shape[dim], "cat")?
                    .set(EXTRA + 2, start, "cat")?
                    .set(EXTRA + 3, len, "cat")?;
                let k = key(
                    ShaderId::Elementwise,
                    "cat_part",
                    first.dtype,
                    first.dtype,
                    0,
                );
                launch(&out, k, p, &[storage], workgroups(&out))?;
            }
            start += len;
        }
        Ok(out)
    }
}

/// Whether the i32 kernel (`elementwise_math.wgsl` `unary_op_i32`) takes `op`: the Cpu's i32
/// set (neg, abs, relu, square, sign, the roundings, maximum/minimum_scalar, affine), with
/// affine's scalars whole numbers in the i32 range (then the kernel's 64-bit integer result is
/// exact, as the Cpu's f64 one is).
fn check_i32_unary(op: UnaryOp) -> Result<()> {
    let whole = |v: f32| v.fract() == 0.0 && (-2147483648.0..2147483648.0).contains(&v);
    match op {
        UnaryOp::Neg
        | UnaryOp::Abs
        | UnaryOp::Relu
        | UnaryOp::Square
        | UnaryOp::Sign
        | UnaryOp::Floor
        | UnaryOp::Ceil
        | UnaryOp::Round
        | UnaryOp::Trunc
        | UnaryOp::MaxScalar(_)
        | UnaryOp::MinScalar(_) => Ok(()),
        UnaryOp::Affine { mul, add } if whole(mul) && whole(add) => Ok(()),
        UnaryOp::Affine { mul, add } => Err(Error::UnsupportedDType {
            op: op.name(),
            dtype: DType::I32,
            device: Device::Xpu,
            hint: format!(
                ": on the Xpu an i32 affine (mul_scalar, add_scalar, ...) takes whole-number \
                 scalars within the i32 range, got mul {mul} and add {add}; cast to f32 first \
                 (PyTorch promotes to float)"
            ),
        }),
        other => Err(Error::UnsupportedDType {
            op: other.name(),
            dtype: DType::I32,
            device: Device::Xpu,
            hint: format!(
                ": {} on i32 is not defined (i32 supports neg, abs, relu, affine, \
                 maximum_scalar, minimum_scalar, square, sign); cast to a float dtype first",
                other.name()
            ),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transposes_are_planned_only_where_tiles_pay() {
        // [b, r, c].transpose(1, 2): innermost output dim r (stride c), dim c contiguous.
        let plan = transpose_plan(&[3, 40, 70], &[2800, 1, 40], DType::F32);
        assert_eq!(
            plan,
            Some(TransposePlan {
                contiguous_dim: 1,
                tiles: 3 * 2 * 3
            })
        );
        // NCHW -> NHWC: [N, H, W, C] over NCHW strides coalesces to [N, H·W, C].
        let (c, h, w) = (320, 64, 64);
        let plan = transpose_plan(&[2, h, w, c], &[c * h * w, w, 1, h * w], DType::F16);
        assert_eq!(
            plan,
            Some(TransposePlan {
                contiguous_dim: 1,
                tiles: 2 * 128 * 10
            })
        );
        // Contiguous, or innermost already unit stride: the plain gather.
        assert_eq!(transpose_plan(&[64, 64], &[64, 1], DType::F32), None);
        assert_eq!(
            transpose_plan(&[64, 2, 64], &[64, 4096, 1], DType::F32),
            None
        );
        // Too small an extent on either side.
        assert_eq!(transpose_plan(&[8, 64], &[1, 8], DType::F32), None);
        assert_eq!(transpose_plan(&[64, 8], &[1, 64], DType::F32), None);
        // 16-bit outputs need an even innermost extent, bytes a multiple of 4.
        assert_eq!(transpose_plan(&[64, 33], &[1, 64], DType::F16), None);
        assert!(transpose_plan(&[64, 34], &[1, 64], DType::BF16).is_some());
        assert_eq!(transpose_plan(&[64, 34], &[1, 64], DType::U8), None);
        assert!(transpose_plan(&[64, 36], &[1, 64], DType::U8).is_some());
        // No dim contiguous in the input (a strided column of a transpose): the gather.
        assert_eq!(transpose_plan(&[64, 64], &[2, 128], DType::F32), None);
        // Broadcast batch dims keep their zero stride.
        assert!(transpose_plan(&[5, 64, 64], &[0, 1, 64], DType::F32).is_some());
    }
}
