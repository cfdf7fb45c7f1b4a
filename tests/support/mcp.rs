//! An in-process `runway serve` and a raw MCP-over-HTTP client, so tests can send exactly the
//! requests (and the malformed ones) they mean to.

use std::net::SocketAddr;

use std::pin::Pin;

use futures::{Stream, StreamExt};
use reqwest::StatusCode;
use reqwest::header::HeaderMap;
use runway::server::{AuthMode, Options, Server};
use serde_json::{Value, json};

use super::harness::TempDir;

pub const VERSION: &str = "2026-07-28";
pub const TASKS: &str = "io.modelcontextprotocol/tasks";

/// The auth file most tests use: alice, dave (dev) and bob (dev, ops: may list runs) in team-a,
/// carol in team-b, olga operates team-a, rita may only read runs, paula (dev, approvers) may
/// not list runs.
pub const AUTH: &str = r#"
tokens:
  - { token: alice-token, user: alice, groups: [dev], namespace: team-a }
  - { token: bob-token, user: bob, groups: [dev, ops], namespace: team-a }
  - { token: dave-token, user: dave, groups: [dev], namespace: team-a }
  - { token: carol-token, user: carol, groups: [b-devs], namespace: team-b }
  - { token: olga-token, user: olga, groups: [operators], namespace: team-a }
  - { token: reader-token, user: rita, groups: [readers], namespace: team-a }
  - { token: paula-token, user: paula, groups: [dev, approvers], namespace: team-a }
rules:
  - { groups: [dev], namespaces: [team-a], resources: [runs], verbs: [get, watch, create, update] }
  - { groups: [dev], namespaces: [team-a], resources: [workflows], verbs: [get, list] }
  - { groups: [ops], namespaces: [team-a], resources: [runs], verbs: [list] }
  - { users: [carol], namespaces: [team-b], resources: ["*"], verbs: ["*"] }
  - { groups: [operators], namespaces: [team-a], resources: ["*"], verbs: ["*"] }
  - { groups: [readers], namespaces: [team-a], resources: [runs], verbs: [get] }
"#;

/// Workflows of the task tests (a quick one, a nap, forms, approvals, failures, a sync one),
/// written for namespace `NS`.
pub const TASK_WORKFLOWS: &str = r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: quick, namespace: NS }
spec:
  tool: { description: Finishes at once. }
  execution: { pollInterval: 250ms, ttlAfterFinished: 1h }
  steps: [ { name: work, delay: { duration: 10ms } } ]
  result: { content: [ { type: text, text: "quick done" } ] }
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: nap, namespace: NS }
spec:
  tool: { description: Sleeps for an hour unless cancelled. }
  steps: [ { name: sleep, delay: { duration: 1h } } ]
  finally: [ { name: cleanup, delay: { duration: 10ms } } ]
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: form, namespace: NS }
spec:
  tool: { description: Two questions. }
  steps:
    - name: ask
      input:
        requests:
          - { name: a, message: "A?", requestedSchema: { type: object, properties: { v: { type: string } } } }
          - { name: b, message: "B?", requestedSchema: { type: object, properties: { v: { type: string } } } }
  finally: [ { name: cleanup, delay: { duration: 10ms } } ]
  result: { content: [ { type: text, text: "{{ inputs.a.v }}{{ inputs.b.v }}" } ] }
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: gated, namespace: NS }
spec:
  tool: { description: Needs an ops approver other than the requester. }
  steps:
    - name: ask
      input:
        requests:
          - { name: ok, message: "ok?", approvers: { groups: [ops] }, distinctFromRequester: true }
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: signoff, namespace: NS }
spec:
  tool: { description: Needs a sign-off from the approvers group. }
  steps:
    - name: ask
      input:
        requests:
          - name: release
            message: "Release?"
            approvers: { groups: [approvers] }
            requestedSchema:
              type: object
              properties:
                approve: { type: boolean }
                channel: { type: string, enum: [stable, beta] }
              required: [approve]
          - { name: note, message: "Anything to add?" }
  result: { content: [ { type: text, text: "{{ inputs.release.channel }}" } ] }
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: sso, namespace: NS }
spec:
  tool: { description: Sends the caller to sign in. }
  steps:
    - name: ask
      input:
        requests:
          - { name: login, message: "Sign in, please", url: "https://sso.example.com/start?task={{ run.name }}" }
  result: { content: [ { type: text, text: "signed in" } ] }
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: tool-error, namespace: NS }
spec:
  tool: { description: Fails as a tool error. }
  steps: [ { name: f, fail: { message: "nope" } } ]
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: proto-error, namespace: NS }
spec:
  tool: { description: Fails as a protocol error. }
  steps: [ { name: f, fail: { error: { code: -31042, message: "broken" } } } ]
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: sync-only, namespace: NS }
spec:
  tool: { description: Never a task. }
  execution: { mode: sync }
  result: { content: [ { type: text, text: "sync" } ] }
