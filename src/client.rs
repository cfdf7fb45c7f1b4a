//! The `runway call` and `runway tasks …` client commands: an MCP 2026-07-28 client (rmcp) that
//! works against any server, with a terminal prompt for input requests.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

use futures::StreamExt;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CancelTaskParams, ClientCapabilities, ClientConfig,
    GetTaskParams, Implementation, JsonObject, ProtocolVersion, TaskPayload, UpdateTaskParams,
};
use rmcp::service::{ClientLifecycleMode, ClientServiceExt};
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::protocol::codes::INVALID_PARAMS;
use crate::protocol::{
    HEADER_METHOD, HEADER_PROTOCOL_VERSION, META_AWAITING_YOU, META_CLIENT_CAPABILITIES,
    META_PROTOCOL_VERSION, METHOD_LISTEN, PROTOCOL_VERSION, TASKS_EXTENSION,
};

/// Exit codes of the client commands.
pub mod exit {
    /// The call succeeded.
    pub const OK: u8 = 0;
    /// The tool reported an error, the task failed or was cancelled.
    pub(crate) const FAILED: u8 = 1;
    /// Bad usage, or the server could not be reached or refused the request.
    pub const ERROR: u8 = 2;
    /// An answer was not taken: its question is not open (unknown key, answered already, the
    /// task ended) or the server refused it (the reason is printed).
    pub(crate) const NOT_TAKEN: u8 = 3;
    /// Interrupted (Ctrl-C).
    pub const INTERRUPTED: u8 = 130;
}

/// Client errors.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Connecting or the protocol failed.
    #[error("{0}")]
    Protocol(String),
    /// The server answered with a JSON-RPC error.
    #[error("server error {code}: {message}")]
    Rpc {
        /// Code.
        code: i64,
        /// Message.
        message: String,
    },
    /// Bad input on the command line or the terminal.
    #[error("{0}")]
    Usage(String),
    /// The server could not be reached (connection refused, reset, timed out): worth retrying
    /// while following a task, which carries on without the client.
    #[error("{0}")]
    Unreachable(String),
    /// The person pressed Ctrl-C at a prompt.
    #[error("interrupted")]
    Interrupted,
}

impl From<rmcp::ServiceError> for ClientError {
    fn from(e: rmcp::ServiceError) -> Self {
        match e {
            rmcp::ServiceError::McpError(e) => Self::Rpc {
                code: e.code.0 as i64,
                message: e.message.to_string(),
            },
            rmcp::ServiceError::TransportSend(e) => transport_error(&e, None),
            rmcp::ServiceError::TransportClosed => {
                Self::Unreachable("the connection to the server closed".into())
            }
            other => Self::Protocol(other.to_string()),
        }
    }
}

/// A transport failure in the user's terms: the HTTP status or network condition and what to
/// do about it, never the library's type names.
fn transport_error(
    e: &rmcp::transport::DynamicTransportError,
    target: Option<&Target>,
) -> ClientError {
    use rmcp::transport::streamable_http_client::StreamableHttpError;
    let url = target.map_or("the server", |t| t.url.as_str());
    let Some(http) = e
        .error
        .downcast_ref::<StreamableHttpError<reqwest::Error>>()
    else {
        return ClientError::Protocol(format!("talking to {url} failed: {}", e.error));
    };
    match http {
        StreamableHttpError::AuthRequired(_) => ClientError::Protocol(match target {
            Some(Target { token: None, .. }) => format!(
                "HTTP 401 from {url}: it wants a bearer token; pass --token-file FILE (or set RUNWAY_TOKEN_FILE)"
            ),
            _ => format!(
                "HTTP 401 from {url}: the token was not accepted (unknown, expired, revoked, or minted for another audience)"
            ),
        }),
        StreamableHttpError::InsufficientScope(_) => ClientError::Protocol(format!(
            "HTTP 403 from {url}: the token lacks the scope this request needs"
        )),
        StreamableHttpError::HttpStatus(s) if s.status == 429 || s.status >= 500 => {
            ClientError::Unreachable(format!("HTTP {} from {url}", s.status))
        }
        StreamableHttpError::HttpStatus(s) => {
            ClientError::Protocol(format!("HTTP {} from {url}", s.status))
        }
        StreamableHttpError::Client(r) if r.is_connect() || r.is_timeout() || r.is_request() => {
            ClientError::Unreachable(format!(
                "cannot reach {url}: {}",
                if r.is_connect() {
                    "connection refused or host unreachable (is the server running?)"
                } else if r.is_timeout() {
                    "timed out"
                } else {
                    "the connection failed"
                }
            ))
        }
        other => ClientError::Protocol(format!("talking to {url} failed: {other}")),
    }
}

