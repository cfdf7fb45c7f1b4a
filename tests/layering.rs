//! The module graph points one way, and the core (`protocol`, `api`, `engine`) does no I/O.
//! docs/design.md draws the same graph; a change that needs a new edge changes both.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Which top-level modules each top-level module may use.
const ALLOWED: &[(&str, &[&str])] = &[
    ("protocol", &[]),
    ("api", &[]),
    ("telemetry", &["api"]),
    ("endpoint", &["api", "store", "telemetry"]),
    ("engine", &["api", "protocol"]),
    ("auth", &["api", "telemetry"]),
    ("store", &["api", "engine"]),
    ("steps", &["api", "engine", "protocol", "store"]),
    (
        "controller",
        &["api", "engine", "steps", "store", "telemetry"],
    ),
    (
        "mcp",
        &["api", "auth", "engine", "protocol", "store", "telemetry"],
    ),
    ("client", &["api", "engine", "protocol"]),
    (
        "operator",
        &[
            "api",
            "auth",
            "controller",
            "endpoint",
            "engine",
            "mcp",
            "steps",
            "store",
            "telemetry",
        ],
    ),
    (
        "server",
        &[
            "api",
            "auth",
            "controller",
            "endpoint",
            "engine",
            "mcp",
            "steps",
            "store",
            "telemetry",
        ],
    ),
];

/// What the core may not name: clocks, randomness, files, sockets, clients, runtimes.
const IO: &[&str] = &[
    "tokio",
    "reqwest",
    "hyper",
    "axum",
    "rusqlite",
    "getrandom",
    "std::fs",
    "std::net",
    "std::process",
    "std::time::SystemTime",
    "std::time::Instant",
    "Timestamp::now",
    "Zoned::now",
    "kube::Client",
    "kube::Api",
    "kube::runtime",
    "crate::install_crypto_provider",
];
const CORE: &[&str] = &["protocol", "api", "engine"];

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Each production file of `src/` by top-level module, without unit tests (they may use what
/// they like to build fixtures).
fn modules() -> BTreeMap<String, Vec<(PathBuf, String)>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = vec![];
    sources(&root, &mut files);
    let mut by_module: BTreeMap<String, Vec<(PathBuf, String)>> = BTreeMap::new();
    for path in files {
        let rel = path.strip_prefix(&root).unwrap();
        let top = rel.components().next().unwrap().as_os_str();
        let top = top.to_str().unwrap().trim_end_matches(".rs").to_owned();
        let is_test_file = rel.components().any(|c| c.as_os_str() == "tests")
            || rel.file_name().is_some_and(|f| f == "tests.rs");
        if top == "lib" || top == "main" || is_test_file {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let text = match text.find("#[cfg(test)]") {
            Some(i) => text[..i].to_owned(),
            None => text,
        };
        by_module
            .entry(top)
            .or_default()
            .push((Path::new("src").join(rel), text));
    }
    by_module
}

/// The `crate::<module>` names a text uses, with the line of each first use.
fn uses(text: &str) -> BTreeMap<String, usize> {
    let mut found = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        let mut rest = line;
        while let Some(i) = rest.find("crate::") {
            rest = &rest[i + "crate::".len()..];
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            found.entry(name).or_insert(n + 1);
        }
    }
    found
}

#[test]
fn the_module_graph_points_one_way() {
    let allowed: BTreeMap<&str, BTreeSet<&str>> = ALLOWED
        .iter()
        .map(|(m, deps)| (*m, deps.iter().copied().collect()))
        .collect();
    let modules = modules();
    let mut wrong = vec![];
    for (module, files) in &modules {
        let Some(ok) = allowed.get(module.as_str()) else {
            wrong.push(format!(
                "module {module} is not in the graph of tests/layering.rs"
            ));
            continue;
        };
        for (path, text) in files {
            if text.contains("crate::{") {
                wrong.push(format!(
                    "{}: import each module as crate::<module>::… so its edge shows",
                    path.display()
                ));
            }
            for (used, line) in uses(text) {
                let is_module = modules.contains_key(&used);
                if is_module && used != *module && !ok.contains(used.as_str()) {
                    wrong.push(format!("{}:{line} uses crate::{used}", path.display()));
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports against the module graph:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_core_does_no_io() {
    let modules = modules();
    let mut wrong = vec![];
    for module in CORE {
        for (path, text) in &modules[*module] {
            for (n, line) in text.lines().enumerate() {
                let code = line.split("//").next().unwrap_or_default();
                for name in IO {
                    if code.contains(name) {
                        wrong.push(format!("{}:{} names {name}", path.display(), n + 1));
                    }
                }
            }
        }
    }
    assert!(wrong.is_empty(), "I/O in the core:\n{}", wrong.join("\n"));
}

#[test]
fn the_checks_see_a_wrong_import() {
    let found = uses("use crate::api::Run;\nfn f() { crate::store::new_uid(); }\n");
    assert_eq!(
        found.keys().map(String::as_str).collect::<Vec<_>>(),
        ["api", "store"]
    );
    assert_eq!(found["store"], 2);
}