"#;

pub struct Mcp {
    pub dir: TempDir,
    pub server: Option<Server>,
    pub addr: SocketAddr,
}

impl Mcp {
    /// Start a server with these Workflow manifests in namespace team-a (and team-b copies).
    pub async fn start(manifests: &[(&str, &str)]) -> Self {
        Self::start_in(Self::prepare(manifests)).await
    }

    /// A directory with these manifests (team-a and team-b copies) and the auth file.
    pub fn prepare(manifests: &[(&str, &str)]) -> TempDir {
        let dir = TempDir::new();
        let wf = dir.path().join("workflows");
        std::fs::create_dir_all(&wf).unwrap();
        for (name, yaml) in manifests {
            std::fs::write(
                wf.join(name),
                yaml.replace("namespace: NS", "namespace: team-a"),
            )
            .unwrap();
            std::fs::write(
                wf.join(format!("b-{name}")),
                yaml.replace("namespace: NS", "namespace: team-b"),
            )
            .unwrap();
        }
        std::fs::write(dir.path().join("auth.yaml"), AUTH).unwrap();
        dir
    }

    pub async fn start_in(dir: TempDir) -> Self {
        Self::start_in_with(dir, |_| {}).await
    }

    /// Start a server with these manifests and MCP settings changed by `tune`.
    pub async fn start_with(
        manifests: &[(&str, &str)],
        tune: impl FnOnce(&mut runway::mcp::Config),
    ) -> Self {
        Self::start_in_with(Self::prepare(manifests), tune).await
    }

    /// Start a server on `dir` with MCP settings changed by `tune`.
    pub async fn start_in_with(dir: TempDir, tune: impl FnOnce(&mut runway::mcp::Config)) -> Self {
        // As `runway serve` does by default: the archive beside the Runs.
        let archive = runway::store::archive::keeper::Settings {
            address: Some(format!("sqlite:{}", dir.path().join("runs.db").display())),
            retention: Default::default(),
        };
        Self::start_archived(dir, tune, archive).await
    }

    /// Start a server on `dir` with MCP settings changed by `tune`, archiving as `archive`
    /// says.
    pub async fn start_archived(
        dir: TempDir,
        tune: impl FnOnce(&mut runway::mcp::Config),
        archive: runway::store::archive::keeper::Settings,
    ) -> Self {
        runway::install_crypto_provider();
        let mut mcp = runway::mcp::Config::new();
        mcp.state_keys = vec![b"0123456789abcdef0123456789abcdef-test".to_vec()];
        tune(&mut mcp);
        let server = Server::start(Options {
            workflows: dir.path().join("workflows"),
            db: dir.path().join("runs.db"),
            listen: "127.0.0.1:0".parse().unwrap(),
            workers: 8,
            auth: AuthMode::File(dir.path().join("auth.yaml")),
            mcp,
            egress: super::harness::local_egress(),
            archive,
        })
        .await
        .unwrap();
        let addr = server.addr;
        Self {
            dir,
            server: Some(server),
            addr,
        }
    }

    pub async fn stop(mut self) -> TempDir {
        self.server.take().unwrap().stop().await;
        let Mcp { dir, .. } = self;
        dir
    }

    /// The team-a endpoint.
    pub fn url(&self) -> String {
        format!("http://{}/namespaces/team-a/mcp", self.addr)
    }

    pub fn client(&self, token: &str) -> Client {
        Client::new(
            &format!("http://{}", self.addr),
            Some(token),
            "/namespaces/team-a/mcp",
        )
    }

    pub fn store(&self) -> &runway::store::sqlite::SqliteStore {
        &self.server.as_ref().unwrap().store
    }

