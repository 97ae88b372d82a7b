//! Weight loading: [`WeightStore`] (a memory-mapped safetensors file, or the shards of a
//! sharded checkpoint read as one) and the parameter sources the model constructors read from.
//!
//! Invariants:
//! - Each file (the one file, or every shard an index lists: `weights_index.rs`) is
//!   memory-mapped and its header parsed by the `safetensors` crate, which checks
//!   that the header length fits in the file, that every tensor's byte range is in bounds,
//!   contiguous and matches `shape × dtype`, and that the ranges cover the data exactly. Nothing
//!   is allocated from a size in the header before that check, so a truncated or corrupt file
//!   is an [`Error::InvalidFile`], never a panic or a huge allocation.
//! - Models are built in two passes: [`Recorder`] collects the `(name, shape)` of every
//!   parameter (building a throw-away model whose every dim is 1, which costs nothing), the file
//!   header is checked against that list ([`WeightStore::check`]: all missing, unexpected and
//!   mis-shaped tensors in one [`Error::Weights`]), and only then is data read and converted.
//! - Constructors take parameters only through [`ParamSource::get`] and never read a
//!   placeholder's shape back, so the recording pass and the real one build the same tree;
//!   the few that check shapes across parameters ask [`ParamSource::placeholders`].

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use safetensors::tensor::{Dtype as StDtype, Metadata, SafeTensors};

use crate::nn::restore::Regenerate;
use crate::nn::weights_reread::FileTensor;
use crate::{DType, Device, Error, Result, Tensor};

/// How a parameter is initialised when no file provides it ([`RandomSource`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Init {
    /// Uniform in `[-1/sqrt(fan_in), 1/sqrt(fan_in))`, PyTorch's default (Linear and conv weights).
    FanIn(usize),
    /// All ones (norm scales).
    Ones,
    /// All zeros (biases).
    Zeros,
}

/// Where model constructors get their parameters from.
pub(crate) trait ParamSource {
    /// The parameter `name` with `shape`.
    fn get(&mut self, name: &str, shape: &[usize], init: Init) -> Result<Tensor>;

    /// [`ParamSource::get`] in f32 whatever the model's dtype: for the few tiny parameters a
    /// 16-bit copy would ruin (a Fourier time projection's frequencies, multiplied by
    /// timesteps up to 1000 before a sine).
    fn get_f32(&mut self, name: &str, shape: &[usize], init: Init) -> Result<Tensor>;

    /// A way to draw the parameter `name` again, bit for bit, so that a layer which runs from
    /// packs made of it need not hold it (`restore.rs`); `None` where the source cannot. A
    /// checkpoint reads it again from its file and checks it unchanged (`weights_reread.rs`).
    fn regenerate(&self, _name: &str, _shape: &[usize], _init: Init) -> Option<Regenerate> {
        None
    }

    /// True when [`ParamSource::get`] returns placeholders whose every dim is 1 (the
    /// [`Recorder`]); a constructor that checks shapes *across* parameters (e.g. divisibility
    /// by a head count) must then use sizes that fit them.
    fn placeholders(&self) -> bool {
        false
    }
}

/// Records every requested parameter; returns all-ones-shaped placeholders (no memory).
pub(crate) struct Recorder {
    pub(crate) entries: Vec<(String, Vec<usize>)>,
}

impl ParamSource for Recorder {
    fn get(&mut self, name: &str, shape: &[usize], _init: Init) -> Result<Tensor> {
        self.entries.push((name.to_string(), shape.to_vec()));
        Tensor::zeros(&vec![1; shape.len()], DType::F32, Device::Cpu)
    }

    fn get_f32(&mut self, name: &str, shape: &[usize], init: Init) -> Result<Tensor> {
        self.get(name, shape, init)
    }

    fn placeholders(&self) -> bool {
        true
    }
}

/// Seeded random parameters: each tensor's values depend only on `seed` and its name.
pub(crate) struct RandomSource {
    pub(crate) dtype: DType,
    pub(crate) device: Device,
    pub(crate) seed: u64,
}

