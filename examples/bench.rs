//! The user's benchmark tool.
//!
//! `cargo run --release --example bench -- [FAMILY...] [--device cpu|xpu] [--dtype f32|f16|bf16] [--json] [--quick]`
//!
//! FAMILY: `elementwise`, `reduce`, `matmul`, `conv`, `ffn`, `attention` (none means all). Prints a
//! table, or one JSON object per line with `op`, `variant`, `device`, `dtype`, `shape`,
//! `median_ms`, `gflops` or `gbps`, `peak_fraction`, and for the `attention` family `speedup`
//! (unfused time / this row's) and `peak_mem_mb` (allocator peak on Xpu, heap peak on Cpu, above
//! what was in use before). Peaks are measured in the same run: memory bandwidth by a large
//! copy on each device, and the CPU's FMA rate by a register-only FMA loop.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use xpu::{DType, Device, Tensor};

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
        }
    }
}

struct Opts {
    families: Vec<String>,
    devices: Vec<Device>,
    dtypes: Vec<DType>,
    json: bool,
    quick: bool,
}

fn parse() -> Result<Opts, String> {
    let mut o = Opts {
        families: vec![],
        devices: vec![],
        dtypes: vec![],
        json: false,
        quick: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--json" => o.json = true,
            "--quick" => o.quick = true,
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
    sync(f()?)?; // warm-up: pipelines compiled, buffers cached
    let start = Instant::now();
    sync(f()?)?;
    let once = start.elapsed().as_secs_f64();
    let iters = ((0.05 / once.max(1e-6)) as usize).clamp(1, 100);
    let samples = if quick { 3 } else { 7 };
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
    Ok(times[times.len() / 2])
}

/// Copy bandwidth of a device in GB/s (bytes read + written), the reference for `gbps` rows.
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
    // Device-to-device buffer copy.
    let ms = time(device, quick, || x.copy())?;
    Ok(2.0 * 4.0 * n as f64 / (ms / 1e3) / 1e9)
}

fn elementwise(
    o: &Opts,
    device: Device,
    dtype: DType,
    peak_bw: f64,
    rows: &mut Vec<Row>,
) -> xpu::Result<()> {
    let sizes: &[usize] = if o.quick {
        &[1 << 20]
    } else {
        &[1 << 20, 1 << 24]
    };
    for &n in sizes {
        let x = Tensor::randn(&[n], dtype, device, 1)?;
        let y = Tensor::randn(&[n], dtype, device, 2)?;
        let bias = Tensor::randn(&[1024], dtype, device, 3)?;
        let x2 = x.reshape(&[n / 1024, 1024])?;
        let b = dtype.size_in_bytes() as f64 * n as f64;
        let cases: Vec<(&str, f64, Op)> = vec![
            ("exp", 2.0 * b, Box::new(|| x.exp())),
            ("gelu", 2.0 * b, Box::new(|| x.gelu())),
            ("add", 3.0 * b, Box::new(|| x.add(&y))),
            ("add_bias_broadcast", 2.0 * b, Box::new(|| x2.add(&bias))),
            ("affine", 2.0 * b, Box::new(|| x.affine(2.0, 1.0))),
            ("transpose_copy", 2.0 * b, Box::new(|| x2.t()?.contiguous())),
        ];
        for (name, bytes, f) in cases {
            let ms = time(device, o.quick, f)?;
            rows.push(Row::bytes(
                name,
                "contiguous",
                device,
                dtype,
                vec![n],
                ms,
                bytes,
                peak_bw,
            ));
        }
    }
    Ok(())
}

fn reduce(
    o: &Opts,
    device: Device,
    dtype: DType,
    peak_bw: f64,
    rows: &mut Vec<Row>,
) -> xpu::Result<()> {
    let (r, c) = if o.quick { (1024, 1024) } else { (4096, 4096) };
    let x = Tensor::randn(&[r, c], dtype, device, 5)?;
    let b = (dtype.size_in_bytes() * r * c) as f64;
    let cases: Vec<(&str, &str, f64, Op)> = vec![
        ("sum", "last_dim", b, Box::new(|| x.sum(-1, false))),
        ("sum", "first_dim", b, Box::new(|| x.sum(0, false))),
        ("max", "last_dim", b, Box::new(|| x.max(-1, false))),
        ("argmax", "last_dim", b, Box::new(|| x.argmax(-1, false))),
        ("softmax", "last_dim", 2.0 * b, Box::new(|| x.softmax(-1))),
    ];
    for (name, variant, bytes, f) in cases {
        let ms = time(device, o.quick, f)?;
        rows.push(Row::bytes(
            name,
            variant,
            device,
            dtype,
            vec![r, c],
            ms,
            bytes,
            peak_bw,
        ));
    }
    Ok(())
}