    /// Wait (on the store's watch) until the Run behind `task` in team-a satisfies `pred`.
    pub async fn wait(
        &self,
        task: &str,
        what: &str,
        pred: impl Fn(&runway::api::Run) -> bool,
    ) -> runway::api::Run {
        super::harness::wait_for_in(self.store(), "team-a", task, what, pred).await
    }

    /// Wait until some Run of `team-a` satisfies `pred`, following the store's watch.
    pub async fn wait_any(
        &self,
        what: &str,
        pred: impl Fn(&runway::api::Run) -> bool,
    ) -> runway::api::Run {
        use futures::StreamExt;
        use runway::store::RunStore;
        let store = self.store();
        let mut changes = store.watch(None);
        let found = tokio::time::timeout(super::harness::PATIENCE, async {
            loop {
                let runs = store
                    .list(Some("team-a"), &Default::default())
                    .await
                    .unwrap();
                if let Some(r) = runs.into_iter().find(|r| pred(r)) {
                    return (*r).clone();
                }
                changes.next().await;
            }
        })
        .await;
        found.unwrap_or_else(|_| panic!("timed out waiting for {what}"))
    }

    /// Wait until Run `task` ends, and check it ended cancelled because the client that held
    /// its call went away.
    pub async fn cancelled_as_left(&self, task: &str) {
        let run = self.wait(task, "ended", |r| r.phase().is_terminal()).await;
        assert_eq!(run.phase(), runway::api::RunPhase::Cancelled, "{task}");
        assert_eq!(
            run.spec.cancel.unwrap().reason.as_deref(),
            Some("mcp-request-cancelled")
        );
    }
}

#[derive(Clone)]
pub struct Client {
    pub http: reqwest::Client,
    pub base: String,
    pub token: Option<String>,
    pub path: String,
    /// Client capabilities sent in `_meta`.
    pub caps: Value,
}

/// A response: status, headers, and the JSON-RPC messages (one for JSON, all frames for SSE).
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub messages: Vec<Value>,
}

impl Reply {
    /// The final JSON-RPC message (the response).
    pub fn last(&self) -> &Value {
        self.messages.last().expect("a message")
    }
    pub fn result(&self) -> &Value {
        let m = self.last();
        assert!(m.get("error").is_none(), "expected a result, got {m}");
        &m["result"]
    }
    /// The task a `tools/call` answered with (a `CreateTaskResult`): its `taskId`.
    pub fn task_id(&self) -> String {
        let res = self.result();
        assert_eq!(res["resultType"], "task", "{:?}", self.messages);
        res["taskId"].as_str().expect("a taskId").to_owned()
    }
    /// Assert a plain, complete result (what `tasks/update` and `tasks/cancel` answer).
    pub fn assert_complete(&self) {
        assert_eq!(
            self.result()["resultType"],
            "complete",
            "{:?}",
            self.messages
        );
    }
    pub fn error_code(&self) -> i64 {
        self.last()["error"]["code"]
            .as_i64()
            .unwrap_or_else(|| panic!("expected an error, got {:?}", self.messages))
    }
    /// The Event reasons of a `runway_get_run` answer, oldest first.
    pub fn event_reasons(&self) -> Vec<String> {
        self.result()["structuredContent"]["events"]
            .as_array()
            .expect("events")
            .iter()
            .map(|e| e["reason"].as_str().unwrap().to_owned())
            .collect()
    }
    /// The Events of a `runway_get_run` answer: reason and message.
    pub fn events(&self) -> Vec<(String, String)> {
        self.result()["structuredContent"]["events"]
            .as_array()
            .expect("events")
            .iter()
            .map(|e| {
                let text = |k: &str| e[k].as_str().unwrap_or_default().to_owned();
                (text("reason"), text("message"))
            })
            .collect()
    }
    /// The task ids of a `runway_list_runs` answer, in order.
    pub fn listed(&self) -> Vec<String> {
        self.result()["structuredContent"]["runs"]
            .as_array()
            .expect("a list of runs")
            .iter()
            .map(|r| r["taskId"].as_str().unwrap().to_owned())
            .collect()
    }
    pub fn notifications(&self, method: &str) -> Vec<&Value> {
        self.messages
            .iter()
            .filter(|m| m["method"] == method)
            .collect()
    }
}

