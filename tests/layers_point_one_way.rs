//! The architecture test (in the spirit of ArchUnit): reads every `crate::` path in the
//! library's source and fails on an import against the layer order of
//! docs/ARCHITECTURE.md ("Layers"), and on any cycle between the files of one module.
//!
//! Only source outside tests counts (`tests.rs`, `tests/` folders and inline
//! `#[cfg(test)] mod tests` blocks may reach anywhere). The binary (`src/main.rs` and the
//! command line in `src/cli/`) is not the library's: it is read only to be left out, and
//! the library must not reach it nor use its error crate, `anyhow`.

use std::{
    collections::{BTreeMap, BTreeSet},
    fs,
    path::{Path, PathBuf},
};

/// The library's top-level modules, lowest layer first. A module may import modules of a
/// lower layer only; modules of one layer do not import each other. `cli` is not here: it
/// is the binary's (src/main.rs, src/cli/), above everything.
const LAYERS: &[&[&str]] = &[
    // HTTP clients and the TLS crypto provider, shared by everything that speaks HTTP; the
    // Kubernetes object builders of the tests.
    &["http", "fixtures", "brokers", "health"],
    // Avro and telemetry know nothing of Kubernetes or of the runtime.
    &["codec", "telemetry"],
    // The exactly-once runtime: processors, stores, tasks, drivers. No domain type.
    &["runtime"],
    // The cluster-trace format (watch events as JSON lines).
    &["trace"],
    // The input contract: observation types, annotation keys, topic names, minimization,
    // admission, the in-memory input topics.
    &["observe"],
    // The run facts every downstream stage and the cleanup decision share.
    &["facts"],
    // The cleanup policy and its decisions (the `[runs]` sweep decides with it), and the
    // cleaner that applies them.
    &["cleanup"],
    // The processors.
    &["journal", "coverage", "sessions"],
    // Shells around them: the watcher, the Alertmanager forwarder, the simulator.
    &["watch", "alerts", "simulate"],
    // The Prometheus endpoint (reads the runtime's and the watcher's counters).
    &["metrics"],
    // The pipeline file, which names every stage's settings.
    &["config"],
    // The topology: every stage, built from the pipeline file.
    &["pipeline"],
    &["acls"],
    &["testcontainers"],
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&module))
}

/// A source file of the library, with its module path (`journal::runs`) and text.
#[derive(Debug)]
struct Source {
    module: Vec<String>,
    text: String,
    path: PathBuf,
}

/// The library's source files: everything under src/ but the binary's (`main.rs`, `cli/`)
/// and `lib.rs` (which only declares modules; see [`library_roots`]).
fn sources() -> Vec<Source> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = Vec::new();
    walk(&src, &src, &mut out);
    assert!(out.len() > 50, "found only {} source files under {}", out.len(), src.display());
    out
}

fn walk(root: &Path, dir: &Path, out: &mut Vec<Source>) {
    let mut entries: Vec<_> = fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            let binary = dir == root && path.file_name().unwrap() == "cli";
            if path.file_name().unwrap() != "tests" && !binary {
                walk(root, &path, out);
            }
            continue;
        }
        let name = path.file_name().unwrap().to_str().unwrap();
        if !name.ends_with(".rs") || name == "tests.rs" || name == "lib.rs" || name == "main.rs" {
            continue;
        }
        let rel = path.strip_prefix(root).unwrap().with_extension("");
        let mut module: Vec<String> = rel.iter().map(|c| c.to_str().unwrap().to_owned()).collect();
        if module.last().unwrap() == "mod" {
            module.pop();
        }
        let text = without_tests(&strip_comments(&fs::read_to_string(&path).unwrap()));
        out.push(Source { module, text, path });
    }
}

/// The text without `//` comments (doc links name modules without importing them).
fn strip_comments(text: &str) -> String {
    text.lines()
        .map(|line| match line.find("//") {
            // `//` inside a string literal ("http://…") is rare in paths we read; a line
            // cut there loses nothing we look for.
            Some(i) => &line[..i],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The text without its inline `#[cfg(test)] mod … { … }` blocks.
fn without_tests(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..i]);
        let after = &rest[i + "#[cfg(test)]".len()..];
        let trimmed = after.trim_start();
        if trimmed.starts_with("mod ") && trimmed.find('{').is_some_and(|b| trimmed[..b].find(';').is_none())
        {
            let open = after.find('{').unwrap();
            let mut depth = 0usize;
            let mut end = after.len();
            for (j, c) in after[open..].char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            end = open + j + 1;
                            break;
                        }
                    }
                    _ => {}
                }
            }
            rest = &after[end..];
        } else {
            rest = after;
        }
    }
    out.push_str(rest);
    out
}

