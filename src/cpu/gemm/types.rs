//! The public value types of the GEMM engine: strided matrix views and the fused epilogue.
//!
//! Invariants: a [`MatRef`] never owns data and addresses element `(r, c)` at
//! `data[offset + r * row_stride + c * col_stride]`; [`MatRef::validate`] is the single place
//! where that formula is checked against `data.len()`, and every entry point calls it before any
//! unchecked access.

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

/// Element-wise activation applied by the epilogue (or, for the GLU entry points, to the gate).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Activation {
    /// Identity.
    #[default]
    None,
    /// `max(x, 0)`.
    Relu,
    /// Exact GELU: `0.5 x (1 + erf(x / sqrt 2))` (PyTorch `approximate="none"`).
    Gelu,
    /// Tanh GELU: `0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`.
    GeluTanh,
    /// SiLU / swish: `x * sigmoid(x)`.
    Silu,
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
}

impl Default for Epilogue<'_> {
    fn default() -> Self {
        Epilogue {
            alpha: 1.0,
            beta: 0.0,
            bias: None,
            activation: Activation::None,
            residual: None,
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
}
