//! Argument checks shared by the Stable Diffusion examples: numbers parsed with the range each
//! accepts (the limits diffusers' pipelines enforce, where they enforce one), with a message
//! that says the range (also for arguments that look negative), and output paths checked
//! before any model is loaded (so a path that cannot be written fails at once, not after every
//! step has run).
//!
//! Include it with `#[path = "../common/args.rs"] mod args;`. The number parsers fit clap's
//! `value_parser`; give the command `allow_negative_numbers = true` so that `--steps -5`
//! reaches them (and gets the range) instead of being read as an unknown flag.
//!
//! Invariants: every parser accepts exactly the range its message states; the path checks
//! create nothing that outlives them (a writability probe is a file created and removed at
//! once) and never follow a path into a folder.
#![allow(dead_code)]

use std::path::{Component, Path, PathBuf};

/// Most denoising steps: diffusers refuses more steps than the scheduler's training
/// timesteps (`num_train_timesteps`, 1000 for every Stable Diffusion release).
pub const MAX_STEPS: u64 = 1000;
/// Largest image side, in pixels (latents are 1/8 of it; the memory check refuses what does
/// not fit long before).
pub const MAX_SIDE: u64 = 1 << 20;
/// Largest classifier-free guidance scale: pipelines use 1 to about 20; past 100 the guided
/// noise is the difference of two predictions blown up until the latents overflow.
pub const MAX_GUIDANCE: f64 = 100.0;

/// An integer in `lo..=hi`, `what` describing the range for the message.
fn int_in(s: &str, what: &str, lo: u64, hi: u64) -> Result<u64, String> {
    match s.trim().parse::<i128>() {
        Ok(v) if v >= lo as i128 && v <= hi as i128 => Ok(v as u64),
        Ok(v) => Err(format!("must be {what}, got {v}")),
        Err(_) => Err(format!("must be {what}, got {s:?}")),
    }
}

/// `--steps`: a whole number from 1 to [`MAX_STEPS`].
pub fn steps(s: &str) -> Result<usize, String> {
    let what = format!("a whole number of steps from 1 to {MAX_STEPS}");
    int_in(s, &what, 1, MAX_STEPS).map(|v| v as usize)
}

/// `--height` / `--width`: a multiple of 8 from 8 to [`MAX_SIDE`] pixels (diffusers refuses
/// sides not divisible by 8: the latents are an eighth of the image).
pub fn image_side(s: &str) -> Result<usize, String> {
    let what = format!("a multiple of 8 from 8 to {MAX_SIDE} (pixels)");
    let v = int_in(s, &what, 8, MAX_SIDE)?;
    if !v.is_multiple_of(8) {
        return Err(format!("must be {what}, got {v}"));
    }
    Ok(v as usize)
}

/// `--guidance`: a finite number from 0 to [`MAX_GUIDANCE`].
pub fn guidance(s: &str) -> Result<f64, String> {
    let what = format!("a finite number from 0 to {MAX_GUIDANCE}");
    match s.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && (0.0..=MAX_GUIDANCE).contains(&v) => Ok(v),
        Ok(_) => Err(format!("must be {what}, got {}", s.trim())),
        Err(_) => Err(format!("must be {what}, got {s:?}")),
    }
}

/// `--seed`: a whole number from 0 to 2^64 − 1.
pub fn seed(s: &str) -> Result<u64, String> {
    int_in(
        s,
        &format!("a whole number from 0 to {}", u64::MAX),
        0,
        u64::MAX,
    )
}

/// `path` made absolute (against the current folder) with `.` and `..` resolved and its
/// longest existing prefix resolved through links, so two spellings of one file compare equal.
pub fn normalised(path: &Path) -> PathBuf {
    let abs = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir().unwrap_or_default().join(path)
    };
    let mut clean = PathBuf::new();
    for c in abs.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                clean.pop();
            }
            other => clean.push(other),
        }
    }
    // Resolve links in the part that exists; keep the rest as written.
    let mut existing = clean.clone();
    let mut rest = Vec::new();
    while !existing.exists() {
        match (
            existing.file_name().map(|n| n.to_os_string()),
            existing.parent(),
        ) {
            (Some(name), Some(parent)) => {
                rest.push(name);
                existing = parent.to_path_buf();
            }
            _ => return clean,
        }
    }
    let mut out = existing.canonicalize().unwrap_or(existing);
    for name in rest.iter().rev() {
        out.push(name);
    }
    out
}

