//! Replays operator cases described by a file against xpu on one device and dtype, for
//! `lab/sweeps/check_random_ops.py` (a developer's check against PyTorch, not run by CI):
//!
//! ```text
//! cargo run --release -p xpu-lab --example op_replay -- --cases DIR/cases.json --device xpu --dtype f16 \
//!     --output DIR/out.safetensors
//! ```
//!
//! `cases.json` is a list of `{"name", "op", "args", "inputs"}`; the inputs are the tensors
//! `"<name>/<input>"` of the safetensors file beside it (`cases.safetensors`). Float inputs are
//! converted to `--dtype` and moved to `--device`; inputs named `index` become `I32`, inputs
//! named `mask` stay `U8` when `args.bool_mask` is true. `args.views` may give, per input, a
//! permutation applied as a view (the stored tensor is the permuted data made contiguous, so
//! the op sees a non-contiguous input), and `args.channels_last` lists inputs converted to
//! channels-last memory (when they are 4-D). Each case's output is written as `"<name>"` (f32); a case whose op
//! fails is reported as `error <name>: <message>` on stdout and written as nothing, so the
//! script can tell refusals from results. Invariant: the output file is written whole or not
//! at all (`io::write_file_atomically`).

#[path = "../../../examples/sd_unet/io.rs"]
mod io;
mod reduce;

use std::collections::HashMap;
use std::path::PathBuf;

use clap::Parser;
use serde_json::Value;
use xpu::{
    Activation, CmpOp, Conv2dParams, ConvTranspose2dParams, DType, Device, Error, MemoryFormat,
    Result, Tensor,
};

#[derive(Parser)]
#[command(about = "Replay operator cases (lab/sweeps/check_random_ops.py) on one device")]
struct Args {
    /// The cases' JSON list (its tensors in the `.safetensors` file of the same stem).
    #[arg(long)]
    cases: PathBuf,
    /// cpu or xpu.
    #[arg(long, default_value = "cpu")]
    device: String,
    /// f32, f16 or bf16: the dtype float inputs are converted to.
    #[arg(long, default_value = "f32")]
    dtype: String,
    /// Where the outputs go (safetensors, f32).
    #[arg(long)]
    output: PathBuf,
}

/// One case of the JSON list.
struct Case {
    name: String,
    op: String,
    args: Value,
    inputs: HashMap<String, Tensor>,
    /// Why the inputs could not be prepared (a view or memory format the data does not fit:
    /// reported as the case's error).
    setup: Option<Error>,
}

fn bad(msg: impl Into<String>) -> Error {
    Error::invalid("op_replay", msg.into())
}

fn usize_arg(args: &Value, key: &str) -> Result<usize> {
    args.get(key)
        .and_then(Value::as_u64)
        .map(|v| v as usize)
        .ok_or_else(|| bad(format!("argument `{key}`: expected a non-negative integer")))
}

fn isize_arg(args: &Value, key: &str) -> Result<isize> {
    args.get(key)
        .and_then(Value::as_i64)
        .map(|v| v as isize)
        .ok_or_else(|| bad(format!("argument `{key}`: expected an integer")))
}

fn f64_arg(args: &Value, key: &str) -> Result<f64> {
    args.get(key)
        .and_then(Value::as_f64)
        .ok_or_else(|| bad(format!("argument `{key}`: expected a number")))
}

fn bool_arg(args: &Value, key: &str) -> bool {
    args.get(key).and_then(Value::as_bool).unwrap_or(false)
}

/// `v` as a list of non-negative integers.
fn usizes(v: &Value) -> Option<Vec<usize>> {
    v.as_array()?
        .iter()
        .map(|v| v.as_u64().map(|v| v as usize))
        .collect()
}

fn list_arg(args: &Value, key: &str) -> Result<Vec<usize>> {
    args.get(key)
        .and_then(usizes)
        .ok_or_else(|| bad(format!("argument `{key}`: expected a list of integers")))
}

fn pair_arg(args: &Value, key: &str) -> Result<(usize, usize)> {
    match list_arg(args, key)?.as_slice() {
        [a, b] => Ok((*a, *b)),
        other => Err(bad(format!(
            "argument `{key}`: expected two integers, got {other:?}"
        ))),
    }
}

impl Case {
    fn input(&self, key: &str) -> Result<&Tensor> {
        self.inputs
            .get(key)
            .ok_or_else(|| bad(format!("case {}: no input `{key}`", self.name)))
    }

    fn optional(&self, key: &str) -> Option<&Tensor> {
        self.inputs.get(key)
    }

