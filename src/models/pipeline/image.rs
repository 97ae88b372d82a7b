//! [`Image`]: 8-bit RGB pictures in and out of the pipeline, the conversion of the VAE's output
//! to them exactly as diffusers' `VaeImageProcessor.postprocess` + `numpy_to_pil` make them, the
//! conversion of an init image to the VAE's input as `VaeImageProcessor.preprocess` makes it, and
//! PNG files (read: 8-bit RGB only; written with text chunks, atomically).
//!
//! Invariants:
//! - `pixels` holds `height · width · 3` bytes, row-major, RGB interleaved.
//! - [`to_image_u8`] computes, per value in f32: `x · 0.5 + 0.5`, clamped to `[0, 1]`, `· 255`,
//!   rounded half to even (numpy's `round`), as diffusers does for `output_type="pil"`.
//! - [`Image::to_tensor`] computes `2 · (v / 255) - 1` in f32 (diffusers' `pil_to_numpy` then
//!   `normalize`).
//! - [`Image::save_png`] writes to a hidden file in the target's folder and renames it over the
//!   target only once everything is written, so no partial PNG is ever left under the name.

use std::io::{BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::{DType, Device, Error, Result, Tensor};

/// An 8-bit RGB image.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Image {
    /// Width in pixels.
    pub width: usize,
    /// Height in pixels.
    pub height: usize,
    /// `height · width · 3` bytes, row-major, RGB.
    pub pixels: Vec<u8>,
}

fn io_error(context: String, source: std::io::Error) -> Error {
    Error::Io { context, source }
}

impl Image {
    /// An image from its pixels; an error when `pixels` is not `height · width · 3` bytes or a
    /// side is 0.
    pub fn new(width: usize, height: usize, pixels: Vec<u8>) -> Result<Image> {
        let want = width.checked_mul(height).and_then(|n| n.checked_mul(3));
        if width == 0 || height == 0 || want != Some(pixels.len()) {
            return Err(Error::invalid(
                "Image::new",
                format!(
                    "expected {width}×{height}×3 bytes with both sides at least 1, got {} bytes",
                    pixels.len()
                ),
            ));
        }
        Ok(Image {
            width,
            height,
            pixels,
        })
    }

    /// Reads a PNG file holding an 8-bit RGB image (what diffusers' image-to-image pipelines
    /// take); other colour types and depths are an error saying how to convert them.
    pub fn load_png(path: impl AsRef<Path>) -> Result<Image> {
        let path = path.as_ref();
        let bad = |msg: String| Error::InvalidFile {
            file: path.display().to_string(),
            msg,
        };
        let file = std::fs::File::open(path)
            .map_err(|e| io_error(format!("opening image {}", path.display()), e))?;
        let mut decoder = png::Decoder::new(BufReader::new(file));
        decoder.set_transformations(png::Transformations::IDENTITY);
        let mut reader = decoder
            .read_info()
            .map_err(|e| bad(format!("not a readable PNG file: {e}")))?;
        let (color, depth) = reader.output_color_type();
        if color != png::ColorType::Rgb || depth != png::BitDepth::Eight {
            return Err(bad(format!(
                "expected an 8-bit RGB image, got {color:?} at {depth:?} bits per sample; \
                 convert it to RGB (e.g. PIL's image.convert(\"RGB\"))"
            )));
        }
        let size = reader
            .output_buffer_size()
            .ok_or_else(|| bad("the image is too large to decode".into()))?;
        let mut buf = vec![0u8; size];
        let info = reader
            .next_frame(&mut buf)
            .map_err(|e| bad(format!("corrupt PNG data: {e}")))?;
        let (w, h) = (info.width as usize, info.height as usize);
        buf.truncate(info.buffer_size());
        if info.line_size != w * 3 {
            return Err(bad(format!(
                "unexpected row size {} for {w} RGB pixels",
                info.line_size
            )));
        }
        Image::new(w, h, buf)
    }

    /// The PNG file's bytes: 8-bit RGB, with a text chunk per `(keyword, text)` (`tEXt` when the
    /// text is Latin-1, else `iTXt`).
    pub fn encode_png(&self, text: &[(&str, &str)]) -> Result<Vec<u8>> {
        let op = "Image::encode_png";
        let png_err = |e: png::EncodingError| Error::invalid(op, format!("PNG encoding: {e}"));
        let (w, h) = (
            u32::try_from(self.width).map_err(|_| Error::invalid(op, "width exceeds u32"))?,
            u32::try_from(self.height).map_err(|_| Error::invalid(op, "height exceeds u32"))?,
        );
        let mut out = Vec::new();
        {
            let mut encoder = png::Encoder::new(&mut out, w, h);
            encoder.set_color(png::ColorType::Rgb);
            encoder.set_depth(png::BitDepth::Eight);
            for (key, value) in text {
                if value.chars().all(|c| (c as u32) < 256) {
                    encoder.add_text_chunk(key.to_string(), value.to_string())
                } else {
                    encoder.add_itxt_chunk(key.to_string(), value.to_string())
                }
                .map_err(png_err)?;
            }
            let mut writer = encoder.write_header().map_err(png_err)?;
            writer.write_image_data(&self.pixels).map_err(png_err)?;
            writer.finish().map_err(png_err)?;
        }
        Ok(out)
    }

