//! CLIP text encoders as transformers implements them: [`ClipTextModel`] (`CLIPTextModel`,
//! Stable Diffusion 1.x and 2.x, SDXL's first encoder) and [`ClipTextModelWithProjection`]
//! (`CLIPTextModelWithProjection`, SDXL's second), configured by a [`ClipTextConfig`] read from
//! the encoder folder's `config.json`, loaded from its safetensors by transformers' parameter
//! names, or built with seeded random weights.
//!
//! Token ids come in as a `[B, L]` `i32` tensor ([`input_ids`] builds one from a tokenizer's
//! rows). Outputs ([`ClipTextOutput`]) are transformers': `last_hidden_state`, the pooled
//! output at the end-of-text position, any `hidden_states[i]` (without the final layer norm)
//! and, with a projection, `text_embeds`.
//!
//! Invariants: the models run on either device in f32, f16 or bf16 (every parameter in the
//! model's dtype on its device); loading checks the whole checkpoint before reading it; bad
//! configs, checkpoints and ids are errors naming what was expected, never panics.

mod checkpoint;
mod config;
mod config_json;
mod folder;
mod input;
mod layer;
mod model;
mod output;
mod params;
mod projection;

pub use config::{ClipArchitecture, ClipTextConfig, HiddenAct};
pub use input::input_ids;
pub use model::ClipTextModel;
pub use output::ClipTextOutput;
pub use projection::ClipTextModelWithProjection;
