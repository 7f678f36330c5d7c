//! Embeds the Python shim and the bundled tools into the binary.
//!
//! Every file under `python_shim/` and `functions/function_calling/` (except
//! caches) becomes an `(relative path, bytes)` entry, so adding a shim module
//! needs no Rust change and nothing can be forgotten.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn collect(root: &Path, dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = entries.flatten().map(|e| e.path()).collect();
    entries.sort();
    for path in entries {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name == "__pycache__" || name.starts_with('.') || name.ends_with(".pyc") {
            continue;
        }
        if path.is_dir() {
            collect(root, &path, out);
        } else {
            out.push(path.strip_prefix(root).expect("under root").to_path_buf());
        }
    }
}

/// `root` is walked; paths are recorded relative to `base`.
fn table(name: &str, root: &Path, base: &Path) -> String {
    println!("cargo:rerun-if-changed={}", root.display());
    let mut files = Vec::new();
    collect(base, root, &mut files);
    let mut code = format!("pub(crate) static {name}: &[(&str, &[u8])] = &[\n");
    for rel in files {
        let abs = base.join(&rel);
        writeln!(
            code,
            "    ({:?}, include_bytes!({:?})),",
            rel.to_string_lossy(),
            abs.to_string_lossy()
        )
        .expect("write to string");
    }
    code.push_str("];\n");
    code
}

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let shim = manifest.join("python_shim");
    let mut code = table("SHIM_FILES", &shim, &shim);
    code.push_str(&table(
        "BUNDLED_FUNCTION_FILES",
        &manifest.join("functions/function_calling"),
        &manifest,
    ));
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets it"));
    std::fs::write(out.join("embedded_files.rs"), code).expect("write embedded_files.rs");
}
