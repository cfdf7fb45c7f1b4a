//! Workflows for the embedded store: read from a directory of the same YAML manifests that
//! `kubectl apply -f` takes, validated, given `Ready` conditions, and reloaded when files change.
//! A bad file never stops the server: its problem is reported and its last good Workflows stay.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use serde_json::Value;
use tokio::sync::watch;

use super::WorkflowSource;
use super::sqlite::new_uid;
use crate::api::{Workflow, WorkflowSpec, WorkflowStatus, conditions, reasons};
use crate::engine::validate::{self, Capabilities};

/// Namespace of manifests that name none.
pub const DEFAULT_NAMESPACE: &str = "default";

/// A file that could not be read or parsed at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The file.
    pub file: PathBuf,
    /// What is wrong.
    pub message: String,
}

type Key = (String, String);

/// Workflows loaded from a directory.
#[derive(Clone)]
pub struct ManifestWorkflows {
    inner: Arc<Inner>,
}

struct Inner {
    dir: PathBuf,
    caps: Capabilities,
    state: RwLock<State>,
    changes: watch::Sender<u64>,
}

#[derive(Default)]
struct State {
    workflows: BTreeMap<Key, Workflow>,
    by_file: HashMap<PathBuf, Vec<Key>>,
    fingerprint: Vec<(PathBuf, SystemTime, u64)>,
    problems: Vec<Problem>,
}

fn ready(wf: &Workflow, status: bool, reason: &str, message: String) -> WorkflowStatus {
    WorkflowStatus::with_ready(
        wf,
        Condition {
            type_: conditions::READY.into(),
            status: if status { "True" } else { "False" }.into(),
            reason: reason.into(),
            message,
            last_transition_time: crate::api::kube_time(jiff::Timestamp::now()),
            observed_generation: wf.metadata.generation,
        },
    )
}

