//! Where a client command connects, and opening the session there.

use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;

use super::errors::{ClientError, connect_error};
use crate::dial::{self, Abilities, Session};

/// Where to connect.
#[derive(Debug, Clone)]
pub struct Target {
    /// MCP endpoint URL.
    pub url: String,
    /// Bearer token.
    pub token: Option<String>,
}

/// Open a session at `target`; a person is at the terminal, so URL-mode questions can be
/// answered; `tasks` declares the Tasks extension.
pub(super) async fn connect(target: &Target, tasks: bool) -> Result<Session, ClientError> {
    let mut cfg = StreamableHttpClientTransportConfig::with_uri(target.url.clone());
    if let Some(t) = &target.token {
        cfg = cfg.auth_header(t.clone());
    }
    let abilities = Abilities { urls: true, tasks };
    dial::open(reqwest::Client::default(), cfg, abilities)
        .await
        .map_err(|e| connect_error(e, &target.url, target.token.is_some()))
}
