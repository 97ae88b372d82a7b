//! The CLIP tokenizer of Stable Diffusion pipelines: prompt text to the ids a CLIP text
//! encoder takes, identical to transformers' slow `CLIPTokenizer` (the Python class diffusers
//! pipelines load with transformers 4.x) as it runs when ftfy is not installed.
//!
//! Host-only: no tensors and no device; nothing here touches the Xpu.
//!
//! # The steps (each in its own module)
//! 1. `added`: added tokens (`<|startoftext|>`, `<|endoftext|>`, the padding token, any
//!    textual-inversion token) are split out of the raw text, case-sensitively, and become
//!    their ids. With Stable Diffusion 2.x's padding token `!`, every `!` in a prompt is
//!    therefore id 0, exactly as in transformers.
//! 2. `normalize`: BERT's `BasicTokenizer` clean-up: controls and format characters dropped,
//!    whitespace collapsed, CJK ideographs made words of their own, NFC, lower case.
//! 3. `pretokenize`: CLIP's word pattern (`'s`, `'t`, ..., letter runs, single digits, runs of
//!    other characters).
//! 4. `bpe`: each piece's UTF-8 bytes as characters (`bytes`), `</w>` on the last, merged by
//!    rank; results cached per piece.
//! 5. ids: added tokens, then the vocabulary, else the unknown token; start and end tokens;
//!    truncation to `model_max_length - 2` content ids; padding.
//!
//! # Differences from other Python paths (each recorded per prompt in the test fixture)
//! - With ftfy installed, the slow tokenizer runs `ftfy.fix_text` instead of step 2: quotes are
//!   straightened (`don’t` gives `'t`), ligatures and full-width forms become ASCII, controls
//!   such as U+200B and U+FFFD are kept, and CJK ideographs are not split apart.
//! - `CLIPTokenizerFast` (and transformers 5's `CLIPTokenizer`, which is the fast one) does
//!   NFC, whitespace collapse and lower case only: controls, U+200B, U+FEFF, U+FFFD and private
//!   use characters become tokens; CJK runs are not split; a final capital sigma lower-cases to
//!   `σ` rather than `ς`; `'ſ` and `<|ſtartoftext|>` are not matched case-insensitively; U+0345
//!   is kept. Transformers 5's `CLIPTokenizer` gives the fast ids, except that with Stable
//!   Diffusion 1.x's `tokenizer_config.json` an upper-case `<|ENDOFTEXT|>` is not the end token.
//! - Unicode tables: character categories, NFC and case mapping come from this build's crates;
//!   Python uses its own `unicodedata` (Unicode 14.0 in Python 3.11), so characters assigned
//!   since can differ (Python drops them as unassigned).
//! - Reading `merges.txt`, the first line is skipped whatever it is (published files start
//!   with `#version: 0.2`) and at most 48894 merges are used, as the slow tokenizer does.
//! - Added tokens are matched leftmost, then longest; their `lstrip`/`rstrip` flags change
//!   nothing here (whitespace is dropped around every piece anyway) and `single_word` is not
//!   applied.

mod added;
mod bpe;
mod bytes;
mod clip_tokenizer;
mod config;
mod encoding;
mod files;
mod normalize;
mod pretokenize;

pub use clip_tokenizer::ClipTokenizer;
pub use config::{
    AddedToken, ClipTokenizerConfig, CLIP_MODEL_MAX_LENGTH, END_OF_TEXT, MAX_MODEL_LENGTH,
    START_OF_TEXT,
};
pub use encoding::Encoding;
pub use files::CLIP_MERGES;
