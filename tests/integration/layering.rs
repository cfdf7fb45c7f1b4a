//! The module graph points one way, and the core (`protocol`, `api`, `engine`) does no I/O.
//! docs/design.md draws the same graph; a change that needs a new edge changes both.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Which top-level modules each top-level module may use.
const ALLOWED: &[(&str, &[&str])] = &[
    ("protocol", &[]),
    ("api", &[]),
    ("telemetry", &["api", "engine", "protocol"]),
    ("endpoint", &["api", "auth", "store", "telemetry"]),
    ("engine", &["api", "protocol"]),
    ("auth", &["api", "telemetry"]),
    ("store", &["api", "engine"]),
    ("dial", &["protocol"]),
    (
        "steps",
        &["api", "dial", "engine", "protocol", "store", "telemetry"],
    ),
    (
        "controller",
        &["api", "engine", "steps", "store", "telemetry"],
    ),
    (
        "mcp",
        &["api", "auth", "engine", "protocol", "store", "telemetry"],
    ),
    ("client", &["api", "dial", "engine", "protocol"]),
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
        // `main` and `cli` are the binary, which uses the library from outside.
        if top == "lib" || top == "main" || top == "cli" || is_test_file {
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
                "module {module} is not in the graph of tests/integration/layering.rs"
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

/// Every production file of `src/` with its module path (`mcp/era2025/held.rs` is
/// `["mcp", "era2025", "held"]`; a `mod.rs` is its folder), unit tests cut off.
fn module_files() -> Vec<(Vec<String>, PathBuf, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = vec![];
    sources(&root, &mut files);
    let mut out = vec![];
    for path in files {
        let rel = path.strip_prefix(&root).unwrap();
        let is_test_file = rel.components().any(|c| c.as_os_str() == "tests")
            || rel.file_name().is_some_and(|f| f == "tests.rs");
        if is_test_file {
            continue;
        }
        let mut module: Vec<String> = rel
            .components()
            .map(|c| {
                c.as_os_str()
                    .to_str()
                    .unwrap()
                    .trim_end_matches(".rs")
                    .to_owned()
            })
            .collect();
        if module
            .last()
            .is_some_and(|m| m == "mod" || m == "lib" || m == "main")
        {
            module.pop();
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let text = match text.find("#[cfg(test)]") {
            Some(i) => text[..i].to_owned(),
            None => text,
        };
        out.push((module, Path::new("src").join(rel), text));
    }
    out
}

/// The module paths a text names through `crate::`, `super::` and `self::`, resolved from
/// the module `at` (grouped imports `use super::{a, b}` name each member).
fn named_paths(at: &[String], text: &str) -> BTreeSet<Vec<String>> {
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut found = BTreeSet::new();
    for line in text.lines() {
        let code = line.split("//").next().unwrap_or_default();
        for (prefix, base) in [
            ("crate::", vec![]),
            ("super::", at[..at.len().saturating_sub(1)].to_vec()),
            ("self::", at.to_vec()),
        ] {
            let mut rest = code;
            while let Some(i) = rest.find(prefix) {
                let before = rest[..i].chars().last();
                rest = &rest[i + prefix.len()..];
                if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':') {
                    continue;
                }
                let mut base = base.clone();
                // `super::super::x`
                let mut tail = rest;
                while let Some(t) = tail.strip_prefix("super::") {
                    base.pop();
                    tail = t;
                }
                loop {
                    if let Some(group) = tail.strip_prefix('{') {
                        let mut depth = 0;
                        let mut start = true;
                        for (j, c) in group.char_indices() {
                            match c {
                                '{' => depth += 1,
                                '}' if depth == 0 => break,
                                '}' => depth -= 1,
                                ',' if depth == 0 => start = true,
                                c if start && !c.is_whitespace() => {
                                    start = false;
                                    let name = ident(&group[j..]);
                                    if !name.is_empty() && name != "self" {
                                        let mut p = base.clone();
                                        p.push(name);
                                        found.insert(p);
                                    }
                                }
                                _ => {}
                            }
                        }
                        break;
                    }
                    let name = ident(tail);
                    if name.is_empty() {
                        break;
                    }
                    tail = &tail[name.len()..];
                    base.push(name);
                    match tail.strip_prefix("::") {
                        Some(t) => tail = t,
                        None => {
                            found.insert(base.clone());
                            break;
                        }
                    }
                }
            }
        }
    }
    found
}

/// Import loops between the members of each folder (a member is a file or a sub-folder).
fn folder_loops(files: &[(Vec<String>, PathBuf, String)]) -> Vec<String> {
    // folder → member → members it names
    let mut graph: BTreeMap<Vec<String>, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for (module, _, text) in files {
        for named in named_paths(module, text) {
            // Each folder that holds both the file and the named module, below the folder
            // face itself (a face declares and re-exports; it is no member).
            for depth in 0..module.len() {
                let folder = &module[..depth];
                if named.len() <= depth || named[..depth] != *folder {
                    break;
                }
                let (from, to) = (&module[depth], &named[depth]);
                if from != to {
                    graph
                        .entry(folder.to_vec())
                        .or_default()
                        .entry(from.clone())
                        .or_default()
                        .insert(to.clone());
                }
            }
        }
    }
    let mut loops = vec![];
    for (folder, edges) in &graph {
        if folder.is_empty() {
            // The top level has its own graph (ALLOWED above).
            continue;
        }
        for start in edges.keys() {
            // Depth-first from `start`: a path back to it is a loop.
            let mut stack = vec![(start.clone(), vec![start.clone()])];
            let mut seen = BTreeSet::new();
            while let Some((at, path)) = stack.pop() {
                for next in edges.get(&at).into_iter().flatten() {
                    if next == start {
                        let mut l = path.clone();
                        l.push(next.clone());
                        loops.push(format!("{}: {}", folder.join("/"), l.join(" -> ")));
                    } else if seen.insert(next.clone()) {
                        let mut p = path.clone();
                        p.push(next.clone());
                        stack.push((next.clone(), p));
                    }
                }
            }
        }
    }
    loops.sort();
    loops.dedup();
    loops
}

#[test]
fn no_folder_has_an_import_loop() {
    let loops = folder_loops(&module_files());
    assert!(
        loops.is_empty(),
        "import loops inside a folder:\n{}",
        loops.join("\n")
    );
}

#[test]
fn the_loop_check_sees_a_loop() {
    let file = |m: &[&str], text: &str| {
        (
            m.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
            PathBuf::new(),
            text.to_owned(),
        )
    };
    let files = vec![
        file(&["mcp", "a"], "use super::{b, c::X};\n"),
        file(&["mcp", "b"], "use crate::mcp::a::Y;\n"),
        file(&["mcp", "c"], "use super::super::api::Run;\n"),
    ];
    assert_eq!(
        folder_loops(&files),
        ["mcp: a -> b -> a", "mcp: b -> a -> b"]
    );
    let fixed = vec![
        files[0].clone(),
        file(&["mcp", "b"], "use crate::api::Run;\n"),
    ];
    assert!(folder_loops(&fixed).is_empty());
}

/// The longest a production file may grow before it holds more than one thing.
const MAX_FILE_LINES: usize = 600;
/// The longest a function may grow before its steps deserve names.
const MAX_FN_LINES: usize = 80;

/// Each function of a text with its name, first line and length in lines. Braces inside
/// strings, characters and comments do not count.
fn functions(text: &str) -> Vec<(String, usize, usize)> {
    let lines: Vec<String> = text.lines().map(code_only).collect();
    let mut out = vec![];
    let mut i = 0;
    while i < lines.len() {
        let Some(name) = fn_name(&lines[i]) else {
            i += 1;
            continue;
        };
        let (mut depth, mut opened, mut j) = (0i32, false, i);
        'scan: while j < lines.len() {
            for c in lines[j].chars() {
                match c {
                    '{' => {
                        depth += 1;
                        opened = true;
                    }
                    '}' => depth -= 1,
                    ';' if !opened => break 'scan,
                    _ => {}
                }
                if opened && depth == 0 {
                    break 'scan;
                }
            }
            j += 1;
        }
        if opened {
            out.push((name, i + 1, j - i + 1));
            i = j + 1;
        } else {
            i += 1;
        }
    }
    out
}

/// The name of the function a line declares, if it declares one.
fn fn_name(line: &str) -> Option<String> {
    let mut words = line.split_whitespace();
    while let Some(w) = words.next() {
        match w {
            "fn" => {
                let name: String = words
                    .next()?
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                return (!name.is_empty()).then_some(name);
            }
            "pub" | "async" | "const" | "unsafe" | "extern" => {}
            w if w.starts_with("pub(") => {}
            _ => return None,
        }
    }
    None
}

/// A line with its strings and character literals emptied and its comment cut off.
fn code_only(line: &str) -> String {
    let mut out = String::new();
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' => {
                out.push('"');
                while let Some(s) = chars.next() {
                    match s {
                        '\\' => {
                            chars.next();
                        }
                        '"' => break,
                        _ => {}
                    }
                }
                out.push('"');
            }
            '\'' => {
                // A character literal ('x', '\n', '{') is emptied; a lifetime is kept.
                let rest: String = chars.clone().take(4).collect();
                let len = if rest.starts_with('\\') {
                    rest.find('\'').map(|i| i + 1)
                } else if rest.chars().nth(1) == Some('\'') {
                    Some(2)
                } else {
                    None
                };
                match len {
                    Some(n) => {
                        for _ in 0..n {
                            chars.next();
                        }
                        out.push_str("''");
                    }
                    None => out.push('\''),
                }
            }
            '/' if chars.peek() == Some(&'/') => break,
            _ => out.push(c),
        }
    }
    out
}

#[test]
fn no_production_file_or_function_is_too_long() {
    let mut long = vec![];
    for (_, path, text) in module_files() {
        let n = text.lines().count();
        if n > MAX_FILE_LINES {
            long.push(format!("{}: {n} lines", path.display()));
        }
        for (name, at, len) in functions(&text) {
            if len > MAX_FN_LINES {
                long.push(format!("{}:{at} fn {name}: {len} lines", path.display()));
            }
        }
    }
    assert!(
        long.is_empty(),
        "over {MAX_FILE_LINES} lines a file or {MAX_FN_LINES} a function:\n{}",
        long.join("\n")
    );
}

#[test]
fn the_length_check_measures_functions() {
    let text = "pub(crate) async fn a(x: &str) -> char {\n    let s = \"}\";\n    '{'\n}\n\
                fn b<'a>(x: &'a str);\nimpl X {\n    fn c() {}\n}\n";
    assert_eq!(
        functions(text),
        [("a".to_owned(), 1, 4), ("c".to_owned(), 7, 1)]
    );
}