    /// Runs the case's op.
    fn run(&self) -> Result<Tensor> {
        if let Some(e) = &self.setup {
            return Err(bad(format!("preparing the inputs: {e}")));
        }
        let a = &self.args;
        let x = || self.input("x");
        match self.op.as_str() {
            "conv2d" => x()?.conv2d(
                self.input("weight")?,
                self.optional("bias"),
                conv_params(a)?,
            ),
            "conv_transpose2d" => x()?.conv_transpose2d(
                self.input("weight")?,
                self.optional("bias"),
                ConvTranspose2dParams {
                    stride: pair_arg(a, "stride")?,
                    padding: pair_arg(a, "padding")?,
                    output_padding: pair_arg(a, "output_padding")?,
                    dilation: pair_arg(a, "dilation")?,
                    groups: usize_arg(a, "groups")?,
                },
            ),
            "group_norm" => {
                let (w, b) = (self.optional("weight"), self.optional("bias"));
                let (g, eps) = (usize_arg(a, "groups")?, f64_arg(a, "eps")?);
                if bool_arg(a, "silu") {
                    x()?.group_norm_silu(g, w, b, eps)
                } else {
                    x()?.group_norm(g, w, b, eps)
                }
            }
            "layer_norm" => x()?.layer_norm(
                self.optional("weight"),
                self.optional("bias"),
                f64_arg(a, "eps")?,
            ),
            "sdpa" if bool_arg(a, "causal") => {
                let scale = a.get("scale").and_then(Value::as_f64);
                x()?.scaled_dot_product_attention_causal(self.input("k")?, self.input("v")?, scale)
            }
            "sdpa" if bool_arg(a, "gqa") => {
                let scale = a.get("scale").and_then(Value::as_f64);
                let (k, v) = (self.input("k")?, self.input("v")?);
                x()?.scaled_dot_product_attention_gqa(k, v, self.optional("mask"), scale)
            }
            "sdpa" => {
                let scale = a.get("scale").and_then(Value::as_f64);
                x()?.scaled_dot_product_attention(
                    self.input("k")?,
                    self.input("v")?,
                    self.optional("mask"),
                    scale,
                )
            }
            "interpolate_nearest" => x()?.interpolate_nearest(&list_arg(a, "size")?),
            "interpolate_bilinear" => {
                let s = pair_arg(a, "size")?;
                x()?.interpolate_bilinear([s.0, s.1], bool_arg(a, "align_corners"))
            }
            "avg_pool2d" => x()?.avg_pool2d(
                pair_arg(a, "kernel")?,
                pair_arg(a, "stride")?,
                pair_arg(a, "padding")?,
                bool_arg(a, "count_include_pad"),
            ),
            "max_pool2d" => x()?.max_pool2d(
                pair_arg(a, "kernel")?,
                pair_arg(a, "stride")?,
                pair_arg(a, "padding")?,
            ),
            "pad" => x()?.pad(&list_arg(a, "pads")?, f64_arg(a, "value")?),
            "matmul" => x()?.matmul(self.input("y")?),
            "matmul_fused" => {
                let (x, y) = (x()?, self.input("y")?);
                let mut b = x.matmul_fused(y).alpha(f64_arg(a, "alpha")?);
                if let Some(c) = self.optional("c") {
                    b = b.add_scaled(f64_arg(a, "beta")?, c);
                }
                if let Some(bias) = self.optional("bias") {
                    b = b.bias(bias);
                }
                if let Some(r) = self.optional("residual") {
                    b = b.residual(r);
                }
                b = b.activation(activation(a)?);
                if bool_arg(a, "geglu") {
                    b = b.geglu();
                }
                b.run()
            }
            "conv2d_fused" => {
                let x = x()?;
                let mut b = x.conv2d_fused(self.input("weight")?, conv_params(a)?);
                if let Some(bias) = self.optional("bias") {
                    b = b.bias(bias);
                }
                b = b.activation(activation(a)?);
                if let Some(r) = self.optional("residual") {
                    b = b.residual(r);
                }
                b.run()
            }
            "timestep_embedding" => x()?.timestep_embedding(
                usize_arg(a, "dim")?,
                bool_arg(a, "flip_sin_to_cos"),
                f64_arg(a, "shift")?,
                x()?.dtype(),
            ),
            "reduce" => reduce::along_dim(x()?, a),
            "reduce_dims" => reduce::over_dims(x()?, a),
            "binary" => {
                let (x, y) = (x()?, self.input("y")?);
                match a.get("kind").and_then(Value::as_str).unwrap_or("") {
                    "add" => x.add(y),
                    "sub" => x.sub(y),
                    "mul" => x.mul(y),
                    "div" => x.div(y),
                    "maximum" => x.maximum(y),
                    "minimum" => x.minimum(y),
                    "pow" => x.pow(y),
                    other => Err(bad(format!("unknown binary op {other:?}"))),
                }
            }
            "unary" => unary(x()?, a),
            "cmp" => {
                let kind = a.get("kind").and_then(Value::as_str).unwrap_or("");
                let op = match kind {
                    "eq" => CmpOp::Eq,
                    "ne" => CmpOp::Ne,
                    "lt" => CmpOp::Lt,
                    "le" => CmpOp::Le,
                    "gt" => CmpOp::Gt,
                    "ge" => CmpOp::Ge,
                    other => return Err(bad(format!("unknown comparison {other:?}"))),
                };
                match self.optional("y") {
                    Some(y) => x()?.cmp(y, op),
                    None => x()?.cmp_scalar(op, f64_arg(a, "value")?),
                }
            }
            "cast" => {
                let to = match a.get("to").and_then(Value::as_str).unwrap_or("") {
                    "f32" => DType::F32,
                    "f16" => DType::F16,
                    "bf16" => DType::BF16,
                    "i32" => DType::I32,
                    "u8" => DType::U8,
                    other => return Err(bad(format!("unknown dtype {other:?}"))),
                };
                x()?.to_dtype(to)
            }
            "reduce_all" => reduce::whole(x()?, a),
            "tril" => x()?.tril(isize_arg(a, "diagonal")? as i64),
            "triu" => x()?.triu(isize_arg(a, "diagonal")? as i64),
            "flip" => {
                let dims: Vec<isize> = a
                    .get("dims")
                    .and_then(Value::as_array)
                    .map(|l| {
                        l.iter()
                            .filter_map(|v| v.as_i64().map(|v| v as isize))
                            .collect()
                    })
                    .unwrap_or_default();
                x()?.flip(&dims)
            }
            "repeat" => x()?.repeat(&list_arg(a, "reps")?),
            "cat" => Tensor::cat(&[x()?, self.input("y")?], isize_arg(a, "dim")?),
            "stack" => Tensor::stack(&[x()?, self.input("y")?], isize_arg(a, "dim")?),
            "where" => self.input("mask")?.where_cond(x()?, self.input("y")?),
            "masked_fill" => x()?.masked_fill(self.input("mask")?, f64_arg(a, "value")?),
            "gather" => x()?.gather(isize_arg(a, "dim")?, self.input("index")?),
            "index_select" => x()?.index_select(isize_arg(a, "dim")?, self.input("index")?),
            other => Err(bad(format!("unknown op {other:?}"))),
        }
    }
}

