//! The reductions of `op_replay`: along one dim (`reduce`), over several dims at once
//! (`reduce_dims`) and over the whole tensor (`reduce_all`). `args.kind` names the reduction,
//! as the draws of `tests/fixtures/random_op_draws.py` write it.

use serde_json::Value;
use xpu::{Result, Tensor};

use super::{bad, bool_arg, f64_arg, isize_arg};

fn kind(a: &Value) -> &str {
    a.get("kind").and_then(Value::as_str).unwrap_or("")
}

/// `x` reduced along `args.dim` (softmax, log_softmax and cumsum too).
pub fn along_dim(x: &Tensor, a: &Value) -> Result<Tensor> {
    let (dim, keep) = (isize_arg(a, "dim")?, bool_arg(a, "keepdim"));
    match kind(a) {
        "sum" => x.sum(dim, keep),
        "mean" => x.mean(dim, keep),
        "max" => x.max(dim, keep),
        "min" => x.min(dim, keep),
        "argmax" => x.argmax(dim, keep),
        "argmin" => x.argmin(dim, keep),
        "var" => x.var(dim, f64_arg(a, "correction")?, keep),
        "std" => x.std(dim, f64_arg(a, "correction")?, keep),
        "logsumexp" => x.logsumexp(dim, keep),
        "softmax" => x.softmax(dim),
        "log_softmax" => x.log_softmax(dim),
        "cumsum" => x.cumsum(dim),
        other => Err(bad(format!("unknown reduction {other:?}"))),
    }
}

/// `x` reduced over the list `args.dims` at once.
pub fn over_dims(x: &Tensor, a: &Value) -> Result<Tensor> {
    let dims: Vec<isize> = a
        .get("dims")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("reduce_dims needs a list \"dims\""))?
        .iter()
        .map(|v| v.as_i64().map(|v| v as isize))
        .collect::<Option<_>>()
        .ok_or_else(|| bad("\"dims\" must hold integers"))?;
    let keep = bool_arg(a, "keepdim");
    match kind(a) {
        "sum" => x.sum_dims(&dims, keep),
        "mean" => x.mean_dims(&dims, keep),
        "amax" => x.max_dims(&dims, keep),
        "amin" => x.min_dims(&dims, keep),
        "var" => x.var_dims(&dims, f64_arg(a, "correction")?, keep),
        "std" => x.std_dims(&dims, f64_arg(a, "correction")?, keep),
        "logsumexp" => x.logsumexp_dims(&dims, keep),
        other => Err(bad(format!("unknown reduction {other:?}"))),
    }
}

/// `x` reduced over every element.
pub fn whole(x: &Tensor, a: &Value) -> Result<Tensor> {
    match kind(a) {
        "sum" => x.sum_all(),
        "mean" => x.mean_all(),
        "max" => x.max_all(),
        "argmax" => x.argmax_all(),
        other => Err(bad(format!("unknown reduction {other:?}"))),
    }
}
