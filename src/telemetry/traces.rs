//! Traces: OpenTelemetry spans of MCP requests, reconciles, step attempts and outgoing calls,
//! exported over OTLP/HTTP when the standard `OTEL_*` environment asks for it (and costing
//! nothing when it does not), and the trace of a Run, which outlives every process that
//! drives it.
//!
//! A Run's own span has ids that follow from the Run: its trace is the caller's (the
//! `runway.dev/traceparent` annotation written when it was created) or, without one, its uid;
//! its span id is a hash of the uid. So every replica, before and after a restart or a
//! failover, hangs the spans of its step attempts under the same Run span, and the replica
//! that writes the Run's end emits that span, with the Run's history as events (started,
//! answered by whom, cancelled by whom, finished).

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{
    SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState, TracerProvider as _,
};
use opentelemetry::{Context, InstrumentationScope, KeyValue};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{
    BatchSpanProcessor, SdkTracer, SdkTracerProvider, SpanData, SpanExporter as _, SpanProcessor,
};
use sha2::{Digest, Sha256};
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::api::{Run, annotations};

/// Name of the tracer and of the instrumentation scope of every span.
const SCOPE: &str = "runway";
/// The W3C trace-context header and `_meta` key.
pub const TRACEPARENT: &str = "traceparent";
/// The W3C trace-state header and `_meta` key.
pub const TRACESTATE: &str = "tracestate";

/// Why traces could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TracesError {
    /// The environment asks for a protocol this build does not speak.
    #[error(
        "{0}={1} is not supported: Runway exports traces over OTLP/HTTP with protobuf (http/protobuf, port 4318)"
    )]
    Protocol(&'static str, String),
    /// The OTLP exporter could not be built (a bad endpoint, say).
    #[error("the OTLP trace exporter: {0}")]
    Exporter(#[from] opentelemetry_otlp::ExporterBuildError),
}

/// The exporting side, once traces are on.
struct Traces {
    provider: SdkTracerProvider,
    /// The same processor the provider sends its spans to: Run spans, whose ids Runway
    /// chooses, go to it directly.
    processor: Shared,
    scope: InstrumentationScope,
}

static TRACES: OnceLock<Traces> = OnceLock::new();

/// The batch processor, shared by the provider and [`finish_run`].
#[derive(Debug, Clone)]
struct Shared(Arc<BatchSpanProcessor>);

impl SpanProcessor for Shared {
    fn on_start(&self, span: &mut opentelemetry_sdk::trace::Span, cx: &Context) {
        self.0.on_start(span, cx);
    }
    fn on_end(&self, span: SpanData) {
        self.0.on_end(span);
    }
    fn force_flush(&self) -> opentelemetry_sdk::error::OTelSdkResult {
        self.0.force_flush()
    }
    fn shutdown_with_timeout(&self, timeout: Duration) -> opentelemetry_sdk::error::OTelSdkResult {
        self.0.shutdown_with_timeout(timeout)
    }
}

/// Whether traces are exported in this process.
pub fn enabled() -> bool {
    TRACES.get().is_some()
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// Whether the environment asks for traces: `OTEL_TRACES_EXPORTER=otlp`, or an OTLP endpoint
/// without `OTEL_TRACES_EXPORTER` saying otherwise; never with `OTEL_SDK_DISABLED=true`.
fn wanted() -> bool {
    if env("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
        return false;
    }
    match env("OTEL_TRACES_EXPORTER") {
        Some(v) => v.split(',').any(|e| e.trim() == "otlp"),
        None => {
            env("OTEL_EXPORTER_OTLP_ENDPOINT").is_some()
                || env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_some()
        }
    }
}

/// Set traces up from the environment, as `instance` (the replica's identity) of the
/// `runway` service; the tracer for the tracing layer, or `None` when traces are off.
/// The exporter reads its endpoint, headers, timeout and compression from the standard
/// `OTEL_EXPORTER_OTLP_*` variables, the sampler from `OTEL_TRACES_SAMPLER`, the resource from
/// `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES`.
pub fn init(instance: &str) -> Result<Option<SdkTracer>, TracesError> {
    if !wanted() {
        return Ok(None);
    }
    for var in [
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
    ] {
        if let Some(p) = env(var) {
            if p.trim() != "http/protobuf" {
                return Err(TracesError::Protocol(var, p));
            }
            break;
        }
    }
    // reqwest's blocking client (the batch processor runs on a thread of its own) is built
    // and dropped off the async runtime.
    let instance = instance.to_owned();
    std::thread::scope(|s| {
        s.spawn(move || build(&instance))
            .join()
            .expect("building the trace exporter does not panic")
    })
    .map(Some)
}

fn build(instance: &str) -> Result<SdkTracer, TracesError> {
    let resource = Resource::builder()
        .with_service_name(env("OTEL_SERVICE_NAME").unwrap_or_else(|| SCOPE.to_owned()))
        .with_attributes([
            KeyValue::new("service.version", crate::VERSION),
            KeyValue::new("service.instance.id", instance.to_owned()),
            KeyValue::new("vcs.ref.head.revision", crate::COMMIT),
            KeyValue::new("process.pid", i64::from(std::process::id())),
        ])
        .build();
    let mut exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .build()?;
    exporter.set_resource(&resource);
    let processor = Shared(Arc::new(BatchSpanProcessor::builder(exporter).build()));
    let provider = SdkTracerProvider::builder()
        .with_resource(resource)
        .with_span_processor(processor.clone())
        .build();
    let tracer = provider.tracer(SCOPE);
    let scope = InstrumentationScope::builder(SCOPE)
        .with_version(crate::VERSION)
        .build();
    let _ = TRACES.set(Traces {
        provider,
        processor,
        scope,
    });
    Ok(tracer)
}

/// Export what is left and stop (at the end of `serve` and `operator`).
pub fn shutdown() {
    if let Some(t) = TRACES.get() {
        let provider = t.provider.clone();
        let _ = std::thread::spawn(move || provider.shutdown()).join();
    }
}

/// The trace context carried by `carrier` (`traceparent`, `tracestate`), as a parent.
pub fn extract(carrier: &HashMap<String, String>) -> Context {
    TraceContextPropagator::new().extract(carrier)
}

/// Make `span` a child of the caller's trace context found in `meta` (`_meta.traceparent`,
/// the MCP convention) or else in `headers` (`traceparent`). Before the span starts only.
pub fn follow_caller(
    span: &tracing::Span,
    meta: Option<&serde_json::Value>,
    headers: &http::HeaderMap,
) {
    if !enabled() {
        return;
    }
    let mut carrier = HashMap::new();
    for key in [TRACEPARENT, TRACESTATE] {
        let value = meta
            .and_then(|m| m.get(key))
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned)
            .or_else(|| {
                headers
                    .get(key)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned)
            });
        if let Some(v) = value {
            carrier.insert(key.to_owned(), v);
        }
    }
    if !carrier.is_empty() {
        let _ = span.set_parent(extract(&carrier));
    }
}

