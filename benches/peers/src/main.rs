//! xpu beside candle, its closest Rust peer, on the CPU: the same operations on the same
//! values in one process, timed one after the other, and the two outputs compared.
//!
//! `cargo run --release --manifest-path benches/peers/Cargo.toml -- [FAMILY...] [--unet DIR]
//! [--runs N] [--json]`
//!
//! FAMILY: `matmul`, `conv`, `attention`, `unet` (none means all but `unet`; `unet` needs
//! `--unet DIR`, a diffusers SD-1.x-shaped `unet` folder both libraries load). Each row gives the
//! median wall time of `--runs` calls after one warm-up call, GFLOP/s, xpu's speed over
//! candle's, and `max_rel_diff`: the largest |xpu - candle| over the largest |xpu| (a check that
//! both computed the same thing, not an accuracy figure: each rounds its own way).
//!
//! Invariants: inputs are made once by xpu's seeded `randn` and handed to candle as the same
//! f32 values (then converted by each library to the row's dtype); both libraries use every
//! core (candle through rayon, xpu through its pool); timings include each library's per-call
//! work (weight packing of one-off products included), and the xpu `layer` rows prepack once as
//! `xpu::nn` layers do.

use std::path::PathBuf;
use std::time::Instant;

use candle_core::{DType as CDType, Device as CDevice, Tensor as CTensor};
use xpu::{DType, Device, Tensor};

mod families;
mod unet;

/// One measured comparison.
pub struct Row {
    /// Operation and variant, e.g. `matmul`, `conv layer`.
    pub op: String,
    /// Problem shape.
    pub shape: String,
    /// `f32` or `bf16`.
    pub dtype: &'static str,
    /// xpu's median milliseconds.
    pub xpu_ms: f64,
    /// Floating-point operations of one call (None: not counted).
    pub flops: Option<f64>,
    /// candle's median milliseconds and the largest |xpu - candle| over the largest |xpu|, or
    /// candle's error (e.g. a dtype it does not support for this op on the CPU).
    pub candle: Result<(f64, f64), String>,
    /// 16-bit rows: the largest error of xpu's and of candle's output against the same
    /// computation in f32 on the same (rounded) inputs, over the largest |reference|.
    pub errors: Option<(f64, Option<f64>)>,
}

impl Row {
    /// A row from xpu's measurement and candle's (timed output, or error).
    pub fn new(
        op: impl Into<String>,
        shape: String,
        dtype: &'static str,
        flops: Option<f64>,
        (xpu_ms, ours): (f64, Tensor),
        theirs: AnyResult<(f64, CTensor)>,
        reference: Option<Tensor>,
    ) -> AnyResult<Row> {
        let ours = xpu_values(&ours)?;
        let (candle, theirs) = match theirs {
            Ok((ms, y)) => {
                let y = candle_values(&y)?;
                (Ok((ms, max_rel_diff(&ours, &y)?)), Some(y))
            }
            Err(e) => (
                Err(e.to_string().lines().next().unwrap_or_default().to_string()),
                None,
            ),
        };
        let errors = match reference {
            Some(r) => {
                let r = xpu_values(&r)?;
                let theirs = theirs.map(|y| max_rel_diff(&r, &y)).transpose()?;
                Some((max_rel_diff(&r, &ours)?, theirs))
            }
            None => None,
        };
        Ok(Row {
            op: op.into(),
            shape,
            dtype,
            xpu_ms,
            flops,
            candle,
            errors,
        })
    }
}

/// Boxed error of either library.
pub type AnyResult<T> = Result<T, Box<dyn std::error::Error>>;

/// Median wall milliseconds of `runs` calls of `f` after one warm-up call.
pub fn median_ms<T>(runs: usize, mut f: impl FnMut() -> AnyResult<T>) -> AnyResult<(f64, T)> {
    let mut last = f()?;
    let mut times = Vec::with_capacity(runs);
    for _ in 0..runs.max(1) {
        let t = Instant::now();
        last = f()?;
        times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    times.sort_by(f64::total_cmp);
    Ok((times[times.len() / 2], last))
}

/// xpu's seeded standard-normal values of `shape` as an xpu tensor (f32, Cpu) and the same
/// values as a candle tensor, both converted to `dtype`.
pub fn pair(shape: &[usize], seed: u64, scale: f32, dtype: DType) -> AnyResult<(Tensor, CTensor)> {
    let x = Tensor::randn(shape, DType::F32, Device::Cpu, seed)?.mul_scalar(f64::from(scale))?;
    let values = x.to_vec::<f32>()?;
    let c = CTensor::from_vec(values, shape, &CDevice::Cpu)?.to_dtype(candle_dtype(dtype))?;
    Ok((x.to_dtype(dtype)?, c))
}

/// candle's dtype for xpu's.
pub fn candle_dtype(dtype: DType) -> CDType {
    match dtype {
        DType::BF16 => CDType::BF16,
        DType::F16 => CDType::F16,
        _ => CDType::F32,
    }
}

/// An xpu tensor's values as f32, row-major.
pub fn xpu_values(t: &Tensor) -> AnyResult<Vec<f32>> {
    Ok(t.to_dtype(DType::F32)?.contiguous()?.to_vec::<f32>()?)
}

/// A candle tensor's values as f32, row-major.
pub fn candle_values(t: &CTensor) -> AnyResult<Vec<f32>> {
    Ok(t.to_dtype(CDType::F32)?.flatten_all()?.to_vec1::<f32>()?)
}

/// Largest |a - b| over the largest |a| (both row-major values of one shape).
pub fn max_rel_diff(a: &[f32], b: &[f32]) -> AnyResult<f64> {
    if a.len() != b.len() {
        return Err(format!("outputs of {} and {} values", a.len(), b.len()).into());
    }
    let scale = a
        .iter()
        .fold(0f32, |m, v| m.max(v.abs()))
        .max(f32::MIN_POSITIVE);
    let diff = a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()));
    Ok(f64::from(diff / scale))
}