/// One HTTP/1.1 connection to the endpoint, which every request sent through it travels on: a
/// pooled client opens another whenever its last one has not been handed back yet, which a
/// test of what a connection remembers cannot have.
pub struct OneConnection(
    hyper::client::conn::http1::SendRequest<http_body_util::Full<bytes::Bytes>>,
);

impl OneConnection {
    /// Connect to the endpoint at `base` (`http://host:port`).
    pub async fn open(base: &str) -> Self {
        let addr = base.strip_prefix("http://").expect("an http:// base");
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (sender, conn) =
            hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(tcp))
                .await
                .unwrap();
        tokio::spawn(conn);
        Self(sender)
    }

    /// Send what `b` would (its path, headers and body) on this connection.
    pub async fn send(&mut self, b: reqwest::RequestBuilder) -> Reply {
        use http_body_util::BodyExt;
        let sent = b.build().unwrap();
        let mut req = http::Request::post(sent.url().path())
            .header("host", sent.url().authority())
            .body(http_body_util::Full::new(bytes::Bytes::copy_from_slice(
                sent.body().and_then(|b| b.as_bytes()).unwrap_or_default(),
            )))
            .unwrap();
        req.headers_mut().extend(sent.headers().clone());
        self.0.ready().await.unwrap();
        let resp = self.0.send_request(req).await.unwrap();
        let (status, headers) = (resp.status(), resp.headers().clone());
        let body = resp.into_body().collect().await.unwrap().to_bytes();
        let ct = headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        Reply {
            status,
            messages: parse_body(ct, &String::from_utf8_lossy(&body)),
            headers,
        }
    }
}

pub fn parse_body(content_type: &str, body: &str) -> Vec<Value> {
    if content_type.starts_with("text/event-stream") {
        body.lines()
            .filter_map(|l| l.strip_prefix("data:"))
            .filter_map(|d| serde_json::from_str(d.trim()).ok())
            .collect()
    } else {
        serde_json::from_str(body)
            .map(|v| vec![v])
            .unwrap_or_default()
    }
}

impl Client {
    pub fn new(base: &str, token: Option<&str>, path: &str) -> Self {
        runway::install_crypto_provider();
        Self {
            http: reqwest::Client::new(),
            base: base.into(),
            token: token.map(str::to_owned),
            path: path.into(),
            caps: json!({"extensions": {TASKS: {}}, "elicitation": {}}),
        }
    }

    /// The same client (its connections too) sending `token` instead.
    pub fn sharing(&self, token: Option<&str>) -> Self {
        Self {
            http: self.http.clone(),
            base: self.base.clone(),
            token: token.map(str::to_owned),
            path: self.path.clone(),
            caps: self.caps.clone(),
        }
    }

    pub fn with_caps(mut self, caps: Value) -> Self {
        self.caps = caps;
        self
    }

    pub fn at(mut self, path: &str) -> Self {
        self.path = path.into();
        self
    }

    pub fn meta(&self) -> Value {
        json!({
            "io.modelcontextprotocol/protocolVersion": VERSION,
            "io.modelcontextprotocol/clientCapabilities": self.caps,
        })
    }

    /// The request builder with the standard headers for `method` / `name`.
    pub fn request(&self, method: &str, name: Option<&str>) -> reqwest::RequestBuilder {
        self.request_at(VERSION, method, name)
    }

    /// A request that announces `version` in its `MCP-Protocol-Version` header.
    pub fn request_at(
        &self,
        version: &str,
        method: &str,
        name: Option<&str>,
    ) -> reqwest::RequestBuilder {
        let mut b = self
            .http
            .post(format!("{}{}", self.base, self.path))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", version)
            .header("mcp-method", method);
        if let Some(n) = name {
            b = b.header("mcp-name", n);
        }
        if let Some(t) = &self.token {
            b = b.bearer_auth(t);
        }
        b
    }

    pub async fn send(&self, b: reqwest::RequestBuilder) -> Reply {
        let resp = b.send().await.unwrap();
        let status = resp.status();
        let headers = resp.headers().clone();
        let ct = headers
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        let body = resp.text().await.unwrap();
        Reply {
            status,
            headers,
            messages: parse_body(&ct, &body),
        }
    }

    /// Send `method` with `params` (the `_meta` is added).
    pub async fn rpc(&self, method: &str, name: Option<&str>, params: Value) -> Reply {
        self.send(self.rpc_request(method, name, params)).await
    }

