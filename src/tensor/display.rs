//! Printing a [`Tensor`] as PyTorch does: `Display` and `Debug` both show the values
//! (`tensor([[1.0000, 2.0000], [3.0000, 4.0000]], dtype=f32, device=cpu)` across lines), with
//! PyTorch's default print options: four decimals, scientific notation when the magnitudes
//! call for it, integers as `1.` in a float tensor, right-aligned columns, rows wrapped at 80
//! characters, and tensors of more than 1000 elements summarised to their first and last three
//! entries along every dim (` ...` between them).
//!
//! Invariants: only the elements shown are read (a summarised tensor reads at most
//! `6^rank` of them, so printing a huge or broadcast tensor allocates little); values on the Xpu
//! are read back to the host; a read that fails prints the shape, dtype, device and the error,
//! and formatting never panics.

use super::Tensor;
use crate::{DType, Device, Result};
use std::fmt;

/// More elements than this are summarised (PyTorch's `threshold`).
const THRESHOLD: usize = 1000;
/// Entries shown at each end of a summarised dim (`edgeitems`).
const EDGE: usize = 3;
/// Digits after the point (`precision`).
const PRECISION: usize = 4;
/// Characters per line before a row wraps (`linewidth`).
const LINE_WIDTH: usize = 80;
/// `tensor(`: the indent of the first line's values.
const PREFIX: &str = "tensor(";

impl fmt::Display for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&render(self))
    }
}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&render(self))
    }
}

/// The shown values, widened for formatting.
enum Values {
    Float(Vec<f64>),
    Int(Vec<i64>),
}

/// The elements a print shows: the whole tensor, or its first and last [`EDGE`] entries along
/// every dim longer than `2 · EDGE` when `summarize`.
struct Shown {
    /// The tensor's shape.
    shape: Vec<usize>,
    summarize: bool,
    /// Row-major over the shown shape.
    values: Values,
}

impl Shown {
    fn read(t: &Tensor) -> Result<Shown> {
        let shape = t.shape().to_vec();
        let summarize = t.numel() > THRESHOLD;
        let mut s = t.clone();
        if summarize {
            for (d, &n) in shape.iter().enumerate() {
                if n > 2 * EDGE {
                    let dim = d as isize;
                    let (head, tail) = (s.narrow(dim, 0, EDGE)?, s.narrow(dim, n - EDGE, EDGE)?);
                    s = Tensor::cat(&[&head, &tail], dim)?;
                }
            }
        }
        let s = if s.device() == Device::Cpu {
            s
        } else {
            s.to(Device::Cpu)?
        };
        fn widen<T, U: From<T>>(v: Vec<T>) -> Result<Vec<U>> {
            crate::backend::alloc::collected("print", v.len(), v.into_iter().map(U::from))
        }
        let values = match s.dtype() {
            DType::I32 => Values::Int(widen(s.to_vec::<i32>()?)?),
            DType::U8 => Values::Int(widen(s.to_vec::<u8>()?)?),
            // f16 and bf16 widen to f32 exactly.
            _ => Values::Float(widen(s.to_dtype(DType::F32)?.to_vec::<f32>()?)?),
        };
        Ok(Shown {
            shape,
            summarize,
            values,
        })
    }

    /// Entries shown along a dim of size `n`.
    fn shown_len(&self, n: usize) -> usize {
        if self.summarize && n > 2 * EDGE {
            2 * EDGE
        } else {
            n
        }
    }

    /// True when a dim of size `n` shows `...` between its ends.
    fn cut(&self, n: usize) -> bool {
        self.summarize && n > 2 * EDGE
    }
}

/// PyTorch's `_Formatter`: one width and notation for every element shown.
struct Formatter {
    int_mode: bool,
    sci: bool,
    width: usize,
}

