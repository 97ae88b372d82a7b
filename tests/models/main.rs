//! The Stable Diffusion parts: tokenizer, text encoders, VAE, schedulers, the seeded generator.

#[path = "../common/mod.rs"]
mod common;

mod clip_text;
mod clip_text_common;
mod clip_text_loading;
mod clip_tokenizer;
mod pipeline;
mod scheduler_configs;
mod scheduler_devices;
mod scheduler_errors;
mod scheduler_runs;
mod torch_generator;
mod vae;
mod vae_loading;
