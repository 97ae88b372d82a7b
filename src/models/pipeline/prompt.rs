//! Prompt encoding as diffusers' `encode_prompt` does it: [`PromptEmbeds`] and
//! [`StableDiffusionPipeline::encode_prompt`].
//!
//! Invariants: a prompt is tokenized to the tokenizer's `model_max_length` (77: start token,
//! at most 75 content tokens, end token, padding), what did not fit is reported as diffusers
//! warns (negative prompts are truncated silently, as there); SD conditions on the text
//! encoder's last hidden state, SDXL on both encoders' `hidden_states[-2]` concatenated along
//! the width plus the second's `text_embeds`; with guidance the negative rows come first, then
//! the prompt's, each repeated `images` times, as `torch.cat([negative, prompt])` orders them.

use super::index::PipelineKind;
use super::StableDiffusionPipeline;
use crate::models::clip::input_ids;
use crate::models::tokenizer::ClipTokenizer;
use crate::{Error, Result, Tensor};

/// The text conditioning of one run.
#[derive(Clone, Debug)]
pub struct PromptEmbeds {
    /// `encoder_hidden_states` `[B, 77, D]` in the pipeline's dtype on its device: with
    /// guidance `B = 2·images` (negative rows first), else `B = images`.
    pub context: Tensor,
    /// SDXL's pooled text embeddings `[B, projection_dim]` (same rows); `None` for SD.
    pub pooled: Option<Tensor>,
    /// Whether the rows hold a negative half (classifier-free guidance).
    pub guided: bool,
    /// diffusers' truncation warnings for the prompt.
    pub warnings: Vec<String>,
}

/// One text's states: `(hidden states [1, 77, D], pooled [1, P] for SDXL)`.
type Encoded = (Tensor, Option<Tensor>);

impl StableDiffusionPipeline {
    /// The ids of `text` for `tok` as a `[1, L]` tensor, and the truncation warning if any.
    fn ids(&self, tok: &ClipTokenizer, text: &str) -> Result<(Tensor, Option<String>)> {
        let enc = tok.encode(text)?;
        Ok((
            input_ids(&[enc.ids.as_slice()], self.device())?,
            enc.truncation_warning(),
        ))
    }

    /// Encodes one text with every text encoder of the pipeline.
    fn encode_text(&self, text: &str, warnings: &mut Vec<String>) -> Result<Encoded> {
        let p = self.parts();
        let (ids, warn) = self.ids(&p.tokenizer, text)?;
        warnings.extend(warn);
        if self.kind() != PipelineKind::StableDiffusionXl {
            return Ok((p.text_encoder.forward(&ids)?.last_hidden_state, None));
        }
        let (Some(tok2), Some(enc2)) = (&p.tokenizer_2, &p.text_encoder_2) else {
            return Err(Error::invalid(
                "encode_prompt",
                "an SDXL pipeline without its second text encoder",
            ));
        };
        let h1 = p.text_encoder.hidden_state(&ids, -2)?;
        let (ids2, warn2) = self.ids(tok2, text)?;
        if let Some(w) = warn2.filter(|w| !warnings.contains(w)) {
            warnings.push(w);
        }
        let out = enc2.forward_with_hidden_state(&ids2, -2)?;
        let missing = || Error::invalid("encode_prompt", "internal: text encoder output");
        let h2 = out.hidden_state.ok_or_else(missing)?;
        let pooled = out.text_embeds.ok_or_else(missing)?;
        Ok((Tensor::cat(&[&h1, &h2], -1)?, Some(pooled)))
    }

    /// diffusers' `encode_prompt` for `prompt`, with `guided` (classifier-free guidance) the
    /// negative rows first (`negative_prompt`, the empty prompt where `None`, or SDXL's zeros
    /// where `None` and `force_zeros_for_empty_prompt`), each text's rows repeated `images`
    /// times.
    pub fn encode_prompt(
        &self,
        prompt: &str,
        negative_prompt: Option<&str>,
        images: usize,
        guided: bool,
    ) -> Result<PromptEmbeds> {
        if images == 0 {
            return Err(Error::invalid("encode_prompt", "images must be at least 1"));
        }
        let mut warnings = Vec::new();
        let (context, pooled) = self.encode_text(prompt, &mut warnings)?;
        let rep = |t: &Tensor| -> Result<Tensor> {
            let mut reps = vec![1; t.rank()];
            reps[0] = images;
            t.repeat(&reps)
        };
        let (mut context, mut pooled) = (rep(&context)?, pooled.as_ref().map(rep).transpose()?);
        if guided {
            let xl = self.kind() == PipelineKind::StableDiffusionXl;
            let (neg, neg_pooled) = match negative_prompt {
                None if xl && self.parts().force_zeros_for_empty_prompt => (
                    context.zeros_like()?,
                    pooled.as_ref().map(|p| p.zeros_like()).transpose()?,
                ),
                _ => {
                    let (n, np) =
                        self.encode_text(negative_prompt.unwrap_or(""), &mut Vec::new())?;
                    (rep(&n)?, np.as_ref().map(rep).transpose()?)
                }
            };
            context = Tensor::cat(&[&neg, &context], 0)?;
            pooled = match (neg_pooled, pooled) {
                (Some(n), Some(p)) => Some(Tensor::cat(&[&n, &p], 0)?),
                _ => None,
            };
        }
        Ok(PromptEmbeds {
            context,
            pooled,
            guided,
            warnings,
        })
    }
}