    /// The request [`Client::rpc`] sends, unsent.
    pub fn rpc_request(
        &self,
        method: &str,
        name: Option<&str>,
        mut params: Value,
    ) -> reqwest::RequestBuilder {
        if params.get("_meta").is_none() {
            params["_meta"] = self.meta();
        } else {
            let extra = params["_meta"].as_object().unwrap().clone();
            params["_meta"] = self.meta();
            for (k, v) in extra {
                params["_meta"][k] = v;
            }
        }
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": method, "params": params});
        self.request(method, name).json(&body)
    }

    pub async fn call(&self, tool: &str, args: Value) -> Reply {
        self.rpc(
            "tools/call",
            Some(tool),
            json!({"name": tool, "arguments": args}),
        )
        .await
    }

    pub async fn get(&self, task: &str) -> Reply {
        self.send(self.get_request(task)).await
    }

    /// The request [`Client::get`] sends, unsent.
    pub fn get_request(&self, task: &str) -> reqwest::RequestBuilder {
        self.rpc_request("tasks/get", Some(task), json!({"taskId": task}))
    }

    pub async fn update(&self, task: &str, responses: Value) -> Reply {
        self.rpc(
            "tasks/update",
            Some(task),
            json!({"taskId": task, "inputResponses": responses}),
        )
        .await
    }

    pub async fn cancel(&self, task: &str) -> Reply {
        self.rpc("tasks/cancel", Some(task), json!({"taskId": task}))
            .await
    }

    /// `tools/call` of `tool` under an idempotency key; the task id, or `None` when the server
    /// gave no answer (it died meanwhile). A refusal fails the test.
    pub async fn idempotent_call(
        &self,
        tool: &str,
        args: Value,
        key: &str,
        timeout: std::time::Duration,
    ) -> Option<String> {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {
        "name": tool, "arguments": args,
        "_meta": {
            "io.modelcontextprotocol/protocolVersion": VERSION,
            "io.modelcontextprotocol/clientCapabilities": self.caps,
            "dev.runway/idempotencyKey": key,
        }}});
        let resp = self
            .request("tools/call", Some(tool))
            .json(&body)
            .timeout(timeout)
            .send()
            .await
            .ok()?;
        let ct = resp
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        let msg = parse_body(&ct, &resp.text().await.ok()?).pop()?;
        assert!(msg.get("error").is_none(), "call {key} refused: {msg}");
        msg["result"]["taskId"].as_str().map(str::to_owned)
    }

    /// Open `subscriptions/listen` on `tasks`, to be read frame by frame.
    pub async fn listen(&self, tasks: &[&str]) -> Events {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "subscriptions/listen",
            "params": {"_meta": self.meta(), "notifications": {"taskIds": tasks}}});
        let resp = self
            .request("subscriptions/listen", None)
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        assert_unbuffered(&resp);
        Events {
            body: Box::pin(resp.bytes_stream()),
            buf: String::new(),
        }
    }

    /// Follow `task` on `subscriptions/listen` until its status is `status`; returns the task.
    pub async fn await_status(&self, task: &str, status: &str) -> Value {
        self.await_task(task, &format!("status {status}"), |t| t["status"] == status)
            .await
    }

    /// Follow `task` on `subscriptions/listen` until `pred` holds for it; returns the task.
    pub async fn await_task(&self, task: &str, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let mut frames = self.listen(&[task]).await;
        let found = tokio::time::timeout(super::harness::PATIENCE, async {
            while let Some(f) = frames.next().await {
                if f["method"] == "notifications/tasks" && pred(&f["params"]) {
                    return Some(f["params"].clone());
                }
            }
            None
        })
        .await;
        found
            .ok()
            .flatten()
            .unwrap_or_else(|| panic!("task {task} never reached {what}"))
    }
}

/// A 2025-era client (it opens with `initialize`): it has sent `initialize` and holds the session id it got.
pub struct Old {
    pub http: reqwest::Client,
    pub url: String,
    pub token: String,
    pub session: String,
    pub version: String,
}

/// An SSE response read event by event.
pub struct Events {
    body: Pin<Box<dyn Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>,
    buf: String,
}

