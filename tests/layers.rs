//! The layers of `src/` point down only. Each top-level module belongs to one layer; a file may
//! name (`crate::...`) only modules of its own layer or of the layers its layer builds on:
//!
//! ```text
//! models, schedulers   →  nn, the Tensor API, base
//! nn                   →  the Tensor API, base, and from the backend only its prepared-weight
//!                         type (`backend::prepared`) and the storage handle (`backend::Storage`)
//! tensor, ops          →  backend, base            (the Tensor API)
//! backend              →  cpu, gpu, base           (the one place that matches on the device)
//! cpu | gpu            →  base                     (kernels; neither names the other)
//! base                 →  base                     (error, dtype, device, layout, desc, config,
//!                                                   autotune)
//! ```
//!
//! Names re-exported at the crate root (`crate::Tensor`, `crate::Activation`, ...) count as the
//! module that defines them. Test-only code (`#[cfg(test)]` modules, `tests.rs`, `*_tests.rs`,
//! `tests/` folders) and comments are not checked. `src/lib.rs` itself may name anything.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The layer of a top-level module, or `None` for one this test does not know (which fails).
fn layer(module: &str) -> Option<&'static str> {
    Some(match module {
        "error" | "dtype" | "device" | "layout" | "desc" | "config" | "json_values"
        | "autotune" => "base",
        "cpu" => "cpu",
        "gpu" => "gpu",
        "backend" => "backend",
        "tensor" | "ops" => "tensor",
        "nn" => "nn",
        "models" | "schedulers" => "models",
        "root" => "root",
        _ => return None,
    })
}

/// The layers each layer may name.
fn allowed(from: &str) -> &'static [&'static str] {
    match from {
        "base" => &["base"],
        "cpu" => &["base", "cpu"],
        "gpu" => &["base", "gpu"],
        "backend" => &["base", "cpu", "gpu", "backend"],
        "tensor" => &["base", "backend", "tensor"],
        "nn" => &["base", "tensor", "nn"],
        "models" => &["base", "tensor", "nn", "models"],
        _ => &[],
    }
}

/// Paths into the backend that `nn` may name (its prepared-weight type and the storage handle).
const NN_BACKEND: [&str; 2] = ["backend::prepared", "backend::Storage"];

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("dir entry").path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n == "tests") {
                continue;
            }
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if name != "tests.rs" && !name.ends_with("_tests.rs") {
                out.push(path);
            }
        }
    }
}

/// The production part of a file: without comments and from its first `#[cfg(test)]` module
/// on.
fn production_code(text: &str) -> String {
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let t = line.trim_start();
        if t.starts_with("#[cfg(test)]") {
            if let Some(next) = lines.peek() {
                let n = next.trim_start();
                if n.starts_with("mod ") || n.starts_with("pub(crate) mod ") {
                    break;
                }
            }
        }
        if t.starts_with("//") {
            continue;
        }
        let code = match line.find("//") {
            // A `//` inside a string literal is rare in use paths; cut conservatively only
            // where no quote precedes it.
            Some(i) if !line[..i].contains('"') => &line[..i],
            _ => line,
        };
        out.push_str(code);
        out.push('\n');
    }
    out
}

/// Every `crate::a::b...` path a piece of code names, as the top module plus the rest
/// (`use crate::{x::y, z}` groups are expanded).
fn crate_paths(code: &str) -> Vec<String> {
    let mut paths = Vec::new();
    let bytes = code.as_bytes();
    let mut i = 0;
    while let Some(pos) = code[i..].find("crate::") {
        let start = i + pos;
        let before = start.checked_sub(1).map(|j| bytes[j] as char);
        i = start + "crate::".len();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
            continue;
        }
        if code[i..].starts_with('{') {
            // A group: split its top-level items.
            let mut depth = 0;
            let mut item = String::new();
            for c in code[i..].chars() {
                match c {
                    '{' => {
                        depth += 1;
                        if depth > 1 {
                            item.push(c);
                        }
                    }
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            paths.push(item.trim().to_string());
                            break;
                        }
                        item.push(c);
                    }
                    ',' if depth == 1 => {
                        paths.push(item.trim().to_string());
                        item.clear();
                    }
                    _ => item.push(c),
                }
            }
        } else {
            let end = code[i..]
                .find(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                .map_or(code.len(), |e| i + e);
            paths.push(code[i..end].trim_end_matches(':').to_string());
        }
    }
    paths.retain(|p| !p.is_empty());
    paths
}