fn yaml_files(dir: &Path) -> Vec<PathBuf> {
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

fn fingerprint(files: &[PathBuf]) -> Vec<(PathBuf, SystemTime, u64)> {
    files
        .iter()
        .filter_map(|f| {
            let m = std::fs::metadata(f).ok()?;
            Some((f.clone(), m.modified().ok()?, m.len()))
        })
        .collect()
}

/// A Workflow document of a file, or the key and error of one that does not deserialize.
type Document = Result<Workflow, (Key, String)>;

/// Parse one file into Workflow documents; other kinds are skipped.
fn parse_file(file: &Path) -> Result<Vec<Document>, String> {
    let text = std::fs::read_to_string(file).map_err(|e| e.to_string())?;
    let docs: Vec<Value> = serde_saphyr::from_multiple(&text).map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    for doc in docs {
        if doc.is_null() {
            continue;
        }
        if doc.get("kind").and_then(Value::as_str) != Some("Workflow")
            || doc.get("apiVersion").and_then(Value::as_str) != Some("runway.dev/v1alpha1")
        {
            continue;
        }
        let meta = doc.get("metadata");
        let name = meta.and_then(|m| m.get("name")).and_then(Value::as_str);
        let ns = meta
            .and_then(|m| m.get("namespace"))
            .and_then(Value::as_str)
            .unwrap_or(DEFAULT_NAMESPACE);
        let Some(name) = name else {
            return Err("a Workflow without metadata.name".into());
        };
        let key = (ns.to_owned(), name.to_owned());
        match serde_path_to_error::deserialize::<_, Workflow>(doc) {
            Ok(mut wf) => {
                wf.metadata.namespace = Some(key.0.clone());
                out.push(Ok(wf));
            }
            Err(e) => out.push(Err((key, format!("{}: {}", e.path(), e.inner())))),
        }
    }
    Ok(out)
}

impl ManifestWorkflows {
    /// Load `dir` now. `caps` says which step kinds this server can run.
    pub fn load(dir: &Path, caps: Capabilities) -> Self {
        let (changes, _) = watch::channel(0);
        let me = Self {
            inner: Arc::new(Inner {
                dir: dir.to_path_buf(),
                caps,
                state: RwLock::new(State::default()),
                changes,
            }),
        };
        me.reload();
        me
    }

    /// Re-read the directory if any file changed. Returns whether anything was reloaded.
    pub fn reload(&self) -> bool {
        let files = yaml_files(&self.inner.dir);
        let fp = fingerprint(&files);
        if self.inner.state.read().expect("state lock").fingerprint == fp && !fp.is_empty() {
            return false;
        }
        let mut state = self.inner.state.write().expect("state lock");
        let previous = state.workflows.clone();
        let mut next: BTreeMap<Key, Workflow> = BTreeMap::new();
        let mut by_file = HashMap::new();
        let mut problems = Vec::new();
        for file in &files {
            match parse_file(file) {
                Ok(docs) => {
                    let mut keys = Vec::new();
                    for doc in docs {
                        let wf = match doc {
                            Ok(wf) => {
                                let prev = previous.get(&key_of(&wf));
                                self.validated(wf, prev)
                            }
                            Err((key, message)) => {
                                invalid_manifest(&key, file, &message, previous.get(&key))
                            }
                        };
                        let key = key_of(&wf);
                        keys.push(key.clone());
                        next.insert(key, wf);
                    }
                    by_file.insert(file.clone(), keys);
                }
                Err(message) => {
                    tracing::error!(file = %file.display(), %message, "cannot load workflow manifest");
                    problems.push(Problem {
                        file: file.clone(),
                        message: message.clone(),
                    });
                    // Keep what this file defined before it broke, as an API server would.
                    if let Some(keys) = state.by_file.get(file) {
                        for k in keys {
                            if let Some(wf) = previous.get(k) {
                                next.insert(k.clone(), wf.clone());
                            }
                        }
                        by_file.insert(file.clone(), keys.clone());
                    }
                }
            }
        }
        mark_duplicate_tools(&mut next);
        for ((ns, name), wf) in &next {
            let now = wf.status.as_ref().and_then(|s| s.conditions.first());
            let before = previous
                .get(&(ns.clone(), name.clone()))
                .and_then(|w| w.status.as_ref())
                .and_then(|s| s.conditions.first());
            if let Some(c) = now
                && c.status != "True"
                && before.map(|b| (&b.reason, &b.message)) != Some((&c.reason, &c.message))
            {
                tracing::warn!(namespace = %ns, workflow = %name, reason = %c.reason, "workflow not ready: {}", c.message);
            }
        }
        let changed = next != previous;
        state.workflows = next;
        state.by_file = by_file;
        state.fingerprint = fp;
        state.problems = problems;
        drop(state);
        if changed {
            self.inner.changes.send_modify(|v| *v += 1);
        }
        changed
    }

    fn validated(&self, mut wf: Workflow, previous: Option<&Workflow>) -> Workflow {
        carry_identity(&mut wf, previous);
        let status = match validate::workflow(&wf, self.inner.caps) {
            Ok(()) => ready(&wf, true, reasons::VALID, "workflow is valid".into()),
            Err(e) => ready(&wf, false, e.reason, e.message),
        };
        wf.status = Some(keep_transition_time(status, previous));
        wf
    }

    /// Files that could not be parsed at the last reload.
    pub fn problems(&self) -> Vec<Problem> {
        self.inner
            .state
            .read()
            .expect("state lock")
            .problems
            .clone()
    }

    /// Poll the directory for changes until the returned task is aborted.
    pub fn spawn_reloader(&self, every: Duration) -> tokio::task::JoinHandle<()> {
        let me = self.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            loop {
                tick.tick().await;
                let m = me.clone();
                if let Ok(true) = tokio::task::spawn_blocking(move || m.reload()).await {
                    tracing::info!(dir = %me.inner.dir.display(), "workflows reloaded");
                }
            }
        })
    }
}