/// A failure to start a session in the user's terms.
fn connect_error(e: rmcp::service::ClientInitializeError, target: &Target) -> ClientError {
    use rmcp::service::ClientInitializeError as E;
    match e {
        E::TransportError { error, .. } => transport_error(&error, Some(target)),
        E::JsonRpcError(e) if e.message.contains("HTTP 404") => ClientError::Protocol(format!(
            "HTTP 404 from {}: no MCP endpoint there; the path is /mcp or /namespaces/<namespace>/mcp",
            target.url
        )),
        E::JsonRpcError(e) => ClientError::Rpc {
            code: e.code.0 as i64,
            message: e.message.to_string(),
        },
        other => ClientError::Protocol(format!(
            "cannot start a session with {}: {other}",
            target.url
        )),
    }
}

/// Where to connect.
#[derive(Debug, Clone)]
pub struct Target {
    /// MCP endpoint URL.
    pub url: String,
    /// Bearer token.
    pub token: Option<String>,
}

type Session = RunningService<RoleClient, ClientConfig>;

fn capabilities(tasks: bool) -> ClientCapabilities {
    let mut caps = json!({"elicitation": {"form": {}, "url": {}}});
    if tasks {
        caps["extensions"] = json!({ TASKS_EXTENSION: {} });
    }
    serde_json::from_value(caps).expect("capabilities deserialize")
}

async fn connect(target: &Target, tasks: bool) -> Result<Session, ClientError> {
    crate::install_crypto_provider();
    let mut cfg = StreamableHttpClientTransportConfig::with_uri(target.url.clone());
    if let Some(t) = &target.token {
        cfg = cfg.auth_header(t.clone());
    }
    let transport = StreamableHttpClientTransport::from_config(cfg);
    let info = ClientConfig::new(
        capabilities(tasks),
        Implementation::new("runway", env!("CARGO_PKG_VERSION")),
    );
    info.serve_with_lifecycle(
        transport,
        ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        },
    )
    .await
    .map_err(|e| connect_error(e, target))
}

/// Parse `--arg k=v` pairs over `--json`. A value is JSON when it parses, else a string; a
/// property the tool's schema declares as a string always stays a string (`--arg version=1.2`).
pub fn arguments(
    json_args: Option<&str>,
    pairs: &[String],
    schema: Option<&Value>,
) -> Result<JsonObject, ClientError> {
    let mut args = match json_args {
        Some(s) => match serde_json::from_str::<Value>(s) {
            Ok(Value::Object(m)) => m,
            _ => return Err(ClientError::Usage("--json must be a JSON object".into())),
        },
        None => JsonObject::new(),
    };
    for p in pairs {
        let (k, v) = p
            .split_once('=')
            .ok_or_else(|| ClientError::Usage(format!("--arg {p:?}: expected key=value")))?;
        let declared = schema.and_then(|s| s["properties"][k]["type"].as_str());
        let v = if declared == Some("string") {
            Value::String(v.to_owned())
        } else {
            serde_json::from_str(v).unwrap_or_else(|_| Value::String(v.to_owned()))
        };
        args.insert(k.to_owned(), v);
    }
    Ok(args)
}

