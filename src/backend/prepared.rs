//! Product weights prepared once for a device: the prepared-weight type `nn` layers keep.
//!
//! On the Cpu a `Linear` (or the two products of a feed-forward block) keeps its weight packed
//! into the GEMM engine's panels, so a forward packs only its input; on the Xpu nothing is
//! prepared (its kernels read the weight tensor). Invariant: a [`PreparedProduct`] is built
//! only from a Cpu weight, and `apply` checks that its input and residual are Cpu storages
//! with fitting layouts before any work.

use super::*;
use crate::cpu::prepack::PackedWeight;
use crate::desc::Activation;

/// Convolution weights packed once for the Cpu engine (see `backend::conv`).
pub(crate) use super::conv::PackedConv;

/// A convolution layer's Cpu packs: the weight packed for the kernel in use and the bias in
/// f32. The kernel can change after construction (the autotuner's winner for the layer's
/// problems): [`LayerConv::replace`] swaps the packs, which calls already running keep alive.
pub(crate) struct LayerConv {
    packs: std::sync::RwLock<std::sync::Arc<PackedConv>>,
    /// The bias widened to f32.
    pub bias: Option<Vec<f32>>,
}

impl LayerConv {
    /// Holds `packed` and the f32 bias.
    pub(crate) fn new(packed: PackedConv, bias: Option<Vec<f32>>) -> LayerConv {
        LayerConv {
            packs: std::sync::RwLock::new(std::sync::Arc::new(packed)),
            bias,
        }
    }

    /// The packs in use.
    pub(crate) fn current(&self) -> std::sync::Arc<PackedConv> {
        match self.packs.read() {
            Ok(p) => std::sync::Arc::clone(&p),
            Err(poisoned) => std::sync::Arc::clone(&poisoned.into_inner()),
        }
    }

    /// The weight the packs in use were made from, as a contiguous `[O, C/G, kh, kw]` Cpu
    /// storage in `dtype` (the weight's own: the packed values are that dtype's, widened
    /// exactly); `None` for Winograd packs (see `PackedConv::unpack_oihw`).
    pub(crate) fn unpack_weight(&self, dtype: DType) -> Option<Storage> {
        let values = self.current().unpack_oihw()?;
        let n = values.len();
        Some(Storage::Cpu(match dtype {
            DType::F32 => CpuStorage::F32(values),
            DType::F16 => CpuStorage::F16(
                crate::cpu::alloc::collected(
                    "conv2d unpack",
                    n,
                    values.into_iter().map(half::f16::from_f32),
                )
                .ok()?,
            ),
            DType::BF16 => CpuStorage::BF16(
                crate::cpu::alloc::collected(
                    "conv2d unpack",
                    n,
                    values.into_iter().map(half::bf16::from_f32),
                )
                .ok()?,
            ),
            _ => return None,
        }))
    }

    /// Uses `packed` from now on.
    pub(crate) fn replace(&self, packed: std::sync::Arc<PackedConv>) {
        match self.packs.write() {
            Ok(mut p) => *p = packed,
            Err(poisoned) => *poisoned.into_inner() = packed,
        }
    }
}

/// Residual rows of a product: the storage, and `(offset, row stride, column stride)` of
/// `M × N` rows in it.
pub(crate) type ResidualRowsOf<'a> = (&'a Storage, (usize, usize, usize));

/// A `K × N` product weight packed for the Cpu engine. A bf16 weight's layout (its product
/// method) can change after construction to the autotuner's winner (`product_tuning.rs`);
/// calls already running keep the packs they started with.
pub(crate) struct PreparedProduct(std::sync::RwLock<std::sync::Arc<PackedWeight>>);

fn cpu<'s>(op: &'static str, s: &'s Storage) -> Result<&'s CpuStorage> {
    match s {
        Storage::Cpu(c) => Ok(c),
        Storage::Xpu(_) => Err(Error::DeviceMismatch {
            op,
            lhs: Device::Cpu,
            rhs: Device::Xpu,
        }),
    }
}

