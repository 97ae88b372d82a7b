//! The user's benchmark tool.
//!
//! `cargo run --release --example bench -- [FAMILY...] [--device cpu|xpu] [--dtype f32|f16|bf16] [--json] [--quick] [--report] [--shape MxKxN ...]`
//!
//! FAMILY: `elementwise`, `reduce`, `matmul`, `conv`, `ffn`, `attention` (none means all). Prints a
//! table, or one JSON object per line with `op`, `variant`, `device`, `dtype`, `shape`,
//! `median_ms`, `gflops` or `gbps`, `peak_fraction`, and for the `attention` family `speedup`
//! (unfused time / this row's) and `peak_mem_mb` (allocator peak on Xpu, heap peak on Cpu, above
//! what was in use before). Peaks are measured in the same run: memory bandwidth by a large
//! copy on each device, and the CPU's FMA rate by a register-only FMA loop. With `XPU_PROFILE=1`
//! each Xpu row also gets `kernels`: the GPU time per call of its pipelines (timestamp queries;
//! each batch then waits for the GPU, so the row's own timing is not comparable). Rows that ran
//! autotuned kernels show the candidates chosen (`candidates`: `family=candidate` pairs), and
//! `--report` ends with the autotuner's report: every problem's candidates and their times.
//! `XPU_AUTOTUNE=off` runs the static rules (compare the two).

use std::cell::RefCell;
use std::collections::VecDeque;
use std::time::Instant;

use xpu::{DType, Device, Tensor};

mod attention;
mod families;

use attention::attention;
use families::{conv, elementwise, ffn, matmul, reduce};

/// A benchmarked closure producing a tensor.
type Op<'a> = Box<dyn Fn() -> xpu::Result<Tensor> + 'a>;

struct Row {
    op: String,
    variant: String,
    device: Device,
    dtype: DType,
    shape: Vec<usize>,
    median_ms: f64,
    gflops: Option<f64>,
    gbps: Option<f64>,
    peak_fraction: Option<f64>,
    speedup: Option<f64>,
    peak_mem_mb: Option<f64>,
    /// Per-call GPU time of the row's pipelines (`XPU_PROFILE=1` only).
    kernels: Option<String>,
    /// The autotuner's choices in one timed call: `family=candidate` pairs.
    chosen: Option<String>,
}

thread_local! {
    /// Kernel profiles of the timings not yet given to a row, oldest first (rows are built in
    /// the order their timings ran).
    static PROFILES: RefCell<VecDeque<Option<String>>> = const { RefCell::new(VecDeque::new()) };
    /// The autotuner's choices of the timings not yet given to a row, oldest first.
    static CHOICES: RefCell<VecDeque<Option<String>>> = const { RefCell::new(VecDeque::new()) };
}

/// The choices of the oldest timing no row has taken yet.
fn next_choice() -> Option<String> {
    CHOICES.with(|p| p.borrow_mut().pop_front()).flatten()
}

/// The profile of the oldest timing no row has taken yet.
fn next_profile() -> Option<String> {
    PROFILES.with(|p| p.borrow_mut().pop_front()).flatten()
}

/// The top pipelines of the Xpu profile since the last call, per call of the timed closure.
fn take_profile(calls: usize) -> Option<String> {
    let rows = xpu::xpu_profile().ok().flatten()?;
    let per = |ms: f64| ms / calls.max(1) as f64;
    let top: Vec<String> = rows
        .iter()
        .take(5)
        .map(|r| {
            format!(
                "{} {:.4} ms x{}",
                r.kernel,
                per(r.total_ms),
                r.dispatches / calls.max(1) as u64
            )
        })
        .collect();
    Some(top.join("; "))
}

// Row constructors take one argument per table column.
#[allow(clippy::too_many_arguments)]
impl Row {
    /// A row measured in GFLOP/s (`peak` in GFLOP/s when known).
    fn flops(
        op: &str,
        variant: &str,
        device: Device,
        dtype: DType,
        shape: Vec<usize>,
        ms: f64,
        flops: f64,
        peak: Option<f64>,
    ) -> Row {
        let gflops = flops / (ms / 1e3) / 1e9;
        Row {
            op: op.into(),
            variant: variant.into(),
            device,
            dtype,
            shape,
            median_ms: ms,
            gflops: Some(gflops),
            gbps: None,
            peak_fraction: peak.map(|p| gflops / p),
            speedup: None,
            peak_mem_mb: None,
            kernels: next_profile(),
            chosen: next_choice(),
        }
    }

