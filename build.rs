//! Embeds every schema under `schemas/` (current files and frozen revisions) into the
//! binary, so adding a revision is dropping a file, and the demo needs no files at run time.

use std::{env, fs, path::Path};

fn main() {
    let manifest = env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR");
    let root = Path::new(&manifest).join("schemas");
    println!("cargo::rerun-if-changed={}", root.display());

    let mut current = Vec::new();
    let mut revisions = Vec::new();
    for entry in sorted_entries(&root) {
        let path = entry.as_path();
        if path.extension().is_some_and(|e| e == "avsc") {
            current.push((stem(path), path.display().to_string()));
        }
    }
    let rev_root = root.join("revisions");
    if rev_root.is_dir() {
        println!("cargo::rerun-if-changed={}", rev_root.display());
        for dir in sorted_entries(&rev_root) {
            println!("cargo::rerun-if-changed={}", dir.display());
            for file in sorted_entries(&dir) {
                let name = stem(&file);
                let rev = name
                    .strip_prefix('r')
                    .and_then(|n| n.parse::<u32>().ok())
                    .unwrap_or_else(|| panic!("revision files are named rN.avsc: {}", file.display()));
                revisions.push((stem(&dir), rev, file.display().to_string()));
            }
        }
    }

    let mut out = String::from("/// (file stem, schema text) of every current schema.\n");
    out.push_str("pub(crate) static CURRENT: &[(&str, &str)] = &[\n");
    for (stem, path) in &current {
        out.push_str(&format!("    ({stem:?}, include_str!({path:?})),\n"));
    }
    out.push_str("];\n/// (file stem, revision, schema text) of every frozen revision.\n");
    out.push_str("pub(crate) static REVISIONS: &[(&str, u32, &str)] = &[\n");
    for (stem, rev, path) in &revisions {
        out.push_str(&format!("    ({stem:?}, {rev}, include_str!({path:?})),\n"));
    }
    out.push_str("];\n");
    let dest = Path::new(&env::var("OUT_DIR").expect("OUT_DIR")).join("embedded_schemas.rs");
    fs::write(dest, out).expect("write embedded_schemas.rs");
}

fn sorted_entries(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .collect();
    v.sort();
    v
}

fn stem(p: &Path) -> String {
    p.file_stem().and_then(|s| s.to_str()).expect("utf-8 file name").to_owned()
}
