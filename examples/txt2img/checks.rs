//! The example's checks before any model is loaded: numbers in the ranges diffusers accepts,
//! the scheduler name, the output paths (a `.png` name, not a folder, its folder existing or
//! created and writable), the `--latents` file and the `--init-image` PNG read and checked.
//!
//! Invariant: [`Plan::from_args`] either returns a plan whose request only the models can
//! still refuse (sizes against the pipeline's VAE factor, latents against its channels) or an
//! error naming the argument; it creates at most the output's folder.

use std::path::{Path, PathBuf};

use safetensors::{Dtype as St, SafeTensors};
use xpu::models::pipeline::{GenerateRequest, Image, StableDiffusionPipeline};
use xpu::schedulers::SchedulerName;
use xpu::{Device, Error, Result, Tensor};

use super::Args;

/// The most images one run may make.
const MAX_IMAGES: usize = 64;
/// The largest side accepted, in pixels.
const MAX_SIDE: usize = 8192;
/// Size and steps of the run without `--model` (random SD 1.5 weights).
pub const RANDOM_SIZE: usize = 128;
/// Steps of the run without `--model`.
pub const RANDOM_STEPS: usize = 4;

/// The checked settings of a run.
#[derive(Debug)]
pub struct Plan {
    /// The request without the pipeline's defaults.
    pub request: GenerateRequest,
    /// The files to write, one per image.
    pub outputs: Vec<PathBuf>,
}

fn bad(arg: &str, msg: impl std::fmt::Display) -> Error {
    Error::invalid("txt2img", format!("{arg}: {msg}"))
}

fn check_side(arg: &str, v: Option<usize>) -> Result<()> {
    match v {
        Some(v) if v == 0 || v > MAX_SIDE || !v.is_multiple_of(8) => Err(bad(
            arg,
            format!("must be a positive multiple of 8 up to {MAX_SIDE}, got {v}"),
        )),
        _ => Ok(()),
    }
}

impl Plan {
    /// Checks `args` (see the module docs).
    pub fn from_args(args: &Args) -> Result<Plan> {
        if let Some(steps) = args.steps {
            if steps == 0 || steps > 1000 {
                return Err(bad("--steps", format!("must be in 1..=1000, got {steps}")));
            }
        }
        if let Some(g) = args.guidance {
            if !g.is_finite() || g.abs() > 1e4 {
                return Err(bad(
                    "--guidance",
                    format!("must be finite, |g| ≤ 10000, got {g}"),
                ));
            }
        }
        let rescale = args.guidance_rescale;
        if !(rescale.is_finite() && (0.0..=1.0).contains(&rescale)) {
            return Err(bad(
                "--guidance-rescale",
                format!("must be in [0, 1], got {rescale}"),
            ));
        }
        check_side("--height", args.height)?;
        check_side("--width", args.width)?;
        if args.num_images == 0 || args.num_images > MAX_IMAGES {
            return Err(bad(
                "--num-images",
                format!("must be in 1..={MAX_IMAGES}, got {}", args.num_images),
            ));
        }
        let scheduler: Option<SchedulerName> = match &args.scheduler {
            Some(name) => Some(name.parse().map_err(|e| bad("--scheduler", e))?),
            None => None,
        };
        if args.init_image.is_some() {
            let s = args.strength;
            if !(s.is_finite() && s > 0.0 && s <= 1.0) {
                return Err(bad("--strength", format!("must be in (0, 1], got {s}")));
            }
            if args.latents.is_some() {
                return Err(bad(
                    "--latents",
                    "cannot be combined with --init-image (img2img draws its noise from --seed)",
                ));
            }
        }
        let outputs = output_paths(&args.output, args.num_images)?;
        check_writable(&args.output)?;
        let latents = args.latents.as_deref().map(read_latents).transpose()?;
        if let Some(l) = &latents {
            if l.shape()[0] != args.num_images {
                return Err(bad(
                    "--latents",
                    format!(
                        "holds {} latents but --num-images is {}",
                        l.shape()[0],
                        args.num_images
                    ),
                ));
            }
        }
        let init_image = args
            .init_image
            .as_deref()
            .map(Image::load_png)
            .transpose()?;
        if let Some(img) = &init_image {
            check_side("--init-image height", Some(img.height))?;
            check_side("--init-image width", Some(img.width))?;
        }
        let mut request = GenerateRequest::new(args.prompt.clone());
        request.negative_prompt = args.negative_prompt.clone();
        request.steps = args.steps;
        request.guidance = args.guidance;
        request.guidance_rescale = rescale;
        request.height = args.height;
        request.width = args.width;
        request.seed = args.seed;
        request.latents = latents;
        request.scheduler = scheduler;
        request.num_images_per_prompt = args.num_images;
        request.init_image = init_image;
        request.strength = args.strength;
        if args.model.is_none() {
            let sized = args.height.is_some()
                || args.width.is_some()
                || request.latents.is_some()
                || request.init_image.is_some();
            if !sized {
                request.height = Some(RANDOM_SIZE);
                request.width = Some(RANDOM_SIZE);
            }
            request.steps = request.steps.or(Some(RANDOM_STEPS));
        }
        Ok(Plan { request, outputs })
    }

