//! Tiled decoding and encoding, exactly as diffusers' `AutoencoderKL.enable_tiling()` runs
//! them (`tiled_decode`, `_tiled_encode`), so that memory stays bounded for large images.
//!
//! Invariants (diffusers' arithmetic, with `T` the input tile and `t` the output tile):
//! - decoding: input tiles of `tile_latent_min_size` latents every
//!   `int(tile_latent_min_size · 0.75)`; output tiles blended over
//!   `int(tile_sample_min_size · 0.25)` pixels and cropped to `tile_sample_min_size` minus that;
//! - encoding: input tiles of `tile_sample_min_size` pixels every
//!   `int(tile_sample_min_size · 0.75)`; blended over `int(tile_latent_min_size · 0.25)` latents
//!   and cropped to `tile_latent_min_size` minus that;
//! - tiles are visited row by row; each tile is first blended with the (already blended) tile
//!   above it (`blend_v`) and then with the one to its left (`blend_h`): over the first `e` rows
//!   (columns), `e = min(both sizes, blend extent)`, row `y` becomes
//!   `a[-e + y] · (1 - y/e) + b[y] · (y/e)`, computed in f32 with diffusers' two products and
//!   one sum;
//! - only the previous row of tiles is kept (diffusers keeps all of them; the result is the
//!   same), so memory is bounded by a row of output tiles plus the output.

use crate::{DType, Error, Result, Tensor};

/// When [`super::AutoencoderKl`] decodes or encodes tile by tile.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum VaeTiling {
    /// Never: the whole input at once.
    Off,
    /// Always (diffusers' `tiled_decode` / `_tiled_encode` called directly).
    On,
    /// When the input exceeds one tile (diffusers after `enable_tiling()`): latents taller or
    /// wider than `tile_latent_min_size`, images taller or wider than `tile_sample_min_size`.
    #[default]
    Auto,
}

/// The geometry of one tiled pass.
#[derive(Clone, Copy, Debug)]
pub(crate) struct TileGeometry {
    /// Input tile side.
    pub tile: usize,
    /// Distance between tile starts.
    pub step: usize,
    /// Blend extent in output units.
    pub blend: usize,
    /// Output rows/columns kept per tile.
    pub limit: usize,
}

impl TileGeometry {
    /// diffusers' numbers for input tiles of `tile_in` and output tiles of `tile_out` (overlap
    /// factor 0.25); an error where the step would be 0 (Python's `range` refuses it too).
    pub(crate) fn new(op: &'static str, tile_in: usize, tile_out: usize) -> Result<TileGeometry> {
        let step = (tile_in as f64 * 0.75) as usize;
        let blend = (tile_out as f64 * 0.25) as usize;
        if step == 0 || tile_out <= blend {
            return Err(Error::invalid(
                op,
                format!(
                    "tiles of {tile_in} input and {tile_out} output units are too small to \
                     overlap (sample_size too small for the number of levels)"
                ),
            ));
        }
        Ok(TileGeometry {
            tile: tile_in,
            step,
            blend,
            limit: tile_out - blend,
        })
    }
}

/// `f` over the overlapping tiles of `x` `[B, C, H, W]`, blended and assembled (module docs).
pub(crate) fn run_tiled(
    x: &Tensor,
    g: TileGeometry,
    f: impl Fn(&Tensor) -> Result<Tensor>,
) -> Result<Tensor> {
    let (h, w) = (x.shape()[2], x.shape()[3]);
    let mut above: Vec<Tensor> = Vec::new();
    let mut rows = Vec::new();
    for i in (0..h).step_by(g.step) {
        let band = x.narrow(2, i, g.tile.min(h - i))?;
        let mut row: Vec<Tensor> = Vec::new();
        let mut crops = Vec::new();
        for (jx, j) in (0..w).step_by(g.step).enumerate() {
            let mut t = f(&band.narrow(3, j, g.tile.min(w - j))?)?;
            if let Some(a) = above.get(jx) {
                t = blend(a, &t, g.blend, 2)?;
            }
            if let Some(l) = row.last() {
                t = blend(l, &t, g.blend, 3)?;
            }
            let (th, tw) = (t.shape()[2], t.shape()[3]);
            crops.push(
                t.narrow(2, 0, g.limit.min(th))?
                    .narrow(3, 0, g.limit.min(tw))?,
            );
            row.push(t);
        }
        rows.push(Tensor::cat(&crops.iter().collect::<Vec<_>>(), 3)?);
        above = row;
    }
    drop(above);
    Tensor::cat(&rows.iter().collect::<Vec<_>>(), 2)
}

/// diffusers' `blend_v` (`dim` 2) or `blend_h` (`dim` 3): `b` with its first `e` rows/columns
/// faded in from `a`'s last `e`.
fn blend(a: &Tensor, b: &Tensor, extent: usize, dim: isize) -> Result<Tensor> {
    let (na, nb) = (a.shape()[dim as usize], b.shape()[dim as usize]);
    let e = extent.min(na).min(nb);
    if e == 0 {
        return Ok(b.clone());
    }
    let mut shape = [1usize; 4];
    shape[dim as usize] = e;
    let weights = |f: &dyn Fn(f64) -> f64| {
        let v: Vec<f32> = (0..e).map(|y| f(y as f64 / e as f64) as f32).collect();
        Tensor::from_vec(v, &shape, b.device())
    };
    let wa = weights(&|r| 1.0 - r)?;
    let wb = weights(&|r| r)?;
    let tail = a.narrow(dim, na - e, e)?.to_dtype(DType::F32)?;
    let head = b.narrow(dim, 0, e)?.to_dtype(DType::F32)?;
    let mixed = tail.mul(&wa)?.add(&head.mul(&wb)?)?.to_dtype(b.dtype())?;
    if nb == e {
        return Ok(mixed);
    }
    Tensor::cat(&[&mixed, &b.narrow(dim, e, nb - e)?], dim)
}
