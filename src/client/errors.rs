//! What can go wrong in a client command, said in the user's terms.

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
            rmcp::ServiceError::TransportSend(e) => transport_error(&e, None, true),
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
    url: Option<&str>,
    with_token: bool,
) -> ClientError {
    use rmcp::transport::streamable_http_client::StreamableHttpError;
    let url = url.unwrap_or("the server");
    let Some(http) = e
        .error
        .downcast_ref::<StreamableHttpError<reqwest::Error>>()
    else {
        return ClientError::Protocol(format!("talking to {url} failed: {}", e.error));
    };
    match http {
        StreamableHttpError::AuthRequired(_) => ClientError::Protocol(match with_token {
            false => format!(
                "HTTP 401 from {url}: it wants a bearer token; pass --token-file FILE (or set RUNWAY_TOKEN_FILE)"
            ),
            true => format!(
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
pub(super) fn connect_error(
    e: rmcp::service::ClientInitializeError,
    url: &str,
    with_token: bool,
) -> ClientError {
    use rmcp::service::ClientInitializeError as E;
    match e {
        E::TransportError { error, .. } => transport_error(&error, Some(url), with_token),
        E::JsonRpcError(e) if e.message.contains("HTTP 404") => ClientError::Protocol(format!(
            "HTTP 404 from {}: no MCP endpoint there; the path is /mcp or /namespaces/<namespace>/mcp",
            url
        )),
        E::JsonRpcError(e) => ClientError::Rpc {
            code: e.code.0 as i64,
            message: e.message.to_string(),
        },
        other => ClientError::Protocol(format!("cannot start a session with {}: {other}", url)),
    }
}
