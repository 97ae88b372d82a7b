//! The index of a sharded safetensors checkpoint (`*.safetensors.index.json`, as diffusers'
//! and transformers' `save_pretrained` write it past `max_shard_size`):
//! `{"metadata": {...}, "weight_map": {"<tensor>": "<shard file>", ...}}`.
//!
//! Invariants: the index is read only if it is a plausible size (a corrupt or hostile file
//! cannot make us allocate gigabytes); every shard is a plain file name ending in
//! `.safetensors`, resolved beside the index (no directories, so an index cannot point outside
//! its folder); the result lists each shard once, in order of first mention, with the tensors
//! the index places in it. Whether the shards really hold them is checked by
//! [`super::WeightStore::open`] once they are mapped.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::{Error, Result};

/// Largest index read (SDXL's lists ~1700 tensors in ~150 KB).
const MAX_INDEX_BYTES: u64 = 64 << 20;

/// The shards `index` lists, each with the tensors placed in it.
pub(crate) fn read_index(index: &Path) -> Result<Vec<(PathBuf, Vec<String>)>> {
    let invalid = |msg: String| Error::InvalidFile {
        file: index.display().to_string(),
        msg,
    };
    let io = |source| Error::Io {
        context: format!("reading the sharded checkpoint index {}", index.display()),
        source,
    };
    let len = std::fs::metadata(index).map_err(io)?.len();
    if len > MAX_INDEX_BYTES {
        return Err(invalid(format!(
            "{len} bytes is too large for a checkpoint index (at most {MAX_INDEX_BYTES})"
        )));
    }
    let text = std::fs::read_to_string(index).map_err(io)?;
    let value: Value =
        serde_json::from_str(&text).map_err(|e| invalid(format!("not valid JSON: {e}")))?;
    let Some(Value::Object(map)) = value.get("weight_map") else {
        return Err(invalid(
            "expected an object with a \"weight_map\" object (tensor name -> shard file)".into(),
        ));
    };
    let dir = index.parent().unwrap_or(Path::new("."));
    let mut shards: Vec<(PathBuf, Vec<String>)> = Vec::new();
    for (name, file) in map {
        let file = file
            .as_str()
            .filter(|f| is_plain_shard_name(f))
            .ok_or_else(|| {
                invalid(format!(
                    "weight_map entry {name}: expected a shard file name beside the index \
                     (\"*.safetensors\", no directories), got {file}"
                ))
            })?;
        let path = dir.join(file);
        match shards.iter_mut().find(|(p, _)| *p == path) {
            Some((_, names)) => names.push(name.clone()),
            None => shards.push((path, vec![name.clone()])),
        }
    }
    if shards.is_empty() {
        return Err(invalid("the weight_map lists no tensors".into()));
    }
    Ok(shards)
}

/// A file name with no directory part that names a safetensors file.
fn is_plain_shard_name(f: &str) -> bool {
    let p = Path::new(f);
    f.ends_with(".safetensors")
        && p.file_name().and_then(|n| n.to_str()) == Some(f)
        && !f.contains(['/', '\\'])
        && f != ".safetensors"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_names_stay_beside_the_index() {
        assert!(is_plain_shard_name("m-00001-of-00002.safetensors"));
        for bad in [
            "../m.safetensors",
            "/etc/m.safetensors",
            "sub/m.safetensors",
            "sub\\m.safetensors",
            "m.bin",
            ".safetensors",
            "",
        ] {
            assert!(!is_plain_shard_name(bad), "{bad}");
        }
    }
}
