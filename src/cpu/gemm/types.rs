//! The public value types of the GEMM engine: strided matrix views and the fused epilogue.
//!
//! Invariants: a [`MatRef`] never owns data and addresses element `(r, c)` at
//! `data[offset + r * row_stride + c * col_stride]`; [`MatRef::validate`] is the single place
//! where that formula is checked against `data.len()`, and every entry point calls it before any
//! unchecked access.

use crate::desc::Activation;
use crate::{Error, Result};

/// A read-only, arbitrarily strided view of a `rows × cols` matrix.
///
/// Element `(r, c)` lives at `data[offset + r * row_stride + c * col_stride]`. Row-major data has
/// `col_stride == 1`; a transposed (column-major) operand has `row_stride == 1`. Packing reads any
/// layout directly, so a transposed operand never needs a copy before a GEMM.
pub struct MatRef<'a, T> {
    /// The backing storage.
    pub data: &'a [T],
    /// Index of element `(0, 0)` in `data`.
    pub offset: usize,
    /// Number of rows.
    pub rows: usize,
    /// Number of columns.
    pub cols: usize,
    /// Distance in elements between `(r, c)` and `(r + 1, c)`.
    pub row_stride: usize,
    /// Distance in elements between `(r, c)` and `(r, c + 1)`.
    pub col_stride: usize,
}

impl<T> Clone for MatRef<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for MatRef<'_, T> {}

impl<T> std::fmt::Debug for MatRef<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MatRef")
            .field("len", &self.data.len())
            .field("offset", &self.offset)
            .field("rows", &self.rows)
            .field("cols", &self.cols)
            .field("row_stride", &self.row_stride)
            .field("col_stride", &self.col_stride)
            .finish()
    }
}

impl<'a, T: Copy> MatRef<'a, T> {
    /// A view with explicit offset and strides (checked later by [`MatRef::validate`]).
    pub fn new(
        data: &'a [T],
        offset: usize,
        rows: usize,
        cols: usize,
        row_stride: usize,
        col_stride: usize,
    ) -> Self {
        MatRef {
            data,
            offset,
            rows,
            cols,
            row_stride,
            col_stride,
        }
    }

    /// A dense row-major `rows × cols` view of `data` (row stride `cols`).
    pub fn row_major(data: &'a [T], rows: usize, cols: usize) -> Self {
        Self::new(data, 0, rows, cols, cols, 1)
    }

    /// A dense column-major `rows × cols` view of `data` (column stride `rows`).
    pub fn col_major(data: &'a [T], rows: usize, cols: usize) -> Self {
        Self::new(data, 0, rows, cols, 1, rows)
    }

    /// The transposed view (swaps rows/cols and the two strides; no data moves).
    pub fn t(self) -> Self {
        Self::new(
            self.data,
            self.offset,
            self.cols,
            self.rows,
            self.col_stride,
            self.row_stride,
        )
    }

    /// Element `(r, c)`, or `None` when out of the view or out of `data`.
    pub fn get(&self, r: usize, c: usize) -> Option<T> {
        if r >= self.rows || c >= self.cols {
            return None;
        }
        let idx = r
            .checked_mul(self.row_stride)?
            .checked_add(c.checked_mul(self.col_stride)?)?
            .checked_add(self.offset)?;
        self.data.get(idx).copied()
    }

    /// Checks that every element of the view lies inside `data` (empty views always pass).
    pub fn validate(&self, op: &'static str, name: &str) -> Result<()> {
        if self.rows == 0 || self.cols == 0 {
            return Ok(());
        }
        let last = (self.rows - 1)
            .checked_mul(self.row_stride)
            .and_then(|x| x.checked_add((self.cols - 1).checked_mul(self.col_stride)?))
            .and_then(|x| x.checked_add(self.offset));
        match last {
            Some(i) if i < self.data.len() => Ok(()),
            _ => Err(Error::invalid(
                op,
                format!(
                    "{name}: view {}x{} with offset {} and strides ({}, {}) does not fit in {} elements",
                    self.rows,
                    self.cols,
                    self.offset,
                    self.row_stride,
                    self.col_stride,
                    self.data.len()
                ),
            )),
        }
    }

    /// Element `(r, c)` without checks.
    ///
    /// # Safety
    /// The view must have passed [`MatRef::validate`] and `r < rows`, `c < cols`.
    #[inline(always)]
    pub(crate) unsafe fn at(&self, r: usize, c: usize) -> T {
        *self
            .data
            .get_unchecked(self.offset + r * self.row_stride + c * self.col_stride)
    }
}

