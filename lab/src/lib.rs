//! `xpu-lab`: experiments, probes and diagnostics for the `xpu` kernels. Nothing here is part
//! of the product; a variant that wins a measurement moves into the library as a candidate of
//! its kernel family, and one that loses is deleted (git keeps its history).
