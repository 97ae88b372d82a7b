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
    /// The ids of `texts` for `tok` as a `[texts, L]` tensor, and each text's truncation
    /// warning (`None` where it fit).
    fn ids(&self, tok: &ClipTokenizer, texts: &[&str]) -> Result<(Tensor, Vec<Option<String>>)> {
        let mut rows = Vec::with_capacity(texts.len());
        let mut warnings = Vec::with_capacity(texts.len());
        for text in texts {
            let enc = tok.encode(text)?;
            warnings.push(enc.truncation_warning());
            rows.push(enc.ids);
        }
        Ok((input_ids(&rows, self.device())?, warnings))
    }

    /// Encodes `texts` with every text encoder of the pipeline in one batch (rows are
    /// independent: each text's states are those of its own encoding); the first text's
    /// truncation warnings go to `warnings`.
    fn encode_texts(&self, texts: &[&str], warnings: &mut Vec<String>) -> Result<Vec<Encoded>> {
        let p = self.parts();
        let n = texts.len();
        let (ids, warn) = self.ids(&p.tokenizer, texts)?;
        warnings.extend(warn.into_iter().next().flatten());
        let rows =
            |t: &Tensor| -> Result<Vec<Tensor>> { (0..n).map(|i| t.narrow(0, i, 1)).collect() };
        if self.kind() != PipelineKind::StableDiffusionXl {
            let states = p.text_encoder.forward(&ids)?.last_hidden_state;
            return Ok(rows(&states)?.into_iter().map(|h| (h, None)).collect());
        }
        let (Some(tok2), Some(enc2)) = (&p.tokenizer_2, &p.text_encoder_2) else {
            return Err(Error::invalid(
                "encode_prompt",
                "an SDXL pipeline without its second text encoder",
            ));
        };
        let h1 = p.text_encoder.hidden_state(&ids, -2)?;
        let (ids2, warn2) = self.ids(tok2, texts)?;
        if let Some(w) = warn2
            .into_iter()
            .next()
            .flatten()
            .filter(|w| !warnings.contains(w))
        {
            warnings.push(w);
        }
        let out = enc2.forward_with_hidden_state(&ids2, -2)?;
        let missing = || Error::invalid("encode_prompt", "internal: text encoder output");
        let h2 = out.hidden_state.ok_or_else(missing)?;
        let pooled = out.text_embeds.ok_or_else(missing)?;
        let states = Tensor::cat(&[&h1, &h2], -1)?;
        Ok(rows(&states)?
            .into_iter()
            .zip(rows(&pooled)?)
            .map(|(h, p)| (h, Some(p)))
            .collect())
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
        let xl_zeros = self.kind() == PipelineKind::StableDiffusionXl
            && negative_prompt.is_none()
            && self.parts().force_zeros_for_empty_prompt;
        // The prompt and its negative encoded together: one batch of two rows.
        let texts: Vec<&str> = if guided && !xl_zeros {
            vec![prompt, negative_prompt.unwrap_or("")]
        } else {
            vec![prompt]
        };
        let mut encoded = self.encode_texts(&texts, &mut warnings)?.into_iter();
        let missing = || Error::invalid("encode_prompt", "internal: text encoder rows");
        let (context, pooled) = encoded.next().ok_or_else(missing)?;
        let rep = |t: &Tensor| -> Result<Tensor> {
            let mut reps = vec![1; t.rank()];
            reps[0] = images;
            t.repeat(&reps)
        };
        let (mut context, mut pooled) = (rep(&context)?, pooled.as_ref().map(rep).transpose()?);
        if guided {
            let (neg, neg_pooled) = if xl_zeros {
                (
                    context.zeros_like()?,
                    pooled.as_ref().map(|p| p.zeros_like()).transpose()?,
                )
            } else {
                let (n, np) = encoded.next().ok_or_else(missing)?;
                (rep(&n)?, np.as_ref().map(rep).transpose()?)
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
