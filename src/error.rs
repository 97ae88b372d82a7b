//! The one error type of the crate. Every fallible public function returns [`Result`].
//!
//! Invariant: each variant names the operation that failed and, where it applies, what was
//! expected and what came, so a user can fix the call without reading the library's source.

use crate::{DType, Device};

/// Result type of every fallible operation in `xpu`.
pub type Result<T> = std::result::Result<T, Error>;

/// Everything that can go wrong in `xpu`.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Shapes do not fit the operation.
    #[error("{op}: shape mismatch: expected {expected}, got {got}")]
    ShapeMismatch {
        /// The operation.
        op: &'static str,
        /// What the operation needed.
        expected: String,
        /// What it was given.
        got: String,
    },
    /// Two operands (or an operand and a request) disagree on dtype.
    #[error("{op}: dtype mismatch: expected {expected}, got {got}")]
    DTypeMismatch {
        /// The operation.
        op: &'static str,
        /// The dtype the operation needed.
        expected: DType,
        /// The dtype it was given.
        got: DType,
    },
    /// Operands live on different devices; `xpu` never copies silently.
    #[error(
        "{op}: device mismatch: lhs is on {lhs:?}, rhs is on {rhs:?}; move one with .to(device)"
    )]
    DeviceMismatch {
        /// The operation.
        op: &'static str,
        /// Device of the first operand.
        lhs: Device,
        /// Device of the other operand.
        rhs: Device,
    },
    /// The dtype is not supported by this operation on this device.
    #[error("{op}: dtype {dtype} is not supported on {device:?}{hint}")]
    UnsupportedDType {
        /// The operation.
        op: &'static str,
        /// The dtype given.
        dtype: DType,
        /// The device.
        device: Device,
        /// Extra explanation (may be empty).
        hint: String,
    },
    /// A dimension index is outside the tensor's rank.
    #[error("{op}: dim {dim} is out of range for a tensor of rank {rank}")]
    DimOutOfRange {
        /// The operation.
        op: &'static str,
        /// The dim given (may be negative, counted from the end).
        dim: isize,
        /// The tensor's rank.
        rank: usize,
    },
    /// Any other invalid argument.
    #[error("{op}: {msg}")]
    InvalidArgument {
        /// The operation.
        op: &'static str,
        /// What is wrong.
        msg: String,
    },
    /// No GPU adapter could be found or opened.
    #[error("no Xpu adapter: {msg}. Install a Vulkan driver (on Debian/Ubuntu: `apt-get install mesa-vulkan-drivers` gives the lavapipe software driver) or select another adapter with XPU_ADAPTER")]
    NoAdapter {
        /// Why.
        msg: String,
    },
    /// The allocator could not satisfy a request even after emptying its cache.
    #[error("out of memory on Xpu: requested {requested} bytes with {allocated} bytes allocated and a limit of {limit} bytes")]
    OutOfMemory {
        /// Bytes requested.
        requested: u64,
        /// Bytes held by live tensors at the time.
        allocated: u64,
        /// The limit in force (the adapter's or the user's).
        limit: u64,
    },
    /// The host would not allocate memory a Cpu op needs (its output or its scratch).
    #[error(
        "out of memory on Cpu: {op} needs {requested} bytes ({}), which the system would not allocate", crate::error::human_bytes(*.requested)
    )]
    CpuOutOfMemory {
        /// The operation.
        op: &'static str,
        /// Bytes requested.
        requested: u64,
    },
    /// A request was refused before any work: by the shapes, it needs more memory than the
    /// device can give ([`crate::memory_budget`]).
    #[error("{op}: {what} needs {needed} bytes ({}) on {device}, but at most {fits} bytes ({}) fit: {basis}", crate::error::human_bytes(*.needed), crate::error::human_bytes(*.fits))]
    MemoryExceeded {
        /// The operation.
        op: &'static str,
        /// The device.
        device: Device,
        /// What needs the memory (e.g. the activations of one UNet step for a given sample).
        what: String,
        /// Bytes it needs.
        needed: u64,
        /// Bytes that fit.
        fits: u64,
        /// Where `fits` comes from.
        basis: String,
    },
    /// A shader failed to compile or validate.
    #[error("shader {shader}: {msg}")]
    Shader {
        /// The shader file.
        shader: &'static str,
        /// The compiler's message.
        msg: String,
    },
    /// The GPU runtime reported an error.
    #[error("gpu: {0}")]
    Gpu(String),
    /// An I/O error (with the path or context that caused it).
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A model configuration (e.g. diffusers' `config.json`) has a value `xpu` does not support
    /// or that is inconsistent; `key` names the offending key.
    #[error("config key `{key}`: {msg}")]
    Config {
        /// The configuration key.
        key: String,
        /// What is wrong and what is supported.
        msg: String,
    },
    /// A weight file does not match the model: every missing, unexpected and mis-shaped tensor
    /// is listed in one error.
    #[error("{file}: weights do not match the model: {}", crate::error::weights_summary(.missing, .unexpected, .mismatched))]
    Weights {
        /// The weight file (or source) checked.
        file: String,
        /// Tensors the model needs that the file lacks.
        missing: Vec<String>,
        /// Tensors in the file that the model does not use.
        unexpected: Vec<String>,
        /// Tensors whose shape differs: `name: expected [..], file has [..]`.
        mismatched: Vec<String>,
    },
    /// A file is truncated, corrupt or not in the expected format.
    #[error("{file}: {msg}")]
    InvalidFile {
        /// The file.
        file: String,
        /// What is wrong with it.
        msg: String,
    },
}

/// `bytes` for a reader: `1.5 GiB`, `12.0 MiB`, `512 B`.
pub(crate) fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut v = bytes as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit + 1 < UNITS.len() {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

/// The message of [`Error::Weights`]: counts and names of each kind of problem.
pub(crate) fn weights_summary(
    missing: &[String],
    unexpected: &[String],
    mismatched: &[String],
) -> String {
    let mut parts = Vec::new();
    for (what, names) in [
        ("missing", missing),
        ("unexpected", unexpected),
        ("mis-shaped", mismatched),
    ] {
        if !names.is_empty() {
            parts.push(format!("{} {what}: [{}]", names.len(), names.join(", ")));
        }
    }
    parts.join("; ")
}

impl Error {
    /// Shorthand for [`Error::InvalidArgument`].
    pub fn invalid(op: &'static str, msg: impl Into<String>) -> Error {
        Error::InvalidArgument {
            op,
            msg: msg.into(),
        }
    }

    /// Shorthand for [`Error::ShapeMismatch`] with shapes printed as lists.
    pub fn shape(op: &'static str, expected: impl Into<String>, got: &[usize]) -> Error {
        Error::ShapeMismatch {
            op,
            expected: expected.into(),
            got: format!("{got:?}"),
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn sizes_read_in_binary_units() {
        assert_eq!(super::human_bytes(512), "512 B");
        assert_eq!(super::human_bytes(1536), "1.5 KiB");
        assert_eq!(super::human_bytes(1 << 30), "1.0 GiB");
        assert_eq!(super::human_bytes(u64::MAX), "16.0 EiB");
    }
}
