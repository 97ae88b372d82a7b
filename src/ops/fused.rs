//! Fused matrix products: `out = act(alpha * A@B + beta * C + bias) + residual`, and GEGLU
//! (`h * gelu(g)` over the two column halves of one product), built with [`MatmulBuilder`].
//!
//! Invariants: every operand is checked here (device, dtype, shape) before any kernel runs;
//! `C` and `residual` broadcast to the output shape `[..batch, M, N]`; `bias` is 1-D with the
//! product's column count (`2N` for GEGLU, whose output has `N` columns). The unfused sequence
//! in [`MatmulBuilder::run_unfused`] defines the semantics and is what tests compare against.

use crate::backend::{FusedArgs, Storage};
use crate::desc::Activation;
use crate::desc::MatmulKernel;
use crate::layout::broadcast_shapes;
use crate::{DType, Error, Layout, Result, Tensor};

/// A matrix product with a fused epilogue; see the module docs. Made by [`Tensor::matmul_fused`].
#[derive(Clone)]
pub struct MatmulBuilder<'a> {
    lhs: &'a Tensor,
    rhs: &'a Tensor,
    alpha: f64,
    beta: f64,
    c: Option<&'a Tensor>,
    bias: Option<&'a Tensor>,
    activation: Activation,
    residual: Option<&'a Tensor>,
    geglu: bool,
    kernel: MatmulKernel,
    out_dtype: Option<DType>,
}

impl Tensor {
    /// Starts a fused product `self @ rhs`; finish with [`MatmulBuilder::run`].
    pub fn matmul_fused<'a>(&'a self, rhs: &'a Tensor) -> MatmulBuilder<'a> {
        MatmulBuilder {
            lhs: self,
            rhs,
            alpha: 1.0,
            beta: 0.0,
            c: None,
            bias: None,
            activation: Activation::None,
            residual: None,
            geglu: false,
            kernel: MatmulKernel::Auto,
            out_dtype: None,
        }
    }
}

impl<'a> MatmulBuilder<'a> {
    /// Scales the product.
    pub fn alpha(mut self, alpha: f64) -> Self {
        self.alpha = alpha;
        self
    }

    /// Adds `beta * c` (`c` broadcasts to the output shape).
    pub fn add_scaled(mut self, beta: f64, c: &'a Tensor) -> Self {
        self.beta = beta;
        self.c = Some(c);
        self
    }

    /// Adds a per-column bias (1-D, one entry per product column).
    pub fn bias(mut self, bias: &'a Tensor) -> Self {
        self.bias = Some(bias);
        self
    }

    /// Applies an activation after bias (for GEGLU: the gate's activation).
    pub fn activation(mut self, activation: Activation) -> Self {
        self.activation = activation;
        self
    }

    /// Adds `residual` last (broadcasts to the output shape).
    pub fn residual(mut self, residual: &'a Tensor) -> Self {
        self.residual = Some(residual);
        self
    }

    /// GEGLU: the product's columns are `[h | g]`; the output is `h * gelu(g)` with `N/2`
    /// columns (diffusers' `GEGLU`). Sets the gate activation to exact GELU unless another
    /// activation was chosen.
    pub fn geglu(mut self) -> Self {
        self.geglu = true;
        if self.activation == Activation::None {
            self.activation = Activation::Gelu;
        }
        self
    }

    /// Forces an Xpu kernel (ignored on Cpu, which has one engine).
    pub fn kernel(mut self, kernel: MatmulKernel) -> Self {
        self.kernel = kernel;
        self
    }

    /// Output dtype: the inputs' (default) or `F32`.
    pub fn out_dtype(mut self, dtype: DType) -> Self {
        self.out_dtype = Some(dtype);
        self
    }

    fn out_shape(&self) -> Result<(Vec<usize>, usize)> {
        let (a, b) = (self.lhs, self.rhs);
        a.same_device(b, "matmul_fused")?;
        a.same_dtype(b, "matmul_fused")?;
        if a.rank() < 2 || b.rank() < 2 || a.shape()[a.rank() - 1] != b.shape()[b.rank() - 2] {
            return Err(Error::ShapeMismatch {
                op: "matmul_fused",
                expected: "[..., M, K] @ [..., K, N]".into(),
                got: format!("{:?} @ {:?}", a.shape(), b.shape()),
            });
        }
        let n_prod = b.shape()[b.rank() - 1];
        if self.geglu && n_prod % 2 != 0 {
            return Err(Error::invalid(
                "matmul_fused",
                format!("GEGLU needs an even number of product columns, got {n_prod}"),
            ));
        }
        let batch = broadcast_shapes(
            "matmul_fused",
            &a.shape()[..a.rank() - 2],
            &b.shape()[..b.rank() - 2],
        )?;
        let mut out = batch;
        out.push(a.shape()[a.rank() - 2]);
        out.push(if self.geglu { n_prod / 2 } else { n_prod });
        Ok((out, n_prod))
    }

