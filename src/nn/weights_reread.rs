//! A checkpoint tensor read again from its file after loading, checked unchanged.
//!
//! Why: a Cpu convolution layer runs from packs made of its weight (Winograd's transformed
//! filters, from which the weight cannot be recovered bit for bit), and a loaded layer that also
//! kept the weight tensor held an f32 SD 1.5 pipeline's 3×3 filters twice (2.5 GB). The file
//! holds them already: a layer keeps only where the tensor lies and reads it again on the rare
//! occasions it is needed (`weight()`, a dtype or device conversion, packing for another
//! kernel the autotuner picked).
//!
//! Invariants: [`FileTensor::read`] returns exactly the tensor the loader made (the same
//! bytes, decoded and converted by the same code) or an error: the bytes are read with plain
//! file reads (a file truncated since loading is an error, never a fault on a mapping) and
//! compared with a digest taken from them at load, so a file changed or replaced since is an
//! [`Error::InvalidFile`] that says so.

use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;

use crate::{DType, Device, Error, Result, Tensor};

/// Where one tensor lies in a safetensors file, and a digest of its bytes at load.
#[derive(Clone, Debug)]
pub(crate) struct FileTensor {
    /// The file (one shard of a sharded checkpoint).
    pub path: PathBuf,
    /// The tensor's name in the file.
    pub name: String,
    /// Byte offset of its data in the file.
    pub offset: u64,
    /// Bytes of data.
    pub len: usize,
    /// The dtype the file stores it in.
    pub on_disk: DType,
    /// Its shape.
    pub shape: Vec<usize>,
    /// [`digest`] of its bytes when it was loaded.
    pub digest: u64,
}

impl FileTensor {
    /// The tensor read again, converted to `dtype` on `device` as the loader converted it.
    pub(crate) fn read(&self, dtype: DType, device: Device) -> Result<Tensor> {
        let file = self.path.display().to_string();
        let changed = |what: String| Error::InvalidFile {
            file: file.clone(),
            msg: format!(
                "tensor {} could not be read again ({what}); the checkpoint changed since it was \
                 loaded: load the model again",
                self.name
            ),
        };
        let mut bytes = crate::tensor::zeroed_host::<u8>("read weights again", self.len)?;
        std::fs::File::open(&self.path)
            .and_then(|mut f| {
                f.seek(SeekFrom::Start(self.offset))?;
                f.read_exact(&mut bytes)
            })
            .map_err(|e| changed(e.to_string()))?;
        if digest(&bytes) != self.digest {
            return Err(changed("its bytes differ".into()));
        }
        super::weights::decode(&bytes, self.on_disk, &self.shape)?
            .to_dtype(dtype)?
            .to(device)
    }
}

/// A 64-bit digest of `bytes` (word-wise multiply–rotate mixing with the length folded in):
/// not cryptographic, but any change of a weight's bytes that is not crafted to collide
/// changes it.
pub(crate) fn digest(bytes: &[u8]) -> u64 {
    const K: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut lanes = [K, K.rotate_left(17), K.rotate_left(31), K.rotate_left(47)];
    let mut words = bytes.chunks_exact(32);
    for chunk in &mut words {
        for (lane, w) in lanes.iter_mut().zip(chunk.chunks_exact(8)) {
            let mut le = [0u8; 8];
            le.copy_from_slice(w);
            *lane = (*lane ^ u64::from_le_bytes(le))
                .wrapping_mul(K)
                .rotate_left(29);
        }
    }
    let mut h = bytes.len() as u64;
    for lane in lanes {
        h = (h ^ lane).wrapping_mul(K).rotate_left(31);
    }
    for &b in words.remainder() {
        h = (h ^ u64::from(b)).wrapping_mul(K).rotate_left(7);
    }
    h ^ (h >> 29)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn digest_changes_with_any_byte_and_the_length() {
        let bytes: Vec<u8> = (0..1000u32).map(|i| (i * 7 % 251) as u8).collect();
        let d = digest(&bytes);
        for i in [0, 7, 31, 32, 500, 991, 999] {
            let mut other = bytes.clone();
            other[i] ^= 1;
            assert_ne!(digest(&other), d, "byte {i}");
        }
        assert_ne!(digest(&bytes[..999]), d);
        assert_ne!(digest(&[]), digest(&[0]));
    }

    /// A Winograd layer loaded from a checkpoint holds only its packs, reads its weight back
    /// from the file bit for bit, and refuses (an error, not other values) once the file has
    /// changed or gone.
    #[test]
    fn loaded_layers_read_their_weight_again_and_refuse_a_changed_file() {
        use crate::nn::weights::{Init, ParamSource, StoreSource, WeightStore};
        use crate::nn::Conv2d;
        use crate::Conv2dParams;
        let shape = [16usize, 16, 3, 3];
        let n: usize = shape.iter().product();
        let values: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin() * 0.1).collect();
        let view = safetensors::tensor::TensorView::new(
            safetensors::Dtype::F32,
            shape.to_vec(),
            bytemuck::cast_slice(&values),
        )
        .unwrap();
        let data = safetensors::serialize([("w", view)], None).unwrap();
        let path =
            std::env::temp_dir().join(format!("xpu-reread-{}.safetensors", std::process::id()));
        std::fs::write(&path, &data).unwrap();
        let params = Conv2dParams {
            padding: (1, 1),
            ..Conv2dParams::default()
        };
        let layer = {
            let store = WeightStore::open(&path).unwrap();
            let mut src = StoreSource {
                store: &store,
                dtype: DType::F32,
                device: Device::Cpu,
            };
            let w = src.get("w", &shape, Init::FanIn(144)).unwrap();
            let again = src.regenerate("w", &shape, Init::FanIn(144));
            assert!(again.is_some(), "a checkpoint reads its tensors again");
            assert!(src
                .regenerate("w", &[16, 16, 1, 1], Init::FanIn(16))
                .is_none());
            crate::config::scoped(
                |c| c.autotune.mode = crate::config::AutotuneMode::Off,
                || Conv2d::new_owned(w, None, params, again).unwrap(),
            )
        };
        assert!(
            layer.uses_winograd(),
            "Winograd packs cannot give the weight back"
        );
        assert!(!layer.holds_weight_tensor(), "packs only");
        let back = layer.try_weight_owned().unwrap();
        assert_eq!(back.shape(), &shape);
        assert_eq!(
            back.to_vec::<f32>().unwrap(),
            values,
            "read again bit for bit"
        );
        assert!(layer.to_dtype(DType::BF16).is_ok());
        // One byte of the weight changed on disk: refused, whatever the accessor.
        let mut changed = data.clone();
        let last = changed.len() - 1;
        changed[last] ^= 0x40;
        std::fs::write(&path, &changed).unwrap();
        let err = layer.try_weight_owned().unwrap_err().to_string();
        assert!(err.contains("changed since it was loaded"), "{err}");
        assert!(layer.to_dtype(DType::BF16).is_err());
        // Gone: refused too.
        std::fs::remove_file(&path).unwrap();
        assert!(layer.try_weight_owned().is_err());
        assert!(layer.to(Device::Cpu).is_err());
    }
}