    /// The request for `pipe`: the plan's, with the pipeline's defaults made explicit.
    pub fn request(&self, pipe: &StableDiffusionPipeline) -> GenerateRequest {
        let mut r = self.request.clone();
        r.steps = r.steps.or(Some(pipe.kind().default_steps()));
        r.guidance = r.guidance.or(Some(pipe.kind().default_guidance()));
        let f = pipe.vae_scale_factor();
        let (h, w) = match (&r.init_image, &r.latents) {
            (Some(img), _) => (img.height, img.width),
            (None, Some(l)) => (l.shape()[2] * f, l.shape()[3] * f),
            (None, None) => pipe.default_size(),
        };
        r.height = r.height.or(Some(h));
        r.width = r.width.or(Some(w));
        r
    }
}

/// The files `n` images go to: `output` itself for one, `stem-0.png`, `stem-1.png`, ... for
/// more; each must end in `.png` and not be a folder.
pub fn output_paths(output: &Path, n: usize) -> Result<Vec<PathBuf>> {
    let is_png = output
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("png"));
    let stem = output.file_stem().map(|s| s.to_string_lossy().into_owned());
    let (true, Some(stem)) = (is_png, stem) else {
        return Err(bad(
            "--output",
            format!(
                "must be a file name ending in .png, got {}",
                output.display()
            ),
        ));
    };
    let paths: Vec<PathBuf> = if n == 1 {
        vec![output.to_path_buf()]
    } else {
        (0..n)
            .map(|i| output.with_file_name(format!("{stem}-{i}.png")))
            .collect()
    };
    for p in &paths {
        if p.is_dir() {
            return Err(bad("--output", format!("{} is a folder", p.display())));
        }
    }
    Ok(paths)
}

/// Creates `output`'s folder if needed and checks a file can be created in it.
pub fn check_writable(output: &Path) -> Result<()> {
    let dir = match output.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if dir.exists() && !dir.is_dir() {
        return Err(bad(
            "--output",
            format!("{} is not a folder", dir.display()),
        ));
    }
    std::fs::create_dir_all(&dir).map_err(|e| {
        bad(
            "--output",
            format!("cannot create the folder {}: {e}", dir.display()),
        )
    })?;
    let probe = dir.join(format!(".txt2img-write-check-{}", std::process::id()));
    std::fs::write(&probe, b"").map_err(|e| {
        bad(
            "--output",
            format!("cannot write in {}: {e}", dir.display()),
        )
    })?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

fn le_words<const N: usize>(data: &[u8]) -> impl Iterator<Item = [u8; N]> + '_ {
    data.chunks_exact(N).map(|c| {
        let mut w = [0u8; N];
        w.copy_from_slice(c);
        w
    })
}

