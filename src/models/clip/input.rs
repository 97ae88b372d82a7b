//! Token ids going into a CLIP text encoder: [`input_ids`] builds the `[B, L]` `i32` tensor a
//! model takes from rows of ids, and [`TokenIds`] is that tensor checked against a config and
//! read to the host.
//!
//! Invariants: a checked batch has at least one row and one token, at most
//! `max_position_embeddings` tokens a row, and every id in `0..vocab_size` (an error names the
//! first bad id and its position); the pooling positions follow transformers exactly (see
//! [`TokenIds::eos_positions`]).

use super::config::ClipTextConfig;
use crate::{DType, Device, Error, Result, Tensor};

/// Rows of token ids (as a tokenizer gives them, all of one length) as the `[B, L]` `i32`
/// tensor the CLIP text encoders take, on `device`.
pub fn input_ids<R: AsRef<[u32]>>(rows: &[R], device: Device) -> Result<Tensor> {
    let op = "clip::input_ids";
    let len = rows.first().map_or(0, |r| r.as_ref().len());
    let mut flat = Vec::with_capacity(rows.len() * len);
    for (i, row) in rows.iter().enumerate() {
        let row = row.as_ref();
        if row.len() != len {
            return Err(Error::invalid(
                op,
                format!(
                    "every row needs the same length (pad them): row 0 has {len} ids, row {i} has {}",
                    row.len()
                ),
            ));
        }
        for (j, &id) in row.iter().enumerate() {
            flat.push(i32::try_from(id).map_err(|_| {
                Error::invalid(op, format!("id {id} at [{i}, {j}] does not fit i32"))
            })?);
        }
    }
    Tensor::from_vec(flat, &[rows.len(), len], device)
}

/// A batch of token ids checked against a config, on the host.
pub(crate) struct TokenIds {
    pub(crate) ids: Vec<i32>,
    pub(crate) batch: usize,
    pub(crate) len: usize,
}

impl TokenIds {
    /// Reads and checks `input_ids` (`[B, L]` `i32`, any device) for a model of config `c`.
    pub(crate) fn read(op: &'static str, input_ids: &Tensor, c: &ClipTextConfig) -> Result<Self> {
        let (batch, len) = match input_ids.shape() {
            [b, l] if input_ids.dtype() == DType::I32 => (*b, *l),
            s => {
                return Err(Error::ShapeMismatch {
                    op,
                    expected: "input_ids of shape [batch, tokens] and dtype i32 (see \
                               clip::input_ids)"
                        .into(),
                    got: format!("{} of shape {s:?}", input_ids.dtype()),
                })
            }
        };
        if batch == 0 || len == 0 {
            return Err(Error::invalid(
                op,
                format!("input_ids need at least one row and one token, got [{batch}, {len}]"),
            ));
        }
        if len > c.max_position_embeddings {
            return Err(Error::invalid(
                op,
                format!(
                    "{len} tokens a row, but the model has {} positions \
                     (max_position_embeddings)",
                    c.max_position_embeddings
                ),
            ));
        }
        let ids = input_ids.to(Device::Cpu)?.to_vec::<i32>()?;
        let vocab = c.vocab_size;
        if let Some((pos, &bad)) = ids
            .iter()
            .enumerate()
            .find(|(_, &id)| usize::try_from(id).map_or(true, |id| id >= vocab))
        {
            return Err(Error::invalid(
                op,
                format!(
                    "token id {bad} at [{}, {}] is outside the vocabulary 0..{vocab}",
                    pos / len,
                    pos % len
                ),
            ));
        }
        Ok(TokenIds { ids, batch, len })
    }

    /// The position of each row's pooled token, as transformers' `CLIPTextTransformer` picks
    /// it: with the legacy `eos_token_id == 2` the first position of the row's largest id,
    /// otherwise the first position of `eos_token_id` (position 0 in a row without it, as
    /// `argmax` of an all-false row gives).
    pub(crate) fn eos_positions(&self, c: &ClipTextConfig) -> Vec<usize> {
        self.ids
            .chunks(self.len)
            .map(|row| {
                if c.pools_at_argmax() {
                    let max = row.iter().copied().max().unwrap_or(0);
                    row.iter().position(|&id| id == max).unwrap_or(0)
                } else {
                    let eos = i64::from(c.eos_token_id);
                    row.iter().position(|&id| i64::from(id) == eos).unwrap_or(0)
                }
            })
            .collect()
    }
}