fn matmul(
    o: &Opts,
    device: Device,
    dtype: DType,
    peak_flops: Option<f64>,
    rows: &mut Vec<Row>,
) -> xpu::Result<()> {
    let shapes: Vec<(usize, usize, usize)> = if o.quick {
        vec![(256, 256, 256), (512, 512, 512)]
    } else {
        vec![
            (256, 256, 256),
            (512, 512, 512),
            (1024, 1024, 1024),
            (2048, 2048, 2048),
            (4096, 4096, 4096),
            (8192, 320, 320),
            (8192, 320, 1280),
            (8192, 640, 640),
            (154, 768, 320),
        ]
    };
    for (m, k, n) in shapes {
        let a = Tensor::randn(&[m, k], dtype, device, 1)?;
        let b = Tensor::randn(&[k, n], dtype, device, 2)?;
        let ms = time(device, o.quick, || a.matmul(&b))?;
        rows.push(Row::flops(
            "matmul",
            "default",
            device,
            dtype,
            vec![m, k, n],
            ms,
            2.0 * (m * n * k) as f64,
            peak_flops,
        ));
        // The cooperative-matrix kernel where the adapter has one (forced: Auto does not pick it).
        let coop = xpu::xpu_features().is_ok_and(|f| {
            f.subgroup && (f.coop_f32_8x8 || (dtype == DType::F16 && f.coop_f16_16x16))
        });
        if device == Device::Xpu && coop {
            use xpu::MatmulKernel::CoopMatrix;
            match time(device, o.quick, || {
                a.matmul_fused(&b).kernel(CoopMatrix).run()
            }) {
                Ok(ms) => rows.push(Row::flops(
                    "matmul",
                    "coop_matrix",
                    device,
                    dtype,
                    vec![m, k, n],
                    ms,
                    2.0 * (m * n * k) as f64,
                    peak_flops,
                )),
                Err(e) => eprintln!("bench: coop_matrix {m}x{k}x{n} {dtype}: {e}"),
            }
        }
    }
    Ok(())
}

/// SD 1.5's 3x3 convolutions (batch 2, padding 1): 320 ch at 64x64, 640 at 32x32, 1280 at 16x16.
/// Variants: `nchw` and `channels_last` are `conv2d` calls (the Cpu packs the weights per call;
/// NCHW also converts to NHWC and back), `layer_cl` is `nn::Conv2d` (weights prepacked once) on a
/// channels-last input, `layer_cl_fused` adds SiLU and a residual in the same pass.
fn conv(
    o: &Opts,
    device: Device,
    dtype: DType,
    peak_flops: Option<f64>,
    rows: &mut Vec<Row>,
) -> xpu::Result<()> {
    use xpu::MemoryFormat::ChannelsLast;
    let shapes: Vec<(usize, usize)> = if o.quick {
        vec![(64, 16)]
    } else {
        vec![(320, 64), (640, 32), (1280, 16)]
    };
    let p = xpu::Conv2dParams {
        padding: (1, 1),
        ..Default::default()
    };
    for (c, hw) in shapes {
        let x = Tensor::randn(&[2, c, hw, hw], dtype, device, 1)?;
        let w = Tensor::randn(&[c, c, 3, 3], dtype, device, 2)?.mul_scalar(0.02)?;
        let b = Tensor::randn(&[c], dtype, device, 3)?;
        let xcl = x.to_memory_format(ChannelsLast)?;
        let res =
            Tensor::randn(&[2, c, hw, hw], dtype, device, 4)?.to_memory_format(ChannelsLast)?;
        let layer = xpu::nn::Conv2d::new(w.clone(), Some(b.clone()), p)?;
        let silu = xpu::Activation::Silu;
        let variants: [(&str, Op); 4] = [
            ("nchw", Box::new(|| x.conv2d(&w, Some(&b), p))),
            ("channels_last", Box::new(|| xcl.conv2d(&w, Some(&b), p))),
            ("layer_cl", Box::new(|| layer.forward(&xcl))),
            (
                "layer_cl_fused",
                Box::new(|| layer.forward_fused(&xcl, Some(&res), silu)),
            ),
        ];
        for (variant, f) in variants {
            let ms = time(device, o.quick, f)?;
            rows.push(Row::flops(
                "conv2d_3x3",
                variant,
                device,
                dtype,
                vec![2, c, hw, hw],
                ms,
                2.0 * (2 * c * c * 9 * hw * hw) as f64,
                peak_flops,
            ));
        }
    }
    Ok(())
}

