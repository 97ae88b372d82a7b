//! The UNet's class embedding: diffusers' `class_embedding` for every `class_embed_type` (and
//! the lookup table of `num_class_embeds` when it is null), which maps `class_labels` to a
//! `[B, time_embed_dim]` term of the time embedding.
//!
//! Invariants: the result is `[batch, time_embed_dim]` in the model's dtype on its device; one
//! label (or one row) for the whole batch is broadcast, as diffusers' addition broadcasts it.
//! Integer labels given on the Cpu are range-checked there, so an Xpu model never waits on a
//! read-back; vectors (`identity`, projections) must already have the model's dtype and device
//! (as `text_embeds` must), and are checked before anything is computed.

use super::embeddings::{TimeDims, TimestepEmbedding};
use crate::models::unet::config::{ClassEmbedType, UNetConfig};
use crate::nn::layers::{load_linear, map_linear, MapFn};
use crate::nn::weights::{Init, ParamSource};
use crate::nn::ActFn;
use crate::nn::Linear;
use crate::{DType, Device, Error, Result, Tensor};

const OP: &str = "UNet2DConditionModel class_labels";

/// diffusers' `class_embedding` module, one variant per `class_embed_type`.
#[derive(Clone, Debug)]
pub(crate) enum ClassEmbedding {
    /// `nn.Embedding` `[num_class_embeds, time_embed_dim]` of i32 labels.
    Table(Tensor),
    /// `"timestep"`: the labels' sinusoid (the model's own `time_proj`) through this embedding.
    Timestep(TimestepEmbedding),
    /// `"identity"`: the labels are the embedding (`[B, dim]`).
    Identity { dim: usize },
    /// `"projection"`: a `TimestepEmbedding` (SiLU) of float vectors, no sinusoid.
    Projection(TimestepEmbedding),
    /// `"simple_projection"`: one Linear of float vectors.
    SimpleProjection(Linear),
}

impl ClassEmbedding {
    /// The class embedding `c` names, or `None` for a model without class labels.
    /// `fourier` is the model's `time_proj.weight` for a `"fourier"` model (the `"timestep"`
    /// kind projects its labels with the model's own `time_proj`).
    pub(crate) fn load(
        src: &mut dyn ParamSource,
        c: &UNetConfig,
        fourier: Option<&Tensor>,
    ) -> Result<Option<Self>> {
        let temb = c.time_embed_dim();
        let time_dims = |channels, act, fourier: Option<&Tensor>| TimeDims {
            cond_dim: None,
            channels,
            embed_dim: temb,
            act,
            post_act: None,
            fourier: fourier.cloned(),
            flip_sin_to_cos: c.flip_sin_to_cos,
            freq_shift: c.freq_shift,
        };
        let prefix = "class_embedding";
        Ok(Some(match (c.class_embed_type, c.num_class_embeds) {
            (None, None) => return Ok(None),
            // nn.Embedding: PyTorch initialises it N(0, 1); random models draw uniform in ±1.
            (None, Some(n)) => {
                Self::Table(src.get("class_embedding.weight", &[n, temb], Init::FanIn(1))?)
            }
            (Some(ClassEmbedType::Timestep), _) => Self::Timestep(TimestepEmbedding::load(
                src,
                prefix,
                time_dims(c.timestep_input_dim(), c.act_fn, fourier),
            )?),
            (Some(ClassEmbedType::Identity), _) => Self::Identity { dim: temb },
            // diffusers builds it with TimestepEmbedding's default act_fn, whatever act_fn says.
            (Some(ClassEmbedType::Projection { input_dim }), _) => Self::Projection(
                TimestepEmbedding::load(src, prefix, time_dims(input_dim, ActFn::Silu, None))?,
            ),
            (Some(ClassEmbedType::SimpleProjection { input_dim }), _) => {
                Self::SimpleProjection(load_linear(src, prefix, input_dim, temb, true)?)
            }
        }))
    }

    pub(crate) fn map(&self, f: &mut MapFn) -> Result<Self> {
        Ok(match self {
            Self::Table(t) => Self::Table(f(t)?),
            Self::Timestep(e) => Self::Timestep(e.map(f)?),
            Self::Identity { dim } => Self::Identity { dim: *dim },
            Self::Projection(e) => Self::Projection(e.map(f)?),
            Self::SimpleProjection(l) => Self::SimpleProjection(map_linear(l, f)?),
        })
    }

