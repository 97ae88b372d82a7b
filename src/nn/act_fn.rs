//! The activation a block applies between its layers, as diffusers names it in configs.

/// The activation named by `act_fn` (diffusers' `get_activation`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ActFn {
    /// `silu` / `swish`.
    Silu,
    /// `gelu` (exact erf form).
    Gelu,
    /// `relu`.
    Relu,
    /// `mish`: `x * tanh(softplus(x))`.
    Mish,
}
