//! Memory formats of 4-D `[N, C, H, W]` tensors, after PyTorch's `torch.memory_format`.
//!
//! A tensor's shape never changes with its format: a channels-last tensor is still indexed
//! `[N, C, H, W]`, only its strides differ (`[H·W·C, 1, W·C, C]`, so the channels of one pixel
//! are adjacent in memory, as in an NHWC array). Invariants:
//! - [`Tensor::to_memory_format`] returns a dense tensor in the asked format (the same tensor
//!   when it already is one, otherwise one copy on the same device);
//! - [`Tensor::memory_format`] follows PyTorch's `suggest_memory_format`: strides ordered like
//!   channels-last (C fastest, then W, H, N; size-1 dims decided by their strides exactly as
//!   PyTorch's `is_channels_last_strides_2d` does) give `ChannelsLast`, everything else
//!   `Contiguous`;
//! - ops that take a format decision (conv2d) read it from `memory_format()`, never from a flag
//!   stored beside the data, so views keep their format where their strides do.

use super::Tensor;
use crate::layout::Layout;
use crate::{Error, Result};

/// How the elements of a 4-D `[N, C, H, W]` tensor are ordered in memory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum MemoryFormat {
    /// Row-major `[N, C, H, W]` (NCHW): strides `[C·H·W, H·W, W, 1]`.
    #[default]
    Contiguous,
    /// Channels-last (NHWC in memory): strides `[H·W·C, 1, W·C, C]`.
    ChannelsLast,
}

pub(crate) use crate::layout::channels_last::{
    channels_last_layout, channels_last_strides, NCHW_FROM_NHWC, NHWC,
};

impl Tensor {
    /// True when the view is dense in `fmt`: row-major for `Contiguous`, NHWC order for
    /// `ChannelsLast` (4-D only; size-1 dims may have any stride, as in PyTorch).
    pub fn is_contiguous_for(&self, fmt: MemoryFormat) -> bool {
        match fmt {
            MemoryFormat::Contiguous => self.is_contiguous(),
            MemoryFormat::ChannelsLast => {
                self.rank() == 4
                    && self
                        .layout()
                        .permute(&NHWC)
                        .is_ok_and(|l| l.is_contiguous())
            }
        }
    }

    /// The format this tensor's strides suggest (PyTorch's `suggest_memory_format`):
    /// `ChannelsLast` for 4-D tensors whose strides are ordered like channels-last, including
    /// views such as a channel slice of a channels-last tensor; `Contiguous` otherwise. With
    /// size-1 dims the strides decide, as in PyTorch (a `[2, 1, 4, 5]` tensor made by
    /// `to_memory_format(ChannelsLast)` reports `ChannelsLast`, a row-major one `Contiguous`).
    pub fn memory_format(&self) -> MemoryFormat {
        if channels_last_strides(self.layout()) {
            MemoryFormat::ChannelsLast
        } else {
            MemoryFormat::Contiguous
        }
    }

    /// This tensor densely laid out in `fmt`: itself when it already is, else a copy on the
    /// same device. `ChannelsLast` needs a 4-D `[N, C, H, W]` tensor and keeps that shape
    /// (PyTorch's `x.to(memory_format=torch.channels_last)`); `Contiguous` is
    /// [`Tensor::contiguous`].
    pub fn to_memory_format(&self, fmt: MemoryFormat) -> Result<Tensor> {
        // A tensor already dense in `fmt` gets the canonical strides of `fmt` (size-1 dims
        // can carry others) as a view, so `memory_format()` then reports `fmt`.
        let canonical = |l: Layout| {
            Layout::from_parts(
                l.shape().to_vec(),
                l.strides().to_vec(),
                self.layout().offset(),
            )
        };
        match fmt {
            MemoryFormat::Contiguous if self.is_contiguous() => {
                Ok(self.with_layout(canonical(Layout::contiguous(self.shape()))))
            }
            MemoryFormat::Contiguous => self.contiguous(),
            MemoryFormat::ChannelsLast => {
                if self.rank() != 4 {
                    return Err(Error::shape(
                        "to_memory_format(ChannelsLast)",
                        "a 4-D [N, C, H, W] tensor",
                        self.shape(),
                    ));
                }
                if self.is_contiguous_for(fmt) {
                    return Ok(self.with_layout(canonical(channels_last_layout(self.shape())?)));
                }
                self.permute(&NHWC)?.contiguous()?.permute(&NCHW_FROM_NHWC)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{DType, Device};

    #[test]
    fn strides_and_suggestion_follow_pytorch() -> Result<()> {
        let x = Tensor::zeros(&[2, 3, 4, 5], DType::F32, Device::Cpu)?;
        assert_eq!(x.memory_format(), MemoryFormat::Contiguous);
        let cl = x.to_memory_format(MemoryFormat::ChannelsLast)?;
        assert_eq!(cl.shape(), &[2, 3, 4, 5]);
        assert_eq!(cl.strides(), &[60, 1, 15, 3]);
        assert_eq!(cl.memory_format(), MemoryFormat::ChannelsLast);
        assert!(cl.is_contiguous_for(MemoryFormat::ChannelsLast));
        assert!(!cl.is_contiguous());
        assert_eq!(channels_last_layout(&[2, 3, 4, 5])?.strides(), cl.strides());
        // Size-1 dims: the strides decide, as in PyTorch (checked there: channels-last copies
        // of [2, 1, 4, 5] and [2, 3, 1, 1] suggest channels_last, row-major ones contiguous).
        for shape in [[2, 1, 4, 5], [2, 3, 1, 1]] {
            let t = Tensor::zeros(&shape, DType::F32, Device::Cpu)?;
            assert!(t.is_contiguous_for(MemoryFormat::ChannelsLast));
            assert_eq!(t.memory_format(), MemoryFormat::Contiguous, "{shape:?}");
            let t = t.to_memory_format(MemoryFormat::ChannelsLast)?;
            assert_eq!(t.memory_format(), MemoryFormat::ChannelsLast, "{shape:?}");
            let t = t.to_memory_format(MemoryFormat::Contiguous)?;
            assert_eq!(t.memory_format(), MemoryFormat::Contiguous, "{shape:?}");
        }
        // A channel slice of a channels-last tensor stays channels-last-like.
        assert_eq!(
            cl.narrow(1, 1, 2)?.memory_format(),
            MemoryFormat::ChannelsLast
        );
        assert!(x.to_memory_format(MemoryFormat::ChannelsLast).is_ok());
        assert!(Tensor::zeros(&[3, 4], DType::F32, Device::Cpu)?
            .to_memory_format(MemoryFormat::ChannelsLast)
            .is_err());
        Ok(())
    }
}