/// Reads answers to input requests from the terminal, and notices Ctrl-C.
pub struct Prompter {
    lines: tokio::io::Lines<BufReader<tokio::io::Stdin>>,
    /// One listener for the whole command: a Ctrl-C pressed between two waits is kept for the
    /// next one instead of being lost (SIGINT no longer ends the process once it is listened to).
    interrupts: tokio::signal::unix::Signal,
}

impl Prompter {
    /// A prompter on standard input; must be created inside the runtime.
    pub fn new() -> std::io::Result<Self> {
        Ok(Self {
            lines: BufReader::new(tokio::io::stdin()).lines(),
            interrupts: tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?,
        })
    }

    /// Resolves when Ctrl-C is pressed (or was, since the last time this resolved).
    pub(crate) async fn interrupted(&mut self) {
        self.interrupts.recv().await;
    }

    async fn ask(&mut self, prompt: &str) -> Result<String, ClientError> {
        eprint!("{prompt}");
        let _ = std::io::stderr().flush();
        // Once a Ctrl-C handler exists the terminal's SIGINT no longer ends the process, so
        // the prompt listens for it itself.
        tokio::select! {
            line = self.lines.next_line() => match line {
                Ok(Some(l)) => Ok(l.trim().to_owned()),
                _ => Err(ClientError::Usage("no answer on standard input".into())),
            },
            _ = self.interrupts.recv() => {
                eprintln!();
                Err(ClientError::Interrupted)
            }
        }
    }

    /// Ask one elicitation request; returns the `{action, content}` answer.
    pub async fn answer(&mut self, key: &str, request: &Value) -> Result<Value, ClientError> {
        let params = &request["params"];
        eprintln!(
            "\n[{key}] {}",
            params["message"].as_str().unwrap_or("input requested")
        );
        if request["method"] != "elicitation/create" {
            eprintln!("  (this client answers only elicitation requests; declining)");
            return Ok(json!({"action": "decline"}));
        }
        if params["mode"] == "url" {
            // URL mode: the page does the work; this client only shows where to go.
            eprintln!("  open: {}", params["url"].as_str().unwrap_or("?"));
            let a = self.ask("  opened it (or will)? [y/n] ").await?;
            return Ok(if a.starts_with('y') {
                json!({"action": "accept"})
            } else {
                json!({"action": "decline"})
            });
        }
        let props = params["requestedSchema"]["properties"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        if props.is_empty() {
            let a = self.ask("  accept? [y/n] ").await?;
            return Ok(if a.starts_with('y') {
                json!({"action": "accept", "content": {}})
            } else {
                json!({"action": "decline"})
            });
        }
        let required: Vec<&str> = params["requestedSchema"]["required"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let mut content = JsonObject::new();
        // Properties come in the order the server sent them: the manifest's order.
        for (name, schema) in props {
            let field = Field::new(&name, &schema, required.contains(&name.as_str()));
            loop {
                let raw = self.ask(&field.prompt()).await?;
                match field.read(&raw) {
                    Ok(Some(v)) => {
                        content.insert(name.clone(), v);
                        break;
                    }
                    Ok(None) => break,
                    Err(why) => eprintln!("  {why}; try again"),
                }
            }
        }
        Ok(json!({"action": "accept", "content": content}))
    }
}

/// One property of an elicitation form, as the terminal asks it.
struct Field<'a> {
    name: &'a str,
    schema: &'a Value,
    required: bool,
}

impl<'a> Field<'a> {
    fn new(name: &'a str, schema: &'a Value, required: bool) -> Self {
        Self {
            name,
            schema,
            required,
        }
    }

    fn ty(&self) -> &str {
        self.schema["type"].as_str().unwrap_or("string")
    }

    /// Allowed values: `enum`, or the `const`s of a titled `oneOf`.
    fn choices(&self) -> Vec<Value> {
        if let Some(e) = self.schema["enum"].as_array() {
            return e.clone();
        }
        self.schema["oneOf"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|o| o.get("const").cloned())
            .collect()
    }