/// A convolution's stride, padding, dilation and groups from `args`.
fn conv_params(a: &Value) -> Result<Conv2dParams> {
    Ok(Conv2dParams {
        stride: pair_arg(a, "stride")?,
        padding: pair_arg(a, "padding")?,
        dilation: pair_arg(a, "dilation")?,
        groups: usize_arg(a, "groups")?,
    })
}

/// The fused epilogues' activation `args.activation` (none when absent).
fn activation(a: &Value) -> Result<Activation> {
    Ok(
        match a
            .get("activation")
            .and_then(Value::as_str)
            .unwrap_or("none")
        {
            "none" => Activation::None,
            "relu" => Activation::Relu,
            "gelu" => Activation::Gelu,
            "gelu_tanh" => Activation::GeluTanh,
            "silu" => Activation::Silu,
            other => return Err(bad(format!("unknown activation {other:?}"))),
        },
    )
}

/// The elementwise op `args.kind` of `x` (the unary ops, `pow_scalar` and `clamp`).
fn unary(x: &Tensor, a: &Value) -> Result<Tensor> {
    let kind = a.get("kind").and_then(Value::as_str).unwrap_or("");
    let f: fn(&Tensor) -> Result<Tensor> = match kind {
        "pow_scalar" => return x.pow_scalar(f64_arg(a, "exponent")?),
        "clamp" => return x.clamp(f64_arg(a, "min")?, f64_arg(a, "max")?),
        "neg" => Tensor::neg,
        "abs" => Tensor::abs,
        "exp" => Tensor::exp,
        "log" => Tensor::log,
        "sqrt" => Tensor::sqrt,
        "rsqrt" => Tensor::rsqrt,
        "tanh" => Tensor::tanh,
        "sigmoid" => Tensor::sigmoid,
        "relu" => Tensor::relu,
        "gelu" => Tensor::gelu,
        "gelu_tanh" => Tensor::gelu_tanh,
        "silu" => Tensor::silu,
        "sin" => Tensor::sin,
        "cos" => Tensor::cos,
        "recip" => Tensor::recip,
        "square" => Tensor::square,
        "floor" => Tensor::floor,
        "ceil" => Tensor::ceil,
        "round" => Tensor::round,
        "trunc" => Tensor::trunc,
        "sign" => Tensor::sign,
        "erf" => Tensor::erf,
        other => return Err(bad(format!("unknown unary op {other:?}"))),
    };
    f(x)
}

