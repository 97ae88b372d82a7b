//! Neural-network layers built on the Tensor API. Each layer works on both devices and picks the
//! fastest path for its device (prepacked weights on Cpu, fused epilogues on Xpu).

mod act_fn;
mod attention;
mod conv;
mod conv_transpose;
mod feedforward;
mod held_weight;
pub(crate) mod layers;
mod linear;
mod qkv;
pub(crate) mod resnet;
mod restore;
pub(crate) mod transformer;
pub(crate) mod weights;
mod weights_index;
mod weights_reread;

pub use conv::Conv2d;
pub use conv_transpose::ConvTranspose2d;
pub use linear::Linear;
pub use qkv::FusedQkv;

pub use act_fn::ActFn;
pub use attention::Attention;
pub use feedforward::FeedForward;
pub use layers::{GroupNorm, LayerNorm};
pub use resnet::{Downsample2D, ResnetBlock2D, Upsample2D};
pub use transformer::{BasicTransformerBlock, Transformer2DModel};
pub use weights::WeightStore;