    /// `  Channel* (string, one of stable|beta, default beta): `
    fn prompt(&self) -> String {
        let title = self.schema["title"].as_str().unwrap_or(self.name);
        let mut hints = vec![self.ty().to_owned()];
        let choices = self.choices();
        if !choices.is_empty() {
            let list: Vec<String> = choices.iter().map(plain).collect();
            hints.push(format!("one of {}", list.join("|")));
        }
        if let Some(d) = self.schema.get("default") {
            hints.push(format!("default {}", plain(d)));
        } else if !self.required {
            hints.push("optional, Enter skips".into());
        }
        let mark = if self.required { "*" } else { "" };
        format!("  {title}{mark} ({}): ", hints.join(", "))
    }

    /// The value typed, `None` to leave the property out, or why the input is not accepted.
    fn read(&self, raw: &str) -> Result<Option<Value>, String> {
        if raw.is_empty() {
            return match (self.schema.get("default"), self.required) {
                (Some(d), _) => Ok(Some(d.clone())),
                (None, false) => Ok(None),
                (None, true) => Err("an answer is required".into()),
            };
        }
        let ty = self.ty();
        let v = match ty {
            "boolean" => match raw.to_ascii_lowercase().as_str() {
                "y" | "yes" | "true" => Value::Bool(true),
                "n" | "no" | "false" => Value::Bool(false),
                _ => return Err("not a boolean (y/n)".into()),
            },
            "integer" => raw
                .parse::<i64>()
                .map(Value::from)
                .map_err(|_| "not an integer".to_owned())?,
            "number" => raw
                .parse::<f64>()
                .map(Value::from)
                .map_err(|_| "not a number".to_owned())?,
            _ => Value::String(raw.to_owned()),
        };
        // The same check the server makes, field by field, so a mistake is caught here.
        let one = json!({"type": "object", "properties": {self.name: self.schema}});
        match crate::engine::input::answer_schema_error(Some(&one), Some(&json!({self.name: v}))) {
            None => Ok(Some(v)),
            Some(why) => Err(why
                .replace("the answer does not match requestedSchema: ", "")
                .replace(&format!("/{}: ", self.name), "")),
        }
    }
}

/// A JSON scalar as a person would type it.
fn plain(v: &Value) -> String {
    v.as_str().map_or_else(|| v.to_string(), str::to_owned)
}

/// Print a line on stdout. A reader that went away (`| head`) ends the output, not the
/// process with a panic.
fn out(line: &str) {
    let mut stdout = std::io::stdout().lock();
    if writeln!(stdout, "{line}")
        .and_then(|()| stdout.flush())
        .is_err()
    {
        std::process::exit(0);
    }
}

fn print_result(result: &Value) -> u8 {
    let mut out = std::io::stdout();
    for item in result["content"].as_array().into_iter().flatten() {
        match item["type"].as_str() {
            Some("text") => {
                let _ = writeln!(out, "{}", item["text"].as_str().unwrap_or_default());
            }
            _ => {
                let _ = writeln!(out, "{item}");
            }
        }
    }
    if let Some(sc) = result.get("structuredContent") {
        let _ = writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(sc).unwrap_or_default()
        );
    }
    if result["isError"] == true {
        exit::FAILED
    } else {
        exit::OK
    }
}