    fn check_operand(&self, t: &Tensor, what: &'static str) -> Result<()> {
        self.lhs.same_device(t, what)?;
        self.lhs.same_dtype(t, what)
    }

    fn validate(&self) -> Result<(Vec<usize>, DType)> {
        let (out, n_prod) = self.out_shape()?;
        let out_dtype = self.out_dtype.unwrap_or(self.lhs.dtype());
        if out_dtype != self.lhs.dtype() && out_dtype != DType::F32 {
            return Err(Error::invalid(
                "matmul_fused",
                format!(
                    "output dtype must be {} or f32, got {out_dtype}",
                    self.lhs.dtype()
                ),
            ));
        }
        if !self.lhs.dtype().is_float() {
            return Err(Error::UnsupportedDType {
                op: "matmul_fused",
                dtype: self.lhs.dtype(),
                device: self.lhs.device(),
                hint: "; matmul takes f32, f16 or bf16".into(),
            });
        }
        if let Some(bias) = self.bias {
            self.check_operand(bias, "matmul_fused bias")?;
            if bias.shape() != [n_prod] {
                return Err(Error::shape(
                    "matmul_fused bias",
                    format!("[{n_prod}] (one entry per product column)"),
                    bias.shape(),
                ));
            }
        }
        for (t, what) in [
            (self.c, "matmul_fused c"),
            (self.residual, "matmul_fused residual"),
        ] {
            if let Some(t) = t {
                self.check_operand(t, what)?;
                t.layout()
                    .broadcast_to(&out)
                    .map_err(|_| Error::ShapeMismatch {
                        op: what,
                        expected: format!("a shape that broadcasts to the output {out:?}"),
                        got: format!("{:?}", t.shape()),
                    })?;
            }
        }
        if self.geglu && self.c.is_some() {
            return Err(Error::invalid(
                "matmul_fused",
                "GEGLU takes no `add_scaled` term",
            ));
        }
        Ok((out, out_dtype))
    }

    /// Computes the fused product.
    pub fn run(&self) -> Result<Tensor> {
        let (out, out_dtype) = self.validate()?;
        let (a, b) = (self.lhs, self.rhs);
        let batch = &out[..out.len() - 2];
        let (m, k) = (a.shape()[a.rank() - 2], a.shape()[a.rank() - 1]);
        let n_prod = b.shape()[b.rank() - 1];
        let l = a.layout().broadcast_to(&[batch, &[m, k]].concat())?;
        let r = b.layout().broadcast_to(&[batch, &[k, n_prod]].concat())?;
        let bcast = |t: Option<&'a Tensor>| -> Result<Option<(&'a Storage, Layout)>> {
            t.map(|t| Ok((t.storage(), t.layout().broadcast_to(&out)?)))
                .transpose()
        };
        let args = FusedArgs {
            alpha: self.alpha as f32,
            beta: self.beta as f32,
            c: bcast(self.c)?,
            bias: self.bias.map(|t| (t.storage(), t.layout().clone())),
            activation: self.activation,
            residual: bcast(self.residual)?,
            geglu: self.geglu,
            kernel: self.kernel,
            out_dtype,
        };
        let s = a.storage().matmul_fused(&l, b.storage(), &r, &args)?;
        Ok(Tensor::from_storage(s, Layout::contiguous(&out)))
    }

    /// The same result computed by separate ops (the semantics' definition; for tests and the
    /// `unfused` rows of benchmarks).
    pub fn run_unfused(&self) -> Result<Tensor> {
        let (_, out_dtype) = self.validate()?;
        let f32_ = |t: &Tensor| t.to_dtype(DType::F32);
        let mut acc = f32_(&self.lhs.matmul(self.rhs)?)?;
        if self.alpha != 1.0 {
            acc = acc.mul_scalar(self.alpha)?;
        }
        if let Some(c) = self.c {
            acc = acc.add(&f32_(c)?.mul_scalar(self.beta)?)?;
        }
        if let Some(bias) = self.bias {
            acc = acc.add(&f32_(bias)?)?;
        }
        let act = |t: &Tensor| -> Result<Tensor> {
            match self.activation {
                Activation::None => Ok(t.clone()),
                Activation::Relu => t.relu(),
                Activation::Gelu => t.gelu(),
                Activation::GeluTanh => t.gelu_tanh(),
                Activation::Silu => t.silu(),
            }
        };
        let mut out = if self.geglu {
            let n = acc.dim(-1)? / 2;
            acc.narrow(-1, 0, n)?.mul(&act(&acc.narrow(-1, n, n)?)?)?
        } else {
            act(&acc)?
        };
        if let Some(r) = self.residual {
            out = out.add(&f32_(r)?)?;
        }
        out.to_dtype(out_dtype)
    }
}