/// The cases of `path` with their inputs as `dtype` on `device`.
fn load_cases(path: &std::path::Path, dtype: DType, device: Device) -> Result<Vec<Case>> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::Io {
        context: format!("reading {}", path.display()),
        source,
    })?;
    let list: Vec<Value> =
        serde_json::from_str(&text).map_err(|e| bad(format!("{}: {e}", path.display())))?;
    let mut tensors = io::read_tensors(&path.with_extension("safetensors"))?;
    let mut cases = Vec::new();
    for item in list {
        let field = |k: &str| {
            item.get(k)
                .and_then(Value::as_str)
                .map(str::to_string)
                .ok_or_else(|| bad(format!("a case without `{k}`")))
        };
        let (name, op) = (field("name")?, field("op")?);
        let args = item.get("args").cloned().unwrap_or(Value::Null);
        let names: Vec<String> = item
            .get("inputs")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        let mut inputs = HashMap::new();
        let mut setup = None;
        for input in names {
            let stored = tensors
                .remove(&format!("{name}/{input}"))
                .ok_or_else(|| bad(format!("case {name}: tensor `{input}` is not in the file")))?;
            match prepare(stored, &input, &args, dtype, device) {
                Ok(t) => {
                    inputs.insert(input, t);
                }
                Err(e) => setup = Some(e),
            }
        }
        cases.push(Case {
            name,
            op,
            args,
            inputs,
            setup,
        });
    }
    Ok(cases)
}

/// One stored input as the op sees it: converted to `dtype` (indices to I32, boolean masks to
/// U8), on `device`, as the view and memory format `args` give.
fn prepare(
    stored: Tensor,
    input: &str,
    args: &Value,
    dtype: DType,
    device: Device,
) -> Result<Tensor> {
    let converted = if input == "index" {
        stored.to_dtype(DType::I32)?
    } else if input == "mask" && bool_arg(args, "bool_mask") {
        stored.to_dtype(DType::U8)?
    } else {
        stored.to_dtype(dtype)?
    };
    let mut t = converted.to(device)?;
    if let Some(perm) = args.get("views").and_then(|v| v.get(input)) {
        let perm = usizes(perm).ok_or_else(|| bad(format!("views.{input}: not a permutation")))?;
        t = t.permute(&perm)?;
    }
    let channels_last = args
        .get("channels_last")
        .and_then(Value::as_array)
        .is_some_and(|l| l.iter().any(|v| v.as_str() == Some(input)));
    // A layout hint for a 4-D input: an input the script resized to another rank (a user
    // error it injects) keeps its layout, so the op, not the hint, meets the wrong rank.
    if channels_last && t.rank() == 4 {
        t = t.to_memory_format(MemoryFormat::ChannelsLast)?;
    }
    Ok(t)
}

fn main() -> Result<()> {
    let args = Args::parse();
    let device = match args.device.as_str() {
        "cpu" => Device::Cpu,
        "xpu" => Device::Xpu,
        other => return Err(bad(format!("--device: expected cpu or xpu, got {other:?}"))),
    };
    let dtype = match args.dtype.as_str() {
        "f32" => DType::F32,
        "f16" => DType::F16,
        "bf16" => DType::BF16,
        other => {
            return Err(bad(format!(
                "--dtype: expected f32, f16 or bf16, got {other:?}"
            )))
        }
    };
    let cases = load_cases(&args.cases, dtype, device)?;
    let mut outputs = Vec::new();
    for case in &cases {
        match case.run() {
            Ok(out) => outputs.push((case.name.clone(), out)),
            Err(e) => println!("error {}: {e}", case.name),
        }
    }
    let named: Vec<(&str, &Tensor)> = outputs.iter().map(|(n, t)| (n.as_str(), t)).collect();
    io::write_tensors(&args.output, &named)?;
    println!("{} cases, {} outputs", cases.len(), outputs.len());
    Ok(())
}