/// The crate root's re-exports and items: name → defining top module (`root` for items of
/// lib.rs itself).
fn root_names(lib: &str) -> BTreeMap<String, String> {
    let mut names = BTreeMap::new();
    for stmt in lib.split(';') {
        let stmt = stmt.trim();
        let Some(rest) = stmt.strip_prefix("pub use ") else {
            continue;
        };
        let module = rest.split("::").next().unwrap_or("").to_string();
        let items: Vec<&str> = match rest.find('{') {
            Some(b) => rest[b + 1..].trim_end_matches('}').split(',').collect(),
            None => vec![rest.rsplit("::").next().unwrap_or("")],
        };
        for item in items {
            let name = item.trim().rsplit(" as ").next().unwrap_or("").trim();
            if !name.is_empty() {
                names.insert(name.to_string(), module.clone());
            }
        }
    }
    for line in lib.lines() {
        for kw in ["pub fn ", "fn ", "pub struct ", "pub(crate) fn "] {
            if let Some(rest) = line.strip_prefix(kw) {
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                names.entry(name).or_insert_with(|| "root".to_string());
            }
        }
    }
    names
}

#[test]
fn layers_point_down_only() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("src");
    let lib = std::fs::read_to_string(root.join("lib.rs")).expect("read lib.rs");
    let names = root_names(&lib);
    let mut files = Vec::new();
    rust_files(&root, &mut files);
    assert!(files.len() > 100, "found only {} source files", files.len());
    let mut violations = Vec::new();
    for file in &files {
        let rel = file.strip_prefix(&root).expect("under src");
        let top = rel
            .components()
            .next()
            .and_then(|c| c.as_os_str().to_str())
            .unwrap_or("")
            .trim_end_matches(".rs");
        if top == "lib" {
            continue;
        }
        let Some(from) = layer(top) else {
            violations.push(format!("{}: module `{top}` has no layer", rel.display()));
            continue;
        };
        let text = std::fs::read_to_string(file).expect("read source");
        for path in crate_paths(&production_code(&text)) {
            let first = path.split("::").next().unwrap_or("").trim();
            let module = if layer(first).is_some() {
                first.to_string()
            } else if let Some(m) = names.get(first) {
                m.clone()
            } else {
                // `crate::self`-style or macro paths this test does not model.
                violations.push(format!("{}: unknown path crate::{path}", rel.display()));
                continue;
            };
            let to = layer(&module).unwrap_or("unknown");
            let ok = allowed(from).contains(&to)
                || (from == "nn" && NN_BACKEND.iter().any(|p| path.starts_with(p)));
            if !ok {
                violations.push(format!(
                    "{}: the {from} layer names crate::{path} ({to} layer)",
                    rel.display()
                ));
            }
        }
    }
    assert!(
        violations.is_empty(),
        "{} imports point up or across:\n{}",
        violations.len(),
        violations.join("\n")
    );
}

#[test]
fn the_checker_sees_paths_and_groups() {
    let code = "use crate::{a::b, c::{d, e}};\nlet x = crate::f::g(1); // crate::h\n";
    let paths = crate_paths(&production_code(code));
    assert_eq!(paths, vec!["a::b", "c::{d, e}", "f::g"]);
    let cut = production_code("fn f() {}\n#[cfg(test)]\nmod tests {\n use crate::cpu;\n}\n");
    assert!(!cut.contains("crate::cpu"));
}
