//! Layer norm and group norm on Xpu (`norm.wgsl`).
//!
//! Invariants: one workgroup normalises one row (`NormSpec::rows()` rows of
//! `NormSpec::row_len()` contiguous elements, or for a dense channels-last group norm the
//! group's channels at every pixel, read and written in place of their NHWC order), with f32
//! statistics (two-pass, shifted by the row's first element) and tree reductions in workgroup
//! memory. The kernel reads a contiguous (or dense channels-last) input and contiguous `[C]`
//! parameters (other strided views are copied first) and writes the input's layout: f32 one
//! word per element, 16-bit in element pairs per word when every pair shares a word (an even
//! row length; channels-last: an even number of channels per group), else f32 and one extra
//! cast, so no two invocations ever write the same 32-bit word. Absent weight/bias bindings are
//! filled with the input and never read.

use crate::desc::NormSpec;
use crate::gpu::kernels::params::{grid, u32_arg, Params, EXTRA};
use crate::gpu::kernels::{key, launch};
use crate::gpu::pipelines::ShaderId;
use crate::gpu::XpuStorage;
use crate::layout::Layout;
use crate::{DType, Device, Error, Result};

/// `VARIANT` bits of `norm.wgsl`.
const HAS_WEIGHT: u32 = 1;
const HAS_BIAS: u32 = 2;
const SILU: u32 = 4;
const CHANNELS_LAST: u32 = 8;

/// A contiguous copy of a strided view (`None` when the view is already contiguous).
fn gathered(s: &XpuStorage, layout: &Layout) -> Result<Option<XpuStorage>> {
    if layout.is_contiguous() {
        Ok(None)
    } else {
        Ok(Some(s.copy_cast(layout, s.dtype)?))
    }
}

/// Whether `layout` is a dense channels-last `[N, C, H, W]` view: strides
/// `[H·W·C, 1, W·C, C]`, except on size-1 dims (never stepped along).
fn dense_channels_last(layout: &Layout) -> bool {
    let &[_, c, h, w] = layout.shape() else {
        return false;
    };
    let dense = [h * w * c, 1, w * c, c];
    layout
        .shape()
        .iter()
        .zip(layout.strides())
        .zip(dense)
        .all(|((&size, &stride), want)| size <= 1 || stride == want)
}

/// The contiguous storage to bind and its element offset.
fn view<'a>(
    s: &'a XpuStorage,
    layout: &Layout,
    copy: &'a Option<XpuStorage>,
) -> (&'a XpuStorage, usize) {
    match copy {
        Some(c) => (c, 0),
        None => (s, layout.offset()),
    }
}

impl XpuStorage {
    /// Layer/group norm of `layout` per `spec`, with optional `[C]` weight and bias of this
    /// storage's dtype; float dtypes only. The output is contiguous in `layout`'s shape, or
    /// with `channels_last` (group norm of a dense channels-last `[N, C, H, W]` view, read in
    /// place) dense channels-last: the `[N, H, W, C]` array.
    pub(crate) fn norm(
        &self,
        op: &'static str,
        layout: &Layout,
        weight: Option<(&XpuStorage, &Layout)>,
        bias: Option<(&XpuStorage, &Layout)>,
        spec: &NormSpec,
        channels_last: bool,
    ) -> Result<XpuStorage> {
        if !self.dtype.is_float() {
            return Err(Error::UnsupportedDType {
                op,
                dtype: self.dtype,
                device: Device::Xpu,
                hint: ": normalisation needs f32, f16 or bf16; cast first".into(),
            });
        }
        for (s, _) in weight.iter().chain(bias.iter()) {
            if s.dtype != self.dtype {
                return Err(Error::DTypeMismatch {
                    op,
                    expected: self.dtype,
                    got: s.dtype,
                });
            }
        }
        let n = layout.numel();
        let rows = spec.rows();
        if n != rows * spec.row_len() {
            return Err(Error::invalid(
                op,
                format!("{n} elements do not match the norm geometry {spec:?}"),
            ));
        }
        // 16-bit results are stored in element pairs when rows start on words (even row
        // length); otherwise in f32 and cast once.
        if channels_last && !dense_channels_last(layout) {
            return Err(Error::invalid(
                op,
                format!(
                    "internal: channels-last norm of a view that is not dense channels-last \
                     (shape {:?}, strides {:?})",
                    layout.shape(),
                    layout.strides()
                ),
            ));
        }
        let pairs = if channels_last {
            spec.cpg().is_multiple_of(2)
        } else {
            spec.row_len().is_multiple_of(2)
        };
        let out_dtype = if self.dtype == DType::F32 || pairs {
            self.dtype
        } else {
            DType::F32
        };
        let out = XpuStorage::alloc(&self.ctx, out_dtype, n)?;
        if n > 0 {
            let x_copy = if channels_last {
                None
            } else {
                gathered(self, layout)?
            };
            let (x, x_off) = view(self, layout, &x_copy);
            let w_copy = weight.map(|(s, l)| gathered(s, l)).transpose()?.flatten();
            let b_copy = bias.map(|(s, l)| gathered(s, l)).transpose()?.flatten();
            let w = weight.map(|(s, l)| view(s, l, &w_copy));
            let b = bias.map(|(s, l)| view(s, l, &b_copy));
            let mut variant = if spec.silu { SILU } else { 0 };
            if channels_last {
                variant |= CHANNELS_LAST;
            }
            let mut p = Params::new(rows, op)?;
            p.set(EXTRA, spec.row_len(), op)?
                .set(EXTRA + 1, spec.inner, op)?
                .set(EXTRA + 2, spec.groups, op)?
                .set(EXTRA + 3, spec.cpg(), op)?
                .set(EXTRA + 4, x_off, op)?
                .scalars(spec.eps, 0.0);
            // The last element any row reaches must fit the 32-bit index range too.
            u32_arg(op, x_off + n)?;
            let mut inputs: [&XpuStorage; 3] = [x, x, x];
            if let Some((w, off)) = w {
                variant |= HAS_WEIGHT;
                p.set(EXTRA + 5, off, op)?;
                inputs[1] = w;
            }
            if let Some((b, off)) = b {
                variant |= HAS_BIAS;
                p.set(EXTRA + 6, off, op)?;
                inputs[2] = b;
            }
            let k = key(ShaderId::Norm, "norm", self.dtype, out_dtype, variant);
            let groups = grid(rows, self.ctx.limits.max_compute_workgroups_per_dimension);
            launch(&out, k, p, &inputs, groups)?;
        }
        if out_dtype == self.dtype {
            return Ok(out);
        }
        out.copy_cast(&Layout::contiguous(&[n]), self.dtype)
    }
}