    /// A row measured in GB/s against the device's copy bandwidth.
    fn bytes(
        op: &str,
        variant: &str,
        device: Device,
        dtype: DType,
        shape: Vec<usize>,
        ms: f64,
        bytes: f64,
        peak: f64,
    ) -> Row {
        let gbps = bytes / (ms / 1e3) / 1e9;
        Row {
            op: op.into(),
            variant: variant.into(),
            device,
            dtype,
            shape,
            median_ms: ms,
            gflops: None,
            gbps: Some(gbps),
            peak_fraction: Some(gbps / peak),
            speedup: None,
            peak_mem_mb: None,
            kernels: next_profile(),
            chosen: next_choice(),
        }
    }
}

struct Opts {
    families: Vec<String>,
    devices: Vec<Device>,
    dtypes: Vec<DType>,
    json: bool,
    quick: bool,
    /// `--report`: print the autotuner's report at the end.
    report: bool,
    /// `--shape MxKxN` (repeatable): the matmul family runs only these products, without the
    /// FMA tile forms (for sweeps such as `run_gpu.sh tiles`).
    shapes: Vec<(usize, usize, usize)>,
}

fn parse() -> Result<Opts, String> {
    let mut o = Opts {
        families: vec![],
        devices: vec![],
        dtypes: vec![],
        json: false,
        quick: false,
        report: false,
        shapes: vec![],
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--json" => o.json = true,
            "--quick" => o.quick = true,
            "--report" => o.report = true,
            "--shape" => o.shapes.push(
                args.next()
                    .and_then(|s| parse_shape(&s))
                    .ok_or("--shape takes MxKxN, e.g. 4096x4096x4096")?,
            ),
            "--device" => o.devices.push(
                args.next()
                    .and_then(|d| Device::parse(&d))
                    .ok_or("--device takes cpu or xpu")?,
            ),
            "--dtype" => o.dtypes.push(
                args.next()
                    .and_then(|d| DType::parse(&d))
                    .ok_or("--dtype takes f32, f16 or bf16")?,
            ),
            "elementwise" | "reduce" | "matmul" | "conv" | "ffn" | "attention" => {
                o.families.push(a)
            }
            other => {
                return Err(format!(
                    "unknown argument {other:?}; families: elementwise reduce matmul conv ffn attention"
                ))
            }
        }
    }
    if o.families.is_empty() {
        o.families = vec![
            "elementwise".into(),
            "reduce".into(),
            "matmul".into(),
            "conv".into(),
            "ffn".into(),
            "attention".into(),
        ];
    }
    if o.devices.is_empty() {
        o.devices.push(Device::Cpu);
        if xpu::xpu_available() {
            o.devices.push(Device::Xpu);
        }
    }
    if o.dtypes.is_empty() {
        o.dtypes = vec![DType::F32];
    }
    Ok(o)
}

/// `MxKxN` as three sizes.
fn parse_shape(text: &str) -> Option<(usize, usize, usize)> {
    let v: Vec<usize> = text
        .split('x')
        .map(|d| d.parse().ok())
        .collect::<Option<_>>()?;
    match v[..] {
        [m, k, n] if m * k * n > 0 => Some((m, k, n)),
        _ => None,
    }
}

/// Median milliseconds per call of `f` (GPU work is synchronised inside each sample).
fn time(
    device: Device,
    quick: bool,
    mut f: impl FnMut() -> xpu::Result<Tensor>,
) -> xpu::Result<f64> {
    let sync = |t: Tensor| -> xpu::Result<()> {
        if device == Device::Xpu {
            drop(t);
            xpu::synchronize()?;
        }
        Ok(())
    };
    sync(f()?)?; // warm-up: pipelines compiled, buffers cached, kernels tuned
    let start = Instant::now();
    let (out, chosen) = xpu::autotune::trace(&mut f);
    sync(out?)?;
    let once = start.elapsed().as_secs_f64();
    let mut pairs: Vec<String> = chosen
        .iter()
        .map(|c| format!("{}={}", c.op, c.candidate))
        .collect();
    pairs.dedup();
    CHOICES.with(|c| {
        c.borrow_mut()
            .push_back((!pairs.is_empty()).then(|| pairs.join(" ")))
    });
    let iters = ((0.05 / once.max(1e-6)) as usize).clamp(1, 100);
    let samples = if quick { 3 } else { 7 };
    if device == Device::Xpu {
        take_profile(1); // drops the warm-up's profile
    }
    let mut times = Vec::with_capacity(samples);
    for _ in 0..samples {
        let start = Instant::now();
        let mut last = None;
        for _ in 0..iters {
            last = Some(f()?);
        }
        if let Some(t) = last {
            sync(t)?;
        }
        times.push(start.elapsed().as_secs_f64() * 1e3 / iters as f64);
    }
    times.sort_by(|a, b| a.total_cmp(b));
    let profile = if device == Device::Xpu {
        take_profile(samples * iters)
    } else {
        None
    };
    PROFILES.with(|p| p.borrow_mut().push_back(profile));
    Ok(times[times.len() / 2])
}

