//! The HTTP client of a `tool` step's upstream session: rmcp's reqwest client, with the
//! attempt's `Idempotency-Key` header on its `tools/call` requests alone. A session also
//! discovers the server and polls its tasks; a proxy that deduplicates by the header would
//! answer those with the cached answer of another request, or refuse the key's reuse.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;

use futures::stream::BoxStream;
use reqwest::header::{HeaderName, HeaderValue};
use rmcp::model::{ClientJsonRpcMessage, ClientRequest, JsonRpcMessage};
use rmcp::transport::streamable_http_client::{
    SseError, StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
    StreamableHttpResponseLimits,
};
use sse_stream::Sse;

/// The header that names an attempt (lowercase, as `HeaderName` wants it).
const IDEMPOTENCY_HEADER: HeaderName = HeaderName::from_static("idempotency-key");

/// reqwest, adding `key` to every `tools/call` sent.
#[derive(Clone)]
pub(super) struct KeyedClient {
    http: reqwest::Client,
    key: Option<HeaderValue>,
}

impl KeyedClient {
    /// A client for one attempt, or for requests of no attempt (`key` of `None`).
    pub(super) fn new(http: reqwest::Client, key: Option<HeaderValue>) -> Self {
        Self { http, key }
    }

    /// `headers` of a session, with the key added when `message` calls a tool.
    fn for_message(
        &self,
        message: &ClientJsonRpcMessage,
        mut headers: HashMap<HeaderName, HeaderValue>,
    ) -> HashMap<HeaderName, HeaderValue> {
        if let (Some(key), JsonRpcMessage::Request(request)) = (&self.key, message)
            && matches!(request.request, ClientRequest::CallToolRequest(_))
        {
            headers.insert(IDEMPOTENCY_HEADER, key.clone());
        }
        headers
    }
}

/// What rmcp's streams of server-sent events give.
type Events = BoxStream<'static, Result<Sse, SseError>>;
/// What a client's requests fail with.
type Failure = StreamableHttpError<reqwest::Error>;

impl StreamableHttpClient for KeyedClient {
    type Error = reqwest::Error;

    fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> impl Future<Output = Result<StreamableHttpPostResponse, Failure>> + Send + '_ {
        let headers = self.for_message(&message, custom_headers);
        self.http
            .post_message(uri, message, session_id, auth_header, headers)
    }

    fn post_message_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> impl Future<Output = Result<StreamableHttpPostResponse, Failure>> + Send + '_ {
        let headers = self.for_message(&message, custom_headers);
        self.http.post_message_with_max_sse_event_size(
            uri,
            message,
            session_id,
            auth_header,
            headers,
            max_sse_event_size,
        )
    }

    fn post_message_with_response_limits(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        limits: StreamableHttpResponseLimits,
    ) -> impl Future<Output = Result<StreamableHttpPostResponse, Failure>> + Send + '_ {
        let headers = self.for_message(&message, custom_headers);
        self.http.post_message_with_response_limits(
            uri,
            message,
            session_id,
            auth_header,
            headers,
            limits,
        )
    }

    fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> impl Future<Output = Result<(), Failure>> + Send + '_ {
        self.http
            .delete_session(uri, session_id, auth_header, custom_headers)
    }

    fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> impl Future<Output = Result<Events, Failure>> + Send + '_ {
        self.http
            .get_stream(uri, session_id, last_event_id, auth_header, custom_headers)
    }

    fn get_stream_with_max_sse_event_size(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
        max_sse_event_size: usize,
    ) -> impl Future<Output = Result<Events, Failure>> + Send + '_ {
        self.http.get_stream_with_max_sse_event_size(
            uri,
            session_id,
            last_event_id,
            auth_header,
            custom_headers,
            max_sse_event_size,
        )
    }
}
