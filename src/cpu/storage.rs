//! [`CpuStorage`]: a typed host buffer, and its dtype-agnostic operations (construction, bytes,
//! strided reads, contiguous copies, casts, concatenation).
//!
//! Invariants: a storage is a flat vector of one dtype; it knows nothing about shapes. Every
//! method that takes a [`Layout`] validates it against the storage length first and reports a
//! bad one as [`Error::InvalidArgument`]; every buffer comes from the fallible allocation path
//! (`cpu::alloc`), so memory the host will not give is [`Error::CpuOutOfMemory`], never an
//! abort. Outputs are always contiguous and row-major.

use super::strided::{check_layout, gather, gather_pooled};
use crate::layout::Layout;
use crate::{DType, Error, Result, WithDType};
use half::{bf16, f16};

/// Host memory of one dtype (the CPU device's storage).
#[derive(Clone, Debug, PartialEq)]
pub enum CpuStorage {
    /// `f32` elements.
    F32(Vec<f32>),
    /// `f16` elements.
    F16(Vec<f16>),
    /// `bf16` elements.
    BF16(Vec<bf16>),
    /// `i32` elements.
    I32(Vec<i32>),
    /// `u8` elements.
    U8(Vec<u8>),
}

impl Drop for CpuStorage {
    /// Large buffers go back to the recycling pool (see `cpu::pool`).
    fn drop(&mut self) {
        match self {
            CpuStorage::F32(v) => super::pool::give(std::mem::take(v)),
            CpuStorage::F16(v) => super::pool::give(std::mem::take(v)),
            CpuStorage::BF16(v) => super::pool::give(std::mem::take(v)),
            CpuStorage::I32(v) => super::pool::give(std::mem::take(v)),
            CpuStorage::U8(v) => super::pool::give(std::mem::take(v)),
        }
    }
}

impl CpuStorage {
    /// The f32 vector of an f32 storage, moved out (`None` for other dtypes).
    pub(crate) fn into_f32(mut self) -> Option<Vec<f32>> {
        match &mut self {
            CpuStorage::F32(v) => Some(std::mem::take(v)),
            _ => None,
        }
    }
}

/// Applies an expression to the inner vector whatever the dtype, producing a storage of the same
/// dtype: `map_storage!(s, v => expr)`.
macro_rules! map_storage {
    ($s:expr, $v:ident => $body:expr) => {
        match $s {
            CpuStorage::F32($v) => CpuStorage::F32($body),
            CpuStorage::F16($v) => CpuStorage::F16($body),
            CpuStorage::BF16($v) => CpuStorage::BF16($body),
            CpuStorage::I32($v) => CpuStorage::I32($body),
            CpuStorage::U8($v) => CpuStorage::U8($body),
        }
    };
}

/// Evaluates an expression on the inner vector whatever the dtype: `with_storage!(s, v => expr)`.
macro_rules! with_storage {
    ($s:expr, $v:ident => $body:expr) => {
        match $s {
            CpuStorage::F32($v) => $body,
            CpuStorage::F16($v) => $body,
            CpuStorage::BF16($v) => $body,
            CpuStorage::I32($v) => $body,
            CpuStorage::U8($v) => $body,
        }
    };
}
pub(crate) use with_storage;

fn vec_from_bytes<T: bytemuck::Pod>(bytes: &[u8]) -> Result<Vec<T>> {
    let size = std::mem::size_of::<T>().max(1);
    let mut v = super::alloc::zeroed::<T>("from_bytes", bytes.len() / size)?;
    if let Ok(dst) = bytemuck::try_cast_slice_mut::<T, u8>(&mut v) {
        let n = dst.len();
        dst.copy_from_slice(&bytes[..n]);
    }
    Ok(v)
}

fn downcast_vec<T: 'static, U: 'static>(v: Vec<T>) -> std::result::Result<Vec<U>, Vec<T>> {
    let boxed: Box<dyn std::any::Any> = Box::new(v);
    match boxed.downcast::<Vec<U>>() {
        Ok(u) => Ok(*u),
        Err(b) => match b.downcast::<Vec<T>>() {
            Ok(t) => Err(*t),
            Err(_) => Err(Vec::new()),
        },
    }
}

