//! Neural-network layers built on the Tensor API. Each layer works on both devices and picks the
//! fastest path for its device (prepacked weights on Cpu, fused epilogues on Xpu).

mod attention;
mod config;
mod config_check;
mod config_depths;
mod config_json;
mod conv;
mod conv_transpose;
mod feedforward;
mod held;
pub(crate) mod layers;
mod linear;
mod qkv;
mod resnet;
mod restore;
mod transformer;
pub(crate) mod unet;
pub(crate) mod weights;
mod weights_index;

pub use conv::Conv2d;
pub use conv_transpose::ConvTranspose2d;
pub use linear::Linear;
pub use qkv::FusedQkv;

pub use attention::Attention;
pub use config::{
    ActFn, ClassEmbedType, DownBlockType, MidBlockType, TextTimeEmbed, TimeEmbeddingType,
    UNetConfig, UpBlockType,
};
pub use feedforward::FeedForward;
pub use layers::{GroupNorm, LayerNorm};
pub use resnet::{Downsample2D, ResnetBlock2D, Upsample2D};
pub use transformer::{BasicTransformerBlock, Transformer2DModel};
pub use unet::{AddedCond, DownBlock, MidBlock, TimestepEmbedding, UNet2DConditionModel, UpBlock};
pub use weights::WeightStore;