/// FNV-1a of a name, mixed with a seed.
fn name_seed(seed: u64, name: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ seed.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    for b in name.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

impl ParamSource for RandomSource {
    fn get(&mut self, name: &str, shape: &[usize], init: Init) -> Result<Tensor> {
        match init {
            Init::Ones => Tensor::ones(shape, self.dtype, self.device),
            Init::Zeros => Tensor::zeros(shape, self.dtype, self.device),
            Init::FanIn(fan_in) => {
                // PyTorch's default Linear/Conv init (kaiming_uniform with a = sqrt(5)):
                // U(-b, b) with b = 1/sqrt(fan_in). Uniform also costs a fraction of randn's
                // Box–Muller, which matters for SD 1.5's 860M parameters.
                let bound = 1.0 / (fan_in.max(1) as f64).sqrt();
                let seed = name_seed(self.seed, name);
                Tensor::rand_affine_f32(shape, seed, 2.0 * bound, -bound)?
                    .to_dtype(self.dtype)?
                    .to(self.device)
            }
        }
    }

    fn get_f32(&mut self, name: &str, shape: &[usize], init: Init) -> Result<Tensor> {
        let mut f32_source = RandomSource {
            dtype: DType::F32,
            ..*self
        };
        f32_source.get(name, shape, init)
    }

    fn regenerate(&self, name: &str, shape: &[usize], init: Init) -> Option<Regenerate> {
        // The values depend only on the seed and the name (`name_seed`), so a second draw
        // gives back the same bits.
        let (dtype, device, seed) = (self.dtype, self.device, self.seed);
        let (name, shape) = (name.to_string(), shape.to_vec());
        Some(Arc::new(move || {
            RandomSource {
                dtype,
                device,
                seed,
            }
            .get(&name, &shape, init)
        }))
    }
}

/// Reads parameters from a [`WeightStore`], converting to `dtype` on `device`.
pub(crate) struct StoreSource<'a> {
    pub(crate) store: &'a WeightStore,
    pub(crate) dtype: DType,
    pub(crate) device: Device,
}

impl ParamSource for StoreSource<'_> {
    fn get(&mut self, name: &str, shape: &[usize], _init: Init) -> Result<Tensor> {
        let t = self.store.tensor(name, self.dtype, self.device)?;
        if t.shape() != shape {
            return Err(Error::Weights {
                file: self.store.path.display().to_string(),
                missing: vec![],
                unexpected: vec![],
                mismatched: vec![format!(
                    "{name}: expected {shape:?}, file has {:?}",
                    t.shape()
                )],
            });
        }
        Ok(t)
    }

    fn get_f32(&mut self, name: &str, shape: &[usize], init: Init) -> Result<Tensor> {
        let mut f32_source = StoreSource {
            dtype: DType::F32,
            ..*self
        };
        f32_source.get(name, shape, init)
    }

    fn regenerate(&self, name: &str, shape: &[usize], _init: Init) -> Option<Regenerate> {
        let at = self.store.locate(name).filter(|t| t.shape == shape)?;
        let (dtype, device) = (self.dtype, self.device);
        Some(Arc::new(move || at.read(dtype, device)))
    }
}

/// One memory-mapped safetensors file with its header parsed and validated.
struct Shard {
    path: PathBuf,
    mmap: memmap2::Mmap,
    header_len: usize,
    metadata: Metadata,
}

/// A safetensors checkpoint, memory-mapped, with its header(s) parsed and validated: one file,
/// or the shards a `*.safetensors.index.json` lists (read as one set of tensors).
pub struct WeightStore {
    /// The file, or the index of a sharded checkpoint.
    path: PathBuf,
    shards: Vec<Shard>,
    /// Which shard holds each tensor.
    locate: HashMap<String, usize>,
    /// Digests of the 4-D tensors read so far (convolution weights, which a layer may read
    /// again: [`WeightStore::locate`]), taken while their bytes were mapped.
    digests: std::sync::Mutex<HashMap<String, u64>>,
}

