//! A small in-memory Kubernetes API server: enough of the REST semantics (list, watch with
//! resume and bookmarks, create, get, merge/apply patch, status subresource, delete, 404, 409 on
//! a stale resourceVersion, 422 from the Run CRD's CEL rules) for the kube layer to be tested for
//! real, and a log of every request so tests can assert exactly what was sent.

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::broadcast;

/// One request as the server saw it.
#[derive(Debug, Clone)]
pub struct Recorded {
    pub method: String,
    pub path: String,
    pub query: BTreeMap<String, String>,
    pub content_type: Option<String>,
    pub body: Value,
}

type Responder = Arc<dyn Fn(&Value) -> Value + Send + Sync>;
/// Which requests an injected failure answers.
type Matcher = Arc<dyn Fn(&Recorded) -> bool + Send + Sync>;

#[derive(Default)]
struct Inner {
    rv: u64,
    /// (collection path, namespace, name) → object
    objects: BTreeMap<(String, String, String), Value>,
    history: Vec<(u64, String, String, Value)>, // (rv, collection, type, object)
    log: Vec<Recorded>,
    /// resource → responder for create-only review APIs
    reviews: BTreeMap<String, Responder>,
    /// Requests to answer with an HTTP status instead of their result.
    failing: Vec<Failing>,
    /// The next request each picks waits until its gate opens (`None` once one was held).
    holding: Vec<(Matcher, Option<tokio::sync::watch::Receiver<bool>>)>,
}

/// Requests to answer with an HTTP status instead of their result.
struct Failing {
    which: Matcher,
    /// How many more.
    left: usize,
    code: u16,
    /// Whether the request is carried out first (a proxy that gave up on a request the API
    /// server went on to complete) or not at all.
    served: bool,
}

#[derive(Clone)]
pub struct FakeApi {
    inner: Arc<Mutex<Inner>>,
    events: broadcast::Sender<(u64, String, String, Value)>,
    /// Write-held while watches are held: every watch event waits for a read of it.
    watches: Arc<tokio::sync::RwLock<()>>,
    /// Told of every request, for [`FakeApi::wait_until`].
    requested: Arc<tokio::sync::Notify>,
    pub addr: SocketAddr,
}

/// `(collection, namespace, name, subresource)` of an API path; collection is e.g.
/// `runway.dev/v1alpha1/runs` or `v1/secrets`.
/// `(collection, namespace, name, subresource)`.
type ApiPath = (String, Option<String>, Option<String>, Option<String>);

fn parse(path: &str) -> Option<ApiPath> {
    let parts: Vec<&str> = path.trim_matches('/').split('/').collect();
    let (gv, rest) = match parts.as_slice() {
        ["api", v, rest @ ..] => (v.to_string(), rest.to_vec()),
        ["apis", g, v, rest @ ..] => (format!("{g}/{v}"), rest.to_vec()),
        _ => return None,
    };
    let (ns, rest) = match rest.as_slice() {
        ["namespaces", ns, rest @ ..] if !rest.is_empty() => (Some(ns.to_string()), rest.to_vec()),
        _ => (None, rest),
    };
    match rest.as_slice() {
        [res] => Some((format!("{gv}/{res}"), ns, None, None)),
        [res, name] => Some((format!("{gv}/{res}"), ns, Some(name.to_string()), None)),
        [res, name, sub] => Some((
            format!("{gv}/{res}"),
            ns,
            Some(name.to_string()),
            Some(sub.to_string()),
        )),
        _ => None,
    }
}

fn status(code: u16, reason: &str, message: &str) -> Response {
    let body = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": reason, "code": code});
    (
        StatusCode::from_u16(code).unwrap(),
        [("content-type", "application/json")],
        body.to_string(),
    )
        .into_response()
}

fn ok(v: Value) -> Response {
    (
        StatusCode::OK,
        [("content-type", "application/json")],
        v.to_string(),
    )
        .into_response()
}