impl Events {
    /// The next JSON-RPC message, `None` at the end of the stream.
    pub async fn next(&mut self) -> Option<Value> {
        loop {
            if let Some(end) = self.buf.find("\n\n") {
                let event: String = self.buf.drain(..end + 2).collect();
                if let Some(m) = parse_body("text/event-stream", &event).into_iter().next() {
                    return Some(m);
                }
                continue;
            }
            let chunk = self.body.next().await?.ok()?;
            self.buf.push_str(&String::from_utf8_lossy(&chunk));
        }
    }
}

/// `initialize` at `url` as `token`: the response head (for its session id) and the answer.
pub async fn initialize(
    url: &str,
    token: &str,
    version: &str,
    caps: Value,
) -> (reqwest::Response, Value) {
    runway::install_crypto_provider();
    let resp = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .bearer_auth(token)
        .json(
            &json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": version, "capabilities": caps,
            "clientInfo": {"name": "test", "version": "1"}}}),
        )
        .send()
        .await
        .unwrap();
    let headers = resp.headers().clone();
    let body: Value = resp.json().await.unwrap();
    let mut fake = http::Response::new("");
    *fake.headers_mut() = headers;
    (reqwest::Response::from(fake), body)
}

impl Old {
    /// A client that has opened a 2025-11-25 session at `url`.
    pub async fn connect(url: &str, token: &str, caps: Value) -> Self {
        Self::connect_at(url, token, caps, "2025-11-25").await
    }

    /// A client that has opened a session of revision `version` at `url`.
    pub async fn connect_at(url: &str, token: &str, caps: Value, version: &str) -> Self {
        let (resp, body) = initialize(url, token, version, caps).await;
        assert_eq!(body["result"]["protocolVersion"], version, "{body}");
        let session = resp.headers()["mcp-session-id"]
            .to_str()
            .unwrap()
            .to_owned();
        Self {
            http: reqwest::Client::new(),
            url: url.into(),
            token: token.into(),
            session,
            version: version.into(),
        }
    }

    pub fn post(&self, body: &Value) -> reqwest::RequestBuilder {
        self.http
            .post(&self.url)
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-session-id", &self.session)
            .header("mcp-protocol-version", &self.version)
            .bearer_auth(&self.token)
            .json(body)
    }

    /// POST `body` (a message or a batch); the status, content type and text of the answer.
    pub async fn exchange(&self, body: &Value) -> (StatusCode, String, String) {
        let resp = self.post(body).send().await.unwrap();
        let status = resp.status();
        let ct = resp
            .headers()
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_owned())
            .unwrap_or_default();
        (status, ct, resp.text().await.unwrap())
    }

    /// Send a request; the status and every message of the answer.
    pub async fn rpc(&self, method: &str, params: Value) -> (StatusCode, Vec<Value>) {
        let body = json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params});
        let (status, ct, text) = self.exchange(&body).await;
        (status, parse_body(&ct, &text))
    }

    pub async fn result(&self, method: &str, params: Value) -> Value {
        let (status, messages) = self.rpc(method, params).await;
        assert_eq!(status, StatusCode::OK, "{messages:?}");
        let last = messages.last().unwrap().clone();
        assert!(last.get("error").is_none(), "{last}");
        last["result"].clone()
    }

    pub async fn error(&self, method: &str, params: Value) -> Value {
        let (_, messages) = self.rpc(method, params).await;
        messages.last().unwrap()["error"].clone()
    }

    /// Send a request whose answer is a stream, and read it as it comes.
    pub async fn open(&self, method: &str, params: Value) -> Events {
        let body = json!({"jsonrpc": "2.0", "id": "held", "method": method, "params": params});
        self.open_body(&body).await
    }

    /// POST `body` (a message or a batch) whose answer is a stream, and read it as it comes.
    pub async fn open_body(&self, body: &Value) -> Events {
        let resp = self.post(body).send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        assert!(
            resp.headers()["content-type"]
                .to_str()
                .unwrap()
                .starts_with("text/event-stream")
        );
        assert_unbuffered(&resp);
        Events {
            body: Box::pin(resp.bytes_stream()),
            buf: String::new(),
        }
    }

    /// POST the client's answer to a server request.
    pub async fn answer(&self, id: &Value, result: Value) -> StatusCode {
        let body = json!({"jsonrpc": "2.0", "id": id, "result": result});
        self.post(&body).send().await.unwrap().status()
    }
}