/// The trace context of the current span as W3C `traceparent` (and `tracestate`) entries, to
/// send with an outgoing request or to record on a Run created now; empty when traces are off.
pub fn current_context() -> HashMap<String, String> {
    let mut carrier = HashMap::new();
    if enabled() {
        let cx = tracing::Span::current().context();
        if cx.span().span_context().is_valid() {
            TraceContextPropagator::new().inject_context(&cx, &mut carrier);
        }
    }
    carrier
}

/// The annotation a Run created now carries, so that its trace joins the current one.
pub fn run_annotation() -> Option<(&'static str, String)> {
    current_context()
        .remove(TRACEPARENT)
        .map(|tp| (annotations::TRACEPARENT, tp))
}

/// The span context of `run`'s own span, and that of its parent (the span that created it)
/// when it has one.
fn run_span_context(run: &Run) -> (SpanContext, Option<SpanContext>) {
    let uid = run.metadata.uid.as_deref().unwrap_or_default();
    let parent = run
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(annotations::TRACEPARENT))
        .map(|tp| {
            let carrier = HashMap::from([(TRACEPARENT.to_owned(), tp.clone())]);
            extract(&carrier).span().span_context().clone()
        })
        .filter(SpanContext::is_valid);
    let digest = Sha256::digest(format!("runway run span\0{uid}").as_bytes());
    let mut id = [0u8; 8];
    id.copy_from_slice(&digest[..8]);
    id[0] |= 1; // never the invalid all-zero id
    let (trace_id, flags, state) = match &parent {
        Some(p) => (p.trace_id(), p.trace_flags(), p.trace_state().clone()),
        None => (
            uid_trace_id(uid),
            TraceFlags::SAMPLED,
            TraceState::default(),
        ),
    };
    let own = SpanContext::new(trace_id, SpanId::from_bytes(id), flags, true, state);
    (own, parent)
}

/// The trace id of a Run that no trace created: its uid (a UUID is 128 bits), else a hash.
fn uid_trace_id(uid: &str) -> TraceId {
    let hex: String = uid.chars().filter(char::is_ascii_hexdigit).collect();
    match u128::from_str_radix(&hex, 16) {
        Ok(n) if hex.len() == 32 && n != 0 => TraceId::from_bytes(n.to_be_bytes()),
        _ => {
            let digest = Sha256::digest(format!("runway run trace\0{uid}").as_bytes());
            let mut id = [0u8; 16];
            id.copy_from_slice(&digest[..16]);
            id[0] |= 1;
            TraceId::from_bytes(id)
        }
    }
}

/// Make `span` (a reconcile or a step attempt) a child of `run`'s span, and put the trace and
/// span ids on it so that log lines inside it carry them. Before the span starts only.
pub fn under_run(span: &tracing::Span, run: &Run) {
    if !enabled() {
        return;
    }
    let (own, _) = run_span_context(run);
    let _ = span.set_parent(Context::new().with_remote_span_context(own));
    let sc = span.context().span().span_context().clone();
    span.record("trace_id", sc.trace_id().to_string());
    span.record("span_id", sc.span_id().to_string());
}

