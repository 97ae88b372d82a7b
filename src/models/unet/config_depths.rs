//! Transformer depths of a [`UNetConfig`]: diffusers' `transformer_layers_per_block` (an int,
//! one int per level, or per level a list with one depth per layer) and
//! `reverse_transformer_layers_per_block` (the up blocks' depths of an "asymmetrical UNet").
//!
//! Invariants: after [`expand`] every level has exactly one depth per layer (`layers_per_block`
//! down, one more up); an int is repeated over the layers, as diffusers' blocks repeat it; a
//! list must name every layer (diffusers would ignore extra entries and fail on missing ones:
//! both are errors here, naming the key).

use serde_json::Value;

use crate::models::unet::config::{cfg_err, UNetConfig};
use crate::models::unet::config_check::MAX_LAYERS;
use crate::Result;

/// One level's entry: a depth for every layer, or one depth per layer.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Depths {
    /// An int: every transformer of the level has this depth.
    Each(usize),
    /// A list: the depth of each layer's transformer.
    PerLayer(Vec<usize>),
}

fn depth(key: &str, v: &Value) -> Result<usize> {
    v.as_u64()
        .and_then(|x| usize::try_from(x).ok())
        .ok_or_else(|| {
            cfg_err(
                key,
                format!("expected a non-negative integer depth, got {v}"),
            )
        })
}

/// Parses an int (one entry, to repeat per level) or a list of ints and int lists; the flag
/// says whether the value was a single int.
pub(crate) fn parse(key: &str, v: &Value) -> Result<(Vec<Depths>, bool)> {
    match v {
        Value::Array(items) => {
            let entries = items
                .iter()
                .map(|x| match x {
                    Value::Array(layers) => Ok(Depths::PerLayer(
                        layers
                            .iter()
                            .map(|d| depth(key, d))
                            .collect::<Result<_>>()?,
                    )),
                    _ => Ok(Depths::Each(depth(key, x)?)),
                })
                .collect::<Result<_>>()?;
            Ok((entries, false))
        }
        _ => Ok((vec![Depths::Each(depth(key, v)?)], true)),
    }
}

/// The depths of `levels` levels with `layers[i]` layers each, from `entries` (one entry
/// repeated when `scalar`, else exactly one per level).
pub(crate) fn expand(
    key: &str,
    entries: &[Depths],
    scalar: bool,
    layers: &[usize],
) -> Result<Vec<Vec<usize>>> {
    // Bound the layer counts before anything is repeated over them (a corrupt config must
    // not allocate per layer).
    if layers.iter().any(|&l| l == 0 || l > MAX_LAYERS + 1) {
        return Err(cfg_err(
            "layers_per_block",
            format!("{layers:?}: each entry must be in 1..={MAX_LAYERS}"),
        ));
    }
    let n = layers.len();
    if !(scalar && entries.len() == 1) && entries.len() != n {
        return Err(cfg_err(
            key,
            format!(
                "has {} entries but there are {n} levels (give one value or one per level)",
                entries.len()
            ),
        ));
    }
    (0..n)
        .map(|i| {
            let entry = if scalar { &entries[0] } else { &entries[i] };
            match entry {
                Depths::Each(d) => Ok(vec![*d; layers[i]]),
                Depths::PerLayer(v) if v.len() == layers[i] => Ok(v.clone()),
                Depths::PerLayer(v) => Err(cfg_err(
                    key,
                    format!(
                        "level {i} lists {} depths but has {} layers (one depth per layer)",
                        v.len(),
                        layers[i]
                    ),
                )),
            }
        })
        .collect()
}

impl UNetConfig {
    /// The transformer depth of each layer of down level `level` (empty past the last level).
    pub fn down_transformer_depths(&self, level: usize) -> Vec<usize> {
        self.transformer_layers_per_block
            .get(level)
            .cloned()
            .unwrap_or_default()
    }

    /// The transformer depth of each layer of up block `up` (deepest level first, as
    /// `up_blocks`): `reverse_transformer_layers_per_block[up]`, or else the mirrored down
    /// level's depth (its first layer's: without the reverse list every level is uniform)
    /// repeated over its `layers_per_block + 1` layers.
    pub fn up_transformer_depths(&self, up: usize) -> Vec<usize> {
        if let Some(r) = &self.reverse_transformer_layers_per_block {
            return r.get(up).cloned().unwrap_or_default();
        }
        let Some(level) = self.levels().checked_sub(up + 1) else {
            return Vec::new();
        };
        let d = self.down_transformer_depths(level).first().copied();
        let layers = self.layers_per_block.get(level).map_or(0, |l| l + 1);
        d.map_or_else(Vec::new, |d| vec![d; layers])
    }

    /// The mid block's transformer depth: the last level's first entry, as diffusers passes
    /// `transformer_layers_per_block[-1]` to its one-layer `UNetMidBlock2DCrossAttn`.
    pub fn mid_transformer_depth(&self) -> usize {
        self.transformer_layers_per_block
            .last()
            .and_then(|l| l.first())
            .copied()
            .unwrap_or(0)
    }

    /// Checks the depths against the levels' layer counts (part of [`UNetConfig::validate`]).
    pub(crate) fn validate_depths(&self, max_depth: usize) -> Result<()> {
        let key = "transformer_layers_per_block";
        for (i, depths) in self.transformer_layers_per_block.iter().enumerate() {
            let layers = self.layers_per_block.get(i).copied().unwrap_or(0);
            if depths.len() != layers {
                return Err(cfg_err(
                    key,
                    format!("level {i} has {} depths for {layers} layers", depths.len()),
                ));
            }
            if self.reverse_transformer_layers_per_block.is_none()
                && depths.iter().any(|&d| d != depths[0])
            {
                return Err(cfg_err(
                    "reverse_transformer_layers_per_block",
                    "must be given when transformer_layers_per_block lists per-layer depths \
                     (an asymmetrical UNet), as diffusers requires",
                ));
            }
        }
        let up_key = "reverse_transformer_layers_per_block";
        if let Some(r) = &self.reverse_transformer_layers_per_block {
            if r.len() != self.levels() {
                return Err(cfg_err(
                    up_key,
                    format!(
                        "has {} entries but there are {} levels",
                        r.len(),
                        self.levels()
                    ),
                ));
            }
            for (up, depths) in r.iter().enumerate() {
                let level = self.levels() - 1 - up;
                let layers = self.layers_per_block.get(level).map_or(0, |l| l + 1);
                if depths.len() != layers {
                    return Err(cfg_err(
                        up_key,
                        format!(
                            "up block {up} has {} depths for {layers} layers",
                            depths.len()
                        ),
                    ));
                }
            }
        }
        let down = (0..self.levels()).map(|i| (key, self.down_transformer_depths(i)));
        let up = (0..self.levels()).map(|i| (up_key, self.up_transformer_depths(i)));
        let all = down.chain(up);
        for (k, depths) in all {
            if depths.iter().any(|&d| d == 0 || d > max_depth) {
                return Err(cfg_err(
                    k,
                    format!("{depths:?}: each depth must be in 1..={max_depth}"),
                ));
            }
        }
        Ok(())
    }
}