impl Formatter {
    fn new(values: &Values) -> Formatter {
        let mut f = Formatter {
            int_mode: true,
            sci: false,
            width: 1,
        };
        let v = match values {
            Values::Int(v) => {
                f.width = v
                    .iter()
                    .map(|x| x.to_string().len())
                    .max()
                    .unwrap_or(1)
                    .max(1);
                return f;
            }
            Values::Float(v) => v,
        };
        let finite = || v.iter().copied().filter(|x| x.is_finite() && *x != 0.0);
        let (Some(min), Some(max)) = (
            finite().map(f64::abs).reduce(f64::min),
            finite().map(f64::abs).reduce(f64::max),
        ) else {
            return f;
        };
        f.int_mode = finite().all(|x| x == x.ceil());
        let widest = |g: &dyn Fn(f64) -> usize| finite().map(g).max().unwrap_or(1);
        if f.int_mode {
            if max / min > 1000.0 || max > 1e8 {
                f.sci = true;
                f.width = widest(&|x| sci(x).len());
            } else {
                f.width = widest(&|x| format!("{x:.0}").len() + 1);
            }
        } else if max / min > 1000.0 || max > 1e8 || min < 1e-4 {
            f.sci = true;
            f.width = widest(&|x| sci(x).len());
        } else {
            f.width = widest(&|x| format!("{x:.PRECISION$}").len());
        }
        f.width = f.width.max(1);
        f
    }

    fn float(&self, x: f64) -> String {
        let s = if !x.is_finite() {
            nonfinite(x).to_string()
        } else if self.sci {
            sci(x)
        } else if self.int_mode {
            format!("{x:.0}.")
        } else {
            format!("{x:.PRECISION$}")
        };
        self.pad(s)
    }

    fn int(&self, x: i64) -> String {
        self.pad(x.to_string())
    }

    fn pad(&self, s: String) -> String {
        format!("{s:>width$}", width = self.width)
    }
}

/// Python's spelling of NaN and the infinities.
fn nonfinite(x: f64) -> &'static str {
    if x.is_nan() {
        "nan"
    } else if x > 0.0 {
        "inf"
    } else {
        "-inf"
    }
}

/// Python's `{:.4e}`: a signed exponent of at least two digits (`1.2346e+03`).
fn sci(x: f64) -> String {
    if !x.is_finite() {
        return nonfinite(x).to_string();
    }
    let s = format!("{x:.PRECISION$e}");
    match s.split_once('e') {
        Some((mantissa, exp)) => {
            let (sign, digits) = match exp.strip_prefix('-') {
                Some(d) => ('-', d),
                None => ('+', exp),
            };
            format!("{mantissa}e{sign}{digits:0>2}")
        }
        None => s,
    }
}

/// The printed form of `t`.
fn render(t: &Tensor) -> String {
    let suffix = format!("dtype={}, device={}", t.dtype(), t.device());
    let shown = match Shown::read(t) {
        Ok(s) => s,
        Err(e) => {
            return format!(
                "{PREFIX}<values unavailable: {e}>, size={:?}, {suffix})",
                t.shape()
            )
        }
    };
    let fmt = Formatter::new(&shown.values);
    let indent = PREFIX.len();
    let body = if t.numel() == 0 {
        "[]".to_string()
    } else if shown.shape.is_empty() {
        element(&shown, &fmt, 0)
    } else {
        block(&shown, &fmt, 0, 0, indent)
    };
    let mut suffixes = Vec::new();
    if t.numel() == 0 && shown.shape != [0] {
        let dims: Vec<String> = shown.shape.iter().map(usize::to_string).collect();
        let tuple = if dims.len() == 1 {
            format!("({},)", dims[0])
        } else {
            format!("({})", dims.join(", "))
        };
        suffixes.push(format!("size={tuple}"));
    }
    suffixes.push(suffix);
    with_suffixes(format!("{PREFIX}{body}"), &suffixes, indent)
}

/// The element at flat position `i` of the shown values.
fn element(s: &Shown, fmt: &Formatter, i: usize) -> String {
    match &s.values {
        Values::Float(v) => v.get(i).map_or_else(String::new, |&x| fmt.float(x)),
        Values::Int(v) => v.get(i).map_or_else(String::new, |&x| fmt.int(x)),
    }
}