/// Put the trace id of `run` and the id of its span on `span` (a reconcile, which is not
/// exported itself), so that log lines about the Run name its trace.
pub fn record_run_ids(span: &tracing::Span, run: &Run) {
    if !enabled() {
        return;
    }
    let (own, _) = run_span_context(run);
    span.record("trace_id", own.trace_id().to_string());
    span.record("span_id", own.span_id().to_string());
}

/// A step attempt begins on `span`: a child of the Run's span, with why it is tried again.
pub fn attempt_started(span: &tracing::Span, run: &Run, effect: &crate::engine::Effect) {
    if !enabled() {
        return;
    }
    under_run(span, run);
    if effect.attempt > 1 {
        let previous = run
            .status
            .as_ref()
            .and_then(|s| s.steps.iter().find(|r| r.name == effect.step))
            .and_then(|r| r.attempts.last())
            .map(|a| a.message.clone());
        if let Some(why) = previous {
            span.record("runway.step.retry_reason", why);
        }
    }
}

/// A step attempt ended on `span` with `outcome`.
pub fn attempt_ended(span: &tracing::Span, outcome: &crate::engine::Outcome) {
    if !enabled() {
        return;
    }
    if let Some(class) = outcome.failure_class() {
        span.record("otel.status_code", "ERROR");
        span.record("error.type", class);
    }
}

/// The client span of an `http` step's request (the HTTP semantic conventions), or none when
/// traces are off. The URL is recorded without its query and credentials, which may carry
/// secrets from the Workflow.
pub fn http_client_span(method: &str, url: &str) -> tracing::Span {
    if !enabled() {
        return tracing::Span::none();
    }
    let parsed = url::Url::parse(url).ok();
    let shown = parsed
        .as_ref()
        .map(|u| {
            format!(
                "{}://{}{}",
                u.scheme(),
                u.host_str().unwrap_or_default(),
                u.path()
            )
        })
        .unwrap_or_default();
    tracing::info_span!(
        "http",
        otel.name = %method,
        otel.kind = "client",
        otel.status_code = tracing::field::Empty,
        error.type = tracing::field::Empty,
        http.request.method = %method,
        http.response.status_code = tracing::field::Empty,
        url.full = %shown,
        server.address = parsed.as_ref().and_then(|u| u.host_str()).unwrap_or_default(),
        server.port = parsed.as_ref().and_then(|u| u.port_or_known_default()).unwrap_or_default(),
    )
}

/// The client span of a `tool` step's call on its upstream MCP server (the MCP semantic
/// conventions), or none when traces are off.
pub fn mcp_client_span(tool: &str, server: &str) -> tracing::Span {
    if !enabled() {
        return tracing::Span::none();
    }
    let parsed = url::Url::parse(server).ok();
    tracing::info_span!(
        "mcp",
        otel.name = %format_args!("tools/call {tool}"),
        otel.kind = "client",
        otel.status_code = tracing::field::Empty,
        error.type = tracing::field::Empty,
        mcp.method.name = "tools/call",
        gen_ai.tool.name = %tool,
        gen_ai.operation.name = "execute_tool",
        server.address = parsed.as_ref().and_then(|u| u.host_str()).unwrap_or_default(),
        server.port = parsed.as_ref().and_then(|u| u.port_or_known_default()).unwrap_or_default(),
    )
}

/// Link `span` (a request that reads, answers or cancels `run`) to the Run's span, so that a
/// trace viewer leads from the answer to the Run and back.
pub fn link_run(span: &tracing::Span, run: &Run) {
    if !enabled() {
        return;
    }
    let (own, _) = run_span_context(run);
    span.add_link(own);
}

/// Put the trace and span ids of `span` on it, for the log lines inside it.
pub fn record_ids(span: &tracing::Span) {
    if !enabled() {
        return;
    }
    let sc = span.context().span().span_context().clone();
    if sc.is_valid() {
        span.record("trace_id", sc.trace_id().to_string());
        span.record("span_id", sc.span_id().to_string());
    }
}

/// Emit `run`'s own span, now that it has finished: from its creation to its end, with the
/// Run's history as events and a span for each step that ran no effect of its own (input,
/// delay, sample, fail), which no step attempt span covers.
pub fn finish_run(run: &Run) {
    let Some(t) = TRACES.get() else { return };
    let (own, parent) = run_span_context(run);
    for span in super::run_span::spans(run, &own, parent.as_ref(), &t.scope) {
        t.processor.on_end(span);
    }
}

/// Name the Run a span is about (its namespace, name and uid), on the current span: the
/// request that created or read it, the reconcile, the effect. Fields a span did not declare
/// are left alone.
pub fn record_run(run: &Run) {
    let span = tracing::Span::current();
    span.record(
        "namespace",
        run.metadata.namespace.as_deref().unwrap_or_default(),
    );
    span.record("run", run.metadata.name.as_deref().unwrap_or_default());
    span.record("uid", run.metadata.uid.as_deref().unwrap_or_default());
}