/// The `latents` tensor of a safetensors file: `[N, 4, h, w]` (f32; f16, bf16 and f64 are
/// converted), finite, on the Cpu.
pub fn read_latents(path: &Path) -> Result<Tensor> {
    let arg = "--latents";
    let bytes = std::fs::read(path).map_err(|e| bad(arg, format!("{}: {e}", path.display())))?;
    let file = SafeTensors::deserialize(&bytes).map_err(|e| {
        bad(
            arg,
            format!("{} is not a safetensors file: {e}", path.display()),
        )
    })?;
    let view = file.tensor("latents").map_err(|_| {
        bad(
            arg,
            format!("{} has no tensor named `latents`", path.display()),
        )
    })?;
    let data = view.data();
    let values: Vec<f32> = match view.dtype() {
        St::F32 => le_words::<4>(data).map(f32::from_le_bytes).collect(),
        St::F64 => le_words::<8>(data)
            .map(|w| f64::from_le_bytes(w) as f32)
            .collect(),
        St::F16 => le_words::<2>(data)
            .map(|w| half::f16::from_le_bytes(w).to_f32())
            .collect(),
        St::BF16 => le_words::<2>(data)
            .map(|w| half::bf16::from_le_bytes(w).to_f32())
            .collect(),
        other => {
            return Err(bad(
                arg,
                format!("`latents` must be a float tensor, got {other:?}"),
            ))
        }
    };
    let shape = view.shape().to_vec();
    if shape.len() != 4 || shape.contains(&0) || shape[1] != 4 {
        return Err(bad(
            arg,
            format!("`latents` must be [N, 4, H/8, W/8], got {shape:?}"),
        ));
    }
    if values.iter().any(|v| !v.is_finite()) {
        return Err(bad(arg, "`latents` holds non-finite values"));
    }
    Tensor::from_vec(values, &shape, Device::Cpu)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn plan(extra: &[&str]) -> Result<Plan> {
        let dir = std::env::temp_dir().join(format!("txt2img-args-{}", std::process::id()));
        let out = dir.join("out.png");
        let mut argv = vec!["txt2img", "--output", out.to_str().unwrap_or("out.png")];
        argv.extend_from_slice(extra);
        Plan::from_args(&Args::try_parse_from(argv).map_err(|e| bad("parse", e))?)
    }

    fn err(extra: &[&str]) -> String {
        plan(extra).unwrap_err().to_string()
    }

    #[test]
    fn numbers_are_range_checked() {
        assert!(plan(&[]).is_ok());
        assert!(err(&["--steps", "0"]).contains("--steps"));
        assert!(err(&["--steps", "1001"]).contains("--steps"));
        assert!(err(&["--guidance", "NaN"]).contains("--guidance"));
        assert!(err(&["--guidance", "inf"]).contains("--guidance"));
        assert!(err(&["--guidance-rescale", "-0.1"]).contains("--guidance-rescale"));
        assert!(err(&["--height", "100"]).contains("multiple of 8"));
        assert!(err(&["--width", "0"]).contains("--width"));
        assert!(err(&["--num-images", "0"]).contains("--num-images"));
        assert!(err(&["--scheduler", "heun"]).contains("dpm++2m-karras"));
        let p = plan(&["--guidance", "-1", "--scheduler", "euler-a"]).unwrap();
        assert_eq!(p.request.guidance, Some(-1.0));
        // Without --model: a small default size and few steps.
        assert_eq!(p.request.height, Some(RANDOM_SIZE));
        assert_eq!(p.request.steps, Some(RANDOM_STEPS));
    }

    #[test]
    fn img2img_arguments_are_checked() {
        let missing = err(&["--init-image", "/nonexistent/x.png"]);
        assert!(missing.contains("x.png"), "{missing}");
        let dir = std::env::temp_dir().join(format!("txt2img-init-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let png = dir.join("init.png");
        Image::new(16, 8, vec![5; 16 * 8 * 3])
            .unwrap()
            .save_png(&png, &[])
            .unwrap();
        let p = png.to_str().unwrap();
        assert!(plan(&["--init-image", p, "--strength", "0.5"]).is_ok());
        for s in ["0", "1.5", "-0.2", "NaN"] {
            assert!(err(&["--init-image", p, "--strength", s]).contains("--strength"));
        }
        assert!(err(&["--init-image", p, "--latents", p]).contains("--latents"));
        let odd = dir.join("odd.png");
        Image::new(12, 8, vec![5; 12 * 8 * 3])
            .unwrap()
            .save_png(&odd, &[])
            .unwrap();
        assert!(err(&["--init-image", odd.to_str().unwrap()]).contains("multiple of 8"));
        std::fs::write(&odd, b"not a png").unwrap();
        assert!(err(&["--init-image", odd.to_str().unwrap()]).contains("PNG"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn output_paths_are_checked() {
        let n = output_paths(Path::new("a/b.png"), 3).unwrap();
        assert_eq!(
            n,
            [
                PathBuf::from("a/b-0.png"),
                "a/b-1.png".into(),
                "a/b-2.png".into()
            ]
        );
        assert_eq!(
            output_paths(Path::new("x.PNG"), 1).unwrap(),
            [PathBuf::from("x.PNG")]
        );
        assert!(output_paths(Path::new("x.jpg"), 1).is_err());
        assert!(output_paths(Path::new("noext"), 1).is_err());
        let dir = std::env::temp_dir().join(format!("txt2img-out-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("taken.png")).unwrap();
        assert!(output_paths(&dir.join("taken.png"), 1).is_err());
        // A folder that does not exist yet is created; a file in the way is an error.
        let nested = dir.join("new/deeper/out.png");
        check_writable(&nested).unwrap();
        assert!(dir.join("new/deeper").is_dir());
        std::fs::write(dir.join("file"), b"").unwrap();
        assert!(check_writable(&dir.join("file/out.png")).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn latents_files_are_checked() {
        let dir = std::env::temp_dir().join(format!("txt2img-lat-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let write = |name: &str, key: &str, shape: Vec<usize>, values: Vec<f32>| {
            let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
            let view = safetensors::tensor::TensorView::new(St::F32, shape, &bytes).unwrap();
            let path = dir.join(name);
            safetensors::serialize_to_file([(key, view)], None, &path).unwrap();
            path
        };
        let good = write(
            "good.safetensors",
            "latents",
            vec![1, 4, 2, 2],
            vec![0.5; 16],
        );
        assert_eq!(read_latents(&good).unwrap().shape(), &[1, 4, 2, 2]);
        let p = good.to_str().unwrap();
        assert!(plan(&["--latents", p]).is_ok());
        assert!(err(&["--latents", p, "--num-images", "2"]).contains("--num-images"));
        let wrong = write(
            "wrong.safetensors",
            "noise",
            vec![1, 4, 2, 2],
            vec![0.5; 16],
        );
        assert!(read_latents(&wrong)
            .unwrap_err()
            .to_string()
            .contains("latents"));
        let shape = write("shape.safetensors", "latents", vec![4, 2, 2], vec![0.5; 16]);
        assert!(read_latents(&shape).is_err());
        let nan = write(
            "nan.safetensors",
            "latents",
            vec![1, 4, 1, 1],
            vec![f32::NAN; 4],
        );
        assert!(read_latents(&nan).is_err());
        std::fs::write(dir.join("junk"), b"junk").unwrap();
        assert!(read_latents(&dir.join("junk")).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
