//! Opening an MCP client session (rmcp over Streamable HTTP, revision 2026-07-28): one place
//! for what Runway announces as a client, so `runway call` and `tool` steps negotiate alike.

use rmcp::model::{ClientCapabilities, ClientConfig, Implementation, ProtocolVersion};
use rmcp::service::{
    ClientInitializeError, ClientLifecycleMode, ClientServiceExt, RoleClient, RunningService,
};
use rmcp::transport::StreamableHttpClientTransport;
use rmcp::transport::streamable_http_client::{
    StreamableHttpClient, StreamableHttpClientTransportConfig,
};
use serde_json::json;

use crate::protocol::TASKS_EXTENSION;

/// An open client session.
pub type Session = RunningService<RoleClient, ClientConfig>;

/// What a session tells the server it can do beyond form elicitation, which every Runway
/// client answers.
#[derive(Debug, Clone, Copy, Default)]
pub struct Abilities {
    /// URL-mode elicitation: a person is there to open a link.
    pub urls: bool,
    /// The Tasks extension: a long call may be answered with a task.
    pub tasks: bool,
}

/// The capabilities `abilities` declare.
pub fn capabilities(abilities: Abilities) -> ClientCapabilities {
    let mut elicitation = json!({"form": {}});
    if abilities.urls {
        elicitation["url"] = json!({});
    }
    let mut caps = json!({ "elicitation": elicitation });
    if abilities.tasks {
        caps["extensions"] = json!({ TASKS_EXTENSION: {} });
    }
    serde_json::from_value(caps).expect("client capabilities deserialize")
}

/// Open a session with the server `config` names, sending requests through `http`.
pub async fn open<C: StreamableHttpClient>(
    http: C,
    config: StreamableHttpClientTransportConfig,
    abilities: Abilities,
) -> Result<Session, ClientInitializeError> {
    crate::install_crypto_provider();
    let transport = StreamableHttpClientTransport::with_client(http, config);
    ClientConfig::new(
        capabilities(abilities),
        Implementation::new("runway", crate::VERSION),
    )
    .serve_with_lifecycle(
        transport,
        ClientLifecycleMode::Discover {
            preferred_versions: vec![ProtocolVersion::V_2026_07_28],
        },
    )
    .await
}
