//! Checking a CLIP text encoder checkpoint against the model before any data is read.
//!
//! Invariants: the names are matched in one of the two layouts transformers writes (every
//! text-transformer tensor under `text_model.`, as all published checkpoints have them, or
//! without that prefix, as transformers from 5.0 saves a `CLIPTextModel`), chosen by where the
//! token embedding is; every missing, unexpected and mis-shaped tensor is then reported in one
//! [`Error::Weights`]. Tolerated and never read: `embeddings.position_ids` (older releases saved
//! that buffer, as int64) and, for a model without projection, `text_projection.weight` (a
//! `CLIPTextModelWithProjection` checkpoint read as its text model, as transformers allows).

use std::path::Path;

use super::params::{stored_name, TEXT_MODEL};
use crate::nn::WeightStore;
use crate::{Error, Result};

/// The tensors a checkpoint may hold that the model does not read.
fn ignorable(name: &str, strip: bool, with_projection: bool) -> bool {
    let position_ids = format!(
        "{}embeddings.position_ids",
        if strip { "" } else { TEXT_MODEL }
    );
    name == position_ids || (!with_projection && name == "text_projection.weight")
}

/// Opens `path` and checks it against `expected` (names with the `text_model.` prefix);
/// returns the store and whether its names lack that prefix.
pub(crate) fn open_checked(
    path: &Path,
    expected: &[(String, Vec<usize>)],
    with_projection: bool,
) -> Result<(WeightStore, bool)> {
    let store = WeightStore::open(path)?;
    let prefixed = format!("{TEXT_MODEL}embeddings.token_embedding.weight");
    let strip = store.shape(&prefixed).is_none()
        && store.shape("embeddings.token_embedding.weight").is_some();
    let stored: Vec<(String, Vec<usize>)> = expected
        .iter()
        .map(|(n, s)| (stored_name(n, strip).to_string(), s.clone()))
        .collect();
    match store.check(&stored) {
        Ok(()) => Ok((store, strip)),
        Err(Error::Weights {
            file,
            missing,
            unexpected,
            mismatched,
        }) => {
            let unexpected: Vec<String> = unexpected
                .into_iter()
                .filter(|n| !ignorable(n, strip, with_projection))
                .collect();
            if missing.is_empty() && unexpected.is_empty() && mismatched.is_empty() {
                Ok((store, strip))
            } else {
                Err(Error::Weights {
                    file,
                    missing,
                    unexpected,
                    mismatched,
                })
            }
        }
        Err(e) => Err(e),
    }
}