/// `runway call`: call a tool, follow its task (or hold the call), prompt for input, print the result.
pub async fn call(
    target: &Target,
    tool: &str,
    json_args: Option<&str>,
    pairs: &[String],
    no_task: bool,
    prompter: &mut Prompter,
) -> Result<u8, ClientError> {
    let session = connect(target, !no_task).await?;
    let schema = match pairs.is_empty() {
        true => None,
        false => session
            .list_all_tools()
            .await?
            .into_iter()
            .find(|t| t.name == tool)
            .map(|t| Value::Object((*t.input_schema).clone())),
    };
    let args = arguments(json_args, pairs, schema.as_ref())?;
    let mut params = CallToolRequestParams::new(tool.to_owned()).with_arguments(args.clone());
    loop {
        let response = tokio::select! {
            r = session.call_tool_once(params.clone()) => match r.map_err(ClientError::from) {
                Ok(response) => response,
                // A blocking call whose work failed ends as a failed task does: same words,
                // same exit status. Errors about the request itself stay usage errors.
                Err(ClientError::Rpc { code, message }) if !refused_request(code) => {
                    eprintln!("call failed: {message} ({code})");
                    return Ok(exit::FAILED);
                }
                Err(e) => return Err(e),
            },
            _ = prompter.interrupted() => {
                // Dropping a blocking call's connection cancels its Run on the server.
                eprintln!("interrupted; the run was cancelled");
                return Ok(exit::INTERRUPTED);
            }
        };
        match response {
            CallToolResponse::Complete(result) => {
                return Ok(print_result(
                    &serde_json::to_value(result).unwrap_or(Value::Null),
                ));
            }
            CallToolResponse::InputRequired(ir) => {
                let requests = serde_json::to_value(&ir.input_requests).unwrap_or(Value::Null);
                let mut answers = BTreeMap::new();
                for (key, req) in requests.as_object().into_iter().flatten() {
                    match prompter.answer(key, req).await {
                        Ok(a) => answers.insert(key.clone(), a),
                        Err(ClientError::Interrupted) => {
                            eprintln!("interrupted; nothing was started");
                            return Ok(exit::INTERRUPTED);
                        }
                        Err(e) => return Err(e),
                    };
                }
                let mut next =
                    CallToolRequestParams::new(tool.to_owned()).with_arguments(args.clone());
                next.input_responses = Some(answers.into_iter().collect());
                next.request_state = ir.request_state.clone();
                params = next;
            }
            CallToolResponse::Task(t) => {
                let id = t.task.task_id.clone();
                eprintln!("task {id}");
                return follow(target, session, &id, t.task.poll_interval_ms, prompter).await;
            }
            _ => return Err(ClientError::Protocol("unexpected response".into())),
        }
    }
}

/// What one `tasks/get` while following gave.
enum Polled {
    /// The task.
    Task(Box<rmcp::model::GetTaskResult>),
    /// The server was unreachable; a fresh session is ready for the next try.
    Retry,
    /// Stop with this exit code (the person pressed Ctrl-C).
    Exit(u8),
}

/// One `tasks/get`. A server restart or a dropped connection is waited out with bounded
/// backoff, up to a limit: the Run carries on without us.
async fn poll(
    target: &Target,
    session: &mut Session,
    id: &str,
    outage: &mut Outage,
    prompter: &mut Prompter,
) -> Result<Polled, ClientError> {
    let why = match session.get_task(GetTaskParams::new(id.to_owned())).await {
        Ok(got) => {
            outage.over();
            return Ok(Polled::Task(Box::new(got)));
        }
        Err(e) => match ClientError::from(e) {
            ClientError::Unreachable(why) => why,
            other => return Err(other),
        },
    };
    let Some(wait) = outage.next(&why) else {
        eprintln!(
            "giving up after {}s; task {id} keeps running (runway tasks get {id})",
            OUTAGE_LIMIT.as_secs()
        );
        return Err(ClientError::Unreachable(why));
    };
    tokio::select! {
        _ = tokio::time::sleep(wait) => {}
        _ = prompter.interrupted() => return Ok(Polled::Exit(interrupted(id))),
    }
    // A failed transport may not recover by itself: start a fresh session.
    match connect(target, true).await {
        Ok(fresh) => *session = fresh,
        Err(ClientError::Unreachable(_)) => {}
        Err(e) => return Err(e),
    }
    Ok(Polled::Retry)
}

