//! `http` steps: one request per attempt, with the step's idempotency key on every attempt.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::slots::{HTTP_ATTEMPTS, HTTP_ATTEMPTS_PER_NAMESPACE, Slots};
use crate::api::{ErrorClass, Run};
use crate::engine::MAX_OUTPUT_BYTES;
use crate::engine::{Action, Body, Effect, HttpRequest, Outcome};
use crate::store::SecretSource;

/// Header carrying the step's idempotency key.
pub(crate) const IDEMPOTENCY_KEY_HEADER: &str = "Idempotency-Key";
/// Largest response body read, in bytes.
pub(crate) const MAX_RESPONSE_BYTES: usize = 1024 * 1024;

/// Why a response body was not read whole.
#[derive(Debug, thiserror::Error)]
enum BodyError {
    /// The connection failed while reading.
    #[error(transparent)]
    Read(#[from] reqwest::Error),
    /// The body is larger than [`MAX_RESPONSE_BYTES`].
    #[error("response body larger than {MAX_RESPONSE_BYTES} bytes")]
    TooLarge,
}

/// Executes `http` steps with one shared connection pool.
pub(crate) struct HttpExecutor {
    client: reqwest::Client,
    egress: super::egress::Egress,
    secrets: Arc<dyn SecretSource>,
    slots: Slots,
}

impl HttpExecutor {
    /// A new executor that connects where `egress` allows.
    pub fn new(secrets: Arc<dyn SecretSource>, egress: &super::egress::Egress) -> Self {
        Self {
            client: egress.client(),
            egress: egress.clone(),
            secrets,
            slots: Slots::new(HTTP_ATTEMPTS, HTTP_ATTEMPTS_PER_NAMESPACE),
        }
    }
}

#[async_trait::async_trait]
impl super::Executor for HttpExecutor {
    async fn execute(
        &self,
        run: &Run,
        effect: &Effect,
        cancel: CancellationToken,
    ) -> Option<Outcome> {
        let (Action::Http(req) | Action::Notify { request: req, .. }) = &effect.action else {
            return Some(Outcome::internal("not an HTTP step"));
        };
        // An attempt runs in a controller worker: bounded even where the step sets no
        // timeout, so that a receiver that never answers cannot hold the worker for the
        // Run's whole deadline.
        let client = crate::telemetry::http_client_span(&req.method, &req.url);
        let bounded = async {
            tokio::time::timeout(
                crate::engine::budget::MAX_HTTP_ATTEMPT,
                self.attempt(run, effect, req).instrument(client.clone()),
            )
            .await
            .unwrap_or_else(|_| Outcome::Failed {
                detail: None,
                class: ErrorClass::Timeout,
                message: format!(
                    "no answer within {}s (the longest an http attempt may take)",
                    crate::engine::budget::MAX_HTTP_ATTEMPT.as_secs()
                ),
            })
        };
        let bounded = async {
            let outcome = bounded.await;
            crate::telemetry::attempt_ended(&client, &outcome);
            outcome
        };
        // The wait for a turn counts against the step's time, and has the attempt's bound of
        // its own: an attempt may run in a controller worker, which it must not hold for ever
        // (a `finally` step has no deadline).
        let namespace = run.metadata.namespace.as_deref().unwrap_or_default();
        let slotted = async {
            let Ok(_slot) = tokio::time::timeout(
                crate::engine::budget::MAX_HTTP_ATTEMPT,
                self.slots.take(namespace),
            )
            .await
            else {
                return Outcome::Failed {
                    detail: None,
                    class: ErrorClass::Timeout,
                    message: format!(
                        "no turn within {}s: as many http attempts as may run were in progress",
                        crate::engine::budget::MAX_HTTP_ATTEMPT.as_secs()
                    ),
                };
            };
            bounded.await
        };
        let attempt = super::within_deadline(effect, slotted, || Outcome::Failed {
            detail: None,
            class: ErrorClass::Timeout,
            message: "timed out".into(),
        });
        tokio::select! {
            _ = cancel.cancelled() => None,
            out = attempt => Some(out),
        }
    }
}

impl HttpExecutor {
    async fn attempt(&self, run: &Run, effect: &Effect, req: &HttpRequest) -> Outcome {
        let method = match reqwest::Method::from_bytes(req.method.as_bytes()) {
            Ok(m) => m,
            Err(_) => return Outcome::internal(format!("invalid HTTP method {:?}", req.method)),
        };
        match reqwest::Url::parse(&req.url) {
            Ok(url) => {
                if let Err(e) = self.egress.check_url(&url) {
                    return Outcome::internal(e.to_string());
                }
            }
            Err(e) => return Outcome::internal(format!("url {:?}: {e}", req.url)),
        }
        let mut builder = self
            .client
            .request(method, &req.url)
            .header(IDEMPOTENCY_KEY_HEADER, &effect.idempotency_key);
        // The receiver's spans join the Run's trace (W3C trace context).
        for (name, value) in crate::telemetry::current_context() {
            builder = builder.header(name, value);
        }
        let mut typed = false;
        match super::resolve_headers(&*self.secrets, run, &req.headers).await {
            Ok(headers) => {
                for (name, value) in headers {
                    typed |= name.eq_ignore_ascii_case("content-type");
                    builder = builder.header(name, value);
                }
            }
            Err(e) => return e.outcome(""),
        }
        builder = match &req.body {
            None => builder,
            // The step's own Content-Type names a text body's type (a form, XML); reqwest
            // would send a second header beside it rather than replace it.
            Some(Body::Text(t)) if typed => builder.body(t.clone()),
            Some(Body::Text(t)) => builder
                .header("content-type", "text/plain; charset=utf-8")
                .body(t.clone()),
            Some(Body::Json(v)) => builder.json(v),
        };
        let resp = match builder.send().await {
            Ok(r) => r,
            Err(e) if e.is_timeout() => {
                return Outcome::Failed {
                    detail: None,
                    class: ErrorClass::Timeout,
                    message: e.to_string(),
                };
            }
            Err(e) if e.is_builder() => return Outcome::internal(format!("invalid request: {e}")),
            Err(e) => {
                return Outcome::Failed {
                    detail: None,
                    class: ErrorClass::Connection,
                    message: format!("{}: {}", req.url, error_chain(&e)),
                };
            }
        };
        let status = resp.status().as_u16();
        if crate::telemetry::enabled() {
            tracing::Span::current().record("http.response.status_code", status);
        }
        let headers: BTreeMap<String, String> = resp
            .headers()
            .iter()
            .filter_map(|(k, v)| Some((k.as_str().to_owned(), v.to_str().ok()?.to_owned())))
            .collect();
        match read_body(resp).await {
            Ok(body) => response_outcome(req, status, headers, body),
            // A failure's status says what it is, whatever became of its body.
            Err(_) if !succeeded(req, status) => {
                response_outcome(req, status, headers, Value::Null)
            }
            Err(e) => unread_success(status, &e),
        }
    }
}

/// A success whose body could not be read: a body too large to keep would be too large again
/// (not a failure a retry mends), one that broke off is the connection's.
fn unread_success(status: u16, e: &BodyError) -> Outcome {
    let class = match e {
        BodyError::TooLarge => ErrorClass::ClientError,
        BodyError::Read(_) => ErrorClass::Connection,
    };
    Outcome::Failed {
        detail: None,
        class,
        message: format!("HTTP {status}: {e}"),
    }
}

/// What a response means for the step: success for the step's success codes (2xx by default),
/// else a failure classed by status, its body's first 200 characters kept with the step only.
fn response_outcome(
    req: &HttpRequest,
    status: u16,
    headers: BTreeMap<String, String>,
    body: Value,
) -> Outcome {
    if succeeded(req, status) {
        let output = json!({"status": status, "headers": headers, "body": body});
        return Outcome::Succeeded(fitted(output));
    }
    let class = match status {
        429 => ErrorClass::TooManyRequests,
        500..=599 => ErrorClass::ServerError,
        _ => ErrorClass::ClientError,
    };
    let snippet: String = match &body {
        Value::String(s) => s.chars().take(200).collect(),
        other => other.to_string().chars().take(200).collect(),
    };
    // The body may carry anything the upstream chose to say; it stays with the step.
    Outcome::Failed {
        class,
        message: format!("HTTP {status}"),
        detail: (!snippet.is_empty()).then_some(snippet),
    }
}

/// `output` (`{status, headers, body}`) within a step's output: a body that does not fit
/// beside the status and headers is cut, as text, to the room they leave (`bodyCut: true`), so
/// that the status and headers stay readable rather than the whole output becoming text.
fn fitted(mut output: Value) -> Value {
    if output.to_string().len() <= MAX_OUTPUT_BYTES {
        return output;
    }
    let text = match output["body"].take() {
        Value::String(s) => s,
        other => other.to_string(),
    };
    output["bodyCut"] = Value::Bool(true);
    output["body"] = Value::String(String::new());
    let room = MAX_OUTPUT_BYTES.saturating_sub(output.to_string().len());
    // The longest prefix (at a character) whose JSON string, quotes aside, fits the room.
    let escaped = |n: usize| serde_json::to_string(&text[..n]).map_or(usize::MAX, |j| j.len() - 2);
    let (mut low, mut high) = (0, text.len());
    while low < high {
        let mid = (low + high).div_ceil(2);
        let mut at = mid;
        while !text.is_char_boundary(at) {
            at -= 1;
        }
        if at > low && escaped(at) <= room {
            low = at;
        } else {
            high = mid - 1;
        }
    }
    let mut end = low;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    output["body"] = Value::String(text[..end].to_owned());
    output
}

/// Whether `status` is one of the step's success codes (2xx by default).
fn succeeded(req: &HttpRequest, status: u16) -> bool {
    if req.success_codes.is_empty() {
        (200..300).contains(&status)
    } else {
        req.success_codes.contains(&status)
    }
}

/// The body of `resp`: parsed as JSON when it is JSON and fits a step's output, else as text.
/// A body that would not fit a step's output as compact JSON (the form the output is measured
/// in) would be cut to that many bytes of text anyway, so only that much of it is kept, and
/// none of it parsed (a megabyte of `[0,0,…]` is tens of megabytes as a value), while the rest
/// is counted up to [`MAX_RESPONSE_BYTES`].
async fn read_body(mut resp: reqwest::Response) -> Result<Value, BodyError> {
    let mut raw = Vec::new();
    let mut compact = Compact::default();
    let mut read = 0;
    while let Some(chunk) = resp.chunk().await? {
        read += chunk.len();
        if read > MAX_RESPONSE_BYTES {
            return Err(BodyError::TooLarge);
        }
        let room = (MAX_OUTPUT_BYTES + 1).saturating_sub(raw.len());
        raw.extend_from_slice(&chunk[..chunk.len().min(room)]);
        compact.push(&chunk);
    }
    let fits = if read <= MAX_OUTPUT_BYTES {
        &raw
    } else {
        &compact.text
    };
    if fits.len() <= MAX_OUTPUT_BYTES
        && let Ok(v) = serde_json::from_slice::<Value>(fits)
    {
        return Ok(v);
    }
    if read > MAX_OUTPUT_BYTES {
        raw.truncate(MAX_OUTPUT_BYTES);
        // Cut at a character, not inside one.
        if let Err(e) = std::str::from_utf8(&raw)
            && e.error_len().is_none()
        {
            raw.truncate(e.valid_up_to());
        }
    }
    Ok(Value::String(String::from_utf8_lossy(&raw).into_owned()))
}

/// A body as compact JSON: the whitespace outside strings left out, kept up to one byte past
/// a step's output (enough to know it does not fit). Whitespace between two characters that
/// would run together as one token (`1 2`) stays as one space: JSON never has it there, so
/// what is not JSON stays not JSON.
#[derive(Default)]
struct Compact {
    text: Vec<u8>,
    in_string: bool,
    escaped: bool,
    spaced: bool,
}

impl Compact {
    fn push(&mut self, bytes: &[u8]) {
        let word = |b: u8| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'+' | b'-');
        for &b in bytes {
            if self.text.len() > MAX_OUTPUT_BYTES {
                return;
            }
            if self.in_string {
                self.in_string = self.escaped || b != b'"';
                self.escaped = !self.escaped && b == b'\\';
            } else if matches!(b, b' ' | b'\t' | b'\n' | b'\r') {
                self.spaced = true;
                continue;
            } else {
                if self.spaced && word(b) && self.text.last().copied().is_some_and(word) {
                    self.text.push(b' ');
                }
                self.in_string = b == b'"';
            }
            self.spaced = false;
            self.text.push(b);
        }
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;
    use crate::api::{RunSpec, WorkflowRef};
    use crate::engine::budget::MAX_HTTP_ATTEMPT;
    use crate::steps::Executor;

