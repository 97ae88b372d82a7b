//! The example's checks before any model is loaded (output and input paths, the memory one
//! step needs) and after every step (finite latents).
//!
//! Invariants: every check that can run before loading runs before it, and each error names
//! the argument, the value and what is accepted; the latents file and its PNG preview are
//! always two different files.

use std::path::{Path, PathBuf};

use xpu::models::unet::{UNet2DConditionModel, UNetConfig};
use xpu::{DType, Device, Error, Result, Tensor};

use crate::{args, Args};

fn invalid(msg: String) -> Error {
    Error::invalid("sd_unet", msg)
}

/// Where run mode writes the latents: `--output`, else `sd_unet_latents.safetensors`.
pub fn latents_path(args: &Args) -> PathBuf {
    args.output
        .clone()
        .unwrap_or_else(|| PathBuf::from("sd_unet_latents.safetensors"))
}

/// The PNG preview beside the latents file `out` (its extension replaced by `png`).
pub fn preview_path(out: &Path) -> PathBuf {
    out.with_extension("png")
}

/// Checks every path argument before any work: inputs exist; outputs can be written, and the
/// latents and their preview are two files (`--output x.png` would be overwritten by its own
/// preview, so it is refused with the fix).
pub fn paths(a: &Args) -> Result<()> {
    if let Some(dir) = &a.unet {
        args::existing_folder("--unet", dir).map_err(invalid)?;
    }
    if let Some(file) = &a.scheduler_config {
        args::existing_file("--scheduler-config", file).map_err(invalid)?;
    }
    match &a.inputs {
        Some(inputs) => {
            args::existing_file("--inputs", inputs).map_err(invalid)?;
            if let Some(out) = &a.output {
                args::writable_file("--output", out).map_err(invalid)?;
                args::distinct(&[("--inputs", inputs), ("--output", out)]).map_err(invalid)?;
            }
        }
        None => {
            let out = latents_path(a);
            let preview = preview_path(&out);
            if args::normalised(&out) == args::normalised(&preview) {
                return Err(invalid(format!(
                    "--output {}: the latents are written there as safetensors and their PNG \
                     preview beside them with the extension .png, the same file; name the \
                     latents e.g. {}",
                    out.display(),
                    out.with_extension("safetensors").display()
                )));
            }
            args::writable_file("--output", &out).map_err(invalid)?;
            args::writable_file("the preview (--output with .png)", &preview).map_err(invalid)?;
            args::distinct(&[("--output", &out), ("the preview", &preview)]).map_err(invalid)?;
        }
    }
    Ok(())
}

/// Refuses, before the weights are loaded, a run whose weights plus one step of `batch`
/// samples of `latents` cannot fit `device` ([`xpu::memory_budget`]). Skipped when the batch
/// is unknown (parity inputs without a `sample`: the forward then reports it).
pub fn memory(
    config: &UNetConfig,
    dtype: DType,
    device: Device,
    batch: usize,
    latents: (usize, usize),
) -> Result<()> {
    if batch == 0 {
        return Ok(());
    }
    let params = UNet2DConditionModel::parameter_shapes(config)?;
    let elems: u64 = params
        .iter()
        .map(|(_, s)| s.iter().map(|&d| d as u64).product::<u64>())
        .sum();
    let weights = elems.saturating_mul(dtype.size_in_bytes() as u64);
    let step = config.forward_memory(batch, latents, dtype);
    let what = format!(
        "the UNet's {dtype} weights ({elems} parameters) and one step of {batch} sample(s) of \
         {}×{} latents",
        latents.0, latents.1
    );
    xpu::memory_budget(device)?.check(
        "sd_unet",
        &what,
        weights.saturating_add(step.total),
        step.largest,
    )
}