/// What happens to an output tile when its last K block is stored.
///
/// For [`super::gemm_f32`] and friends the result is, per output element `(m, n)`:
/// `acc = alpha * (A @ B)[m, n] + beta * C_in[m, n] + bias[n]`, then
/// `C[m, n] = activation(acc) + residual[m, n]`. With `beta == 0` the input C is never read (it
/// may hold garbage or NaN). Everything is fused into the microkernel's store.
///
/// For the GLU entry points ([`super::gemm_geglu_f32`] and the prepacked GLU form) B has `2N`
/// columns, `bias` has `2N` entries, `beta` must be 0 and `activation` is the gate's:
/// `h = alpha * (A @ B[:, ..N]) + bias[..N]`, `g = alpha * (A @ B[:, N..]) + bias[N..]`,
/// `C = h * activation(g) + residual` (`Activation::Gelu` gives diffusers' GEGLU,
/// `Activation::Silu` SwiGLU).
#[derive(Clone, Copy, Debug)]
pub struct Epilogue<'a> {
    /// Scale of the product.
    pub alpha: f32,
    /// Scale of the incoming C (0 means C is write-only).
    pub beta: f32,
    /// Per-output-column bias (length N; 2N for GLU).
    pub bias: Option<&'a [f32]>,
    /// Activation applied after bias.
    pub activation: Activation,
    /// An `M × N` matrix added after the activation (any strides).
    pub residual: Option<MatRef<'a, f32>>,
    /// Crate-internal: round the final values to 16 bits straight from the store (see [`Out16`]).
    pub(crate) out16: Option<Out16<'a>>,
    /// Crate-internal: a 16-bit residual read (and widened) by the store instead of `residual`.
    pub(crate) residual16: Option<(MatRef<'a, u16>, Half)>,
}

/// The residual the kernels read: f32, or 16-bit values widened exactly as they are loaded (so
/// adding a bf16/f16 residual equals adding its f32 conversion, bit for bit).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Residual<'a> {
    F32(MatRef<'a, f32>),
    Half(MatRef<'a, u16>, Half),
}

impl<'a> Residual<'a> {
    /// A bf16 residual view.
    pub(crate) fn bf16(m: MatRef<'a, half::bf16>) -> Self {
        Residual::Half(cast_view(m), Half::Bf16)
    }
    /// An f16 residual view.
    pub(crate) fn f16(m: MatRef<'a, half::f16>) -> Self {
        Residual::Half(cast_view(m), Half::F16)
    }
    /// Rows and columns.
    pub(crate) fn dims(&self) -> (usize, usize) {
        match self {
            Residual::F32(m) => (m.rows, m.cols),
            Residual::Half(m, _) => (m.rows, m.cols),
        }
    }
    /// The same strides over `rows × cols` starting `delta` elements after this view's start
    /// (validated again by the entry points).
    pub(crate) fn shifted(self, delta: usize, rows: usize, cols: usize) -> Self {
        fn sub<T: Copy>(m: MatRef<T>, delta: usize, rows: usize, cols: usize) -> MatRef<T> {
            let off = m.offset.saturating_add(delta);
            MatRef::new(m.data, off, rows, cols, m.row_stride, m.col_stride)
        }
        match self {
            Residual::F32(m) => Residual::F32(sub(m, delta, rows, cols)),
            Residual::Half(m, h) => Residual::Half(sub(m, delta, rows, cols), h),
        }
    }
    /// Column stride of the view.
    pub(crate) fn col_stride(&self) -> usize {
        match self {
            Residual::F32(m) => m.col_stride,
            Residual::Half(m, _) => m.col_stride,
        }
    }
    /// Checks that every element of the view lies inside its data ([`MatRef::validate`]).
    pub(crate) fn validate(&self, op: &'static str) -> Result<()> {
        match self {
            Residual::F32(m) => m.validate(op, "residual"),
            Residual::Half(m, _) => m.validate(op, "residual"),
        }
    }
    /// Element `(r, c)` in f32.
    ///
    /// # Safety
    /// As [`MatRef::at`].
    #[inline]
    pub(crate) unsafe fn at(&self, r: usize, c: usize) -> f32 {
        match self {
            Residual::F32(m) => m.at(r, c),
            Residual::Half(m, Half::Bf16) => half::bf16::from_bits(m.at(r, c)).to_f32(),
            Residual::Half(m, Half::F16) => half::f16::from_bits(m.at(r, c)).to_f32(),
        }
    }
}

/// The bits of a 16-bit float view.
fn cast_view<T: bytemuck::Pod>(m: MatRef<T>) -> MatRef<u16> {
    MatRef::new(
        bytemuck::cast_slice(m.data),
        m.offset,
        m.rows,
        m.cols,
        m.row_stride,
        m.col_stride,
    )
}

/// The 16-bit formats the store can round to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Half {
    Bf16,
    F16,
}

/// A 16-bit destination for the final values of a product: element `(m, n)` at `ptr + m * ld +
/// n`, rounded to nearest even exactly as [`crate::cpu`]'s narrowing conversions do (NaN stays a
/// quiet NaN). With it, tiles of the last K block are written here instead of C, and C only holds
/// the f32 partial sums of earlier K blocks (a single-block product never touches C). This saves
/// the separate f32 → 16-bit pass over the output and half the bytes of the final store.
///
/// Invariants: built only from a `&'a mut` slice of 16-bit values (so `len` is its length and the
/// memory is exclusively ours for `'a`); the entry points validate `ld` and `len` against the
/// output shape before any tile runs; tiles are disjoint, so the copies the kernels hold never
/// write the same element.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Out16<'a> {
    pub(crate) ptr: *mut u16,
    pub(crate) len: usize,
    pub(crate) ld: usize,
    pub(crate) kind: Half,
    _borrow: std::marker::PhantomData<&'a mut [u16]>,
}

