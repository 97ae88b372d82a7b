//! The example's timings and their report: each phase's wall time (tokenize + encode, every
//! denoising step and their median, VAE decode and the conversion to 8-bit, the whole run from
//! prompt to PNG files, model loading), the device, the dtype and the peak memory (the Xpu
//! allocator's peak, or the process's peak resident memory on the Cpu), and the time the
//! autotuner spent measuring kernels (a first run; later runs read its cache), as text and as
//! one JSON line.

use xpu::models::pipeline::Progress;
use xpu::{DType, Device};

/// Wall times of one run, in seconds.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Timings {
    /// Tokenizing and encoding the prompt(s).
    pub encode_s: f64,
    /// Each denoising step (UNet evaluation; PNDM runs one more than `--steps`).
    pub steps_s: Vec<f64>,
    /// Decoding the latents and converting them to 8-bit.
    pub decode_s: f64,
    /// From the prompt to the PNG files (model loading excluded).
    pub total_s: f64,
    /// Loading (or building) the models.
    pub load_s: f64,
}

impl Timings {
    /// Takes the time a progress event carries.
    pub fn record(&mut self, p: &Progress) {
        match p {
            Progress::Encoded { seconds } => self.encode_s = *seconds,
            Progress::Step { seconds, .. } => self.steps_s.push(*seconds),
            Progress::Decoded { seconds } => self.decode_s = *seconds,
            Progress::Warning(_) | Progress::Started { .. } => {}
        }
    }

    /// The median step time (the upper median for an even count; 0 without steps).
    pub fn step_median_s(&self) -> f64 {
        let mut s = self.steps_s.clone();
        s.sort_by(f64::total_cmp);
        s.get(s.len() / 2).copied().unwrap_or(0.0)
    }
}

/// The device as the report names it.
pub fn device_name(device: Device) -> String {
    match device {
        Device::Xpu => match xpu::xpu_adapter() {
            Ok(a) => format!("xpu ({})", a.name),
            Err(e) => format!("xpu ({e})"),
        },
        Device::Cpu => format!("cpu ({} threads)", rayon::current_num_threads()),
    }
}

/// Peak memory in bytes: the Xpu allocator's peak since the last reset, or the process's
/// peak resident set (Linux `VmHWM`) on the Cpu; `None` where unknown.
pub fn peak_bytes(device: Device) -> Option<u64> {
    match device {
        Device::Xpu => xpu::memory_stats(Device::Xpu)
            .ok()
            .map(|s| s.peak_allocated),
        Device::Cpu => std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("VmHWM:"))
                    .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
                    .map(|kb| kb * 1024)
            }),
    }
}

/// The report of one run.
pub struct Summary {
    timings: Timings,
    device: String,
    dtype: DType,
    peak: Option<u64>,
    peak_what: &'static str,
    /// Seconds the autotuner measured, and the problems it measured.
    tuning: (f64, usize),
}

/// The autotuner's measuring time in this process and the number of problems it measured.
pub fn tuning() -> (f64, usize) {
    let measured = xpu::autotune_report()
        .iter()
        .filter(|r| r.origin == xpu::autotune::Origin::Measured)
        .count();
    (xpu::autotune::tuning_seconds(), measured)
}

impl Summary {
    /// The summary of `timings` on `device` in `dtype` (reads the peak memory now).
    pub fn new(timings: &Timings, device: Device, dtype: DType) -> Summary {
        Summary {
            timings: timings.clone(),
            device: device_name(device),
            dtype,
            peak: peak_bytes(device),
            peak_what: match device {
                Device::Xpu => "allocator peak",
                Device::Cpu => "process peak RSS",
            },
            tuning: tuning(),
        }
    }

    /// Human-readable lines.
    pub fn text(&self) -> String {
        let t = &self.timings;
        let peak = self.peak.map_or("unknown".into(), |b| {
            format!(
                "{:.1} MiB ({})",
                b as f64 / (1u64 << 20) as f64,
                self.peak_what
            )
        });
        format!(
            "encode {:.3} s | {} steps, median {:.3} s/step | decode {:.3} s | total {:.2} s \
             (load {:.1} s)\ndevice {}, dtype {}, peak memory {peak}{}",
            t.encode_s,
            t.steps_s.len(),
            t.step_median_s(),
            t.decode_s,
            t.total_s,
            t.load_s,
            self.device,
            self.dtype,
            match self.tuning {
                (_, 0) => String::new(),
                (s, n) => format!(
                    "\nautotune: measured {n} kernel problems in {s:.2} s (included above; \
                     later runs read the cache)"
                ),
            }
        )
    }

    /// One JSON line: `encode_s`, `step_median_s`, `steps`, `decode_s`, `total_s`, `load_s`,
    /// `peak_bytes` (null where unknown), `device`, `dtype`, `tune_s` and `tuned_problems`.
    pub fn json(&self) -> String {
        let t = &self.timings;
        serde_json::json!({
            "encode_s": t.encode_s,
            "step_median_s": t.step_median_s(),
            "steps": t.steps_s.len(),
            "decode_s": t.decode_s,
            "total_s": t.total_s,
            "load_s": t.load_s,
            "peak_bytes": self.peak,
            "device": self.device,
            "dtype": self.dtype.to_string(),
            "tune_s": self.tuning.0,
            "tuned_problems": self.tuning.1,
        })
        .to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timings_and_json() {
        let mut t = Timings::default();
        t.record(&Progress::Encoded { seconds: 0.5 });
        for s in [3.0, 1.0, 2.0] {
            t.record(&Progress::Step {
                index: 0,
                steps: 3,
                timestep: 1.0,
                seconds: s,
            });
        }
        t.record(&Progress::Decoded { seconds: 0.25 });
        assert_eq!(t.step_median_s(), 2.0);
        let s = Summary::new(&t, Device::Cpu, DType::F32);
        let v: serde_json::Value = serde_json::from_str(&s.json()).unwrap();
        for key in [
            "encode_s",
            "step_median_s",
            "steps",
            "decode_s",
            "total_s",
            "load_s",
            "peak_bytes",
            "device",
            "dtype",
            "tune_s",
            "tuned_problems",
        ] {
            assert!(v.get(key).is_some(), "{key}");
        }
        assert_eq!(v["steps"], 3);
        assert_eq!(v["dtype"], "f32");
        assert!(s.text().contains("median 2.000 s/step"));
    }
}