/// Copy bandwidth of a device in GB/s (bytes read + written), the reference for `gbps` rows:
/// on the Xpu the faster of a buffer copy and an elementwise kernel.
fn copy_peak(device: Device, quick: bool) -> xpu::Result<f64> {
    let n = 1 << 24;
    let x = Tensor::zeros(&[n], DType::F32, device)?;
    if device == Device::Cpu {
        // One copy per core over halves of the buffers, after a first touch of every page.
        let threads = std::thread::available_parallelism().map_or(1, |t| t.get());
        let src = vec![1.0f32; n];
        let mut dst = vec![0.0f32; n];
        let part = n.div_ceil(threads);
        let copy = |dst: &mut [f32]| {
            std::thread::scope(|s| {
                for (d, c) in dst.chunks_mut(part).zip(src.chunks(part)) {
                    s.spawn(move || d.copy_from_slice(c));
                }
            })
        };
        copy(&mut dst);
        let start = Instant::now();
        for _ in 0..5 {
            copy(&mut dst);
            std::hint::black_box(&mut dst);
        }
        let s = start.elapsed().as_secs_f64() / 5.0;
        return Ok(2.0 * 4.0 * n as f64 / s / 1e9);
    }
    // The faster of a device-to-device buffer copy and an elementwise kernel (read + write of
    // every element): on an H200 the buffer copy ran at about 0.8 TB/s while kernels moved 2.1
    // TB/s, which put kernel rows above "peak".
    let copy_ms = time(device, quick, || x.copy())?;
    let kernel_ms = time(device, quick, || x.neg())?;
    PROFILES.with(|p| p.borrow_mut().clear()); // no rows for these timings
    Ok(2.0 * 4.0 * n as f64 / (copy_ms.min(kernel_ms) / 1e3) / 1e9)
}

/// Single-precision FMA peak of this CPU (all cores), from a register-only AVX-512 FMA loop.
fn cpu_fma_peak() -> f64 {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    xpu::cpu::gemm::measure_fma_peak_gflops(threads)
}

/// The peak a CPU row of `family` and `dtype` is measured against: bf16 products (matmul,
/// ffn) and attention run on the bf16 method in use (AMX tiles, `vdpbf16ps`, or widened onto
/// the FMA pipes); bf16 convolutions are measured against the AMX peak where AMX is in use and
/// against the FMA peak otherwise (their rows count direct-convolution flops, and the
/// implicit-GEMM rows widen to f32); every other dtype against the FMA peak.
fn cpu_dtype_peak(family: &str, dtype: DType, fma: Option<f64>, dp: f64, amx: f64) -> Option<f64> {
    use xpu::cpu::gemm::Bf16Method;
    let products = family != "conv";
    match (dtype, xpu::cpu::gemm::bf16_method()) {
        (DType::BF16, Bf16Method::Amx) if amx > 0.0 => Some(amx),
        (DType::BF16, Bf16Method::DotProduct) if products && dp > 0.0 => Some(dp),
        _ => fma,
    }
}

fn main() {
    let o = match parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("bench: {e}");
            std::process::exit(2);
        }
    };
    if let Err(e) = run(&o) {
        eprintln!("bench: {e}");
        std::process::exit(1);
    }
}

