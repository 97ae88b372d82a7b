//! Normalisation dispatch: layer norm and group norm (with an optional SiLU) on either device.

use super::*;

impl Storage {
    /// Group norm (optionally + SiLU) of a dense channels-last `[N, C, H, W]` view, read and
    /// written in its NHWC order: the result is the contiguous `[N, H, W, C]` data.
    pub(crate) fn group_norm_channels_last(
        &self,
        op: &'static str,
        layout: &Layout,
        weight: Option<(&Storage, &Layout)>,
        bias: Option<(&Storage, &Layout)>,
        spec: &NormSpec,
    ) -> Result<Storage> {
        Ok(match self {
            Storage::Cpu(s) => {
                host_output(op, layout.numel(), s.dtype())?;
                Storage::Cpu(s.group_norm_channels_last(
                    op,
                    layout,
                    cpu_operand(op, weight)?,
                    cpu_operand(op, bias)?,
                    spec,
                )?)
            }
            Storage::Xpu(s) => Storage::Xpu(s.norm(
                op,
                layout,
                xpu_operand(op, weight)?,
                xpu_operand(op, bias)?,
                spec,
                true,
            )?),
        })
    }

    /// Layer norm over the last dim of `layout` (weight/bias: `[C]` views on this device).
    pub(crate) fn layer_norm(
        &self,
        layout: &Layout,
        weight: Option<(&Storage, &Layout)>,
        bias: Option<(&Storage, &Layout)>,
        eps: f32,
    ) -> Result<Storage> {
        let shape = layout.shape();
        let channels = shape.last().copied().unwrap_or(1);
        let spec = NormSpec {
            batch: shape[..shape.len().saturating_sub(1)].iter().product(),
            channels,
            groups: 1,
            inner: 1,
            eps,
            silu: false,
        };
        self.norm("layer_norm", layout, weight, bias, &spec)
    }

    /// Group norm of an `[N, C, *spatial]` view with `groups` dividing `C`, optionally followed
    /// by SiLU (weight/bias: `[C]` views on this device).
    pub(crate) fn group_norm(
        &self,
        layout: &Layout,
        groups: usize,
        weight: Option<(&Storage, &Layout)>,
        bias: Option<(&Storage, &Layout)>,
        eps: f32,
        silu: bool,
    ) -> Result<Storage> {
        let shape = layout.shape();
        let spec = NormSpec {
            batch: shape.first().copied().unwrap_or(1),
            channels: shape.get(1).copied().unwrap_or(1),
            groups,
            inner: shape.get(2..).map_or(1, |s| s.iter().product()),
            eps,
            silu,
        };
        let op = if silu {
            "group_norm_silu"
        } else {
            "group_norm"
        };
        self.norm(op, layout, weight, bias, &spec)
    }

    fn norm(
        &self,
        op: &'static str,
        layout: &Layout,
        weight: Option<(&Storage, &Layout)>,
        bias: Option<(&Storage, &Layout)>,
        spec: &NormSpec,
    ) -> Result<Storage> {
        Ok(match self {
            Storage::Cpu(s) => {
                host_output(op, layout.numel(), s.dtype())?;
                Storage::Cpu(s.norm(
                    op,
                    layout,
                    cpu_operand(op, weight)?,
                    cpu_operand(op, bias)?,
                    spec,
                )?)
            }
            Storage::Xpu(s) => Storage::Xpu(s.norm(
                op,
                layout,
                xpu_operand(op, weight)?,
                xpu_operand(op, bias)?,
                spec,
                false,
            )?),
        })
    }
}

/// An optional norm parameter on the Cpu (a device error otherwise).
fn cpu_operand<'a>(
    op: &'static str,
    x: Option<(&'a Storage, &'a Layout)>,
) -> Result<Option<(&'a CpuStorage, &'a Layout)>> {
    match x {
        None => Ok(None),
        Some((Storage::Cpu(c), l)) => Ok(Some((c, l))),
        Some((other, _)) => Err(Error::DeviceMismatch {
            op,
            lhs: Device::Cpu,
            rhs: other.device(),
        }),
    }
}

/// An optional norm parameter on the Xpu (a device error otherwise).
fn xpu_operand<'a>(
    op: &'static str,
    x: Option<(&'a Storage, &'a Layout)>,
) -> Result<Option<(&'a XpuStorage, &'a Layout)>> {
    match x {
        None => Ok(None),
        Some((Storage::Xpu(c), l)) => Ok(Some((c, l))),
        Some((other, _)) => Err(Error::DeviceMismatch {
            op,
            lhs: Device::Xpu,
            rhs: other.device(),
        }),
    }
}
