//! Reading manifest files: which files, whether they changed, and each file's documents as
//! Workflows, with errors that name the field and the line.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde_json::Value;

use crate::api::ObjectKey as Key;
use crate::api::Workflow;

/// Namespace of manifests that name none.
pub(crate) const DEFAULT_NAMESPACE: &str = "default";

/// Every YAML file under `dir`, in path order.
pub(super) fn yaml_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "yml")) {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// What the files look like now (modified time and length), to tell whether to reload.
pub(super) fn fingerprint(files: &[PathBuf]) -> Vec<(PathBuf, SystemTime, u64)> {
    files
        .iter()
        .filter_map(|f| {
            let m = std::fs::metadata(f).ok()?;
            Some((f.clone(), m.modified().ok()?, m.len()))
        })
        .collect()
}

/// A Workflow document of a file, or the key and error of one that does not deserialize.
pub(super) type Document = Result<Workflow, (Key, DocumentError)>;

/// Why a document of a file is not a Workflow; the message names the fields and lines.
#[derive(Debug, thiserror::Error)]
pub(super) enum DocumentError {
    /// Fields the type does not know: their paths, with lines where found.
    #[error("unknown field {0}")]
    UnknownFields(String),
    /// A value of the wrong shape.
    #[error("{path}{at}: {source}")]
    Shape {
        /// Its path.
        path: String,
        /// ` (line N)` when its line is found.
        at: String,
        /// Why it does not deserialize.
        #[source]
        source: serde_json::Error,
    },
}

/// The API group of Runway's resources; a document of this group must be a kind this server
/// reads, so that `kind: Workfow` or a wrong version is an error, not a skipped file.
const GROUP: &str = "runway.dev";
/// The `apiVersion` of the Workflows this server reads.
const API_VERSION: &str = "runway.dev/v1alpha1";

/// Why a manifest file is not read at all (the Workflows it defined before are kept).
#[derive(Debug, thiserror::Error)]
pub(super) enum FileError {
    /// The file cannot be read.
    #[error(transparent)]
    Read(#[from] std::io::Error),
    /// It is not YAML.
    #[error(transparent)]
    Yaml(#[from] serde_saphyr::Error),
    /// A Workflow without `apiVersion`, at a 1-based line.
    #[error("line {0}: a Workflow without apiVersion (use {API_VERSION})")]
    NoApiVersion(usize),
    /// A document of Runway's API group that is not a Workflow of the version this server
    /// reads.
    #[error(
        "line {line}: {api_version} {kind} is not something this server reads (it reads kind Workflow of {API_VERSION})"
    )]
    NotAWorkflow {
        /// The 1-based line the document starts on.
        line: usize,
        /// Its `apiVersion`.
        api_version: String,
        /// Its kind, as `kind <Kind>` or `without kind`.
        kind: String,
    },
    /// A Workflow without `metadata.name`, at a 1-based line.
    #[error("line {0}: a Workflow without metadata.name")]
    NoName(usize),
}

/// Parse one file into Workflow documents; documents of other API groups are skipped.
pub(super) fn parse_file(file: &Path) -> Result<Vec<Document>, FileError> {
    let text = std::fs::read_to_string(file)?;
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text)?;
    let sources = document_texts(&text);
    let mut out = Vec::new();
    for (n, doc) in docs.into_iter().enumerate() {
        if doc.is_null() {
            continue;
        }
        let source = sources.get(n).copied().unwrap_or((0, ""));
        let api_version = doc.get("apiVersion").and_then(Value::as_str);
        let kind = doc.get("kind").and_then(Value::as_str);
        let ours = api_version.is_some_and(|v| v.split('/').next() == Some(GROUP));
        if !ours {
            if kind == Some("Workflow") && api_version.is_none() {
                return Err(FileError::NoApiVersion(source.0 + 1));
            }
            continue;
        }
        if api_version != Some(API_VERSION) || kind != Some("Workflow") {
            return Err(FileError::NotAWorkflow {
                line: source.0 + 1,
                api_version: api_version.unwrap_or_default().to_owned(),
                kind: kind.map_or_else(|| "without kind".to_owned(), |k| format!("kind {k}")),
            });
        }
        let meta = doc.get("metadata");
        let name = meta.and_then(|m| m.get("name")).and_then(Value::as_str);
        let ns = meta
            .and_then(|m| m.get("namespace"))
            .and_then(Value::as_str)
            .unwrap_or(DEFAULT_NAMESPACE);
        let Some(name) = name else {
            return Err(FileError::NoName(source.0 + 1));
        };
        let key = Key::new(ns, name);
        out.push(workflow(key, doc, source));
    }
    Ok(out)
}