async fn follow(
    target: &Target,
    mut session: Session,
    id: &str,
    poll_ms: Option<u64>,
    prompter: &mut Prompter,
) -> Result<u8, ClientError> {
    let mut last_message = None;
    let mut interval = Duration::from_millis(poll_ms.unwrap_or(1000).max(50));
    let mut outage = Outage::default();
    loop {
        let got = match poll(target, &mut session, id, &mut outage, prompter).await? {
            Polled::Task(got) => got,
            Polled::Retry => continue,
            Polled::Exit(code) => return Ok(code),
        };
        // Runway says which open questions this caller may answer; other servers do not, and
        // then every question is asked.
        let awaiting: Option<Vec<String>> = got
            .meta
            .as_ref()
            .and_then(|m| m.0.get(META_AWAITING_YOU))
            .and_then(|v| serde_json::from_value(v.clone()).ok());
        let task = got.task;
        if let Some(ms) = task.task.poll_interval_ms {
            interval = Duration::from_millis(ms.max(50));
        }
        if task.task.status_message != last_message {
            if let Some(m) = &task.task.status_message {
                eprintln!("  {m}");
            }
            last_message = task.task.status_message.clone();
        }
        match &task.payload {
            TaskPayload::Completed { result } => {
                return Ok(print_result(&Value::Object(result.clone())));
            }
            TaskPayload::Failed { error } => {
                eprintln!(
                    "call failed: {} ({})",
                    error.get("message").and_then(Value::as_str).unwrap_or("?"),
                    error.get("code").cloned().unwrap_or(Value::Null)
                );
                return Ok(exit::FAILED);
            }
            TaskPayload::Cancelled => {
                eprintln!("task cancelled");
                return Ok(exit::FAILED);
            }
            TaskPayload::InputRequired { input_requests } => {
                let requests = serde_json::to_value(input_requests).unwrap_or(Value::Null);
                let asked = ask(&session, id, &requests, awaiting.as_deref(), prompter).await?;
                match asked {
                    Asked::Answered => continue,
                    Asked::Interrupted => return Ok(interrupted(id)),
                    Asked::NotMine(note) if last_message.as_deref() != Some(note.as_str()) => {
                        eprintln!("  {note}");
                        last_message = Some(note);
                    }
                    Asked::NotMine(_) => {}
                }
            }
            _ => {}
        }
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = prompter.interrupted() => return Ok(interrupted(id)),
        }
    }
}

/// What became of a task's open questions.
enum Asked {
    /// The caller answered (or an answer was refused and its question stays open).
    Answered,
    /// None is the caller's to answer: this says whose turn it is.
    NotMine(String),
    /// The person pressed Ctrl-C at a prompt.
    Interrupted,
}

/// Ask the person the open questions that wait for them (all of them when the server does not
/// say which), and send the answers in one `tasks/update`.
async fn ask(
    session: &Session,
    id: &str,
    requests: &Value,
    awaiting: Option<&[String]>,
    prompter: &mut Prompter,
) -> Result<Asked, ClientError> {
    let open = requests.as_object().into_iter().flatten();
    let mine: Vec<(&String, &Value)> = open
        .clone()
        .filter(|(k, _)| awaiting.is_none_or(|a| a.contains(k)))
        .collect();
    if mine.is_empty() {
        let others: Vec<&str> = open.map(|(k, _)| k.as_str()).collect();
        return Ok(Asked::NotMine(format!(
            "waiting for someone else to answer {}",
            others.join(", ")
        )));
    }
    let mut answers = BTreeMap::new();
    for (key, req) in mine {
        match prompter.answer(key, req).await {
            Ok(a) => answers.insert(key.clone(), a),
            Err(ClientError::Interrupted) => return Ok(Asked::Interrupted),
            Err(e) => return Err(e),
        };
    }
    // A refused answer leaves its question open: say why, and the next round asks again.
    let update = UpdateTaskParams::new(id.to_owned(), answers.into_iter().collect());
    match session.update_task(update).await.map_err(ClientError::from) {
        Ok(()) => {}
        Err(ClientError::Rpc { code, message }) if code == INVALID_PARAMS => {
            eprintln!("  {message}");
        }
        Err(e) => return Err(e),
    }
    Ok(Asked::Answered)
}