fn run(o: &Opts) -> xpu::Result<()> {
    let mut rows = Vec::new();
    let fma_peak = if o
        .families
        .iter()
        .any(|f| f == "matmul" || f == "conv" || f == "ffn" || f == "attention")
    {
        Some(cpu_fma_peak())
    } else {
        None
    };
    for &device in &o.devices {
        let peak_bw = copy_peak(device, o.quick)?;
        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
        // The bf16 peaks are measured only when a CPU row needs them.
        let (dp_peak, amx_peak) = match (device, fma_peak) {
            (Device::Cpu, Some(_)) => (
                xpu::cpu::gemm::measure_bf16_dp_peak_gflops(threads),
                xpu::cpu::gemm::measure_amx_peak_gflops(threads),
            ),
            _ => (0.0, 0.0),
        };
        if !o.json {
            println!(
                "# {device}: copy bandwidth {peak_bw:.1} GB/s{}",
                match (device, fma_peak) {
                    (Device::Cpu, Some(p)) => format!(
                        ", f32 FMA peak {p:.1} GFLOP/s, bf16 dot-product peak {dp_peak:.1} \
                         GFLOP/s, AMX bf16 peak {amx_peak:.1} GFLOP/s{}; CPU f32 GEMM path: \
                         {:?}, SIMD level: {:?}, bf16 GEMM path: {} (bf16 rows: % of that \
                         method's peak)",
                        xpu::cpu::gemm::amx_unavailable_reason()
                            .map_or(String::new(), |why| format!(" (no AMX: {why})")),
                        xpu::cpu::gemm::gemm_path(DType::F32),
                        xpu::cpu::simd_level(),
                        xpu::cpu::gemm::bf16_method()
                    ),
                    _ => String::new(),
                }
            );
        }
        for &dtype in &o.dtypes {
            for fam in &o.families {
                let flop_peak = match device {
                    Device::Cpu => cpu_dtype_peak(fam, dtype, fma_peak, dp_peak, amx_peak),
                    _ => None,
                };
                match fam.as_str() {
                    "elementwise" => elementwise(o, device, dtype, peak_bw, &mut rows)?,
                    "reduce" => reduce(o, device, dtype, peak_bw, &mut rows)?,
                    "conv" => conv(o, device, dtype, flop_peak, &mut rows)?,
                    "ffn" => ffn(o, device, dtype, flop_peak, &mut rows)?,
                    "attention" => attention(o, device, dtype, flop_peak, &mut rows)?,
                    _ => matmul(o, device, dtype, flop_peak, &mut rows)?,
                }
            }
        }
    }
    for r in &rows {
        let num = |v: Option<f64>| v.map_or("null".to_string(), |x| format!("{x:.4}"));
        if o.json {
            println!(
                "{{\"op\":\"{}\",\"variant\":\"{}\",\"device\":\"{}\",\"dtype\":\"{}\",\"shape\":{:?},\"median_ms\":{:.4},\"gflops\":{},\"gbps\":{},\"peak_fraction\":{},\"speedup\":{},\"peak_mem_mb\":{}{}{}}}",
                r.op, r.variant, r.device, r.dtype, r.shape, r.median_ms, num(r.gflops), num(r.gbps), num(r.peak_fraction), num(r.speedup), num(r.peak_mem_mb),
                r.kernels.as_ref().map_or(String::new(), |k| format!(",\"kernels\":{k:?}")),
                r.chosen.as_ref().map_or(String::new(), |k| format!(",\"candidates\":{k:?}")),
            );
        } else {
            let rate = r
                .gflops
                .map(|g| format!("{g:9.1} GFLOP/s"))
                .or(r.gbps.map(|g| format!("{g:9.1} GB/s   ")))
                .unwrap_or_default();
            let frac = r
                .peak_fraction
                .map_or(String::new(), |f| format!("{:5.1}% of peak", f * 100.0));
            let extra = match (r.speedup, r.peak_mem_mb) {
                (None, None) => String::new(),
                (s, m) => format!(
                    "  {:>6} speedup  {:>9} MB peak",
                    s.map_or("-".into(), |s| format!("{s:.2}x")),
                    m.map_or("-".into(), |m| format!("{m:.1}"))
                ),
            };
            println!(
                "{:<20} {:<14} {:<4} {:<5} {:<22} {:>10.3} ms {rate} {frac}{extra}",
                r.op,
                r.variant,
                r.device.to_string(),
                r.dtype.as_str(),
                format!("{:?}", r.shape),
                r.median_ms
            );
            if let Some(k) = &r.kernels {
                println!("    kernels per call: {k}");
            }
            if let Some(c) = &r.chosen {
                println!("    autotuned: {c}");
            }
        }
    }
    if o.report {
        println!(
            "# autotuner: {:.2} s measuring",
            xpu::autotune::tuning_seconds()
        );
        for r in xpu::autotune_report() {
            println!("{r}");
        }
    }
    Ok(())
}
