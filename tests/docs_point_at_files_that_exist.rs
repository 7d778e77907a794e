//! The docs name files (`src/journal/runs.rs`, `scripts/infra/up.sh`, …) so a reader can
//! follow an event through the code; after files move, a stale name sends them nowhere.
//! Every repository path the docs and the README mention must exist.

use std::path::Path;

/// Repository paths in `text`: a run of path characters starting with one of the top-level
/// folders, trailing punctuation trimmed.
fn paths_in(text: &str) -> Vec<String> {
    const ROOTS: [&str; 6] = ["src/", "tests/", "benches/", "scripts/", "deploy/", "docs/"];
    let is_path_char = |c: char| c.is_ascii_alphanumeric() || "_./-".contains(c);
    let mut out = Vec::new();
    for (i, _) in text.char_indices() {
        let rest = &text[i..];
        let starts_word = text[..i].chars().next_back().is_none_or(|c| !is_path_char(c));
        if !starts_word || !ROOTS.iter().any(|r| rest.starts_with(r)) {
            continue;
        }
        let end = rest.find(|c: char| !is_path_char(c)).unwrap_or(rest.len());
        let path = rest[..end].trim_end_matches(['.', ',', ':', ';', '-']);
        out.push(path.to_owned());
    }
    out
}

#[test]
fn every_path_the_docs_name_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut docs: Vec<_> = std::fs::read_dir(root.join("docs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.push(root.join("README.md"));
    let mut checked = 0;
    let mut missing = Vec::new();
    for doc in &docs {
        let text = std::fs::read_to_string(doc).unwrap();
        for path in paths_in(&text) {
            checked += 1;
            if !root.join(&path).exists() {
                missing.push(format!("{}: {path}", doc.strip_prefix(root).unwrap().display()));
            }
        }
    }
    assert!(checked > 100, "found only {checked} paths in {} docs", docs.len());
    assert!(missing.is_empty(), "the docs name files that do not exist:\n  {}", missing.join("\n  "));
}

#[test]
fn paths_are_found_in_prose_and_code_spans() {
    let text = "see `src/journal/runs.rs`, then src/cli/demo/ and (scripts/infra/up.sh). Not xsrc/a.rs";
    assert_eq!(paths_in(text), ["src/journal/runs.rs", "src/cli/demo/", "scripts/infra/up.sh"]);
}