/// Whether a JSON-RPC error code says the request was refused (malformed, unauthorized, unknown
/// tool, bad arguments, missing capability) rather than that the work it started failed.
fn refused_request(code: i64) -> bool {
    use crate::protocol::codes;
    [
        codes::PARSE_ERROR,
        codes::INVALID_REQUEST,
        codes::METHOD_NOT_FOUND,
        INVALID_PARAMS,
        codes::HEADER_MISMATCH,
        codes::MISSING_CAPABILITY,
        codes::UNSUPPORTED_VERSION,
        codes::UNAUTHENTICATED,
        codes::FORBIDDEN,
    ]
    .contains(&code)
}

/// Leave a task to run on: say how to come back to it.
fn interrupted(id: &str) -> u8 {
    eprintln!(
        "interrupted; task {id} keeps running (runway tasks get {id}, runway tasks watch {id})"
    );
    exit::INTERRUPTED
}

/// How long `runway call` waits for an unreachable server before it gives up on following.
const OUTAGE_LIMIT: Duration = Duration::from_secs(120);

/// Backoff while the server cannot be reached: 250 ms doubling to 5 s, for at most
/// [`OUTAGE_LIMIT`] in a row.
#[derive(Default)]
struct Outage {
    since: Option<tokio::time::Instant>,
    delay: Duration,
}

impl Outage {
    /// The wait before the next attempt, or `None` past the limit.
    fn next(&mut self, why: &str) -> Option<Duration> {
        let since = *self.since.get_or_insert_with(|| {
            eprintln!("  {why}; retrying");
            tokio::time::Instant::now()
        });
        if since.elapsed() >= OUTAGE_LIMIT {
            return None;
        }
        self.delay = (self.delay * 2).clamp(Duration::from_millis(250), Duration::from_secs(5));
        Some(self.delay)
    }

    fn over(&mut self) {
        if self.since.take().is_some() {
            eprintln!("  reconnected");
        }
        self.delay = Duration::ZERO;
    }
}

/// `runway tasks get`: print the task as JSON.
pub async fn get(target: &Target, id: &str) -> Result<u8, ClientError> {
    let session = connect(target, true).await?;
    let task = session.get_task(GetTaskParams::new(id.to_owned())).await?;
    out(&serde_json::to_string_pretty(&task).unwrap_or_default());
    Ok(exit::OK)
}

/// `runway tasks answer`.
pub async fn answer(
    target: &Target,
    id: &str,
    key: &str,
    response: Value,
) -> Result<u8, ClientError> {
    let session = connect(target, true).await?;
    // The server acknowledges answers to keys that are not open without taking them (a retry
    // must not fail), so the client looks first to tell the person what happened.
    let task = session.get_task(GetTaskParams::new(id.to_owned())).await?;
    let open: Vec<String> = match &task.task.payload {
        TaskPayload::InputRequired { input_requests } => input_requests.keys().cloned().collect(),
        _ => vec![],
    };
    if !open.iter().any(|k| k == key) {
        let now = if open.is_empty() {
            "it asks nothing now".to_owned()
        } else {
            format!("open: {}", open.join(", "))
        };
        eprintln!("answer not taken: {key} is not an open question of task {id} ({now})");
        return Ok(exit::NOT_TAKEN);
    }
    let mut responses = BTreeMap::new();
    responses.insert(key.to_owned(), response);
    match session
        .update_task(UpdateTaskParams::new(
            id.to_owned(),
            responses.into_iter().collect(),
        ))
        .await
        .map_err(ClientError::from)
    {
        Ok(()) => {
            eprintln!("answer to {key} taken");
            Ok(exit::OK)
        }
        Err(ClientError::Rpc { code, message }) if code == INVALID_PARAMS => {
            eprintln!("answer not taken: {message}");
            Ok(exit::NOT_TAKEN)
        }
        Err(e) => Err(e),
    }
}

/// `runway tasks cancel`.
pub async fn cancel(target: &Target, id: &str) -> Result<u8, ClientError> {
    let session = connect(target, true).await?;
    session
        .cancel_task(CancelTaskParams::new(id.to_owned()))
        .await?;
    Ok(exit::OK)
}