/// A stream is marked for reverse proxies to pass on as it comes (nginx would buffer it).
fn assert_unbuffered(resp: &reqwest::Response) {
    assert_eq!(
        resp.headers()
            .get("x-accel-buffering")
            .and_then(|v| v.to_str().ok()),
        Some("no"),
        "{:?}",
        resp.headers()
    );
}

/// Start `call` (a request of `probe`'s principal, on a server where a principal may have one
/// request in progress) and return its task once it is in progress: `probe`'s next request
/// is turned away. A probe that came first turns the call away instead; it is sent again.
pub async fn in_progress<F, Fut>(probe: &Client, call: F) -> tokio::task::JoinHandle<StatusCode>
where
    F: Fn() -> Fut,
    Fut: Future<Output = StatusCode> + Send + 'static,
{
    let busy = || async {
        probe.rpc("tools/list", None, json!({})).await.status == StatusCode::TOO_MANY_REQUESTS
    };
    let deadline = tokio::time::Instant::now() + super::harness::PATIENCE;
    loop {
        let task = tokio::spawn(call());
        loop {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the call never was in progress"
            );
            if busy().await {
                return task;
            }
            if task.is_finished() {
                let status = task.await.unwrap();
                assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "the call ended");
                break;
            }
            tokio::task::yield_now().await;
        }
    }
}

/// Wait until `probe`'s principal has no request in progress any more.
pub async fn none_in_progress(probe: &Client) {
    let idle = tokio::time::timeout(super::harness::PATIENCE, async {
        while probe.rpc("tools/list", None, json!({})).await.status == StatusCode::TOO_MANY_REQUESTS
        {
            tokio::task::yield_now().await;
        }
    })
    .await;
    assert!(idle.is_ok(), "a request stayed in progress");
}

/// A call whose client leaves while its Run is being created: another writer holds the
/// database of `s`, so the create waits; `call` (a request of `probe`'s principal) is sent until
/// it is in progress, then dropped; once the server has let go of it, the writes go on. The Run
/// of `workflow` that lands then must end cancelled, as an answer that was never delivered.
pub async fn leave_during_create<F, Fut>(s: &Mcp, probe: &Client, workflow: &str, call: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = StatusCode> + Send + 'static,
{
    let rv = runway::store::RunStore::resource_version(s.store())
        .await
        .unwrap();
    let mut stored = runway::store::RunStore::watch(s.store(), Some(rv));
    let db = rusqlite::Connection::open(s.dir.path().join("runs.db")).unwrap();
    db.execute_batch("BEGIN IMMEDIATE").unwrap();
    in_progress(probe, call).await.abort();
    // The server drops the call (its share comes back) while the create still waits.
    none_in_progress(probe).await;
    db.execute_batch("ROLLBACK").unwrap();
    let name = loop {
        let ev = stored.next().await.unwrap().unwrap();
        if ev.run().spec.workflow_ref.name == workflow {
            break ev.run().metadata.name.clone().unwrap();
        }
    };
    let done = s
        .wait(&name, "cancelled", |r| r.phase().is_terminal())
        .await;
    assert_eq!(done.phase(), runway::api::RunPhase::Cancelled);
    assert_eq!(
        done.spec.cancel.unwrap().reason.as_deref(),
        Some("mcp-request-cancelled")
    );
}

/// Call `tool` through `client`, as a client would, until the server offers it (a Workflow is
/// offered once validated, which a server on Kubernetes learns through its watch); the task.
/// The Events of Run `task` as `runway_get_run` shows them to `client`, once `done` holds for
/// them (or when the test's patience ends): Events are recorded after the status write they
/// describe, so a test that has seen the status follows them to the one it wants.
pub async fn events_once(
    client: &Client,
    task: &str,
    done: impl Fn(&[(String, String)]) -> bool,
) -> Vec<(String, String)> {
    let deadline = tokio::time::Instant::now() + super::harness::PATIENCE;
    loop {
        let events = client
            .call("runway_get_run", json!({"taskId": task}))
            .await
            .events();
        if done(&events) || tokio::time::Instant::now() > deadline {
            return events;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

pub async fn until_created(client: &Client, tool: &str) -> String {
    let deadline = tokio::time::Instant::now() + super::harness::PATIENCE;
    loop {
        let r = client.call(tool, json!({})).await;
        if r.last().get("error").is_none() {
            return r.task_id();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{tool} never offered: {:?}",
            r.messages
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}