/// The f32 reference of a 16-bit row: `f` on f32 copies of the (rounded) inputs; None for f32
/// rows (the row's own output is the f32 computation).
pub fn f32_reference(
    dtype: DType,
    inputs: &[&Tensor],
    f: impl Fn(&[Tensor]) -> xpu::Result<Tensor>,
) -> AnyResult<Option<Tensor>> {
    if dtype == DType::F32 {
        return Ok(None);
    }
    let wide: Vec<Tensor> = inputs
        .iter()
        .map(|t| t.to_dtype(DType::F32))
        .collect::<xpu::Result<_>>()?;
    Ok(Some(f(&wide)?))
}

struct Args {
    families: Vec<String>,
    unet: Option<PathBuf>,
    runs: usize,
    json: bool,
}

fn parse_args() -> AnyResult<Args> {
    let mut args = Args {
        families: Vec::new(),
        unet: None,
        runs: 5,
        json: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        match a.as_str() {
            "--unet" => args.unet = Some(it.next().ok_or("--unet needs a folder")?.into()),
            "--runs" => args.runs = it.next().ok_or("--runs needs a number")?.parse()?,
            "--json" => args.json = true,
            "matmul" | "conv" | "attention" | "unet" => args.families.push(a),
            other => return Err(format!("unknown argument {other:?}").into()),
        }
    }
    if args.families.is_empty() {
        args.families = ["matmul", "conv", "attention"].map(String::from).to_vec();
        if args.unet.is_some() {
            args.families.push("unet".into());
        }
    }
    Ok(args)
}

fn print_row(r: &Row, json: bool) {
    let gflops = |ms: f64| r.flops.map(|f| f / (ms / 1e3) / 1e9);
    let (cms, diff) = match &r.candle {
        Ok((ms, d)) => (Some(*ms), Some(*d)),
        Err(_) => (None, None),
    };
    let (gx, gc) = (gflops(r.xpu_ms), cms.and_then(gflops));
    let speedup = cms.map(|c| c / r.xpu_ms);
    if json {
        let num = |v: Option<f64>| v.map_or("null".into(), |v| format!("{v:.3}"));
        let error = r
            .candle
            .as_ref()
            .err()
            .map_or("null".into(), |e| format!("{e:?}"));
        let (ex, ec) = match r.errors {
            Some((x, c)) => (Some(x), c),
            None => (None, None),
        };
        let sci = |v: Option<f64>| v.map_or("null".into(), |v| format!("{v:.1e}"));
        println!(
            "{{\"op\":\"{}\",\"shape\":\"{}\",\"dtype\":\"{}\",\"xpu_ms\":{:.3},\"candle_ms\":{},\"xpu_gflops\":{},\"candle_gflops\":{},\"xpu_speedup\":{},\"max_rel_diff\":{},\"xpu_err_vs_f32\":{},\"candle_err_vs_f32\":{},\"candle_error\":{}}}",
            r.op, r.shape, r.dtype, r.xpu_ms, num(cms), num(gx), num(gc), num(speedup),
            sci(diff), sci(ex), sci(ec), error
        );
    } else {
        let num = |v: Option<f64>, d: usize| v.map_or("-".into(), |v| format!("{v:.d$}"));
        let candle_ms = match &r.candle {
            Ok((ms, _)) => format!("{ms:.2}"),
            Err(e) => format!("error: {e}"),
        };
        println!(
            "| {} | {} | {} | {:.2} | {} | {} | {} | {} | {} | {} |",
            r.op,
            r.shape,
            r.dtype,
            r.xpu_ms,
            num(gx, 1),
            candle_ms,
            num(gc, 1),
            speedup.map_or("-".into(), |s| format!("{s:.2}x")),
            diff.map_or("-".into(), |d| format!("{d:.1e}")),
            match r.errors {
                Some((x, c)) =>
                    format!("{x:.1e} / {}", c.map_or("-".into(), |c| format!("{c:.1e}"))),
                None => "-".into(),
            },
        );
    }
}

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}

fn run() -> AnyResult<()> {
    let args = parse_args()?;
    if !args.json {
        println!(
            "xpu {} beside candle 0.11.1 on the CPU ({} threads)",
            env!("CARGO_PKG_VERSION"),
            std::thread::available_parallelism().map_or(1, |n| n.get())
        );
        println!("| op | shape | dtype | xpu ms | xpu GFLOP/s | candle ms | candle GFLOP/s | xpu speedup | max rel diff | error vs f32: xpu / candle |");
        println!("| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |");
    }
    for family in &args.families {
        let rows = match family.as_str() {
            "matmul" => families::matmul(args.runs, args.json),
            "conv" => families::conv(args.runs, args.json),
            "attention" => families::attention(args.runs, args.json),
            "unet" => match &args.unet {
                Some(dir) => unet::step(dir, args.runs.min(3), args.json),
                None => Err("the unet family needs --unet DIR".into()),
            },
            other => Err(format!("unknown family {other}").into()),
        };
        rows?;
    }
    Ok(())
}

/// Prints a row as soon as it is measured (a long run shows progress).
pub fn emit(r: AnyResult<Row>, json: bool) -> AnyResult<()> {
    print_row(&r?, json);
    Ok(())
}