/// Row-major strides of the shown shape.
fn shown_strides(s: &Shown) -> Vec<usize> {
    let mut strides = vec![1; s.shape.len()];
    for d in (0..s.shape.len().saturating_sub(1)).rev() {
        strides[d] = strides[d + 1] * s.shown_len(s.shape[d + 1]);
    }
    strides
}

/// The bracketed text of dims `dim..` starting at shown element `offset`, its first line
/// indented by `indent` (PyTorch's `_tensor_str_with_formatter`).
fn block(s: &Shown, fmt: &Formatter, dim: usize, offset: usize, indent: usize) -> String {
    let strides = shown_strides(s);
    let n = s.shape[dim];
    let shown = s.shown_len(n);
    let cut = s.cut(n);
    let rank = s.shape.len();
    if dim + 1 == rank {
        let mut data: Vec<String> = (0..shown).map(|i| element(s, fmt, offset + i)).collect();
        if cut {
            data.insert(EDGE, " ...".to_string());
        }
        let per_line = (LINE_WIDTH.saturating_sub(indent) / (fmt.width + 2)).max(1);
        let lines: Vec<String> = data.chunks(per_line).map(|l| l.join(", ")).collect();
        return format!(
            "[{}]",
            lines.join(&format!(",\n{}", " ".repeat(indent + 1)))
        );
    }
    let mut slices: Vec<String> = (0..shown)
        .map(|i| block(s, fmt, dim + 1, offset + i * strides[dim], indent + 1))
        .collect();
    if cut {
        slices.insert(EDGE, "...".to_string());
    }
    let sep = format!(",{}{}", "\n".repeat(rank - dim - 1), " ".repeat(indent + 1));
    format!("[{}]", slices.join(&sep))
}

/// PyTorch's `_add_suffixes`: `, suffix` on the last line, or on a new line past the width.
fn with_suffixes(mut text: String, suffixes: &[String], indent: usize) -> String {
    let mut last = text.len() - text.rfind('\n').map_or(0, |i| i + 1) + 1;
    for s in suffixes {
        if last + s.len() + 2 > LINE_WIDTH {
            text.push_str(&format!(",\n{}{s}", " ".repeat(indent)));
            last = indent + s.len();
        } else {
            text.push_str(&format!(", {s}"));
            last += s.len() + 2;
        }
    }
    text.push(')');
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cpu(v: Vec<f32>, shape: &[usize]) -> Tensor {
        Tensor::from_vec(v, shape, Device::Cpu).unwrap()
    }

    #[test]
    fn python_exponents_and_nonfinite_spellings() {
        assert_eq!(sci(1234.5678), "1.2346e+03");
        assert_eq!(sci(-0.000012), "-1.2000e-05");
        assert_eq!(sci(1e100), "1.0000e+100");
        assert_eq!(sci(f64::NAN), "nan");
        assert_eq!(sci(f64::NEG_INFINITY), "-inf");
    }

    #[test]
    fn small_tensors_print_every_value() {
        let t = cpu(vec![1.0, 2.5, -3.0, 4.0], &[2, 2]);
        assert_eq!(
            format!("{t}"),
            "tensor([[ 1.0000,  2.5000],\n        [-3.0000,  4.0000]], dtype=f32, device=cpu)"
        );
        assert_eq!(format!("{t:?}"), format!("{t}"));
        let ints = cpu(vec![1.0, 2.0, 30.0], &[3]);
        assert_eq!(
            format!("{ints}"),
            "tensor([ 1.,  2., 30.], dtype=f32, device=cpu)"
        );
        let s = Tensor::full(0.5, &[], DType::F32, Device::Cpu).unwrap();
        assert_eq!(format!("{s}"), "tensor(0.5000, dtype=f32, device=cpu)");
        let e = Tensor::zeros(&[0, 3], DType::F32, Device::Cpu).unwrap();
        assert_eq!(
            format!("{e}"),
            "tensor([], size=(0, 3), dtype=f32, device=cpu)"
        );
    }
}