fn merge(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                if v.is_null() {
                    t.remove(k);
                } else {
                    merge(t.entry(k.clone()).or_insert(Value::Null), v);
                }
            }
        }
        (t, p) => *t = p.clone(),
    }
}

fn fields_match(obj: &Value, selector: Option<&String>) -> bool {
    let Some(sel) = selector else { return true };
    sel.split(',')
        .filter(|s| !s.is_empty())
        .all(|pair| match pair.split_once('=') {
            Some(("metadata.name", v)) => obj["metadata"]["name"] == v,
            Some(("metadata.namespace", v)) => obj["metadata"]["namespace"] == v,
            _ => true,
        })
}

fn labels_match(obj: &Value, selector: Option<&String>) -> bool {
    let Some(sel) = selector else { return true };
    sel.split(',')
        .filter(|s| !s.is_empty())
        .all(|pair| match pair.split_once('=') {
            Some((k, v)) => obj["metadata"]["labels"][k] == v,
            None => true,
        })
}

impl FakeApi {
    pub async fn start() -> Self {
        let (events, _) = broadcast::channel(4096);
        let mut me = Self {
            inner: Arc::default(),
            events,
            watches: Arc::default(),
            requested: Arc::default(),
            addr: "127.0.0.1:0".parse().unwrap(),
        };
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        me.addr = listener.local_addr().unwrap();
        let app = axum::Router::new().fallback(handle).with_state(me.clone());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        me
    }

    /// Hold every watch's events (a reflector falling behind; a watch opened meanwhile replays
    /// nothing either) until the guard is dropped.
    pub async fn hold_watches(&self) -> tokio::sync::OwnedRwLockWriteGuard<()> {
        Arc::clone(&self.watches).write_owned().await
    }

    /// Answer the next `n` requests that `which` picks with HTTP `code` instead of serving them
    /// (an API server restarting, say).
    pub fn fail_next(
        &self,
        n: usize,
        code: u16,
        which: impl Fn(&Recorded) -> bool + Send + Sync + 'static,
    ) {
        self.inject(n, code, which, false);
    }

    /// Carry out the next `n` requests that `which` picks, then answer them with HTTP `code`
    /// instead of their result (a gateway timing out on a write that lands all the same).
    pub fn lose_next_answers(
        &self,
        n: usize,
        code: u16,
        which: impl Fn(&Recorded) -> bool + Send + Sync + 'static,
    ) {
        self.inject(n, code, which, true);
    }

    fn inject(
        &self,
        left: usize,
        code: u16,
        which: impl Fn(&Recorded) -> bool + Send + Sync + 'static,
        served: bool,
    ) {
        self.inner.lock().unwrap().failing.push(Failing {
            which: Arc::new(which),
            left,
            code,
            served,
        });
    }

    /// Hold the next request that `which` picks (logged as it arrives) until the gate this
    /// answers is opened.
    pub fn hold_next(
        &self,
        which: impl Fn(&Recorded) -> bool + Send + Sync + 'static,
    ) -> tokio::sync::watch::Sender<bool> {
        let (open, gate) = tokio::sync::watch::channel(false);
        self.inner
            .lock()
            .unwrap()
            .holding
            .push((Arc::new(which), Some(gate)));
        open
    }

    /// A kube client for this server.
    pub fn client(&self) -> kube::Client {
        runway::install_crypto_provider();
        let config = kube::Config::new(format!("http://{}", self.addr).parse().unwrap());
        kube::Client::try_from(config).unwrap()
    }

    /// Answer POSTs to `collection` (e.g. `authentication.k8s.io/v1/tokenreviews`) with `f(body)`.
    pub fn on_review(&self, collection: &str, f: impl Fn(&Value) -> Value + Send + Sync + 'static) {
        self.inner
            .lock()
            .unwrap()
            .reviews
            .insert(collection.into(), Arc::new(f));
    }