    /// The clock is paused: it moves only when every task waits, so the 15 minutes pass at
    /// once, and only after the receiver has the request (a blocking wait holds the clock).
    #[tokio::test(start_paused = true)]
    async fn an_attempt_without_a_timeout_ends_at_the_cap_when_the_receiver_never_answers() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let (received, request) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            let mut buf = [0u8; 4096];
            let n = conn.read(&mut buf).unwrap();
            received
                .send(String::from_utf8_lossy(&buf[..n]).into_owned())
                .unwrap();
            // Hold the connection open and never answer.
            let _ = conn.read(&mut buf);
        });
        let egress = super::super::egress::Egress {
            allow_loopback: true,
            ..Default::default()
        };
        let executor = HttpExecutor::new(Arc::new(super::super::StaticSecrets::default()), &egress);
        let mut run = Run::new(
            "hook-abc",
            RunSpec {
                workflow_ref: WorkflowRef {
                    name: "hook".into(),
                },
                arguments: None,
                requested_by: None,
                cancel: None,
                pause: None,
                retry_of: None,
                priority: None,
                input_responses: Default::default(),
            },
        );
        run.metadata.namespace = Some("default".into());
        let effect = Effect {
            step: "notify".into(),
            attempt: 1,
            deadline: None,
            idempotency_key: "uid/notify".into(),
            action: Action::Http(HttpRequest {
                method: "POST".into(),
                url: format!("http://{addr}/hook"),
                headers: vec![],
                body: None,
                success_codes: vec![],
            }),
        };
        let started = tokio::time::Instant::now();
        let attempt = tokio::spawn(async move {
            executor
                .execute(&run, &effect, CancellationToken::new())
                .await
        });
        let request = tokio::task::spawn_blocking(move || request.recv().unwrap())
            .await
            .unwrap();
        assert!(request.starts_with("POST /hook"), "{request}");
        // Without the cap the attempt would wait for the Run's deadline, a week away.
        let outcome = tokio::time::timeout(2 * MAX_HTTP_ATTEMPT, attempt)
            .await
            .expect("the attempt ends at the cap")
            .unwrap();
        assert!(started.elapsed() >= MAX_HTTP_ATTEMPT);
        match outcome {
            Some(Outcome::Failed {
                class: ErrorClass::Timeout,
                message,
                ..
            }) => assert!(message.contains("900s"), "{message}"),
            other => panic!("{other:?}"),
        }
    }

    /// A response with `body`, as reqwest hands one over (in chunks of 16 KiB).
    fn response(body: Vec<u8>) -> reqwest::Response {
        let chunks: Vec<Result<bytes::Bytes, std::io::Error>> = body
            .chunks(16 * 1024)
            .map(|c| Ok(bytes::Bytes::copy_from_slice(c)))
            .collect();
        let stream = futures::stream::iter(chunks);
        reqwest::Response::from(http::Response::new(reqwest::Body::wrap_stream(stream)))
    }

    /// `[0,0,…]` of about `bytes` bytes: JSON that is many times its size as a value.
    fn zeros(bytes: usize) -> Vec<u8> {
        let mut v = b"[0".to_vec();
        while v.len() + 3 <= bytes {
            v.extend_from_slice(b",0");
        }
        v.push(b']');
        v
    }

    #[tokio::test]
    async fn a_body_is_measured_as_compact_json_and_cut_at_a_character() {
        // Pretty-printed past 64 KiB, compact well within: parsed, as its output would be.
        let items: Vec<Value> = (0..2_000)
            .map(|i| json!({"id": i, "name": "a \" b"}))
            .collect();
        let pretty = serde_json::to_vec_pretty(&json!({"items": items})).unwrap();
        assert!(pretty.len() > MAX_OUTPUT_BYTES);
        let parsed = read_body(response(pretty.clone())).await.unwrap();
        assert_eq!(parsed, serde_json::from_slice::<Value>(&pretty).unwrap());
        // Text past 64 KiB is cut at a character boundary, never inside one.
        let text = format!("a{}", "é".repeat(MAX_OUTPUT_BYTES));
        let Value::String(kept) = read_body(response(text.into_bytes())).await.unwrap() else {
            panic!("text stays text")
        };
        assert!(!kept.contains('\u{FFFD}'));
        assert_eq!(kept.len(), MAX_OUTPUT_BYTES - 1);
        // Text within it keeps its spaces (a body is compacted only to measure JSON).
        let words = read_body(response(b"not json, just words".to_vec()))
            .await
            .unwrap();
        assert_eq!(words, json!("not json, just words"));
        // Past it, tokens that spaces keep apart are not run together into JSON.
        let numbers = format!("1 2{}", " ".repeat(MAX_OUTPUT_BYTES)).into_bytes();
        let kept = read_body(response(numbers)).await.unwrap();
        assert!(kept.is_string(), "{kept:.40}");
    }

    #[test]
    fn a_body_too_large_beside_its_status_and_headers_is_cut_to_fit() {
        let headers = json!({"content-type": "text/plain", "x-trace": "t".repeat(1000)});
        for body in [
            json!("\"quoted\" é".repeat(MAX_OUTPUT_BYTES / 8)),
            json!({"items": vec!["x"; MAX_OUTPUT_BYTES / 3]}),
        ] {
            let out = fitted(json!({"status": 200, "headers": headers, "body": body}));
            let text = out.to_string();
            assert!(text.len() <= MAX_OUTPUT_BYTES, "{}", text.len());
            assert!(
                text.len() > MAX_OUTPUT_BYTES - 8,
                "cut no shorter than it must be"
            );
            assert_eq!(
                (out["status"].clone(), out["bodyCut"].clone()),
                (json!(200), json!(true))
            );
            assert_eq!(out["headers"], headers);
        }
        let small = json!({"status": 200, "headers": {}, "body": {"ok": true}});
        assert_eq!(fitted(small.clone()), small);
    }

    #[tokio::test]
    async fn a_body_is_parsed_only_when_it_fits_a_steps_output() {
        let small = zeros(MAX_OUTPUT_BYTES);
        let parsed = read_body(response(small.clone())).await.unwrap();
        assert!(parsed.is_array());
        assert_eq!(parsed.to_string().as_bytes(), small);
        // Larger, it would be cut to this much text as the output: only that much is kept.
        let large = zeros(MAX_RESPONSE_BYTES);
        let kept = read_body(response(large.clone())).await.unwrap();
        let Value::String(text) = kept else {
            panic!("parsed: {kept:.100}")
        };
        assert_eq!(text.as_bytes(), &large[..MAX_OUTPUT_BYTES]);
        // Past what is read at all, it is refused.
        let over = zeros(MAX_RESPONSE_BYTES + 3);
        assert!(matches!(
            read_body(response(over)).await,
            Err(BodyError::TooLarge)
        ));
    }
}
