//! The production store: Runs as custom resources (Workflows and Secrets are `kube_sources`').
//! Reads come from a reflector; writes go to the API server. A get that misses the cache, or
//! whose cached copy is older than this process's own last write, is answered by a direct GET,
//! so a task handle resolves the moment it is returned.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use kube::api::{
    DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions,
    WatchEvent as KubeWatchEvent, WatchParams,
};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
use serde_json::{Value, json};

use super::compact::Compactor;
use super::overlay::{Found, find, is_gone, overlay};
use super::recent::{Recent, rv_num};
use super::{RunStore, StoreError, Versioned, WatchEvent, labels_match};
use crate::api::Run;

/// Field manager of the controller's status writes.
pub(crate) const CONTROLLER_MANAGER: &str = "runway-controller";
/// Field manager of the MCP endpoint's spec writes (`cancel`, `inputResponses`).
pub(crate) const MCP_MANAGER: &str = "runway-mcp";

use super::key_of;
use crate::api::ObjectKey as Key;

/// A Kubernetes API failure as the store reports it.
pub(super) fn map_err(e: kube::Error) -> StoreError {
    match e {
        kube::Error::Api(s) => match (s.code, s.reason.as_str()) {
            (404, _) => StoreError::NotFound,
            (409, "AlreadyExists") => StoreError::AlreadyExists,
            (409, _) => StoreError::Conflict,
            (410, _) => StoreError::Gone,
            (422, _) | (400, _) => StoreError::Invalid(s.message.clone()),
            _ => StoreError::Backend(format!("{} {}: {}", s.code, s.reason, s.message)),
        },
        other => StoreError::Backend(other.to_string()),
    }
}

/// Runs as custom resources.
#[derive(Clone)]
pub struct KubeStore {
    client: Client,
    runs: Store<Run>,
    /// This process's latest writes and what its watches saw, until the reflector has them.
    own: Arc<Recent>,
    /// Shrinks every Run kept: the reflector's, the remembered versions, the watch's.
    compactor: Arc<Compactor>,
}

/// Keys read per page when the controller lists every Run at the source.
const KEYS_PAGE: u32 = 500;

/// How long this process trusts its own write over a reflector that has not seen it yet.
const OWN_WRITES_TTL: Duration = Duration::from_secs(10);

impl KubeStore {
    /// Start the Run reflector and wait for its first list.
    pub async fn start(client: Client) -> Result<Self, StoreError> {
        let (reader, writer) = reflector::store();
        let api: Api<Run> = Api::all(client.clone());
        let compactor = Arc::new(Compactor::default());
        let shrink = Arc::clone(&compactor);
        let own = Arc::new(Recent::new(OWN_WRITES_TTL));
        let gone = Arc::clone(&own);
        let events = watcher(api, watcher::Config::default())
            .modify(move |r| shrink.compact(r))
            // A version remembered from this process's writes or watches outlives the Run when
            // another replica deletes it; the cache's own word that it is gone ends it.
            .inspect_ok(move |e| {
                if let watcher::Event::Delete(r) = e
                    && let Some(k) = Key::of(&r.metadata)
                {
                    gone.deleted(&k, r.metadata.uid.as_deref(), rv_num(r));
                }
            });
        let stream = reflector::reflector(writer, events)
            .default_backoff()
            .touched_objects();
        let last_error = super::fill::follow(stream, "Run", || {});
        super::fill::filled(&reader, "Run", &last_error).await?;
        Ok(Self {
            client,
            runs: reader,
            own,
            compactor,
        })
    }

    fn api(&self, ns: &str) -> Api<Run> {
        Api::namespaced(self.client.clone(), ns)
    }

    /// Remember the answer to one of this process's writes, compacted as the cache keeps it.
    fn remember(&self, mut run: Run) -> Arc<Run> {
        self.compactor.compact(&mut run);
        let run = Arc::new(run);
        self.own.remember(&run);
        run
    }

    /// The Run as the API server has it now.
    async fn fetch(&self, namespace: &str, name: &str) -> Result<Option<Arc<Run>>, StoreError> {
        let got = self.api(namespace).get_opt(name).await.map_err(map_err)?;
        Ok(got.map(Arc::new))
    }

    /// `written`, and on a conflict the version that won remembered first: the writer reads
    /// the Run again to retry, and the cache may still hold the version that lost (another
    /// replica's write reaches it through the watch), so every retry would conflict again.
    async fn learning_from_conflict(
        &self,
        namespace: &str,
        name: &str,
        written: Result<Run, StoreError>,
    ) -> Result<Run, StoreError> {
        if let Err(StoreError::Conflict) = &written
            && let Ok(Some(now)) = Box::pin(self.fetch(namespace, name)).await
        {
            self.remember(Arc::unwrap_or_clone(now));
        }
        written
    }

