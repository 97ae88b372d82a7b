//! [`ClipTextOutput`]: what a CLIP text encoder's forward pass returns.

use crate::Tensor;

/// The outputs of [`super::ClipTextModel`] and [`super::ClipTextModelWithProjection`], named
/// as transformers names them. Every tensor has the model's dtype and lives on its device.
#[derive(Clone, Debug)]
pub struct ClipTextOutput {
    /// The last layer's output after the final layer norm, `[B, L, hidden]`.
    pub last_hidden_state: Tensor,
    /// `last_hidden_state` at each row's end-of-text position, `[B, hidden]` (transformers'
    /// `pooler_output`).
    pub pooled_output: Tensor,
    /// `hidden_states[index]` when a forward pass was asked for one (`[B, L, hidden]`, without
    /// the final layer norm; index 0 is the embeddings, `-2` the penultimate layer's output).
    pub hidden_state: Option<Tensor>,
    /// `text_projection(pooled_output)`, `[B, projection_dim]`: models with a projection only.
    pub text_embeds: Option<Tensor>,
}
