//! Where a CLIP text encoder's parameters come from: a recording pass (names and shapes only),
//! seeded random values, or a [`WeightStore`].
//!
//! Invariants: constructors ask for every parameter by its transformers name with the
//! `text_model.` prefix (`text_model.encoder.layers.0.self_attn.q_proj.weight`,
//! `text_projection.weight`) and never read a placeholder's shape back; the recording pass
//! hands out placeholders whose every dim is 1 (no memory), so a constructor that checks shapes
//! across parameters asks [`Params::placeholders`]. A store saved without the prefix
//! (transformers from 5.0 saves a `CLIPTextModel` so) is read with it stripped. Random values
//! depend only on the seed and the parameter's name, so every device and dtype draws the same
//! model.

use crate::nn::WeightStore;
use crate::{DType, Device, Error, Result, Tensor};

/// The prefix of the text transformer's parameters in transformers' checkpoints.
pub(crate) const TEXT_MODEL: &str = "text_model.";

/// How a parameter is drawn by [`Params::Random`].
#[derive(Clone, Copy, Debug)]
pub(crate) enum Init {
    /// Uniform in `±1/sqrt(fan_in)`, PyTorch's default for a Linear weight.
    FanIn(usize),
    /// Uniform with standard deviation `std` (embeddings: transformers draws them N(0, 0.02)).
    Std(f64),
    /// All ones (norm scales).
    Ones,
    /// All zeros (biases).
    Zeros,
}

/// The source of a model's parameters.
pub(crate) enum Params<'a> {
    /// Records `(name, shape)` of every parameter asked for.
    Record(Vec<(String, Vec<usize>)>),
    /// Seeded random values.
    Random {
        dtype: DType,
        device: Device,
        seed: u64,
    },
    /// A checkpoint, already checked against the parameter list; `strip` drops the
    /// `text_model.` prefix from the names asked for.
    Store {
        store: &'a WeightStore,
        strip: bool,
        dtype: DType,
        device: Device,
    },
}

/// A seed for parameter `name` (FNV-1a over the name, mixed with `seed`).
fn name_seed(seed: u64, name: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ seed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    for b in name.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// The name a checkpoint stores parameter `name` under.
pub(crate) fn stored_name(name: &str, strip: bool) -> &str {
    if strip {
        name.strip_prefix(TEXT_MODEL).unwrap_or(name)
    } else {
        name
    }
}

impl Params<'_> {
    /// True for the recording pass, whose tensors are all-ones-shaped placeholders.
    pub(crate) fn placeholders(&self) -> bool {
        matches!(self, Params::Record(_))
    }

    /// The parameter `name` of `shape`.
    pub(crate) fn get(&mut self, name: &str, shape: &[usize], init: Init) -> Result<Tensor> {
        match self {
            Params::Record(entries) => {
                entries.push((name.to_string(), shape.to_vec()));
                Tensor::zeros(&vec![1; shape.len()], DType::F32, Device::Cpu)
            }
            Params::Random {
                dtype,
                device,
                seed,
            } => {
                let bound = match init {
                    Init::Ones => return Tensor::ones(shape, *dtype, *device),
                    Init::Zeros => return Tensor::zeros(shape, *dtype, *device),
                    Init::FanIn(fan_in) => 1.0 / (fan_in.max(1) as f64).sqrt(),
                    // A uniform in ±b has standard deviation b / sqrt(3).
                    Init::Std(std) => std * 3f64.sqrt(),
                };
                Tensor::rand_affine_f32(shape, name_seed(*seed, name), 2.0 * bound, -bound)?
                    .to_dtype(*dtype)?
                    .to(*device)
            }
            Params::Store {
                store,
                strip,
                dtype,
                device,
            } => {
                let stored = stored_name(name, *strip);
                let t = store.tensor(stored, *dtype, *device)?;
                if t.shape() != shape {
                    return Err(Error::Weights {
                        file: store.path().display().to_string(),
                        missing: vec![],
                        unexpected: vec![],
                        mismatched: vec![format!(
                            "{stored}: expected {shape:?}, file has {:?}",
                            t.shape()
                        )],
                    });
                }
                Ok(t)
            }
        }
    }
}