    /// What `class_labels` must be, for error messages, with `b` standing for the batch.
    pub(crate) fn expects(&self, b: &str) -> String {
        match self {
            Self::Table(t) => format!(
                "i32 labels [{b}] (or one), each below num_class_embeds {}",
                t.shape()[0]
            ),
            Self::Timestep(_) => {
                format!("timesteps [{b}] (or one; float or i32), class_embed_type \"timestep\"")
            }
            Self::Identity { dim } => {
                format!("embeddings [{b}, {dim}] (class_embed_type \"identity\")")
            }
            Self::Projection(_) | Self::SimpleProjection(_) => format!(
                "vectors [{b}, {}] (projection_class_embeddings_input_dim)",
                self.input_width()
            ),
        }
    }

    /// The row width of vector labels (identity and projections).
    fn input_width(&self) -> usize {
        match self {
            Self::Identity { dim } => *dim,
            Self::Projection(e) => e.channels(),
            Self::SimpleProjection(l) => l.in_features(),
            Self::Table(_) | Self::Timestep(_) => 0,
        }
    }

    /// The embedding of `labels` for a batch of `batch`: `[batch, time_embed_dim]` in `dtype`
    /// on `device` (the model's).
    pub(crate) fn forward(
        &self,
        labels: &Tensor,
        batch: usize,
        (dtype, device): (DType, Device),
    ) -> Result<Tensor> {
        let rows = match self {
            Self::Table(table) => table_rows(table, labels, batch)?,
            Self::Timestep(e) => {
                let t = e.project(&labels.to(device)?, batch, dtype)?;
                e.forward(&t)?
            }
            Self::Identity { .. } | Self::Projection(_) | Self::SimpleProjection(_) => {
                let width = self.input_width();
                match labels.shape() {
                    [n, w] if (*n == batch || *n == 1) && *w == width => {}
                    s => return Err(Error::shape(OP, self.expects(&batch.to_string()), s)),
                }
                if labels.device() != device {
                    return Err(Error::DeviceMismatch {
                        op: OP,
                        lhs: labels.device(),
                        rhs: device,
                    });
                }
                if labels.dtype() != dtype {
                    return Err(Error::DTypeMismatch {
                        op: OP,
                        expected: dtype,
                        got: labels.dtype(),
                    });
                }
                match self {
                    Self::Projection(e) => e.forward(labels)?,
                    Self::SimpleProjection(l) => l.forward(labels)?,
                    _ => labels.clone(),
                }
            }
        };
        let dim = rows.shape()[1];
        if rows.shape()[0] == batch {
            Ok(rows)
        } else {
            rows.broadcast_to(&[batch, dim])
        }
    }
}

/// Rows of the class-embedding `table` (`[num_class_embeds, D]`) for `labels` (i32, `[]`, `[1]`
/// or `[batch]`, on any device), on the table's device. Labels given on the Cpu
/// (the usual case) are range-checked there, so an Xpu model does not wait to read them back.
fn table_rows(table: &Tensor, labels: &Tensor, batch: usize) -> Result<Tensor> {
    if labels.dtype() != DType::I32 {
        return Err(Error::UnsupportedDType {
            op: OP,
            dtype: labels.dtype(),
            device: labels.device(),
            hint: "; class labels must be i32".into(),
        });
    }
    let flat = match labels.shape() {
        [] => labels.reshape(&[1])?,
        [n] if *n == 1 || *n == batch => labels.clone(),
        _ => {
            return Err(Error::shape(
                OP,
                format!("a scalar, [1] or [{batch}] of class labels"),
                labels.shape(),
            ))
        }
    };
    if flat.device() == Device::Cpu {
        let n = table.shape()[0];
        let values: Vec<i32> = flat.to_vec()?;
        if let Some(bad) = values
            .iter()
            .find(|&&v| usize::try_from(v).map_or(true, |v| v >= n))
        {
            return Err(Error::invalid(
                OP,
                format!("class label {bad} is out of range for num_class_embeds {n}"),
            ));
        }
        table.index_select_in_range(0, &flat.to(table.device())?)
    } else {
        table.index_select(0, &flat.to(table.device())?)
    }
}