impl CpuStorage {
    /// The element type.
    pub fn dtype(&self) -> DType {
        match self {
            CpuStorage::F32(_) => DType::F32,
            CpuStorage::F16(_) => DType::F16,
            CpuStorage::BF16(_) => DType::BF16,
            CpuStorage::I32(_) => DType::I32,
            CpuStorage::U8(_) => DType::U8,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        with_storage!(self, v => v.len())
    }

    /// True when there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Wraps a vector (no copy for the five built-in element types; a type that merely claims a
    /// dtype through [`WithDType`] is reinterpreted bytewise, any trailing partial element
    /// dropped, into a copy: an error when the host will not allocate it).
    pub fn from_vec<T: WithDType>(v: Vec<T>) -> Result<CpuStorage> {
        let v = match T::DTYPE {
            DType::F32 => match downcast_vec::<T, f32>(v) {
                Ok(x) => return Ok(CpuStorage::F32(x)),
                Err(v) => v,
            },
            DType::F16 => match downcast_vec::<T, f16>(v) {
                Ok(x) => return Ok(CpuStorage::F16(x)),
                Err(v) => v,
            },
            DType::BF16 => match downcast_vec::<T, bf16>(v) {
                Ok(x) => return Ok(CpuStorage::BF16(x)),
                Err(v) => v,
            },
            DType::I32 => match downcast_vec::<T, i32>(v) {
                Ok(x) => return Ok(CpuStorage::I32(x)),
                Err(v) => v,
            },
            DType::U8 => match downcast_vec::<T, u8>(v) {
                Ok(x) => return Ok(CpuStorage::U8(x)),
                Err(v) => v,
            },
        };
        let bytes: &[u8] = bytemuck::try_cast_slice(&v).unwrap_or(&[]);
        Self::from_bytes_truncating(T::DTYPE, bytes)
    }

    /// `n` zeros of `dtype` for `op`, or an error naming `op` when the host will not allocate
    /// them.
    pub(crate) fn try_zeros(op: &'static str, dtype: DType, n: usize) -> Result<CpuStorage> {
        ensure_host_memory(op, n, dtype)?;
        use super::alloc::zeroed;
        Ok(match dtype {
            DType::F32 => CpuStorage::F32(zeroed(op, n)?),
            DType::F16 => CpuStorage::F16(zeroed(op, n)?),
            DType::BF16 => CpuStorage::BF16(zeroed(op, n)?),
            DType::I32 => CpuStorage::I32(zeroed(op, n)?),
            DType::U8 => CpuStorage::U8(zeroed(op, n)?),
        })
    }

    /// `n` zeros of `dtype`, or an error when the host will not allocate them.
    pub fn zeros(dtype: DType, n: usize) -> Result<CpuStorage> {
        Self::try_zeros("zeros", dtype, n)
    }

    /// A storage of `dtype` with no elements (allocates nothing).
    pub fn empty(dtype: DType) -> CpuStorage {
        match dtype {
            DType::F32 => CpuStorage::F32(Vec::new()),
            DType::F16 => CpuStorage::F16(Vec::new()),
            DType::BF16 => CpuStorage::BF16(Vec::new()),
            DType::I32 => CpuStorage::I32(Vec::new()),
            DType::U8 => CpuStorage::U8(Vec::new()),
        }
    }

    /// Reads the elements of `layout` (row-major logical order) as `T`; `T::DTYPE` must equal the
    /// storage dtype.
    pub fn to_vec<T: WithDType>(&self, layout: &Layout) -> Result<Vec<T>> {
        if T::DTYPE != self.dtype() {
            return Err(Error::DTypeMismatch {
                op: "to_vec",
                expected: self.dtype(),
                got: T::DTYPE,
            });
        }
        let bytes = self.as_bytes();
        let elems: &[T] = bytemuck::try_cast_slice(bytes).map_err(|e| {
            Error::invalid(
                "to_vec",
                format!(
                    "cannot view {} storage as the requested type: {e}",
                    self.dtype()
                ),
            )
        })?;
        check_layout("to_vec", layout, elems.len())?;
        gather("to_vec", elems, layout)
    }

    /// The raw storage bytes (native endianness), e.g. for a GPU upload.
    pub fn as_bytes(&self) -> &[u8] {
        with_storage!(self, v => bytemuck::try_cast_slice(v.as_slice()).unwrap_or(&[]))
    }

    /// Builds a storage from raw bytes (inverse of [`CpuStorage::as_bytes`]); the length must be a
    /// multiple of the element size.
    pub fn from_bytes(dtype: DType, bytes: &[u8]) -> Result<CpuStorage> {
        if !bytes.len().is_multiple_of(dtype.size_in_bytes()) {
            return Err(Error::invalid(
                "from_bytes",
                format!(
                    "{} bytes is not a multiple of the {dtype} element size {}",
                    bytes.len(),
                    dtype.size_in_bytes()
                ),
            ));
        }
        Self::from_bytes_truncating(dtype, bytes)
    }

    fn from_bytes_truncating(dtype: DType, bytes: &[u8]) -> Result<CpuStorage> {
        Ok(match dtype {
            DType::F32 => CpuStorage::F32(vec_from_bytes(bytes)?),
            DType::F16 => CpuStorage::F16(vec_from_bytes(bytes)?),
            DType::BF16 => CpuStorage::BF16(vec_from_bytes(bytes)?),
            DType::I32 => CpuStorage::I32(vec_from_bytes(bytes)?),
            DType::U8 => CpuStorage::U8(vec_from_bytes(bytes)?),
        })
    }

    /// Contiguous copy of the elements of `layout` (`layout.numel()` elements), or an error if
    /// the layout does not fit the storage or the host will not allocate the copy.
    pub fn contiguous(&self, layout: &Layout) -> Result<CpuStorage> {
        check_layout("contiguous", layout, self.len())?;
        Ok(map_storage!(self, v => gather_pooled("contiguous", v, layout)?))
    }

    /// Casts the elements of `layout` to `dtype` into a new contiguous storage. Float to integer
    /// truncates toward zero and saturates (NaN gives 0), as Rust `as`; `i32 -> u8` wraps
    /// (also as `as`); to 16-bit floats rounds once to nearest even. A layout that does not fit,
    /// or memory the host will not give, is an error.
    pub fn cast(&self, layout: &Layout, dtype: DType) -> Result<CpuStorage> {
        let src = self.contiguous(layout)?;
        super::convert::cast_contiguous(src, dtype)
    }

    /// This whole storage in `dtype`: itself when it already has that dtype, else one
    /// conversion of every element (no intermediate copy).
    pub(crate) fn into_dtype(self, dtype: DType) -> Result<CpuStorage> {
        super::convert::cast_contiguous(self, dtype)
    }

    /// Concatenates `parts` along `dim`: same dtype and rank, equal sizes except along `dim`.
    pub fn cat(parts: &[(&CpuStorage, &Layout)], dim: usize) -> Result<CpuStorage> {
        super::convert::cat(parts, dim)
    }
}

/// Allocations at least this large (1 GiB) are first tried fallibly by [`ensure_host_memory`].
const PROBE_BYTES: usize = 1 << 30;

/// Checks that `numel` elements of `dtype` can be allocated on the host for `op` before it
/// allocates them: more than any allocation may hold, or (from [`PROBE_BYTES`] on) more than
/// the system will reserve, is an error naming `op` and the bytes, where the allocation itself
/// would abort the process. (On Linux the probe reserves address space without touching it; a
/// request past what memory and swap could ever back is refused there.)
pub(crate) fn ensure_host_memory(op: &'static str, numel: usize, dtype: DType) -> Result<()> {
    let bytes = crate::layout::alloc_bytes(op, numel, dtype)?;
    if bytes >= PROBE_BYTES {
        probe(op, bytes)?;
    }
    Ok(())
}

/// Several buffers an op takes one after another, checked together before it starts: at
/// least [`PROBE_TOTAL_BYTES`] (64 MiB) in all are first tried as one fallible reservation, so
/// an op whose later buffers cannot fit fails before its work instead of after it.
pub(crate) fn ensure_host_bytes(op: &'static str, bytes: u64) -> Result<()> {
    let bytes =
        usize::try_from(bytes).map_err(|_| crate::cpu::alloc::out_of_memory(op, usize::MAX))?;
    if bytes >= PROBE_TOTAL_BYTES {
        probe(op, bytes)?;
    }
    Ok(())
}

/// Totals this large are probed by [`ensure_host_bytes`] (smaller ones cost less than a probe).
const PROBE_TOTAL_BYTES: usize = 64 << 20;

/// Reserves `bytes` of address space (never touched) and gives them back.
fn probe(op: &'static str, bytes: usize) -> Result<()> {
    let mut probe: Vec<u8> = Vec::new();
    probe
        .try_reserve_exact(bytes)
        .map_err(|_| crate::cpu::alloc::out_of_memory(op, bytes))
}
