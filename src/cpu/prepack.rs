//! Prepacked weights for repeated products with the same right-hand matrix (IPEX-style): the
//! GEMM engine's B panels are built once, and each call only packs its activations.
//!
//! Invariant: a [`PackedWeight`] holds `B` as `K × N` panels of the weight's own dtype, exactly as
//! the engine would pack them per call, so prepacked and per-call products are bit-identical.

use super::gemm::{self, Activation, Epilogue, MatRef, PackedB};
use super::matmul::narrow;
use super::storage::CpuStorage;
use super::strided::check_layout;
use crate::layout::Layout;
use crate::{DType, Device, Error, Result};
use half::{bf16, f16};

/// B panels in the weight's dtype.
pub(crate) enum PackedWeight {
    F32(PackedB<f32>),
    F16(PackedB<f16>),
    BF16(PackedB<bf16>),
}

fn view<'a, T: Copy>(data: &'a [T], l: &Layout) -> MatRef<'a, T> {
    MatRef::new(
        data,
        l.offset(),
        l.shape()[0],
        l.shape()[1],
        l.strides()[0],
        l.strides()[1],
    )
}

impl PackedWeight {
    /// Packs a 2-D `K × N` view (any strides, e.g. a transposed `[out, in]` weight).
    pub(crate) fn new(s: &CpuStorage, l: &Layout) -> Result<PackedWeight> {
        if l.rank() != 2 {
            return Err(Error::shape("prepack", "a 2-D weight", l.shape()));
        }
        check_layout("prepack", l, s.len())?;
        Ok(match s {
            CpuStorage::F32(v) => PackedWeight::F32(PackedB::new(view(v, l))?),
            CpuStorage::F16(v) => PackedWeight::F16(PackedB::new(view(v, l))?),
            CpuStorage::BF16(v) => PackedWeight::BF16(PackedB::new(view(v, l))?),
            other => {
                return Err(Error::UnsupportedDType {
                    op: "prepack",
                    dtype: other.dtype(),
                    device: Device::Cpu,
                    hint: ": weights must be f32, f16 or bf16".into(),
                })
            }
        })
    }

    /// `act(x @ B + bias)` for `x` viewed as `M × K` (contiguous rows), output `M × N` in
    /// `out_dtype` (`x`'s dtype or f32).
    pub(crate) fn apply(
        &self,
        x: &CpuStorage,
        xl: &Layout,
        bias: Option<&[f32]>,
        activation: Activation,
    ) -> Result<CpuStorage> {
        let (m, k) = (xl.shape()[0], xl.shape()[1]);
        check_layout("linear", xl, x.len())?;
        let n = match self {
            PackedWeight::F32(p) => (p.k(), p.n()),
            PackedWeight::F16(p) => (p.k(), p.n()),
            PackedWeight::BF16(p) => (p.k(), p.n()),
        };
        if n.0 != k {
            return Err(Error::shape(
                "linear",
                format!("input with {} features", n.0),
                xl.shape(),
            ));
        }
        let n = n.1;
        // beta = 0: the engine writes every element, so a recycled buffer is fine.
        let mut c = super::pool::take::<f32>(m * n);
        let mut ep = Epilogue::default().with_activation(activation);
        if let Some(b) = bias {
            ep = ep.with_bias(b);
        }
        if m > 0 && n > 0 {
            match (self, x) {
                (PackedWeight::F32(p), CpuStorage::F32(v)) => {
                    gemm::gemm_prepacked_f32(view(v, xl), p, &mut c, n, &ep)?
                }
                (PackedWeight::F16(p), CpuStorage::F16(v)) => {
                    gemm::gemm_prepacked_f16(view(v, xl), p, &mut c, n, &ep)?
                }
                (PackedWeight::BF16(p), CpuStorage::BF16(v)) => {
                    gemm::gemm_prepacked_bf16(view(v, xl), p, &mut c, n, &ep)?
                }
                _ => {
                    return Err(Error::DTypeMismatch {
                        op: "linear",
                        expected: self.dtype(),
                        got: x.dtype(),
                    })
                }
            }
        }
        Ok(match x.dtype() {
            DType::F16 => CpuStorage::F16(narrow(c)),
            DType::BF16 => CpuStorage::BF16(narrow(c)),
            _ => CpuStorage::F32(c),
        })
    }

    pub(crate) fn dtype(&self) -> DType {
        match self {
            PackedWeight::F32(_) => DType::F32,
            PackedWeight::F16(_) => DType::F16,
            PackedWeight::BF16(_) => DType::BF16,
        }
    }
}