    /// Writes the image as a PNG file (see [`Image::encode_png`]) atomically: a hidden
    /// temporary file beside `path` renamed over it once complete.
    pub fn save_png(&self, path: impl AsRef<Path>, text: &[(&str, &str)]) -> Result<()> {
        write_atomically(path.as_ref(), &self.encode_png(text)?)
    }

    /// The image as the VAE takes it: `[1, 3, height, width]` f32 on the Cpu, `2 · v/255 − 1`.
    pub fn to_tensor(&self) -> Result<Tensor> {
        let (h, w) = (self.height, self.width);
        let mut data = vec![0f32; 3 * h * w];
        for (i, px) in self.pixels.chunks_exact(3).enumerate() {
            for (c, &v) in px.iter().enumerate() {
                data[c * h * w + i] = 2.0 * (v as f32 / 255.0) - 1.0;
            }
        }
        Tensor::from_vec(data, &[1, 3, h, w], Device::Cpu)
    }
}

/// diffusers' rounding of one decoded value (f32 arithmetic, numpy's round half to even).
pub fn to_u8(x: f32) -> u8 {
    let v = (x * 0.5 + 0.5).clamp(0.0, 1.0) * 255.0;
    // Also maps NaN to 0, as numpy's cast of NaN to uint8 does on x86.
    v.round_ties_even() as u8
}

/// The VAE's output `[B, 3, H, W]` (any float dtype, any device) as `B` images, converted as
/// diffusers' `postprocess(output_type="pil")` does (see [`to_u8`]).
pub fn to_image_u8(decoded: &Tensor) -> Result<Vec<Image>> {
    let op = "to_image_u8";
    let [b, c, h, w] = match decoded.shape() {
        &[b, c, h, w] => [b, c, h, w],
        s => return Err(Error::shape(op, "images [B, 3, H, W]", s)),
    };
    if c != 3 {
        return Err(Error::shape(op, "images [B, 3, H, W]", decoded.shape()));
    }
    let values = decoded
        .to(Device::Cpu)?
        .to_dtype(DType::F32)?
        .contiguous()?
        .to_vec::<f32>()?;
    let plane = h * w;
    let mut images = Vec::with_capacity(b);
    for n in 0..b {
        let base = n * 3 * plane;
        let mut pixels = Vec::with_capacity(3 * plane);
        for i in 0..plane {
            for ch in 0..3 {
                pixels.push(to_u8(values[base + ch * plane + i]));
            }
        }
        images.push(Image::new(w, h, pixels)?);
    }
    Ok(images)
}

/// A hidden sibling of `path` for writing before the rename.
fn temp_sibling(path: &Path) -> PathBuf {
    let name = path
        .file_name()
        .map_or_else(|| "output".into(), |n| n.to_string_lossy().into_owned());
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    path.with_file_name(format!(".{name}.{}.{nanos}.tmp", std::process::id()))
}

/// Writes `bytes` to `path` so that `path` is either the whole new file or as it was: a
/// temporary sibling is written and synced, then renamed over `path` (removed on failure).
pub fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = temp_sibling(path);
    let result = (|| {
        let file = std::fs::File::create(&tmp)?;
        let mut w = BufWriter::new(file);
        w.write_all(bytes)?;
        let file = w.into_inner().map_err(|e| e.into_error())?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    result.map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        io_error(format!("writing {}", path.display()), e)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounding_is_numpys() {
        // 0.5 · 255 = 127.5 rounds to the even 128; values beyond ±1 clamp.
        assert_eq!(to_u8(0.0), 128);
        assert_eq!(to_u8(-1.0), 0);
        assert_eq!(to_u8(1.0), 255);
        assert_eq!(to_u8(5.0), 255);
        assert_eq!(to_u8(-5.0), 0);
        assert_eq!(to_u8(f32::NAN), 0);
        // Inputs whose value is exactly 64.5 and 66.5 in f32 (as numpy computes it) round to
        // the even neighbour, not up; their neighbours round to nearest.
        let tie_64 = f32::from_bits(0xbefc_fcfb);
        let tie_66 = f32::from_bits(0xbef4_f4f3);
        assert_eq!((tie_64 * 0.5 + 0.5) * 255.0, 64.5);
        assert_eq!(to_u8(tie_64), 64);
        assert_eq!(to_u8(tie_66), 66);
        assert_eq!(to_u8(f32::from_bits(tie_64.to_bits() - 1)), 65);
    }

    #[test]
    fn png_round_trip_with_text() -> Result<()> {
        let img = Image::new(3, 2, (0..18).map(|v| v as u8 * 13).collect())?;
        let dir = std::env::temp_dir().join(format!("xpu-image-{}", std::process::id()));
        std::fs::create_dir_all(&dir).map_err(|e| io_error("mkdir".into(), e))?;
        let path = dir.join("a.png");
        img.save_png(&path, &[("parameters", "steps 3, prompt «ü» 宇宙")])?;
        assert_eq!(Image::load_png(&path)?, img);
        let leftovers = std::fs::read_dir(&dir)
            .map_err(|e| io_error("ls".into(), e))?
            .count();
        assert_eq!(leftovers, 1);
        let _ = std::fs::remove_dir_all(&dir);
        Ok(())
    }

    #[test]
    fn bad_sizes_are_errors() {
        assert!(Image::new(2, 2, vec![0; 11]).is_err());
        assert!(Image::new(0, 2, vec![]).is_err());
    }
}