/// SD 1.5's GEGLU feed-forward at 2×4096 tokens, dim 320 (inner 1280), fused and unfused.
fn ffn(
    o: &Opts,
    device: Device,
    dtype: DType,
    peak_flops: Option<f64>,
    rows: &mut Vec<Row>,
) -> xpu::Result<()> {
    let (tokens, dim) = if o.quick {
        (2 * 256, 64)
    } else {
        (2 * 4096, 320)
    };
    let inner = 4 * dim;
    let x = Tensor::randn(&[tokens, dim], dtype, device, 1)?;
    let w1 = Tensor::randn(&[2 * inner, dim], dtype, device, 2)?.mul_scalar(0.05)?;
    let b1 = Tensor::randn(&[2 * inner], dtype, device, 3)?;
    let w2 = Tensor::randn(&[dim, inner], dtype, device, 4)?.mul_scalar(0.05)?;
    let b2 = Tensor::randn(&[dim], dtype, device, 5)?;
    let flops = 2.0 * (tokens * dim * 2 * inner + tokens * inner * dim) as f64;
    let fused = time(device, o.quick, || {
        x.ffn_geglu(&w1, Some(&b1), &w2, Some(&b2), Some(&x))
    })?;
    let unfused = time(device, o.quick, || {
        x.ffn_geglu_unfused(&w1, Some(&b1), &w2, Some(&b2), Some(&x))
    })?;
    for (variant, ms) in [("fused", fused), ("unfused", unfused)] {
        rows.push(Row::flops(
            "ffn_geglu",
            variant,
            device,
            dtype,
            vec![tokens, dim, inner],
            ms,
            flops,
            peak_flops,
        ));
    }
    Ok(())
}

/// Heap bytes in use and their high-water mark, kept by [`CountingAlloc`] (the Cpu figure of
/// the `peak_mem_mb` column).
static HEAP_NOW: AtomicUsize = AtomicUsize::new(0);
static HEAP_PEAK: AtomicUsize = AtomicUsize::new(0);

/// The system allocator, counting live bytes (two relaxed atomics per call).
struct CountingAlloc;

impl CountingAlloc {
    fn grew(by: usize) {
        let now = HEAP_NOW.fetch_add(by, Ordering::Relaxed) + by;
        HEAP_PEAK.fetch_max(now, Ordering::Relaxed);
    }
}