impl std::fmt::Debug for WeightStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "WeightStore({}, {} tensors in {} file(s))",
            self.path.display(),
            self.locate.len(),
            self.shards.len()
        )
    }
}

fn describe(e: safetensors::SafeTensorError, file_len: usize) -> String {
    use safetensors::SafeTensorError as E;
    match e {
        E::HeaderTooSmall => format!(
            "truncated: {file_len} bytes, but a safetensors file starts with an 8-byte header length"
        ),
        E::HeaderTooLarge => {
            "corrupt header: the header length is larger than safetensors allows (100 MB)".into()
        }
        E::InvalidHeaderLength => format!(
            "truncated or corrupt: the header length points past the end of the {file_len}-byte file"
        ),
        E::MetadataIncompleteBuffer => format!(
            "truncated or corrupt: the header's tensors do not cover the {file_len}-byte file's data exactly"
        ),
        E::InvalidHeader(e) => format!("corrupt header: not UTF-8 ({e})"),
        E::InvalidHeaderDeserialization(e) => format!("corrupt header: not valid JSON ({e})"),
        E::InvalidOffset(name) => {
            format!("corrupt header: tensor {name} has offsets that overlap or leave gaps")
        }
        E::TensorInvalidInfo => {
            "corrupt header: a tensor's byte range does not match its shape and dtype".into()
        }
        other => format!("corrupt safetensors file: {other}"),
    }
}

fn dtype_of(d: StDtype) -> Option<DType> {
    match d {
        StDtype::F32 => Some(DType::F32),
        StDtype::F16 => Some(DType::F16),
        StDtype::BF16 => Some(DType::BF16),
        StDtype::I32 => Some(DType::I32),
        _ => None,
    }
}

impl Shard {
    /// Drops this process's mapped pages of `offset..offset + len` (on Unix) once a tensor has
    /// been copied out of them. Why: a loader reads every tensor once, and the mapped pages it
    /// touched otherwise stay in the process's resident set until the store is dropped (an f32
    /// SD 1.5 checkpoint's load peaked at 10.9 GB, 3.4 GB of it the file's pages). The pages stay
    /// in the page cache; reading them again faults the same bytes back in.
    fn release(&self, offset: usize, len: usize) {
        #[cfg(unix)]
        // SAFETY: the map is read-only and file-backed (`Mmap::map`: shared, PROT_READ), so
        // MADV_DONTNEED only drops page-table entries and never changes what the range reads
        // as; no borrow of the range is live (the caller has copied it out). The call can only
        // fail on a bad range, which leaves the pages mapped: nothing to report.
        unsafe {
            let _ =
                self.mmap
                    .unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, offset, len);
        }
        #[cfg(not(unix))]
        let _ = (offset, len);
    }

    /// Opens and memory-maps `path` and validates its header (see the module docs).
    fn open(path: &Path) -> Result<Shard> {
        let path = path.to_path_buf();
        let file = std::fs::File::open(&path).map_err(|source| Error::Io {
            context: format!("opening weights {}", path.display()),
            source,
        })?;
        let len = file
            .metadata()
            .map_err(|source| Error::Io {
                context: format!("reading the size of {}", path.display()),
                source,
            })?
            .len();
        let invalid = |msg: String| Error::InvalidFile {
            file: path.display().to_string(),
            msg,
        };
        if len < 8 {
            return Err(invalid(format!(
                "truncated: {len} bytes, but a safetensors file starts with an 8-byte header length"
            )));
        }
        // SAFETY: the map is read-only; like every reader of a mapped file we rely on the file not
        // being truncated by another process while the store is alive.
        let mmap = unsafe { memmap2::Mmap::map(&file) }.map_err(|source| Error::Io {
            context: format!("memory-mapping {}", path.display()),
            source,
        })?;
        let (header_len, metadata) =
            SafeTensors::read_metadata(&mmap).map_err(|e| invalid(describe(e, mmap.len())))?;
        Ok(Shard {
            path,
            mmap,
            header_len,
            metadata,
        })
    }
}

