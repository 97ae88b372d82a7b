//! Tensor ops against PyTorch fixtures (Cpu) and against the Cpu (Xpu): one test binary for every op family.

#[path = "../common/mod.rs"]
mod common;

mod all_any;
mod attention_strides;
mod channels_last_norm;
mod channels_last_ops;
mod conv_channels_last;
mod conv_parity;
mod conv_transpose_parity;
mod conv_winograd;
mod copies_keep_strides;
mod cumsum_parity;
mod elementwise_i32;
mod elementwise_parity;
mod elementwise_strides;
mod ffn_parity;
mod gather_parity;
mod index_parity;
mod logsumexp_parity;
mod matmul_fused;
mod matmul_parity;
mod norm_parity;
mod op_strides;
mod pool_parity;
mod reduce_dims;
mod reduce_parity;
mod reshape_views;
mod resize_parity;
mod select_parity;
mod split_repeat;
mod torch_edges;
mod torch_parity;
mod transpose_copies;
mod var_std_parity;
mod views_parity;