    /// Own writes that are still fresh.
    fn own_writes(&self) -> Vec<Arc<Run>> {
        self.own.fresh()
    }
}

/// The JSON Patch that writes `run`'s labels, annotations and spec over the stored Run, on
/// condition that the stored version is `run`'s. A merge patch would read a `null` inside the
/// arguments or an answer's content as "delete this key", changing what the CRD keeps
/// immutable (refused, so such a Run could never be cancelled or answered) or dropping the key.
/// Each member is added whole: on the version it was read from, that replaces exactly what
/// changed (answers only gain keys, cancel is set once); the CRD's CEL rules police the rest.
fn spec_patch(run: &Run) -> Result<json_patch::Patch, StoreError> {
    let mut ops = Vec::new();
    if let Some(rv) = &run.metadata.resource_version {
        // The API server compares the patched object's version with the stored one: a stale
        // version is a conflict (a `test` operation would fail as invalid instead).
        ops.push(json!({"op": "replace", "path": "/metadata/resourceVersion", "value": rv}));
    }
    if let Some(labels) = &run.metadata.labels {
        ops.push(json!({"op": "add", "path": "/metadata/labels", "value": labels}));
    }
    if let Some(annotations) = &run.metadata.annotations {
        ops.push(json!({"op": "add", "path": "/metadata/annotations", "value": annotations}));
    }
    let spec = serde_json::to_value(&run.spec).map_err(|e| StoreError::Invalid(e.to_string()))?;
    for (field, value) in spec.as_object().into_iter().flatten() {
        ops.push(json!({"op": "add", "path": format!("/spec/{field}"), "value": value}));
    }
    serde_json::from_value(Value::Array(ops)).map_err(|e| StoreError::Invalid(e.to_string()))
}

/// What one event of the API server's watch means for the watchers of Runs.
enum Seen {
    /// A Run applied or deleted.
    Event(WatchEvent),
    /// Nothing (a bookmark): only the version seen moved on.
    Nothing,
    /// The watch ended: the version is gone (410) or the server failed it.
    End(StoreError),
}

/// Read one watch event, moving `rv` to the version it carries and `recent` past it. The Run
/// is compacted as the cache keeps it, and shared by the event and `recent`.
fn seen(ev: KubeWatchEvent<Run>, rv: &mut String, recent: &Recent, shrink: &Compactor) -> Seen {
    match ev {
        KubeWatchEvent::Added(mut r) | KubeWatchEvent::Modified(mut r) => {
            if let Some(v) = &r.metadata.resource_version {
                rv.clone_from(v);
            }
            shrink.compact(&mut r);
            let r = Arc::new(r);
            recent.remember(&r);
            Seen::Event(WatchEvent::Applied(r))
        }
        KubeWatchEvent::Deleted(r) => {
            if let Some(v) = &r.metadata.resource_version {
                rv.clone_from(v);
            }
            if let Some(k) = Key::of(&r.metadata) {
                recent.deleted(&k, r.metadata.uid.as_deref(), rv_num(&r));
            }
            Seen::Event(WatchEvent::Deleted(Arc::new(r)))
        }
        KubeWatchEvent::Bookmark(b) => {
            *rv = b.metadata.resource_version;
            Seen::Nothing
        }
        KubeWatchEvent::Error(s) if s.code == 410 => Seen::End(StoreError::Gone),
        KubeWatchEvent::Error(s) => Seen::End(StoreError::Backend(s.message)),
    }
}

#[async_trait]
impl RunStore for KubeStore {
    async fn create(&self, run: Run) -> Result<Run, StoreError> {
        let ns = key_of(&run)?.namespace;
        let created = self
            .api(&ns)
            .create(
                &PostParams {
                    field_manager: Some(MCP_MANAGER.into()),
                    ..Default::default()
                },
                &run,
            )
            .await
            .map_err(map_err)?;
        Ok(Arc::unwrap_or_clone(self.remember(created)))
    }

    async fn get(&self, namespace: &str, name: &str) -> Result<Option<Run>, StoreError> {
        Ok(self
            .get_shared(namespace, name)
            .await?
            .map(Arc::unwrap_or_clone))
    }