fn key_of(wf: &Workflow) -> Key {
    (
        wf.metadata
            .namespace
            .clone()
            .unwrap_or_else(|| DEFAULT_NAMESPACE.into()),
        wf.metadata.name.clone().unwrap_or_default(),
    )
}

fn carry_identity(wf: &mut Workflow, previous: Option<&Workflow>) {
    match previous {
        Some(p) => {
            wf.metadata.uid = p.metadata.uid.clone();
            wf.metadata.creation_timestamp = p.metadata.creation_timestamp.clone();
            let g = p.metadata.generation.unwrap_or(1);
            wf.metadata.generation = Some(if p.spec == wf.spec { g } else { g + 1 });
        }
        None => {
            wf.metadata.uid = Some(new_uid());
            wf.metadata.creation_timestamp = Some(crate::api::kube_time(jiff::Timestamp::now()));
            wf.metadata.generation = Some(1);
        }
    }
    wf.metadata.resource_version = wf.metadata.generation.map(|g| g.to_string());
}

/// Keep the condition's transition time when nothing about it changed, so reloads are no-ops.
fn keep_transition_time(mut status: WorkflowStatus, previous: Option<&Workflow>) -> WorkflowStatus {
    if let Some(prev) = previous.and_then(|p| p.status.as_ref())
        && let (Some(new), Some(old)) = (status.conditions.first_mut(), prev.conditions.first())
        && (
            new.status.as_str(),
            new.reason.as_str(),
            new.message.as_str(),
            new.observed_generation,
        ) == (
            old.status.as_str(),
            old.reason.as_str(),
            old.message.as_str(),
            old.observed_generation,
        )
    {
        new.last_transition_time = old.last_transition_time.clone();
    }
    status
}

fn invalid_manifest(
    key: &Key,
    file: &Path,
    message: &str,
    previous: Option<&Workflow>,
) -> Workflow {
    let mut wf = Workflow::new(
        &key.1,
        WorkflowSpec {
            tool: Default::default(),
            execution: Default::default(),
            elicit: vec![],
            steps: vec![],
            finally: vec![],
            result: None,
        },
    );
    wf.metadata.namespace = Some(key.0.clone());
    carry_identity(&mut wf, previous);
    let status = ready(
        &wf,
        false,
        reasons::INVALID_MANIFEST,
        format!("{}: {message}", file.display()),
    );
    wf.status = Some(keep_transition_time(status, previous));
    wf
}

fn mark_duplicate_tools(all: &mut BTreeMap<Key, Workflow>) {
    let mut seen: HashMap<(String, String), String> = HashMap::new();
    for ((ns, name), wf) in all.iter_mut() {
        if !wf.is_ready() {
            continue;
        }
        let tool = wf.tool_name().to_owned();
        if let Some(first) = seen.get(&(ns.clone(), tool.clone())) {
            let status = ready(
                wf,
                false,
                reasons::DUPLICATE_TOOL,
                format!("tool name {tool} is already offered by workflow {first}"),
            );
            wf.status = Some(status);
        } else {
            seen.insert((ns.clone(), tool), name.clone());
        }
    }
}

#[async_trait]
impl WorkflowSource for ManifestWorkflows {
    async fn get(&self, namespace: &str, name: &str) -> Option<Workflow> {
        let state = self.inner.state.read().expect("state lock");
        state
            .workflows
            .get(&(namespace.to_owned(), name.to_owned()))
            .cloned()
    }

    async fn list(&self, namespace: &str) -> Vec<Workflow> {
        let state = self.inner.state.read().expect("state lock");
        state
            .workflows
            .range((namespace.to_owned(), String::new())..)
            .take_while(|((ns, _), _)| ns == namespace)
            .map(|(_, wf)| wf.clone())
            .collect()
    }

    fn changes(&self) -> watch::Receiver<u64> {
        self.inner.changes.subscribe()
    }
}