    /// Wait until `pred` holds, re-checking after every change the server makes and every
    /// request it gets.
    pub async fn wait_until(&self, what: &str, pred: impl Fn(&FakeApi) -> bool) {
        let mut rx = self.events.subscribe();
        let ok = tokio::time::timeout(super::harness::PATIENCE, async {
            loop {
                let requested = self.requested.notified();
                tokio::pin!(requested);
                requested.as_mut().enable();
                if pred(self) {
                    return;
                }
                tokio::select! {
                    _ = rx.recv() => {}
                    () = requested => {}
                }
            }
        })
        .await;
        assert!(
            ok.is_ok(),
            "timed out waiting for {what}; requests: {:#?}",
            self.log()
                .iter()
                .map(|r| format!("{} {}", r.method, r.path))
                .collect::<Vec<_>>()
        );
    }

    /// Requests seen so far.
    pub fn log(&self) -> Vec<Recorded> {
        self.inner.lock().unwrap().log.clone()
    }

    /// Requests whose method and path match.
    pub fn requests(&self, method: &str, path_contains: &str) -> Vec<Recorded> {
        self.log()
            .into_iter()
            .filter(|r| r.method == method && r.path.contains(path_contains))
            .collect()
    }

    /// Put an object directly (as kubectl apply would), returning it with metadata filled in.
    pub fn put(&self, collection: &str, obj: Value) -> Value {
        let mut inner = self.inner.lock().unwrap();
        self.put_locked(&mut inner, collection, obj)
    }

    fn put_locked(&self, inner: &mut Inner, collection: &str, mut obj: Value) -> Value {
        inner.rv += 1;
        let rv = inner.rv;
        let ns = obj["metadata"]["namespace"]
            .as_str()
            .unwrap_or("")
            .to_owned();
        if obj["metadata"]["name"].as_str().is_none_or(str::is_empty) {
            let prefix = obj["metadata"]["generateName"]
                .as_str()
                .unwrap_or("object-")
                .to_owned();
            obj["metadata"]["name"] = json!(format!("{prefix}{rv}"));
        }
        let name = obj["metadata"]["name"].as_str().unwrap().to_owned();
        let key = (collection.to_owned(), ns, name);
        let existed = inner.objects.contains_key(&key);
        obj["metadata"]["resourceVersion"] = json!(rv.to_string());
        if obj["metadata"]["uid"].is_null() {
            obj["metadata"]["uid"] = json!(format!("uid-{rv}"));
        }
        if obj["metadata"]["generation"].is_null() {
            obj["metadata"]["generation"] = json!(1);
        }
        if obj["metadata"]["creationTimestamp"].is_null() {
            // As an API server does: now, to the second (a Run's deadline counts from it).
            let now = jiff::Timestamp::from_second(jiff::Timestamp::now().as_second()).unwrap();
            obj["metadata"]["creationTimestamp"] = json!(now.to_string());
        }
        inner.objects.insert(key, obj.clone());
        let ty = if existed { "MODIFIED" } else { "ADDED" };
        inner
            .history
            .push((rv, collection.to_owned(), ty.into(), obj.clone()));
        let _ = self
            .events
            .send((rv, collection.to_owned(), ty.into(), obj.clone()));
        obj
    }

    pub fn get(&self, collection: &str, ns: &str, name: &str) -> Option<Value> {
        self.inner
            .lock()
            .unwrap()
            .objects
            .get(&(collection.into(), ns.into(), name.into()))
            .cloned()
    }

    fn delete(&self, collection: &str, ns: &str, name: &str) -> Option<Value> {
        let mut inner = self.inner.lock().unwrap();
        let mut obj = inner
            .objects
            .remove(&(collection.into(), ns.into(), name.into()))?;
        inner.rv += 1;
        let rv = inner.rv;
        obj["metadata"]["resourceVersion"] = json!(rv.to_string());
        inner
            .history
            .push((rv, collection.to_owned(), "DELETED".into(), obj.clone()));
        let _ = self
            .events
            .send((rv, collection.to_owned(), "DELETED".into(), obj.clone()));
        Some(obj)
    }
}