impl WeightStore {
    /// Opens a safetensors file, or a sharded checkpoint by its `*.safetensors.index.json`
    /// (diffusers' and transformers' `weight_map`; shards are named relative to the index and
    /// must sit beside it). Every file is memory-mapped and its header validated (see the module
    /// docs); a sharded checkpoint must also agree with its index: each listed tensor in its
    /// listed shard, no tensor in two shards.
    pub fn open(path: impl AsRef<Path>) -> Result<WeightStore> {
        let path = path.as_ref().to_path_buf();
        let is_index = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.ends_with(".json"));
        if !is_index {
            let shard = Shard::open(&path)?;
            let locate = shard
                .metadata
                .tensors()
                .into_keys()
                .map(|n| (n, 0))
                .collect();
            return Ok(WeightStore {
                path,
                shards: vec![shard],
                locate,
                digests: Default::default(),
            });
        }
        let listed = super::weights_index::read_index(&path)?;
        let mut shards = Vec::with_capacity(listed.len());
        let mut locate = HashMap::new();
        for (i, (shard_path, names)) in listed.into_iter().enumerate() {
            let shard = Shard::open(&shard_path)?;
            let absent: Vec<&String> = names
                .iter()
                .filter(|n| shard.metadata.info(n).is_none())
                .collect();
            if let Some(first) = absent.first() {
                return Err(Error::InvalidFile {
                    file: path.display().to_string(),
                    msg: format!(
                        "the index places {} tensor(s) in {} that it does not hold (first: {first})",
                        absent.len(),
                        shard_path.display()
                    ),
                });
            }
            for name in shard.metadata.tensors().into_keys() {
                if let Some(&j) = locate.get(&name) {
                    let other: &Shard = &shards[j];
                    return Err(Error::InvalidFile {
                        file: path.display().to_string(),
                        msg: format!(
                            "tensor {name} is in two shards: {} and {}",
                            other.path.display(),
                            shard_path.display()
                        ),
                    });
                }
                locate.insert(name, i);
            }
            shards.push(shard);
        }
        Ok(WeightStore {
            path,
            shards,
            locate,
            digests: Default::default(),
        })
    }

    /// The shard holding `name` and its header entry.
    fn find(&self, name: &str) -> Option<(&Shard, &safetensors::tensor::TensorInfo)> {
        let shard = self.shards.get(*self.locate.get(name)?)?;
        Some((shard, shard.metadata.info(name)?))
    }

    /// The file's path (a sharded checkpoint's index).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Every tensor name, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.locate.keys().cloned().collect();
        names.sort();
        names
    }

    /// The shape of tensor `name`, if the checkpoint has it.
    pub fn shape(&self, name: &str) -> Option<&[usize]> {
        self.find(name).map(|(_, i)| i.shape.as_slice())
    }

    /// The dtype tensor `name` is stored in, if the checkpoint has it and `xpu` can read it
    /// (f32, f16, bf16, i32).
    pub fn dtype(&self, name: &str) -> Option<DType> {
        self.find(name).and_then(|(_, i)| dtype_of(i.dtype))
    }

    /// Tensor `name` converted to `dtype` on `device`. The file may store f32, f16, bf16 (or
    /// i32, e.g. timesteps).
    pub fn tensor(&self, name: &str, dtype: DType, device: Device) -> Result<Tensor> {
        let (shard, info) = self.find(name).ok_or_else(|| Error::Weights {
            file: self.path.display().to_string(),
            missing: vec![name.to_string()],
            unexpected: vec![],
            mismatched: vec![],
        })?;
        let file = shard.path.display().to_string();
        let on_disk = dtype_of(info.dtype).ok_or_else(|| Error::InvalidFile {
            file: file.clone(),
            msg: format!(
                "tensor {name} is stored as {:?}; supported: F32, F16, BF16, I32",
                info.dtype
            ),
        })?;
        let start = 8 + shard.header_len;
        let (s, e) = info.data_offsets;
        let bytes = shard
            .mmap
            .get(start + s..start + e)
            .ok_or_else(|| Error::InvalidFile {
                file: file.clone(),
                msg: format!("tensor {name}: byte range {s}..{e} is outside the file"),
            })?;
        let t = decode(bytes, on_disk, &info.shape)?;
        if info.shape.len() == 4 {
            let d = super::weights_reread::digest(bytes);
            if let Ok(mut digests) = self.digests.lock() {
                digests.insert(name.to_string(), d);
            }
        }
        shard.release(start + s, e - s);
        t.to_dtype(dtype)?.to(device)
    }

    /// Where tensor `name` lies in its file, with a digest of its bytes now, so that it can be
    /// read again later and checked to be unchanged ([`FileTensor::read`]); `None` if the
    /// checkpoint lacks it or stores it in a dtype `xpu` cannot read.
    pub(crate) fn locate(&self, name: &str) -> Option<FileTensor> {
        let (shard, info) = self.find(name)?;
        let on_disk = dtype_of(info.dtype)?;
        let start = 8 + shard.header_len;
        let (s, e) = info.data_offsets;
        let known = self.digests.lock().ok().and_then(|d| d.get(name).copied());
        let digest = match known {
            Some(d) => d,
            None => {
                let bytes = shard.mmap.get(start + s..start + e)?;
                let d = super::weights_reread::digest(bytes);
                shard.release(start + s, e - s);
                d
            }
        };
        Some(FileTensor {
            path: shard.path.clone(),
            name: name.to_string(),
            offset: (start + s) as u64,
            len: e - s,
            on_disk,
            shape: info.shape.clone(),
            digest,
        })
    }

    /// Compares the file with the `(name, shape)` list a model needs; every missing, unexpected
    /// and mis-shaped tensor is reported in one [`Error::Weights`] (each list sorted by name).
    pub fn check(&self, expected: &[(String, Vec<usize>)]) -> Result<()> {
        let mut missing = Vec::new();
        let mut mismatched = Vec::new();
        let mut wanted = HashSet::new();
        for (name, shape) in expected {
            wanted.insert(name.as_str());
            match self.shape(name) {
                None => missing.push(name.clone()),
                Some(s) if s != shape.as_slice() => {
                    mismatched.push(format!("{name}: expected {shape:?}, file has {s:?}"))
                }
                Some(_) => {}
            }
        }
        let unexpected: Vec<String> = self
            .names()
            .into_iter()
            .filter(|n| !wanted.contains(n.as_str()))
            .collect();
        missing.sort();
        mismatched.sort();
        if missing.is_empty() && unexpected.is_empty() && mismatched.is_empty() {
            return Ok(());
        }
        Err(Error::Weights {
            file: self.path.display().to_string(),
            missing,
            unexpected,
            mismatched,
        })
    }
}

