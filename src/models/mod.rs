//! Models built on the Tensor API and `nn` layers: the parts of a Stable Diffusion pipeline
//! (tokenizer, text encoders, VAE, schedulers, the pipeline itself).
//!
//! Invariant: nothing here names a backend type; every model runs on whichever device its
//! weights were loaded to.

pub mod clip;
pub mod generator;
pub mod tokenizer;
pub mod unet;
pub mod vae;