async fn handle(State(api): State<FakeApi>, req: Request) -> Response {
    let method = req.method().clone();
    let path = req.uri().path().to_owned();
    let query: BTreeMap<String, String> = req
        .uri()
        .query()
        .and_then(|q| reqwest::Url::parse(&format!("http://fake/?{q}")).ok())
        .map(|u| {
            u.query_pairs()
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect()
        })
        .unwrap_or_default();
    let content_type = req
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let bytes: Bytes = axum::body::to_bytes(req.into_body(), usize::MAX)
        .await
        .unwrap_or_default();
    let body: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    let seen = Recorded {
        method: method.to_string(),
        path: path.clone(),
        query: query.clone(),
        content_type: content_type.clone(),
        body: body.clone(),
    };
    let injected = {
        let mut inner = api.inner.lock().unwrap();
        let hit = inner
            .failing
            .iter_mut()
            .find(|f| f.left > 0 && (f.which)(&seen));
        let code = hit.map(|f| {
            f.left -= 1;
            (f.code, f.served)
        });
        let held = inner
            .holding
            .iter_mut()
            .find(|(which, gate)| gate.is_some() && which(&seen))
            .and_then(|(_, gate)| gate.take());
        inner.log.push(seen);
        (code, held)
    };
    let (injected, held) = injected;
    api.requested.notify_waiters();
    if let Some(mut gate) = held {
        let _ = gate.wait_for(|open| *open).await;
    }
    let answer = match injected {
        Some((_, false)) => None,
        _ => Some(serve(api, method, path, query, content_type, body).await),
    };
    match (injected, answer) {
        (Some((code, _)), _) => status(code, "InternalError", "failure injected by the test"),
        (None, answer) => answer.expect("served"),
    }
}

