//! The activation a fused epilogue applies (products, convolutions, the GLU gate).

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