/// Every path a file names from the crate root: `crate::a::b` in code and each item of a
/// `use crate::{a::…, b}` group, as module paths.
fn crate_paths(text: &str) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("crate::") {
        let boundary = rest[..i].chars().last().is_none_or(|c| !(c.is_alphanumeric() || c == '_'));
        let after = &rest[i + "crate::".len()..];
        if boundary {
            expand(after, Vec::new(), &mut paths);
        }
        rest = after;
    }
    paths
}

/// Expands the path at the start of `text` (after `prefix::`), groups included.
fn expand(text: &str, prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
    let text = text.trim_start();
    if let Some(group) = text.strip_prefix('{') {
        let mut depth = 0usize;
        let mut start = 0;
        for (j, c) in group.char_indices() {
            match c {
                '{' => depth += 1,
                '}' if depth == 0 => {
                    expand(&group[start..j], prefix.clone(), out);
                    return;
                }
                '}' => depth -= 1,
                ',' if depth == 0 => {
                    expand(&group[start..j], prefix.clone(), out);
                    start = j + 1;
                }
                _ => {}
            }
        }
        return;
    }
    let ident: String = text.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
    if ident.is_empty() || ident == "self" {
        if !prefix.is_empty() {
            out.push(prefix);
        }
        return;
    }
    let mut path = prefix;
    path.push(ident.clone());
    let rest = &text[ident.len()..];
    match rest.trim_start().strip_prefix("::") {
        Some(more) => expand(more, path, out),
        None => out.push(path),
    }
}

/// `super::x` paths of a file, resolved against its module (`journal::runs` +
/// `super::tracked` = `journal::tracked`).
fn super_paths(source: &Source) -> Vec<Vec<String>> {
    let mut paths = Vec::new();
    let mut rest = source.text.as_str();
    while let Some(i) = rest.find("super::") {
        let boundary =
            rest[..i].chars().last().is_none_or(|c| !(c.is_alphanumeric() || c == '_' || c == ':'));
        let after = &rest[i + "super::".len()..];
        if boundary {
            // `super` of `a/b.rs` and of `a/b/mod.rs` alike is `a`.
            let mut base = source.module.clone();
            base.pop();
            let mut found = Vec::new();
            expand(after, Vec::new(), &mut found);
            for p in found {
                let mut full = base.clone();
                full.extend(p);
                paths.push(full);
            }
        }
        rest = after;
    }
    paths
}

#[test]
fn every_top_level_module_has_a_layer() {
    let modules: BTreeSet<String> = sources().iter().map(|s| s.module[0].clone()).collect();
    let missing: Vec<&String> = modules.iter().filter(|m| layer_of(m).is_none()).collect();
    assert!(missing.is_empty(), "modules without a layer in LAYERS: {missing:?}");
}

#[test]
fn imports_point_down_the_layers() {
    let violations = layer_violations(&sources());
    assert!(
        violations.is_empty(),
        "imports against the layer order (docs/ARCHITECTURE.md, \"Layers\"):\n  {}",
        violations.join("\n  ")
    );
}

fn layer_violations(sources: &[Source]) -> Vec<String> {
    let mut violations = BTreeSet::new();
    for source in sources {
        let from = &source.module[0];
        let Some(from_layer) = layer_of(from) else { continue };
        for path in crate_paths(&source.text) {
            let to = &path[0];
            if to == from {
                continue;
            }
            let allowed = layer_of(to).is_some_and(|l| l < from_layer);
            if !allowed {
                violations.insert(format!(
                    "{} ({}) imports crate::{}",
                    source.path.strip_prefix(env!("CARGO_MANIFEST_DIR")).unwrap().display(),
                    from,
                    path.join("::")
                ));
            }
        }
    }
    violations.into_iter().collect()
}

/// The library's files with `lib.rs`, which [`sources`] leaves out (it has no layer).
fn library_roots() -> Vec<Source> {
    let lib = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs");
    let text = without_tests(&strip_comments(&fs::read_to_string(&lib).unwrap()));
    let mut all = sources();
    all.push(Source { module: vec!["lib".to_owned()], text, path: lib });
    all
}

#[test]
fn the_library_uses_neither_the_binary_nor_anyhow() {
    let found = binary_mentions(&library_roots());
    assert!(
        found.is_empty(),
        "library files that name the binary's command line or its error crate (anyhow is for \
         src/main.rs, src/cli/ and tests; the library has thiserror enums):\n  {}",
        found.join("\n  ")
    );
}