/// Carry out a request as the API server would.
async fn serve(
    api: FakeApi,
    method: Method,
    path: String,
    query: BTreeMap<String, String>,
    content_type: Option<String>,
    body: Value,
) -> Response {
    let Some((collection, ns, name, sub)) = parse(&path) else {
        return status(404, "NotFound", "no such path");
    };
    let review = api.inner.lock().unwrap().reviews.get(&collection).cloned();
    if let (Some(f), &Method::POST) = (review, &method) {
        let mut out = body.clone();
        out["status"] = f(&body);
        return (
            StatusCode::CREATED,
            [("content-type", "application/json")],
            out.to_string(),
        )
            .into_response();
    }
    let ns_s = ns.clone().unwrap_or_default();
    match (method, name, sub) {
        (Method::GET, None, None)
            if query.get("watch").map(String::as_str) == Some("true")
                || query.get("watch").map(String::as_str) == Some("1") =>
        {
            watch(api, collection, ns, query).await
        }
        (Method::GET, None, None) => {
            let inner = api.inner.lock().unwrap();
            let items: Vec<Value> = inner
                .objects
                .iter()
                .filter(|((c, n, _), o)| {
                    *c == collection
                        && ns.as_ref().is_none_or(|x| x == n)
                        && labels_match(o, query.get("labelSelector"))
                        && fields_match(o, query.get("fieldSelector"))
                })
                .map(|(_, o)| o.clone())
                .collect();
            let limit = query
                .get("limit")
                .and_then(|l| l.parse::<usize>().ok())
                .unwrap_or(usize::MAX);
            let items: Vec<Value> = items.into_iter().take(limit).collect();
            ok(
                json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": inner.rv.to_string()}, "items": items}),
            )
        }
        (Method::GET, Some(name), _) => match api.get(&collection, &ns_s, &name) {
            Some(o) => ok(o),
            None => status(
                404,
                "NotFound",
                &format!("{collection} \"{name}\" not found"),
            ),
        },
        (Method::POST, None, None) => {
            let name = body["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            let mut inner = api.inner.lock().unwrap();
            if inner
                .objects
                .contains_key(&(collection.clone(), ns_s.clone(), name.clone()))
            {
                return status(
                    409,
                    "AlreadyExists",
                    &format!("{collection} \"{name}\" already exists"),
                );
            }
            let mut obj = body.clone();
            obj["metadata"]["namespace"] = json!(ns_s);
            if collection.ends_with("/runs") {
                obj.as_object_mut().unwrap().remove("status");
            }
            let created = api.put_locked(&mut inner, &collection, obj);
            (
                StatusCode::CREATED,
                [("content-type", "application/json")],
                created.to_string(),
            )
                .into_response()
        }
        (method @ (Method::PATCH | Method::PUT), Some(name), sub) => {
            let mut inner = api.inner.lock().unwrap();
            let Some(current) = inner
                .objects
                .get(&(collection.clone(), ns_s.clone(), name.clone()))
                .cloned()
            else {
                return status(
                    404,
                    "NotFound",
                    &format!("{collection} \"{name}\" not found"),
                );
            };
            // A replace, of the status subresource only here: like the API server's for a
            // custom resource, it needs the version it replaces and takes only the status.
            if method == Method::PUT {
                if sub.as_deref() != Some("status") {
                    return status(405, "MethodNotAllowed", "not supported by the fake");
                }
                match body["metadata"]["resourceVersion"].as_str() {
                    None => {
                        return status(
                            422,
                            "Invalid",
                            "metadata.resourceVersion: must be specified for an update",
                        );
                    }
                    Some(rv) if Some(rv) != current["metadata"]["resourceVersion"].as_str() => {
                        return status(
                            409,
                            "Conflict",
                            "the object has been modified; please apply your changes to the latest version",
                        );
                    }
                    Some(_) => {}
                }
                let mut next = current;
                next["status"] = body["status"].clone();
                return ok(api.put_locked(&mut inner, &collection, next));
            }
            // A JSON Patch, as the API server applies it: to the stored object, whose patched
            // version must still be the stored one.
            let json_patched = if content_type.as_deref() == Some("application/json-patch+json") {
                let Ok(ops) = serde_json::from_value::<json_patch::Patch>(body.clone()) else {
                    return status(400, "BadRequest", "not a JSON Patch");
                };
                let mut patched = current.clone();
                if let Err(e) = json_patch::patch(&mut patched, &ops) {
                    return status(422, "Invalid", &e.to_string());
                }
                Some(patched)
            } else {
                None
            };
            let body = json_patched.clone().unwrap_or(body);
            if let Some(rv) = body["metadata"]["resourceVersion"].as_str()
                && Some(rv) != current["metadata"]["resourceVersion"].as_str()
            {
                return status(
                    409,
                    "Conflict",
                    "the object has been modified; please apply your changes to the latest version",
                );
            }
            let mut next = current.clone();
            let mut patch = body.clone();
            if let Some(m) = patch.get_mut("metadata").and_then(Value::as_object_mut) {
                m.remove("resourceVersion");
            }
            if sub.as_deref() == Some("status") {
                next["status"] = patch["status"].clone();
            } else {
                if let Some(p) = patch.as_object_mut() {
                    p.remove("status");
                }
                match json_patched {
                    Some(patched) => next = patched,
                    None => merge(&mut next, &patch),
                }
                if next["spec"] != current["spec"] {
                    if collection.ends_with("/runs") {
                        let old: runway::api::Run =
                            serde_json::from_value(current.clone()).unwrap();
                        let new: runway::api::Run = match serde_json::from_value(next.clone()) {
                            Ok(r) => r,
                            Err(e) => return status(422, "Invalid", &e.to_string()),
                        };
                        if let Err(e) = new.validate_cel_update(&old) {
                            return status(422, "Invalid", &e.to_string());
                        }
                    }
                    next["metadata"]["generation"] =
                        json!(current["metadata"]["generation"].as_i64().unwrap_or(1) + 1);
                }
            }
            ok(api.put_locked(&mut inner, &collection, next))
        }
        // A custom resource deleted at once is answered with a Status naming it, not the object.
        // Preconditions, as the API server checks them: 409 when the name is another's now, or
        // the object was written since the version named.
        (Method::DELETE, Some(name), None)
            if ["uid", "resourceVersion"].iter().any(|field| {
                body["preconditions"][field].as_str().is_some_and(|want| {
                    api.get(&collection, &ns_s, &name)
                        .is_some_and(|o| o["metadata"][field] != want)
                })
            }) =>
        {
            status(
                409,
                "Conflict",
                "Precondition failed: the object does not match the precondition",
            )
        }
        (Method::DELETE, Some(name), None) => match api.delete(&collection, &ns_s, &name) {
            Some(o) => ok(json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
                "status": "Success", "details": {"name": name,
                "kind": collection.rsplit('/').next(), "uid": o["metadata"]["uid"]}})),
            None => status(
                404,
                "NotFound",
                &format!("{collection} \"{name}\" not found"),
            ),
        },
        _ => status(405, "MethodNotAllowed", "not supported by the fake"),
    }
}

