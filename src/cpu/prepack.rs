//! Prepacked weights for repeated products with the same right-hand matrix (IPEX-style): the
//! GEMM engine's B panels are built once, and each call only packs its activations.
//!
//! Invariant: a [`PackedWeight`] holds `B` as `K × N` panels of the weight's own dtype, exactly as
//! the engine would pack them per call, so prepacked and per-call products are bit-identical. A
//! GEGLU pack ([`PackedWeight::new_geglu`]) holds `K × 2N` and its products return
//! `h · act(g)` (`N` columns); the bias then has `2N` entries. 16-bit products are rounded in
//! the engine's store (no f32 output pass), bit-identical to rounding the f32 product after.

use super::alloc;
use super::gemm::{self, Epilogue, MatRef, Out16, PackKind, PackedB, Residual};
use super::storage::CpuStorage;
use super::strided::check_layout;
use crate::desc::Activation;
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
        Self::build(s, l, false)
    }

    /// Packs a 2-D `K × 2N` view for GEGLU products (`[h | g]` halves of the columns).
    pub(crate) fn new_geglu(s: &CpuStorage, l: &Layout) -> Result<PackedWeight> {
        Self::build(s, l, true)
    }

    fn build(s: &CpuStorage, l: &Layout, glu: bool) -> Result<PackedWeight> {
        if l.rank() != 2 {
            return Err(Error::shape("prepack", "a 2-D weight", l.shape()));
        }
        check_layout("prepack", l, s.len())?;
        fn pack<T: gemm::PackElem>(b: MatRef<T>, glu: bool) -> Result<PackedB<T>> {
            if glu {
                PackedB::new_geglu(b)
            } else {
                PackedB::new(b)
            }
        }
        Ok(match s {
            CpuStorage::F32(v) => PackedWeight::F32(pack(view(v, l), glu)?),
            CpuStorage::F16(v) => PackedWeight::F16(pack(view(v, l), glu)?),
            CpuStorage::BF16(v) => PackedWeight::BF16(pack(view(v, l), glu)?),
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

    /// `act(x @ B + bias) + residual` for `x` viewed as `M × K` (any strides), output `M × N`
    /// in `x`'s dtype (a GEGLU pack: `h · act(g)` of the two halves, bias `2N` long). The
    /// residual is `M × N` rows (any strides; f32, or 16-bit read in place).
    pub(crate) fn apply(
        &self,
        x: &CpuStorage,
        xl: &Layout,
        bias: Option<&[f32]>,
        activation: Activation,
        residual: Option<Residual>,
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
        if let Some(r) = &residual {
            if r.dims() != (m, n) {
                let (rr, rc) = r.dims();
                return Err(Error::shape(
                    "linear",
                    format!("a residual of shape [{m}, {n}]"),
                    &[rr, rc],
                ));
            }
        }
        let base = || {
            let mut ep = Epilogue::default().with_activation(activation);
            if let Some(b) = bias {
                ep = ep.with_bias(b);
            }
            if let Some(r) = residual {
                ep = ep.with_any_residual(r);
            }
            ep
        };
        let run = |c: &mut [f32], ep: &Epilogue| -> Result<()> {
            if m == 0 || n == 0 {
                return Ok(());
            }
            match (self, x) {
                (PackedWeight::F32(p), CpuStorage::F32(v)) => {
                    gemm::gemm_prepacked_f32(view(v, xl), p, c, n, ep)
                }
                (PackedWeight::F16(p), CpuStorage::F16(v)) => {
                    gemm::gemm_prepacked_f16(view(v, xl), p, c, n, ep)
                }
                (PackedWeight::BF16(p), CpuStorage::BF16(v)) => {
                    gemm::gemm_prepacked_bf16(view(v, xl), p, c, n, ep)
                }
                _ => Err(Error::DTypeMismatch {
                    op: "linear",
                    expected: self.dtype(),
                    got: x.dtype(),
                }),
            }
        };
        // beta = 0: the engine writes every element (of C, or of the 16-bit output, C then
        // holding only partial sums), so recycled buffers are fine.
        Ok(match x.dtype() {
            DType::F16 => {
                let mut out = super::pool::take::<f16>("linear", m * n)?;
                let ep = base().with_out16(Out16::f16(&mut out, n));
                gemm::with_partial_sums("linear", m * n, |c| run(c, &ep))?;
                CpuStorage::F16(out)
            }
            DType::BF16 => {
                let mut out = super::pool::take::<bf16>("linear", m * n)?;
                let ep = base().with_out16(Out16::bf16(&mut out, n));
                gemm::with_partial_sums("linear", m * n, |c| run(c, &ep))?;
                CpuStorage::BF16(out)
            }
            _ => {
                let mut c = super::pool::take::<f32>("linear", m * n)?;
                run(&mut c, &base())?;
                CpuStorage::F32(c)
            }
        })
    }

    /// The packed matrix given back as row-major `[cols, K]` values in the weight's dtype (a
    /// `[out, in]` Linear weight; for a GEGLU pack `[2N, K]`), bit for bit what was packed;
    /// `None` when the host will not allocate it.
    pub(crate) fn unpack_transposed(&self) -> Option<CpuStorage> {
        Some(match self {
            PackedWeight::F32(p) => CpuStorage::F32(p.unpack_transposed()?),
            PackedWeight::F16(p) => {
                let v = p.unpack_transposed()?;
                let n = v.len();
                CpuStorage::F16(
                    alloc::collected("unpack", n, v.into_iter().map(f16::from_f32)).ok()?,
                )
            }
            PackedWeight::BF16(p) => {
                let v = p.unpack_transposed()?;
                let n = v.len();
                CpuStorage::BF16(
                    alloc::collected("unpack", n, v.into_iter().map(bf16::from_f32)).ok()?,
                )
            }
        })
    }

    /// The layout of a bf16 pack (which selects its kernel: see `gemm::bf16_kinds`); `None`
    /// for f32 and f16 packs.
    pub(crate) fn bf16_layout(&self) -> Option<PackKind> {
        match self {
            PackedWeight::BF16(p) => Some(p.kind()),
            _ => None,
        }
    }

    /// This bf16 pack's weight packed again in layout `kind`: the same values (the panels
    /// give them back exactly), plain or GEGLU as this one; `None` for f32 and f16 packs.
    pub(crate) fn repacked_bf16(&self, kind: PackKind) -> Result<Option<PackedWeight>> {
        let PackedWeight::BF16(p) = self else {
            return Ok(None);
        };
        let unpacked = self.unpack_transposed();
        let Some(CpuStorage::BF16(rows)) = &unpacked else {
            return Err(super::alloc::out_of_memory(
                "prepack",
                p.k().saturating_mul(p.n()).saturating_mul(4),
            ));
        };
        // `rows` is `[cols, K]`: B (`K × cols`) is its transpose.
        let cols = if p.is_geglu() { 2 * p.n() } else { p.n() };
        let k = p.k();
        let b = MatRef::new(rows, 0, k, cols, 1, k);
        Ok(Some(PackedWeight::BF16(PackedB::new_in(
            b,
            kind,
            p.is_geglu(),
        )?)))
    }

    /// Rows `K` of the packed matrix.
    pub(crate) fn k(&self) -> usize {
        match self {
            PackedWeight::F32(p) => p.k(),
            PackedWeight::F16(p) => p.k(),
            PackedWeight::BF16(p) => p.k(),
        }
    }

    /// True for a GEGLU pack.
    pub(crate) fn is_geglu(&self) -> bool {
        match self {
            PackedWeight::F32(p) => p.is_geglu(),
            PackedWeight::F16(p) => p.is_geglu(),
            PackedWeight::BF16(p) => p.is_geglu(),
        }
    }

    /// Columns of the packed `K × N` matrix.
    pub(crate) fn n(&self) -> usize {
        match self {
            PackedWeight::F32(p) => p.n(),
            PackedWeight::F16(p) => p.n(),
            PackedWeight::BF16(p) => p.n(),
        }
    }

    pub(crate) fn dtype(&self) -> DType {
        match self {
            PackedWeight::F32(_) => DType::F32,
            PackedWeight::F16(_) => DType::F16,
            PackedWeight::BF16(_) => DType::BF16,
        }
    }
}

/// Whether the GEMM store reads residuals of `s`'s dtype in place ([`residual_of`] gives
/// `Some` exactly for these).
pub(crate) fn residual_in_place(s: &CpuStorage) -> bool {
    matches!(
        s,
        CpuStorage::F32(_) | CpuStorage::BF16(_) | CpuStorage::F16(_)
    )
}

/// The engine's view of `rows × cols` residual values in `s` at `(offset, row stride, column
/// stride)`; `None` for a dtype the store cannot read (not f32, bf16 or f16).
pub(crate) fn residual_of(
    s: &CpuStorage,
    (rows, cols): (usize, usize),
    (off, rs, cs): (usize, usize, usize),
) -> Option<Residual<'_>> {
    Some(match s {
        CpuStorage::F32(v) => Residual::F32(MatRef::new(v, off, rows, cols, rs, cs)),
        CpuStorage::BF16(v) => Residual::bf16(MatRef::new(v, off, rows, cols, rs, cs)),
        CpuStorage::F16(v) => Residual::f16(MatRef::new(v, off, rows, cols, rs, cs)),
        _ => return None,
    })
}
