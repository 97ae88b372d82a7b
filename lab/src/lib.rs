//! `xpu-lab`: experiments, probes and diagnostics for the `xpu` kernels. Nothing here is part
//! of the product; a variant that wins a measurement moves into the library as a candidate of
//! its kernel family, and one that loses is deleted (git keeps its history).
//!
//! The examples (`cargo run --release -p xpu-lab --example NAME`): `coop_probe` (the forced
//! cooperative-matrix products against the Cpu), `matmul_variants` (every forced matmul kernel
//! timed on one shape), `spirv_dump` (the SPIR-V of the backend's pipelines) and
//! `pipeline_stats` (the driver's statistics of those pipelines). The scripts: `gpu/` (build,
//! carry and run the tests and benchmarks on a GPU machine without a Rust toolchain, beside
//! PyTorch) and `lavapipe_coop/` (Mesa's lavapipe 26 with cooperative matrices in a chroot, and
//! NVIDIA register counts from Mesa's NAK compiler). See `README.md`.
