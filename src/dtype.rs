//! Element types and the host-side trait that ties a Rust type to its [`DType`].
//!
//! Invariant: every dtype has a fixed element size and a lossless path to `f64` for the floating
//! and integer values it can hold; 16-bit floats compute in `f32` everywhere and round once on store.

use half::{bf16, f16};

/// The element type of a tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    /// IEEE 754 binary32.
    F32,
    /// IEEE 754 binary16.
    F16,
    /// bfloat16: the top 16 bits of an `f32`.
    BF16,
    /// Signed 32-bit integer.
    I32,
    /// Unsigned 8-bit integer.
    U8,
}

impl DType {
    /// All dtypes, in a fixed order (useful for tests).
    pub const ALL: [DType; 5] = [DType::F32, DType::F16, DType::BF16, DType::I32, DType::U8];

    /// Size of one element in bytes.
    pub fn size_in_bytes(self) -> usize {
        match self {
            DType::F32 | DType::I32 => 4,
            DType::F16 | DType::BF16 => 2,
            DType::U8 => 1,
        }
    }

    /// True for the floating-point dtypes.
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::BF16)
    }

    /// Lower-case name as used on the command line (`f32`, `f16`, `bf16`, `i32`, `u8`).
    pub fn as_str(self) -> &'static str {
        match self {
            DType::F32 => "f32",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::I32 => "i32",
            DType::U8 => "u8",
        }
    }

    /// Parses the lower-case name produced by [`DType::as_str`].
    pub fn parse(name: &str) -> Option<DType> {
        DType::ALL.into_iter().find(|d| d.as_str() == name)
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A Rust element type that a tensor can hold.
pub trait WithDType:
    Copy + Send + Sync + 'static + bytemuck::Pod + std::fmt::Debug + PartialOrd
{
    /// The dtype of this element type.
    const DTYPE: DType;
    /// Converts to `f64` (exact for every value of every supported type).
    fn to_f64(self) -> f64;
    /// Converts from `f64`, rounding to nearest (saturating for integers).
    fn from_f64(v: f64) -> Self;
}

macro_rules! with_dtype {
    ($t:ty, $d:expr, $to:expr, $from:expr) => {
        impl WithDType for $t {
            const DTYPE: DType = $d;
            fn to_f64(self) -> f64 {
                $to(self)
            }
            fn from_f64(v: f64) -> Self {
                $from(v)
            }
        }
    };
}

with_dtype!(f32, DType::F32, |x: f32| x as f64, |v: f64| v as f32);
with_dtype!(f16, DType::F16, |x: f16| x.to_f64(), f16::from_f64);
with_dtype!(bf16, DType::BF16, |x: bf16| x.to_f64(), bf16::from_f64);
with_dtype!(i32, DType::I32, |x: i32| x as f64, |v: f64| v as i32);
with_dtype!(u8, DType::U8, |x: u8| x as f64, |v: f64| v as u8);
