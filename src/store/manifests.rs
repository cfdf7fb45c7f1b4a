//! Workflows for the embedded store: read from a directory of the same YAML manifests that
//! `kubectl apply -f` takes, validated, given `Ready` conditions, and reloaded when files change.
//! A bad file never stops the server: its problem is reported and its last good Workflows stay.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use tokio::sync::watch;

use super::WorkflowSource;
use super::new_uid;
use crate::api::{Workflow, WorkflowSpec, WorkflowStatus, reasons};
use crate::engine::validate::{self, Capabilities};

use super::manifest_files::{DEFAULT_NAMESPACE, fingerprint, parse_file, yaml_files};

/// A file that could not be read or parsed at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The file.
    pub file: PathBuf,
    /// What is wrong.
    pub message: String,
}

use crate::api::ObjectKey as Key;

/// Workflows loaded from a directory.
#[derive(Clone)]
pub struct ManifestWorkflows {
    inner: Arc<Inner>,
}

struct Inner {
    dir: PathBuf,
    caps: Capabilities,
    /// Where identities outlive the process (`runway serve`); without it, a fresh load gives
    /// them in file order.
    book: Option<super::identities::WorkflowBook>,
    state: RwLock<State>,
    changes: watch::Sender<u64>,
}

#[derive(Default)]
struct State {
    workflows: BTreeMap<Key, Workflow>,
    /// Ready Workflows by (namespace, tool name).
    tools: HashMap<(String, String), Arc<Workflow>>,
    by_file: HashMap<PathBuf, Vec<Key>>,
    fingerprint: Vec<(PathBuf, SystemTime, u64)>,
    problems: Vec<Problem>,
}

/// `wf`'s status with its `Ready` condition (the one rule, [`WorkflowStatus::ready`]), the
/// transition time carried over from `previous`.
fn ready(
    wf: &Workflow,
    previous: Option<&Workflow>,
    ok: bool,
    reason: &str,
    message: String,
) -> WorkflowStatus {
    let previous = previous.and_then(|p| p.status.as_ref());
    WorkflowStatus::ready(wf, previous, ok, reason, message, jiff::Timestamp::now())
}

impl ManifestWorkflows {
    /// Load `dir` now. `caps` says which step kinds this server can run.
    pub fn load(dir: &Path, caps: Capabilities) -> Self {
        Self::load_with(dir, caps, None)
    }