impl PreparedProduct {
    fn holding(p: PackedWeight) -> PreparedProduct {
        PreparedProduct(std::sync::RwLock::new(std::sync::Arc::new(p)))
    }

    /// The packs in use.
    pub(crate) fn current(&self) -> std::sync::Arc<PackedWeight> {
        match self.0.read() {
            Ok(p) => std::sync::Arc::clone(&p),
            Err(poisoned) => std::sync::Arc::clone(&poisoned.into_inner()),
        }
    }

    /// Uses `packed` from now on.
    pub(crate) fn replace(&self, packed: std::sync::Arc<PackedWeight>) {
        match self.0.write() {
            Ok(mut p) => *p = packed,
            Err(poisoned) => *poisoned.into_inner() = packed,
        }
    }

    /// Packs the 2-D `K × N` view `(s, l)` (any strides, e.g. a transposed `[out, in]` weight);
    /// `None` for an Xpu weight (nothing to prepare).
    pub(crate) fn new(s: &Storage, l: &Layout) -> Result<Option<PreparedProduct>> {
        match s {
            Storage::Cpu(c) => Ok(Some(PreparedProduct::holding(PackedWeight::new(c, l)?))),
            Storage::Xpu(_) => Ok(None),
        }
    }

    /// Packs a `K × 2N` view for GEGLU products (`[h | g]` halves of the columns); `None` on
    /// the Xpu.
    pub(crate) fn new_geglu(s: &Storage, l: &Layout) -> Result<Option<PreparedProduct>> {
        match s {
            Storage::Cpu(c) => Ok(Some(PreparedProduct::holding(PackedWeight::new_geglu(
                c, l,
            )?))),
            Storage::Xpu(_) => Ok(None),
        }
    }

    /// `act(x @ B + bias) + residual` for `x` viewed as `M × K` on the Cpu (any strides); the
    /// output is contiguous `M × N` in `x`'s dtype (a GEGLU pack: `h · act(g)` of the halves,
    /// bias `2N` long); the residual rows are f32, bf16 or f16, read in place.
    pub(crate) fn apply(
        &self,
        x: (&Storage, &Layout),
        bias: Option<&[f32]>,
        activation: Activation,
        residual: Option<ResidualRowsOf>,
    ) -> Result<Storage> {
        let op = "linear";
        let xs = cpu(op, x.0)?;
        let m = x.1.shape().first().copied().unwrap_or(0);
        host_output(op, m.saturating_mul(self.n()), xs.dtype())?;
        let residual = match residual {
            Some((s, (off, rs, cs))) => Some(
                crate::cpu::prepack::residual_of(cpu(op, s)?, (m, self.n()), (off, rs, cs))
                    .ok_or_else(|| {
                        Error::invalid(
                            op,
                            format!("a Cpu f32/bf16/f16 residual, got {}", s.dtype()),
                        )
                    })?,
            ),
            None => None,
        };
        Ok(Storage::Cpu(super::product_tuning::apply_tuned(
            self, xs, x.1, bias, activation, residual,
        )?))
    }

    /// Output columns `N` (for a GEGLU pack, the width of one half).
    fn n(&self) -> usize {
        self.current().n()
    }

    /// The packed matrix given back as row-major `[cols, K]` values in the weight's dtype, bit
    /// for bit what was packed (every packed layout gives it back); `None` when the host will
    /// not allocate it.
    pub(crate) fn unpack_transposed(&self) -> Option<Storage> {
        self.current().unpack_transposed().map(Storage::Cpu)
    }
}

impl Storage {
    /// The f32 values `layout` addresses when they are one contiguous run of a Cpu f32
    /// storage (read in place), else `None`.
    pub(crate) fn cpu_f32_run(&self, layout: &Layout) -> Option<&[f32]> {
        match self {
            Storage::Cpu(CpuStorage::F32(all)) if layout.is_contiguous() => {
                let off = layout.offset();
                all.get(off..off + layout.numel())
            }
            _ => None,
        }
    }
}

/// Releases the host's recycled large buffers (the pool of tensor storages and the storage
/// kept from dropped packed weights).
pub(crate) fn release_host_cache() {
    crate::cpu::pool::clear();
}