/// Library files that mention `anyhow`, `crate::cli` or declare a `cli` module.
fn binary_mentions(sources: &[Source]) -> Vec<String> {
    let mut found = Vec::new();
    for source in sources {
        let path = source.path.strip_prefix(env!("CARGO_MANIFEST_DIR")).unwrap().display();
        for (n, line) in source.text.lines().enumerate() {
            let cli = crate_paths(line).iter().any(|p| p[0] == "cli")
                || line.split_whitespace().collect::<Vec<_>>().windows(2).any(|w| w == ["mod", "cli;"]);
            if line.contains("anyhow") || cli {
                found.push(format!("{path}:{}: {}", n + 1, line.trim()));
            }
        }
    }
    found
}

#[test]
fn the_files_of_a_module_form_no_cycle() {
    let cycles = file_cycles(&sources());
    assert!(cycles.is_empty(), "files that import each other (in a cycle):\n  {}", cycles.join("\n  "));
}

/// Cycles among sibling files: `journal::runs` → `journal::tracked` → `journal::runs`.
/// A folder's `mod.rs` declares its children and re-exports them, so edges into and out of
/// a parent module are not counted; edges between siblings are.
fn file_cycles(sources: &[Source]) -> Vec<String> {
    let files: BTreeSet<Vec<String>> = sources.iter().map(|s| s.module.clone()).collect();
    let mut edges: BTreeMap<Vec<String>, BTreeSet<Vec<String>>> = BTreeMap::new();
    for source in sources {
        let paths = crate_paths(&source.text).into_iter().chain(super_paths(source));
        for path in paths {
            // The longest file module the path names.
            let Some(target) = (1..=path.len()).rev().map(|n| path[..n].to_vec()).find(|p| files.contains(p))
            else {
                continue;
            };
            let siblings = target.len() == source.module.len()
                && target.len() > 1
                && target[..target.len() - 1] == source.module[..source.module.len() - 1];
            if siblings && target != source.module {
                edges.entry(source.module.clone()).or_default().insert(target);
            }
        }
    }
    let mut cycles = BTreeSet::new();
    for (from, tos) in &edges {
        for to in tos {
            if reaches(&edges, to, from, &mut BTreeSet::new()) {
                let mut pair = [from.join("::"), to.join("::")];
                pair.sort();
                cycles.insert(format!("{} <-> {}", pair[0], pair[1]));
            }
        }
    }
    cycles.into_iter().collect()
}

fn reaches(
    edges: &BTreeMap<Vec<String>, BTreeSet<Vec<String>>>,
    from: &Vec<String>,
    to: &Vec<String>,
    seen: &mut BTreeSet<Vec<String>>,
) -> bool {
    if from == to {
        return true;
    }
    if !seen.insert(from.clone()) {
        return false;
    }
    edges.get(from).is_some_and(|next| next.iter().any(|n| reaches(edges, n, to, seen)))
}

/// The checker itself: a forbidden import and a cycle planted in synthetic sources are
/// found, a grouped import is expanded, and comments and test blocks are not read.
#[test]
fn the_checker_finds_what_it_must() {
    let file = |module: &str, text: &str| Source {
        module: module.split("::").map(str::to_owned).collect(),
        text: without_tests(&strip_comments(text)),
        path: Path::new(env!("CARGO_MANIFEST_DIR")).join("src").join(module.replace("::", "/") + ".rs"),
    };
    let planted = [
        file("runtime::driver", "use crate::{codec::Codec, observe::InputTopic};"),
        file("codec::frame", "// see crate::runtime\nfn f() {}"),
        file("observe::model", "#[cfg(test)]\nmod tests { use crate::config::X; }"),
        file("journal::runs", "use super::tracked::job;"),
        file("journal::tracked", "fn f() { super::runs::finish(); }"),
    ];
    let violations = layer_violations(&planted);
    assert_eq!(violations.len(), 1, "{violations:?}");
    assert!(violations[0].contains("src/runtime/driver.rs (runtime) imports crate::observe::InputTopic"));
    assert_eq!(file_cycles(&planted), ["journal::runs <-> journal::tracked"]);
    let binary = [
        file("telemetry", "fn f() -> anyhow::Result<()> { Ok(()) }"),
        file("pipeline", "use crate::{codec::Codec, cli::stages::run};"),
        file("codec::frame", "// anyhow and crate::cli in a comment\nfn f() {}"),
        file("watch", "#[cfg(test)]\nmod tests { use anyhow::Context; }"),
    ];
    let found = binary_mentions(&binary);
    assert_eq!(found.len(), 2, "{found:?}");
    assert!(found[0].starts_with("src/telemetry.rs:1: "), "{found:?}");
    assert!(found[1].starts_with("src/pipeline.rs:1: "), "{found:?}");
}