async fn watch(
    api: FakeApi,
    collection: String,
    ns: Option<String>,
    query: BTreeMap<String, String>,
) -> Response {
    let from: u64 = query
        .get("resourceVersion")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let rx = api.events.subscribe();
    let (replay, current) = {
        let inner = api.inner.lock().unwrap();
        let replay: Vec<_> = inner
            .history
            .iter()
            .filter(|(rv, c, _, _)| *rv > from && *c == collection)
            .cloned()
            .collect();
        (replay, inner.rv)
    };
    // Bookmarks carry the collection's apiVersion, as a real API server's do.
    let api_version = collection
        .rsplit_once('/')
        .map(|(gv, _)| gv.to_owned())
        .unwrap_or_default();
    let (labels, fields) = (
        query.get("labelSelector").cloned(),
        query.get("fieldSelector").cloned(),
    );
    let matches = move |c: &str, o: &Value| {
        c == collection
            && ns
                .as_ref()
                .is_none_or(|n| o["metadata"]["namespace"] == n.as_str())
            && labels_match(o, labels.as_ref())
            && fields_match(o, fields.as_ref())
    };
    let line = |ty: &str, o: &Value| {
        Ok::<_, Infallible>(Bytes::from(format!(
            "{}\n",
            json!({"type": ty, "object": o})
        )))
    };
    let m2 = matches.clone();
    let head = futures::stream::iter(
        replay
            .into_iter()
            .filter(move |(_, c, _, o)| m2(c, o))
            .map(move |(_, _, ty, o)| line(&ty, &o))
            .chain(std::iter::once(line(
                "BOOKMARK",
                &json!({"apiVersion": api_version, "kind": "Bookmark", "metadata": {"resourceVersion": current.to_string()}}),
            ))),
    );
    use futures::StreamExt;
    let live = tokio_stream::wrappers::BroadcastStream::new(rx).filter_map(move |e| {
        let matches = matches.clone();
        async move {
            match e {
                Ok((rv, c, ty, o)) if rv > current && matches(&c, &o) => Some(line(&ty, &o)),
                _ => None,
            }
        }
    });
    // Held watches deliver nothing, what a watch opened meanwhile replays included: a watch
    // that lags does not care when it was opened.
    let gate = Arc::clone(&api.watches);
    let events = head.chain(live).then(move |line| {
        let gate = Arc::clone(&gate);
        async move {
            let _open = gate.read().await;
            line
        }
    });
    let timeout = query
        .get("timeoutSeconds")
        .and_then(|t| t.parse::<u64>().ok())
        .unwrap_or(300);
    let body = events.take_until(tokio::time::sleep(std::time::Duration::from_secs(timeout)));
    Response::builder()
        .header("content-type", "application/json")
        .body(Body::from_stream(body))
        .unwrap()
}
