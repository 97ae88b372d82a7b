//! [`Encoding`]: what the tokenizer gives a pipeline for one prompt.
//!
//! Invariants (for encodings made by [`super::ClipTokenizer::encode`]): `ids.len()` is the
//! tokenizer's `model_max_length`; `ids[0]` is the start token, `ids[length - 1]` the end token
//! and everything after it the padding token; `truncated_ids` are the content tokens that did
//! not fit, in order, and `truncated_text` is their decoded text (empty when nothing was cut).

/// One prompt, encoded for a CLIP text model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Encoding {
    /// `<|startoftext|>`, the content tokens that fit, the end token, then padding:
    /// `model_max_length` ids (diffusers' `input_ids` with `padding="max_length"`,
    /// `truncation=True`).
    pub ids: Vec<u32>,
    /// How many leading ids are not padding (start and end tokens included): the number of
    /// ones in the attention mask.
    pub length: usize,
    /// Content ids cut off by truncation, in order.
    pub truncated_ids: Vec<u32>,
    /// The text of the cut ids, decoded as diffusers decodes it for its warning.
    pub truncated_text: String,
}

impl Encoding {
    /// Whether any content was cut off.
    pub fn is_truncated(&self) -> bool {
        !self.truncated_ids.is_empty()
    }

    /// 1 for the first `length` positions, 0 for the padding (transformers' `attention_mask`).
    pub fn attention_mask(&self) -> Vec<u32> {
        (0..self.ids.len())
            .map(|i| u32::from(i < self.length))
            .collect()
    }

    /// diffusers' warning when the prompt was truncated, `None` otherwise.
    pub fn truncation_warning(&self) -> Option<String> {
        self.is_truncated().then(|| {
            format!(
                "The following part of your input was truncated because CLIP can only handle \
                 sequences up to {} tokens: {}",
                self.ids.len(),
                self.truncated_text
            )
        })
    }
}
