//! Build script: hashes the kernel sources (`src/cpu`, `src/gpu`, `src/backend`), so the
//! autotuner's cache files (`src/autotune`) written by one build are retuned by a build whose
//! kernels differ. The hash reaches the crate as `XPU_KERNEL_SOURCE_HASH`.

use std::path::{Path, PathBuf};

fn files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            files(&path, out);
        } else {
            out.push(path);
        }
    }
}

fn main() {
    let root = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".into()));
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for dir in ["src/cpu", "src/gpu", "src/backend"] {
        println!("cargo:rerun-if-changed={dir}");
        let mut list = Vec::new();
        files(&root.join(dir), &mut list);
        list.sort();
        for path in list {
            let name = path
                .strip_prefix(&root)
                .unwrap_or(&path)
                .to_string_lossy()
                .into_owned();
            let data = std::fs::read(&path).unwrap_or_default();
            for b in name.bytes().chain([0u8]).chain(data) {
                hash ^= u64::from(b);
                hash = hash.wrapping_mul(0x0100_0000_01b3);
            }
        }
    }
    println!("cargo:rustc-env=XPU_KERNEL_SOURCE_HASH={hash:016x}");
}