/// Checks that `path` (given as `flag`) can be written as an output file, before any work:
/// it is not a folder; if it exists, it can be opened for writing; its folder exists, or its
/// nearest existing ancestor is a folder in which a file can be created (the folders are made
/// when the file is written).
pub fn writable_file(flag: &str, path: &Path) -> Result<(), String> {
    let shown = path.display();
    if path.as_os_str().is_empty() || path.file_name().is_none() {
        return Err(format!("{flag} {shown:?}: names no file"));
    }
    if path.is_dir() {
        return Err(format!(
            "{flag} {shown}: is a folder; name a file, e.g. {}",
            path.join("latents.safetensors").display()
        ));
    }
    if path.exists() {
        std::fs::OpenOptions::new()
            .append(true)
            .open(path)
            .map_err(|e| format!("{flag} {shown}: cannot be written: {e}"))?;
    }
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let mut dir = parent.as_path();
    while !dir.exists() {
        dir = match dir.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
    }
    if !dir.is_dir() {
        return Err(format!(
            "{flag} {shown}: {} is a file, not a folder",
            dir.display()
        ));
    }
    // A file created and removed at once: the one test that covers permissions, read-only
    // mounts and full inode tables alike.
    let probe = dir.join(format!(".write-probe-{}", std::process::id()));
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
        .map_err(|e| {
            format!(
                "{flag} {shown}: no file can be created in {}: {e}",
                dir.display()
            )
        })?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

/// Checks that no two outputs (`(flag, path)`) name the same file (after [`normalised`]).
pub fn distinct(outputs: &[(&str, &Path)]) -> Result<(), String> {
    for (i, (fa, a)) in outputs.iter().enumerate() {
        for (fb, b) in &outputs[i + 1..] {
            if normalised(a) == normalised(b) {
                return Err(format!(
                    "{fa} and {fb} both name {}: each output needs its own file",
                    a.display()
                ));
            }
        }
    }
    Ok(())
}

/// Checks that `path` (given as `flag`) is an existing file.
pub fn existing_file(flag: &str, path: &Path) -> Result<(), String> {
    match std::fs::metadata(path) {
        Ok(m) if m.is_file() => Ok(()),
        Ok(_) => Err(format!("{flag} {}: is not a file", path.display())),
        Err(e) => Err(format!("{flag} {}: {e}", path.display())),
    }
}

/// Checks that `path` (given as `flag`) is an existing folder.
pub fn existing_folder(flag: &str, path: &Path) -> Result<(), String> {
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(format!("{flag} {}: is not a folder", path.display())),
        Err(e) => Err(format!("{flag} {}: {e}", path.display())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("xpu-args-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn numbers_outside_their_range_say_the_range() {
        assert_eq!(steps("20"), Ok(20));
        for bad in ["0", "-5", "1001", "many", "2.5"] {
            let e = steps(bad).unwrap_err();
            assert!(e.contains("from 1 to 1000"), "{bad}: {e}");
        }
        assert_eq!(image_side("512"), Ok(512));
        for bad in ["-8", "0", "100", "9999999999", "1e3"] {
            let e = image_side(bad).unwrap_err();
            assert!(e.contains("a multiple of 8 from 8 to"), "{bad}: {e}");
        }
        assert_eq!(guidance("7.5"), Ok(7.5));
        for bad in ["-1", "1e300", "NaN", "inf", "101", "x"] {
            let e = guidance(bad).unwrap_err();
            assert!(e.contains("a finite number from 0 to 100"), "{bad}: {e}");
        }
        assert_eq!(seed("18446744073709551615"), Ok(u64::MAX));
        for bad in ["-1", "18446744073709551616", "0x10"] {
            let e = seed(bad).unwrap_err();
            assert!(e.contains("from 0 to 18446744073709551615"), "{bad}: {e}");
        }
    }

    #[test]
    fn output_paths_are_checked_without_leaving_anything() {
        let dir = scratch("out");
        // A new file in a folder that does not exist yet: fine, nothing created.
        let deep = dir.join("a/b/out.safetensors");
        assert_eq!(writable_file("--output", &deep), Ok(()));
        assert!(!dir.join("a").exists());
        // A folder is not a file.
        let e = writable_file("--output", &dir).unwrap_err();
        assert!(e.contains("is a folder"), "{e}");
        // A file in the way of the folder.
        std::fs::write(dir.join("file"), b"x").unwrap();
        let e = writable_file("--output", &dir.join("file/out.png")).unwrap_err();
        assert!(e.contains("is a file, not a folder"), "{e}");
        // Nothing is left behind by the probes.
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["file"]);
        assert!(writable_file("--output", Path::new("")).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[cfg(unix)]
    #[test]
    fn a_folder_that_cannot_be_written_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = scratch("readonly");
        let ro = dir.join("ro");
        std::fs::create_dir(&ro).unwrap();
        std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o555)).unwrap();
        // Root may write anyway: then the probe rightly succeeds.
        let probe = std::fs::File::create(ro.join("p"));
        let root = probe.is_ok();
        let _ = std::fs::remove_file(ro.join("p"));
        let r = writable_file("--output", &ro.join("x.safetensors"));
        if root {
            assert!(r.is_ok(), "{r:?}");
        } else {
            assert!(r.unwrap_err().contains("no file can be created"));
        }
        std::fs::set_permissions(&ro, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn two_spellings_of_one_file_are_the_same_output() {
        let dir = scratch("same");
        let a = dir.join("x.png");
        let b = dir.join("sub/../x.png");
        let e = distinct(&[("--output", &a), ("the preview", &b)]).unwrap_err();
        assert!(e.contains("both name"), "{e}");
        assert_eq!(distinct(&[("a", &a), ("b", &dir.join("y.png"))]), Ok(()));
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn inputs_must_exist() {
        let dir = scratch("inputs");
        assert!(existing_file("--inputs", &dir.join("none")).is_err());
        assert!(existing_file("--inputs", &dir)
            .unwrap_err()
            .contains("not a file"));
        assert_eq!(existing_folder("--unet", &dir), Ok(()));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