    async fn get_shared(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<Arc<Run>>, StoreError> {
        let cached = || self.runs.get(&ObjectRef::new(name).within(namespace));
        // The trips to the API server are boxed apart: inline, their state would size the future
        // of every read, and most reads are answered from memory.
        match find(|| self.own.get(namespace, name), cached) {
            Found::Here(r) => Ok(r),
            Found::CaughtUp(c, version) => {
                self.own
                    .forget_caught_up(Key::new(namespace, name), version);
                Ok(Some(c))
            }
            Found::Source => {
                let got = Box::pin(self.fetch(namespace, name)).await?;
                if got.is_none() {
                    self.own.forget_expired(Key::new(namespace, name));
                }
                Ok(got)
            }
        }
    }

    async fn list_now(
        &self,
        namespace: Option<&str>,
        labels: &BTreeMap<String, String>,
    ) -> Result<Vec<Arc<Run>>, StoreError> {
        // Past the reflector: a Run another replica created may not have reached it yet.
        let selector: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let api = match namespace {
            Some(ns) => self.api(ns),
            None => Api::all(self.client.clone()),
        };
        let list = api
            .list(&ListParams::default().labels(&selector.join(",")))
            .await
            .map_err(map_err)?;
        Ok(list.items.into_iter().map(Arc::new).collect())
    }

    async fn keys_now(&self) -> Result<(Vec<Versioned>, String), StoreError> {
        // Metadata only, a page at a time: the pages are one snapshot, whose version is the
        // first page's.
        let api: Api<Run> = Api::all(self.client.clone());
        let mut keys = Vec::new();
        let mut params = ListParams::default().limit(KEYS_PAGE);
        let mut version = None;
        loop {
            let page = api.list_metadata(&params).await.map_err(map_err)?;
            keys.extend(page.items.iter().filter_map(|m| Versioned::of(&m.metadata)));
            version.get_or_insert(page.metadata.resource_version.unwrap_or_default());
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) => params = params.continue_token(&token),
                None => break,
            }
        }
        Ok((keys, version.unwrap_or_default()))
    }

    async fn get_now(&self, namespace: &str, name: &str) -> Result<Option<Arc<Run>>, StoreError> {
        // Remembered like a write's answer: the reads that follow (a reconcile after a watch
        // gap) must not go back to a cache that has not caught up.
        let got = self.fetch(namespace, name).await?;
        Ok(got.map(|r| self.remember(Arc::unwrap_or_clone(r))))
    }

    async fn phase_counts(&self) -> Result<BTreeMap<crate::api::RunPhase, i64>, StoreError> {
        // The cache, overlaid with this process's newer writes (as `list` does), by key.
        let own = self.own_writes(); // before the cache: see `list`
        let gone = self.own.gone();
        let mut phases: HashMap<Key, (Option<u64>, crate::api::RunPhase)> = HashMap::new();
        for r in self.runs.state() {
            let k = key_of(&r)?;
            if !is_gone(&gone, &k, &r) {
                phases.insert(k, (rv_num(&r), r.phase()));
            }
        }
        for r in own {
            let k = key_of(&r)?;
            let newer = phases
                .get(&k)
                .is_none_or(|(rv, _)| rv.zip(rv_num(&r)).is_some_and(|(a, b)| b > a));
            if newer {
                phases.insert(k, (rv_num(&r), r.phase()));
            }
        }
        let mut counts = BTreeMap::new();
        for (_, phase) in phases.into_values() {
            *counts.entry(phase).or_default() += 1;
        }
        Ok(counts)
    }

    async fn list(
        &self,
        namespace: Option<&str>,
        labels: &BTreeMap<String, String>,
    ) -> Result<Vec<Arc<Run>>, StoreError> {
        let wanted = |r: &Run| {
            namespace.is_none_or(|n| r.metadata.namespace.as_deref() == Some(n))
                && labels_match(r.metadata.labels.as_ref(), labels)
        };
        // Own writes first: one is forgotten only once the cache holds it, so what is gone from
        // this read is in the next. The other way round, a Run created here could miss both.
        let own = self.own_writes();
        let gone = self.own.gone();
        let cached_now = |k: &Key| self.runs.get(&ObjectRef::new(&k.name).within(&k.namespace));
        overlay(self.runs.state(), own, &gone, wanted, cached_now)
    }

    async fn update(&self, run: Run) -> Result<Run, StoreError> {
        let Key {
            namespace: ns,
            name,
        } = key_of(&run)?;
        let patch = spec_patch(&run)?;
        let pp = PatchParams {
            field_manager: Some(MCP_MANAGER.into()),
            ..Default::default()
        };
        let updated = self
            .api(&ns)
            .patch(&name, &pp, &Patch::<()>::Json(patch))
            .await
            .map_err(map_err);
        let updated = self.learning_from_conflict(&ns, &name, updated).await?;
        Ok(Arc::unwrap_or_clone(self.remember(updated)))
    }

    async fn update_status(&self, run: Run) -> Result<Arc<Run>, StoreError> {
        let Key {
            namespace: ns,
            name,
        } = key_of(&run)?;
        // A status written on the version it was decided from replaces the whole status with a
        // PUT: the controller is its only author, and a server-side apply of the same body cost
        // the API server more CPU per write (the merge of managed fields) on the path every Run
        // takes. Without a version (no precondition), apply: a custom resource refuses an
        // unconditional PUT.
        if run.metadata.resource_version.is_some() {
            let pp = PostParams {
                field_manager: Some(CONTROLLER_MANAGER.into()),
                ..Default::default()
            };
            let updated = self
                .api(&ns)
                .replace_status(&name, &pp, &run)
                .await
                .map_err(map_err);
            let updated = self.learning_from_conflict(&ns, &name, updated).await?;
            return Ok(self.remember(updated));
        }
        let patch = json!({
            "apiVersion": "runway.dev/v1alpha1",
            "kind": "Run",
            "metadata": {"name": name, "namespace": ns},
            "status": run.status,
        });
        let pp = PatchParams::apply(CONTROLLER_MANAGER).force();
        let updated = self
            .api(&ns)
            .patch_status(&name, &pp, &Patch::Apply(&patch))
            .await
            .map_err(map_err)?;
        Ok(self.remember(updated))
    }

    async fn delete(
        &self,
        namespace: &str,
        name: &str,
        uid: Option<&str>,
        version: Option<&str>,
    ) -> Result<(), StoreError> {
        let mut params = DeleteParams::background();
        if uid.is_some() || version.is_some() {
            // The API server answers 409 when the name now belongs to another Run, or the Run
            // was written since.
            params = params.preconditions(Preconditions {
                uid: uid.map(str::to_owned),
                resource_version: version.map(str::to_owned),
            });
        }
        let answer = self
            .api(namespace)
            .delete(name, &params)
            .await
            .map_err(map_err)?;
        // A custom resource deleted at once is answered with a Status naming its uid (the Run
        // itself when finalizers hold it).
        let uid = answer
            .map_left(|run| run.metadata.uid)
            .map_right(|status| status.details.map(|d| d.uid).filter(|u| !u.is_empty()))
            .into_inner();
        self.own
            .deleted(&Key::new(namespace, name), uid.as_deref(), None);
        Ok(())
    }

    fn watch(
        &self,
        resource_version: Option<String>,
    ) -> BoxStream<'static, Result<WatchEvent, StoreError>> {
        let api: Api<Run> = Api::all(self.client.clone());
        let recent = Arc::clone(&self.own);
        let shrink = Arc::clone(&self.compactor);
        // Follow the watch across server-side timeouts, resuming from the last version seen
        // (bookmarks included), until the API server says that version is gone.
        futures::stream::unfold(
            (api, resource_version, None::<BoxStream<'static, _>>, false),
            move |(api, rv, stream, done)| {
                let (recent, shrink) = (Arc::clone(&recent), Arc::clone(&shrink));
                async move {
                    if done {
                        return None;
                    }
                    let mut rv = match rv {
                        Some(rv) => rv,
                        None => match api.list_metadata(&ListParams::default().limit(1)).await {
                            Ok(l) => l.metadata.resource_version.unwrap_or_default(),
                            Err(e) => return Some((Err(map_err(e)), (api, None, None, true))),
                        },
                    };
                    let mut stream = match stream {
                        Some(s) => s,
                        None => match api.watch(&WatchParams::default().timeout(290), &rv).await {
                            Ok(s) => s.map_err(map_err).boxed(),
                            Err(e) => return Some((Err(map_err(e)), (api, Some(rv), None, true))),
                        },
                    };
                    loop {
                        match stream.next().await {
                            None => {
                                match api.watch(&WatchParams::default().timeout(290), &rv).await {
                                    Ok(s) => stream = s.map_err(map_err).boxed(),
                                    Err(e) => {
                                        return Some((
                                            Err(map_err(e)),
                                            (api, Some(rv), None, true),
                                        ));
                                    }
                                }
                            }
                            Some(Err(e)) => return Some((Err(e), (api, Some(rv), None, true))),
                            Some(Ok(ev)) => match seen(ev, &mut rv, &recent, &shrink) {
                                Seen::Nothing => {}
                                Seen::Event(out) => {
                                    return Some((Ok(out), (api, Some(rv), Some(stream), false)));
                                }
                                Seen::End(e) => return Some((Err(e), (api, Some(rv), None, true))),
                            },
                        }
                    }
                }
            },
        )
        .boxed()
    }

    async fn resource_version(&self) -> Result<String, StoreError> {
        let api: Api<Run> = Api::all(self.client.clone());
        let l = api
            .list_metadata(&ListParams::default().limit(1))
            .await
            .map_err(map_err)?;
        Ok(l.metadata.resource_version.unwrap_or_default())
    }
}
