//! Layers and the UNet: parity with diffusers, loading, prepacked weights, fuzzed configs and checkpoints.

#[path = "../common/mod.rs"]
mod common;

mod channels_last_unet;
mod config_fuzz;
mod nn_linear;
mod nn_prepacked;
mod nn_weight_restore;
mod unet_class_embed;
mod unet_folders;
mod unet_loading;
mod unet_model_api;
mod weights_fuzz;