// SAFETY: every call forwards to `System` unchanged; only counters are updated.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc(layout);
        if !p.is_null() {
            Self::grew(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc_zeroed(layout);
        if !p.is_null() {
            Self::grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        System.dealloc(ptr, layout);
        HEAP_NOW.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = System.realloc(ptr, layout, new_size);
        if !p.is_null() {
            HEAP_NOW.fetch_sub(layout.size(), Ordering::Relaxed);
            Self::grew(new_size);
        }
        p
    }
}

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

/// Peak memory in MB that `f` needs above what is in use when it starts: the Xpu allocator's
/// peak, or on Cpu the heap's (every allocation of the process, counted by [`CountingAlloc`]).
fn peak_mem_mb(device: Device, f: impl Fn() -> xpu::Result<Tensor>) -> xpu::Result<f64> {
    if device == Device::Xpu {
        xpu::synchronize()?;
        xpu::reset_peak_memory_stats()?;
        let before = xpu::memory_stats(device)?.allocated;
        let t = f()?;
        xpu::synchronize()?;
        drop(t);
        let peak = xpu::memory_stats(device)?.peak_allocated;
        return Ok(peak.saturating_sub(before) as f64 / 1e6);
    }
    xpu::empty_cache()?; // recycled CPU buffers would hide the op's own allocations
    let before = HEAP_NOW.load(Ordering::Relaxed);
    HEAP_PEAK.store(before, Ordering::Relaxed);
    drop(f()?);
    Ok(HEAP_PEAK.load(Ordering::Relaxed).saturating_sub(before) as f64 / 1e6)
}

/// SD 1.5's largest attention: batch 2, 8 heads, 4096 tokens, head dim 40; self-attention and
/// cross-attention to 77 text tokens, fused and unfused (materialised scores).
fn attention(
    o: &Opts,
    device: Device,
    dtype: DType,
    peak_flops: Option<f64>,
    rows: &mut Vec<Row>,
) -> xpu::Result<()> {
    // A software Vulkan driver (lavapipe) would take minutes at SD's size; a hardware GPU runs it.
    let software_xpu =
        device == Device::Xpu && xpu::xpu_adapter().map_or(true, |a| a.device_type == "Cpu");
    let (b, h, l, d) = if o.quick || software_xpu {
        (1, 2, 512, 40)
    } else {
        (2, 8, 4096, 40)
    };
    for (name, lk) in [("attention_self", l), ("attention_cross", 77)] {
        let q = Tensor::randn(&[b, h, l, d], dtype, device, 1)?;
        let k = Tensor::randn(&[b, h, lk, d], dtype, device, 2)?;
        let v = Tensor::randn(&[b, h, lk, d], dtype, device, 3)?;
        let flops = 2.0 * (b * h * l * lk * 2 * d) as f64;
        let fused = || q.scaled_dot_product_attention(&k, &v, None, None);
        let unfused = || q.scaled_dot_product_attention_unfused(&k, &v, None, None);
        let (fused_ms, unfused_ms) = (
            time(device, o.quick, fused)?,
            time(device, o.quick, unfused)?,
        );
        let (fused_mem, unfused_mem) = (peak_mem_mb(device, fused)?, peak_mem_mb(device, unfused)?);
        for (variant, ms, mem) in [
            ("fused", fused_ms, fused_mem),
            ("unfused", unfused_ms, unfused_mem),
        ] {
            let mut row = Row::flops(
                name,
                variant,
                device,
                dtype,
                vec![b, h, l, lk, d],
                ms,
                flops,
                peak_flops,
            );
            row.speedup = Some(unfused_ms / ms);
            row.peak_mem_mb = Some(mem);
            rows.push(row);
        }
    }
    Ok(())
}

/// Single-precision FMA peak of this CPU (all cores), from a register-only AVX-512 FMA loop.
fn cpu_fma_peak() -> f64 {
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    xpu::cpu::gemm::measure_fma_peak_gflops(threads)
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
        if !o.json {
            println!(
                "# {device}: copy bandwidth {peak_bw:.1} GB/s{}",
                match (device, fma_peak) {
                    (Device::Cpu, Some(p)) => {
                        let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
                        format!(
                            ", f32 FMA peak {p:.1} GFLOP/s, bf16 dot-product peak {:.1} GFLOP/s, \
                             AMX bf16 peak {:.1} GFLOP/s{}; CPU f32 GEMM path: {:?}, SIMD level: \
                             {:?}, bf16 GEMM path: {}",
                            xpu::cpu::gemm::measure_bf16_dp_peak_gflops(threads),
                            xpu::cpu::gemm::measure_amx_peak_gflops(threads),
                            xpu::cpu::gemm::amx_unavailable_reason()
                                .map_or(String::new(), |why| format!(" (no AMX: {why})")),
                            xpu::cpu::gemm::gemm_path(DType::F32),
                            xpu::cpu::simd_level(),
                            xpu::cpu::gemm::bf16_method()
                        )
                    }
                    _ => String::new(),
                }
            );
        }
        let flop_peak = if device == Device::Cpu {
            fma_peak
        } else {
            None
        };
        for &dtype in &o.dtypes {
            for fam in &o.families {
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
                "{{\"op\":\"{}\",\"variant\":\"{}\",\"device\":\"{}\",\"dtype\":\"{}\",\"shape\":{:?},\"median_ms\":{:.4},\"gflops\":{},\"gbps\":{},\"peak_fraction\":{},\"speedup\":{},\"peak_mem_mb\":{}}}",
                r.op, r.variant, r.device, r.dtype, r.shape, r.median_ms, num(r.gflops), num(r.gbps), num(r.peak_fraction), num(r.speedup), num(r.peak_mem_mb)
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
                "{:<20} {:<12} {:<4} {:<5} {:<22} {:>10.3} ms {rate} {frac}{extra}",
                r.op,
                r.variant,
                r.device.to_string(),
                r.dtype.as_str(),
                format!("{:?}", r.shape),
                r.median_ms
            );
        }
    }
    Ok(())
}