// SAFETY: worker threads write disjoint tiles through the pointer (see the invariants).
unsafe impl Send for Out16<'_> {}
// SAFETY: as above.
unsafe impl Sync for Out16<'_> {}

impl<'a> Out16<'a> {
    /// Rows of `ld` bf16 values in `out`.
    pub(crate) fn bf16(out: &'a mut [half::bf16], ld: usize) -> Self {
        Self::new(out.len(), out.as_mut_ptr() as *mut u16, ld, Half::Bf16)
    }
    /// Rows of `ld` f16 values in `out`.
    pub(crate) fn f16(out: &'a mut [half::f16], ld: usize) -> Self {
        Self::new(out.len(), out.as_mut_ptr() as *mut u16, ld, Half::F16)
    }
    fn new(len: usize, ptr: *mut u16, ld: usize, kind: Half) -> Self {
        Out16 {
            ptr,
            len,
            ld,
            kind,
            _borrow: std::marker::PhantomData,
        }
    }
    /// The same destination starting `off` elements later (a column or row offset).
    pub(crate) fn offset(self, off: usize) -> Self {
        let off = off.min(self.len);
        Out16 {
            // SAFETY: off <= len keeps the pointer inside (or one past) the borrowed slice.
            ptr: unsafe { self.ptr.add(off) },
            len: self.len - off,
            ..self
        }
    }
    /// Rounds the rows of `cols` values in `src` into rows `0, 1, ...` of this destination
    /// (rounding as [`Out16::put`]); stops at the first row that would not fit.
    pub(crate) fn store_rows(&self, src: &[f32], cols: usize) {
        let k = crate::cpu::simd::Kernels::current();
        for (r, row) in src.chunks_exact(cols.max(1)).enumerate() {
            let at = r * self.ld;
            if at + row.len() > self.len {
                return;
            }
            // SAFETY: `at + len <= self.len` keeps the run inside the borrowed slice, which
            // nothing else writes during this call; f16 and bf16 are transparent u16s.
            unsafe {
                let p = self.ptr.add(at);
                match self.kind {
                    Half::Bf16 => k.f32_to_bf16(
                        row,
                        std::slice::from_raw_parts_mut(p as *mut half::bf16, row.len()),
                    ),
                    Half::F16 => k.f32_to_f16(
                        row,
                        std::slice::from_raw_parts_mut(p as *mut half::f16, row.len()),
                    ),
                }
            }
        }
    }

    /// Rounds `v` and stores it at element `(r, c)`.
    ///
    /// # Safety
    /// `r * ld + c < len` (checked by the entry points for every tile element).
    #[inline]
    pub(crate) unsafe fn put(&self, r: usize, c: usize, v: f32) {
        let bits = match self.kind {
            Half::Bf16 => crate::cpu::simd::bf16_from_f32_rne(v).to_bits(),
            Half::F16 => half::f16::from_f32(v).to_bits(),
        };
        *self.ptr.add(r * self.ld + c) = bits;
    }
}

impl Default for Epilogue<'_> {
    fn default() -> Self {
        Epilogue {
            alpha: 1.0,
            beta: 0.0,
            bias: None,
            activation: Activation::None,
            residual: None,
            out16: None,
            residual16: None,
        }
    }
}

impl<'a> Epilogue<'a> {
    /// The plain product `C = A @ B`.
    pub fn new() -> Self {
        Self::default()
    }
    /// Sets `alpha` and `beta`.
    pub fn with_scale(mut self, alpha: f32, beta: f32) -> Self {
        self.alpha = alpha;
        self.beta = beta;
        self
    }
    /// Sets the per-column bias.
    pub fn with_bias(mut self, bias: &'a [f32]) -> Self {
        self.bias = Some(bias);
        self
    }
    /// Sets the activation.
    pub fn with_activation(mut self, activation: Activation) -> Self {
        self.activation = activation;
        self
    }
    /// Sets the residual added last.
    pub fn with_residual(mut self, residual: MatRef<'a, f32>) -> Self {
        self.residual = Some(residual);
        self
    }
    /// Sets the residual, in any of the engine's formats (a 16-bit one is read in place).
    pub(crate) fn with_any_residual(mut self, residual: Residual<'a>) -> Self {
        match residual {
            Residual::F32(m) => {
                self.residual = Some(m);
                self.residual16 = None;
            }
            Residual::Half(m, h) => {
                self.residual = None;
                self.residual16 = Some((m, h));
            }
        }
        self
    }
    /// Writes the final values rounded to 16 bits into `out` instead of C (see [`Out16`]).
    pub(crate) fn with_out16(mut self, out: Out16<'a>) -> Self {
        self.out16 = Some(out);
        self
    }
}