/// Stops the run when step `i` (timestep `t`) left latents that are not finite (a guidance or
/// a schedule that overflowed), naming the step, instead of writing NaN latents.
pub fn finite(latents: &Tensor, i: usize, t: f64) -> Result<()> {
    // A sum of magnitudes: NaN and infinity carry through a sum on every device.
    let total = latents
        .to_dtype(DType::F32)?
        .abs()?
        .flatten_all()?
        .sum(0, false)?
        .to(Device::Cpu)?
        .to_vec::<f32>()?;
    match total.first() {
        Some(s) if s.is_finite() => Ok(()),
        Some(s) => Err(invalid(format!(
            "step {i} (timestep {t}) left latents that are not finite (sum of magnitudes {s}); \
             nothing is written. A smaller --guidance keeps them finite"
        ))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn parse(list: &[&str]) -> std::result::Result<Args, String> {
        let mut argv = vec!["sd_unet"];
        argv.extend_from_slice(list);
        Args::try_parse_from(argv).map_err(|e| e.to_string())
    }

    fn scratch(name: &str) -> PathBuf {
        let dir =
            std::env::temp_dir().join(format!("xpu-sd-unet-checks-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn numbers_out_of_range_are_refused_with_the_range() {
        let cases: [(&[&str], &str); 9] = [
            (&["--steps", "-5"], "from 1 to 1000"),
            (&["--steps", "0"], "from 1 to 1000"),
            (&["--steps", "5000"], "from 1 to 1000"),
            (&["--height", "-512"], "a multiple of 8"),
            (&["--width", "100"], "a multiple of 8"),
            (&["--guidance", "1e300"], "a finite number from 0 to 100"),
            (&["--guidance", "-3"], "a finite number from 0 to 100"),
            (&["--guidance", "nan"], "a finite number from 0 to 100"),
            (&["--seed", "-1"], "from 0 to 18446744073709551615"),
        ];
        for (argv, want) in cases {
            let e = parse(argv).unwrap_err();
            assert!(e.contains(want), "{argv:?}: {e}");
        }
        let ok = parse(&[
            "--steps",
            "3",
            "--height",
            "64",
            "--width",
            "72",
            "--guidance",
            "0",
        ])
        .unwrap();
        assert_eq!(
            (ok.steps, ok.height, ok.width, ok.guidance),
            (Some(3), Some(64), Some(72), 0.0)
        );
    }

    #[test]
    fn a_png_output_is_refused_before_anything_runs() {
        let dir = scratch("png");
        let out = dir.join("x.png");
        let a = parse(&["--output", out.to_str().unwrap()]).unwrap();
        let e = paths(&a).unwrap_err().to_string();
        assert!(
            e.contains("the same file") && e.contains("x.safetensors"),
            "{e}"
        );
        assert!(!out.exists());
        // The usual spelling writes the latents where asked and the preview beside them.
        let good = dir.join("x.safetensors");
        let a = parse(&["--output", good.to_str().unwrap()]).unwrap();
        assert!(paths(&a).is_ok());
        assert_eq!(preview_path(&latents_path(&a)), dir.join("x.png"));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn unwritable_or_missing_paths_are_refused_before_anything_runs() {
        let dir = scratch("paths");
        std::fs::write(dir.join("file"), b"x").unwrap();
        let bad = |list: &[&str], want: &str| {
            let a = parse(list).unwrap();
            let e = paths(&a).unwrap_err().to_string();
            assert!(e.contains(want), "{list:?}: {e}");
        };
        let d = dir.to_str().unwrap().to_string();
        bad(&["--output", &d], "is a folder");
        bad(
            &["--output", &format!("{d}/file/out.safetensors")],
            "is a file, not a folder",
        );
        bad(
            &[
                "--inputs",
                &format!("{d}/none.safetensors"),
                "--output",
                &format!("{d}/o.safetensors"),
            ],
            "--inputs",
        );
        bad(
            &[
                "--inputs",
                &format!("{d}/file"),
                "--output",
                &format!("{d}/file"),
            ],
            "both name",
        );
        bad(&["--unet", &format!("{d}/file")], "is not a folder");
        bad(
            &["--scheduler-config", &format!("{d}/missing.json")],
            "--scheduler-config",
        );
        // A preview that cannot be written (a folder where it would go).
        std::fs::create_dir(dir.join("lat.png")).unwrap();
        bad(
            &["--output", &format!("{d}/lat.safetensors")],
            "is a folder",
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_run_that_cannot_fit_is_refused_before_loading() {
        let t = std::time::Instant::now();
        let e = memory(
            &UNetConfig::sd15(),
            DType::F32,
            Device::Cpu,
            2,
            (12500, 12500),
        )
        .unwrap_err();
        assert!(t.elapsed().as_secs_f64() < 1.0, "{:?}", t.elapsed());
        assert!(matches!(e, Error::MemoryExceeded { .. }), "{e}");
        let msg = e.to_string();
        assert!(
            msg.contains("12500×12500") && msg.contains("bytes"),
            "{msg}"
        );
        // SD 1.5's quick preset fits any machine that runs the tests.
        assert!(memory(&UNetConfig::tiny(), DType::F32, Device::Cpu, 2, (8, 8)).is_ok());
    }

    #[test]
    fn latents_that_overflow_stop_the_run() {
        let good = Tensor::from_vec(vec![1.0f32, -2.0], &[1, 2], Device::Cpu).unwrap();
        assert!(finite(&good, 0, 999.0).is_ok());
        let bad = Tensor::from_vec(vec![1.0f32, f32::NAN], &[1, 2], Device::Cpu).unwrap();
        let e = finite(&bad, 3, 751.0).unwrap_err().to_string();
        assert!(e.contains("step 3") && e.contains("not finite"), "{e}");
        let inf = Tensor::from_vec(vec![f32::INFINITY, 0.0], &[1, 2], Device::Cpu).unwrap();
        assert!(finite(&inf, 0, 1.0).is_err());
    }
}