/// One Workflow document read into a Workflow, or why it cannot be: a field the type does
/// not know, or a value of the wrong shape, named by its path and line.
fn workflow(key: Key, doc: Value, source: (usize, &str)) -> Document {
    let mut unknown = Vec::new();
    let parsed = serde_path_to_error::deserialize::<_, Workflow>(serde_ignored::Deserializer::new(
        doc,
        &mut |path: serde_ignored::Path<'_>| {
            // `?` marks an optional value's contents: not a part of the path a person writes.
            let path = path
                .to_string()
                .split('.')
                .filter(|segment| *segment != "?")
                .collect::<Vec<_>>()
                .join(".");
            // The type keeps them as its identity, not as fields.
            if path != "apiVersion" && path != "kind" {
                unknown.push(path);
            }
        },
    ));
    match parsed {
        Ok(_) if !unknown.is_empty() => {
            let named = unknown
                .iter()
                .map(|p| match line_of(source, p) {
                    Some(l) => format!("{p} (line {l})"),
                    None => p.clone(),
                })
                .collect::<Vec<_>>()
                .join(", ");
            Err((key, DocumentError::UnknownFields(named)))
        }
        Ok(mut wf) => {
            wf.metadata.namespace = Some(key.namespace.clone());
            Ok(wf)
        }
        Err(e) => {
            let path = e.path().to_string();
            let at = line_of(source, &path)
                .map(|l| format!(" (line {l})"))
                .unwrap_or_default();
            Err((
                key,
                DocumentError::Shape {
                    path,
                    at,
                    source: e.into_inner(),
                },
            ))
        }
    }
}

/// Each YAML document of `text` with the index of its first line, split at `---` lines.
fn document_texts(text: &str) -> Vec<(usize, &str)> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut first_line = 0;
    let mut offset = 0;
    for (i, line) in text.split_inclusive('\n').enumerate() {
        if line.trim_end() == "---" || line.starts_with("--- ") {
            if i > 0 {
                out.push((first_line, &text[start..offset]));
            }
            start = offset + line.len();
            first_line = i + 1;
        }
        offset += line.len();
    }
    out.push((first_line, &text[start..]));
    // A leading `---` opens the first document rather than closing an empty one.
    if text.trim_start().starts_with("---") && out.first().is_some_and(|(_, t)| t.trim().is_empty())
    {
        out.remove(0);
    }
    out
}

/// The 1-based line of the file where the last key of `path` (`spec.steps.0.retry.limt`) is
/// written in `doc`: the first line after its parent's that names the key. A best effort for
/// messages; `None` when the key cannot be found.
fn line_of((first_line, doc): (usize, &str), path: &str) -> Option<usize> {
    let mut from = 0;
    let lines: Vec<&str> = doc.lines().collect();
    for key in path
        .split('.')
        .filter(|k| k.parse::<usize>().is_err() && *k != "?")
    {
        let found = lines
            .iter()
            .enumerate()
            .skip(from)
            .find(|(_, l)| names_key(l, key))?;
        from = found.0;
    }
    Some(first_line + from + 1)
}

/// Whether a YAML line writes `key:` (block or flow style).
fn names_key(line: &str, key: &str) -> bool {
    line.match_indices(key).any(|(i, _)| {
        let before = line[..i].chars().next_back();
        let after = &line[i + key.len()..];
        before.is_none_or(|c| matches!(c, ' ' | '{' | ',' | '-' | '"' | '\''))
            && after.trim_start_matches(['"', '\'']).starts_with(':')
    })
}