    /// [`ManifestWorkflows::load`], the Workflows' identities kept in `book`.
    pub fn load_with(
        dir: &Path,
        caps: Capabilities,
        book: Option<super::identities::WorkflowBook>,
    ) -> Self {
        let (changes, _) = watch::channel(0);
        let me = Self {
            inner: Arc::new(Inner {
                dir: dir.to_path_buf(),
                caps,
                book,
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
                            Err((key, e)) => invalid_manifest(
                                &key,
                                file,
                                &e.to_string(),
                                previous.get(&key),
                                self.inner.book.as_ref(),
                            ),
                        };
                        let key = key_of(&wf);
                        keys.push(key.clone());
                        next.insert(key, wf);
                    }
                    by_file.insert(file.clone(), keys);
                }
                Err(e) => {
                    let message = e.to_string();
                    tracing::error!(file = %file.display(), %message, "cannot load workflow manifest");
                    problems.push(Problem {
                        file: file.clone(),
                        message,
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
        mark_duplicate_tools(&mut next, &previous, self.inner.caps);
        log_changes(&previous, &next);
        let changed = next != previous;
        state.tools = next
            .iter()
            .filter(|(_, wf)| wf.is_ready())
            .map(|(k, wf)| {
                (
                    (k.namespace.clone(), wf.tool_name().to_owned()),
                    Arc::new(wf.clone()),
                )
            })
            .collect();
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
        carry_identity(&mut wf, previous, self.inner.book.as_ref());
        let status = match validate::workflow(&wf, self.inner.caps) {
            Ok(()) => ready(
                &wf,
                previous,
                true,
                reasons::VALID,
                "workflow is valid".into(),
            ),
            Err(e) => ready(&wf, previous, false, e.reason, e.message),
        };
        wf.status = Some(status);
        wf
    }

    /// Every Workflow of every namespace, ordered by namespace and name.
    pub fn snapshot(&self) -> Vec<Workflow> {
        let state = self.inner.state.read().expect("state lock");
        state.workflows.values().cloned().collect()
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
    pub(crate) fn spawn_reloader(&self, every: Duration) -> tokio::task::JoinHandle<()> {
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

/// Say what a reload changed: Workflows added, changed, removed, becoming Ready, and every
/// Workflow that is (still) not Ready, so the log after each reload is complete on its own.
fn log_changes(previous: &BTreeMap<Key, Workflow>, next: &BTreeMap<Key, Workflow>) {
    for (key, wf) in next {
        let (ns, name) = (&key.namespace, &key.name);
        let before = previous.get(key);
        let c = wf.status.as_ref().and_then(|s| s.conditions.first());
        let (reason, message) = c.map_or(("", ""), |c| (c.reason.as_str(), c.message.as_str()));
        match before {
            None => {
                tracing::info!(namespace = %ns, workflow = %name, ready = wf.is_ready(), "workflow added")
            }
            Some(b) if b.metadata.generation != wf.metadata.generation => {
                tracing::info!(namespace = %ns, workflow = %name, ready = wf.is_ready(), generation = ?wf.metadata.generation, "workflow changed")
            }
            Some(_) => {}
        }
        if !wf.is_ready() {
            tracing::warn!(namespace = %ns, workflow = %name, reason, "workflow not ready: {message}");
        } else if before.is_some_and(|b| !b.is_ready()) {
            tracing::info!(namespace = %ns, workflow = %name, tool = wf.tool_name(), "workflow ready");
        }
    }
    for key in previous.keys().filter(|k| !next.contains_key(*k)) {
        tracing::info!(namespace = %key.namespace, workflow = %key.name, "workflow removed");
    }
}

/// A manifest's key: a Workflow without a namespace lives in `default`, as with kubectl.
fn key_of(wf: &Workflow) -> Key {
    Key::new(
        wf.metadata
            .namespace
            .as_deref()
            .unwrap_or(DEFAULT_NAMESPACE),
        wf.metadata.name.as_deref().unwrap_or_default(),
    )
}

fn carry_identity(
    wf: &mut Workflow,
    previous: Option<&Workflow>,
    book: Option<&super::identities::WorkflowBook>,
) {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    match previous {
        Some(p) => {
            wf.metadata.uid = p.metadata.uid.clone();
            wf.metadata.creation_timestamp = p.metadata.creation_timestamp.clone();
            let g = p.metadata.generation.unwrap_or(1);
            wf.metadata.generation = Some(if p.spec == wf.spec { g } else { g + 1 });
        }
        None => {
            let key = key_of(wf);
            let (uid, created) = match book.and_then(|b| b.get(&key.namespace, &key.name)) {
                Some(known) => known,
                None => {
                    // Full precision (the API server keeps seconds): the tool-name rule orders
                    // by creation time, and files added within one second must still come in
                    // order.
                    let fresh = (new_uid(), jiff::Timestamp::now());
                    if let Some(b) = book {
                        b.put(&key.namespace, &key.name, &fresh.0, fresh.1);
                    }
                    fresh
                }
            };
            wf.metadata.uid = Some(uid);
            wf.metadata.creation_timestamp = Some(Time(created));
            wf.metadata.generation = Some(1);
        }
    }
    wf.metadata.resource_version = wf.metadata.generation.map(|g| g.to_string());
}

/// Keep the condition's transition time when nothing about it changed, so reloads are no-ops.
fn invalid_manifest(
    key: &Key,
    file: &Path,
    message: &str,
    previous: Option<&Workflow>,
    book: Option<&super::identities::WorkflowBook>,
) -> Workflow {
    let mut wf = Workflow::new(
        &key.name,
        WorkflowSpec {
            tool: Default::default(),
            execution: Default::default(),
            elicit: vec![],
            steps: vec![],
            finally: vec![],
            result: None,
            schedules: vec![],
            suspend: false,
            notify: None,
        },
    );
    wf.metadata.namespace = Some(key.namespace.clone());
    carry_identity(&mut wf, previous, book);
    wf.status = Some(ready(
        &wf,
        previous,
        false,
        reasons::INVALID_MANIFEST,
        format!("{}: {message}", file.display()),
    ));
    wf
}

/// Apply the tool-name rule to the Workflows that are valid on their own.
fn mark_duplicate_tools(
    all: &mut BTreeMap<Key, Workflow>,
    previous: &BTreeMap<Key, Workflow>,
    caps: Capabilities,
) {
    let snapshot: Vec<Workflow> = all.values().cloned().collect();
    for (key, wf) in all.iter_mut() {
        if !wf.is_ready() {
            continue;
        }
        if let Err(e) = validate::readiness(wf, &snapshot, caps) {
            wf.status = Some(ready(wf, previous.get(key), false, e.reason, e.message));
        }
    }
}

#[async_trait]
impl WorkflowSource for ManifestWorkflows {
    async fn get(&self, namespace: &str, name: &str) -> Option<Workflow> {
        let state = self.inner.state.read().expect("state lock");
        state.workflows.get(&Key::new(namespace, name)).cloned()
    }

    async fn list(&self, namespace: &str) -> Vec<Workflow> {
        let state = self.inner.state.read().expect("state lock");
        state
            .workflows
            .range(Key::new(namespace, "")..)
            .take_while(|(k, _)| k.namespace == namespace)
            .map(|(_, wf)| wf.clone())
            .collect()
    }

    async fn namespaces(&self) -> Vec<String> {
        let state = self.inner.state.read().expect("state lock");
        let mut out: Vec<String> = state
            .workflows
            .keys()
            .map(|k| k.namespace.clone())
            .collect();
        out.dedup();
        out
    }

    async fn tool(&self, namespace: &str, name: &str) -> Option<Arc<Workflow>> {
        let state = self.inner.state.read().expect("state lock");
        state
            .tools
            .get(&(namespace.to_owned(), name.to_owned()))
            .cloned()
    }

    fn changes(&self) -> watch::Receiver<u64> {
        self.inner.changes.subscribe()
    }
}