/// Little-endian bytes to a vector of `T` (copies, so the map's alignment does not matter; an
/// error when the host will not allocate it).
/// A tensor of `shape` from its file bytes stored as `on_disk` (f32, f16, bf16 or i32), on the
/// Cpu in that dtype.
pub(super) fn decode(bytes: &[u8], on_disk: DType, shape: &[usize]) -> Result<Tensor> {
    match on_disk {
        DType::F32 => Tensor::from_vec(pod_vec::<f32>(bytes)?, shape, Device::Cpu),
        DType::F16 => Tensor::from_vec(pod_vec::<half::f16>(bytes)?, shape, Device::Cpu),
        DType::BF16 => Tensor::from_vec(pod_vec::<half::bf16>(bytes)?, shape, Device::Cpu),
        _ => Tensor::from_vec(pod_vec::<i32>(bytes)?, shape, Device::Cpu),
    }
}

fn pod_vec<T: bytemuck::Pod>(bytes: &[u8]) -> Result<Vec<T>> {
    let mut v = crate::tensor::zeroed_host::<T>(
        "load weights",
        bytes.len() / std::mem::size_of::<T>().max(1),
    )?;
    let dst: &mut [u8] = bytemuck::cast_slice_mut(&mut v);
    let n = dst.len();
    dst.copy_from_slice(&bytes[..n]);
    Ok(v)
}