/// One message of a listen stream: print task states; `Some` with the exit code once the task
/// ended or the stream answered, or the error when the task is unknown.
fn on_frame(msg: &Value, id: &str, acknowledged: &mut bool) -> Option<Result<u8, ClientError>> {
    if msg["method"] == crate::protocol::NOTIFICATION_ACKNOWLEDGED {
        *acknowledged = msg["params"]["notifications"]["taskIds"]
            .as_array()
            .is_some_and(|a| !a.is_empty());
        return (!*acknowledged).then(|| Err(ClientError::Usage(format!("unknown task {id}"))));
    }
    if msg["method"] == crate::protocol::NOTIFICATION_TASK {
        let p = &msg["params"];
        let status = p["status"].as_str().unwrap_or("?");
        out(&format!(
            "{status}\t{}",
            p["statusMessage"].as_str().unwrap_or("")
        ));
        return match status {
            "completed" if p["result"]["isError"] == true => Some(Ok(exit::FAILED)),
            "completed" => Some(Ok(exit::OK)),
            "failed" | "cancelled" => Some(Ok(exit::FAILED)),
            _ => None,
        };
    }
    msg.get("id").is_some().then_some(Ok(exit::OK))
}

/// `runway tasks watch`: follow a task on `subscriptions/listen` until it ends.
pub async fn watch(target: &Target, id: &str) -> Result<u8, ClientError> {
    crate::install_crypto_provider();
    let meta = json!({
        META_PROTOCOL_VERSION: PROTOCOL_VERSION,
        META_CLIENT_CAPABILITIES: {"extensions": {TASKS_EXTENSION: {}}},
    });
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": METHOD_LISTEN,
        "params": {"_meta": meta, "notifications": {"taskIds": [id]}}});
    let mut req = reqwest::Client::new()
        .post(&target.url)
        .header("accept", "application/json, text/event-stream")
        .header(HEADER_PROTOCOL_VERSION, PROTOCOL_VERSION)
        .header(HEADER_METHOD, METHOD_LISTEN)
        .json(&body);
    if let Some(t) = &target.token {
        req = req.bearer_auth(t);
    }
    let resp = req
        .send()
        .await
        .map_err(|e| ClientError::Protocol(e.to_string()))?;
    if !resp.status().is_success() {
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap_or_default();
        let why = serde_json::from_str::<Value>(&text)
            .ok()
            .and_then(|v| v["error"]["message"].as_str().map(str::to_owned))
            .unwrap_or(text);
        return Err(ClientError::Protocol(format!(
            "HTTP {status} from {}: {why}",
            target.url
        )));
    }
    // A refusal (no `watch runs`, a bad request) is a plain JSON-RPC response, not a stream.
    let json_reply = resp
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if json_reply {
        let reply: Value = resp
            .json()
            .await
            .map_err(|e| ClientError::Protocol(e.to_string()))?;
        return Err(ClientError::Rpc {
            code: reply["error"]["code"].as_i64().unwrap_or_default(),
            message: reply["error"]["message"]
                .as_str()
                .unwrap_or("unexpected reply")
                .to_owned(),
        });
    }
    let mut stream = resp.bytes_stream();
    let mut buf = String::new();
    let mut acknowledged = false;
    while let Some(chunk) = stream.next().await {
        buf.push_str(&String::from_utf8_lossy(
            &chunk.map_err(|e| ClientError::Protocol(e.to_string()))?,
        ));
        while let Some(end) = buf.find("\n\n") {
            let event: String = buf.drain(..end + 2).collect();
            for data in event.lines().filter_map(|l| l.strip_prefix("data:")) {
                let Ok(msg) = serde_json::from_str::<Value>(data.trim()) else {
                    continue;
                };
                if let Some(done) = on_frame(&msg, id, &mut acknowledged) {
                    return done;
                }
            }
        }
    }
    Err(ClientError::Protocol(if acknowledged {
        "stream ended".into()
    } else {
        "no acknowledgement".into()
    }))
}
