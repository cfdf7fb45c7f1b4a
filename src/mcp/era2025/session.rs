//! The sealed `Mcp-Session-Id` of a 2025-era client: what `initialize` negotiated (the revision
//! and the client's capabilities), carried by the client instead of kept by a server, so any
//! replica — also after a restart — serves the client's next request. It is bound to the
//! principal and the path it was issued on: another caller's, another tenant's or a forged id
//! opens as nothing.

use crate::mcp::caps::{declares_forms, declares_sampling, declares_urls};
use rmcp::model::RequestStateError;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::mcp::state::McpState;

/// Revisions with the `initialize` handshake that this endpoint serves, newest first.
pub(crate) const VERSIONS: [&str; 3] = ["2025-11-25", "2025-06-18", "2025-03-26"];

/// The first revision with the tasks capability and `execution.taskSupport`.
pub(crate) const TASKS_VERSION: &str = "2025-11-25";

/// What a 2025-era client negotiated.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(crate) struct Session {
    /// The negotiated revision.
    #[serde(rename = "v")]
    pub version: String,
    /// The capabilities the client declared in `initialize`.
    #[serde(rename = "c", default)]
    pub capabilities: Value,
    /// Random: two handshakes of one caller are two sessions (their calls are told apart).
    #[serde(rename = "n", default)]
    pub nonce: String,
}

impl Session {
    /// The revision to answer an `initialize` asking for `requested`: the same when served,
    /// else the newest (the client then decides whether it can go on).
    pub(crate) fn negotiate(requested: &str, capabilities: Value) -> Self {
        let version = VERSIONS
            .iter()
            .find(|v| **v == requested)
            .unwrap_or(&VERSIONS[0]);
        let mut nonce = [0u8; 12];
        getrandom::fill(&mut nonce).expect("the OS random source works");
        Self {
            version: (*version).to_owned(),
            capabilities,
            nonce: data_encoding::BASE32_NOPAD.encode(&nonce),
        }
    }

    /// Whether the client may be offered this revision's tasks.
    pub(crate) fn has_tasks(&self) -> bool {
        self.version.as_str() >= TASKS_VERSION
    }

    /// Whether the client can show a form (the rule of both eras, `caps::declares_forms`).
    pub(crate) fn elicits_forms(&self) -> bool {
        declares_forms(&self.capabilities)
    }

    /// Whether the client can send a person to a URL (from 2025-11-25, `elicitation: {url: {}}`).
    pub(crate) fn elicits_urls(&self) -> bool {
        self.has_tasks() && declares_urls(&self.capabilities)
    }

    /// Whether the client lets the server ask its model.
    pub(crate) fn samples(&self) -> bool {
        declares_sampling(&self.capabilities)
    }

    /// The id to hand to the client.
    pub(crate) fn seal(
        &self,
        state: &McpState,
        binding: &str,
    ) -> Result<String, RequestStateError> {
        let opts = rmcp::model::SealOptions::new().associated_data(binding.as_bytes());
        state.codecs[0].seal_json_with(self, &opts)
    }

    /// The session an id names, if this server (under any of its state keys) issued it for
    /// `binding`.
    pub(crate) fn open(state: &McpState, id: &str, binding: &str) -> Option<Self> {
        state
            .codecs
            .iter()
            .find_map(|c| c.open_json_with(id, binding.as_bytes()).ok())
    }
}

/// The label value that ties a held call's Run to the call: a keyed hash of the session id
/// and the request id, so that `notifications/cancelled` finds the Run on any replica and
/// nobody can name another client's call.
pub(crate) fn call_label(state: &McpState, session_id: &str, request_id: &Value) -> String {
    use hmac::{KeyInit, Mac};
    let key = &state.config.state_keys[0];
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(key).expect("HMAC takes any key");
    mac.update(b"mcp-call\0");
    mac.update(session_id.as_bytes());
    mac.update(b"\0");
    mac.update(request_id.to_string().as_bytes());
    let digest = mac.finalize().into_bytes();
    data_encoding::BASE32_NOPAD
        .encode(&digest[..20])
        .to_ascii_lowercase()
}

/// What a session id is bound to: the caller and the path it was issued on.
pub(crate) fn binding(username: &str, path: &str) -> String {
    format!("mcp-session\0{username}\0{path}")
}

/// The sealed id of a question the server asked on a held call's stream (`elicitation/create`,
/// `sampling/createMessage`): the client's answer names it, so whichever replica the answer
/// reaches knows which Run and which input key it answers.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub(crate) struct Question {
    /// The Run.
    #[serde(rename = "r")]
    pub run: String,
    /// Its open input key.
    #[serde(rename = "k")]
    pub key: String,
}

impl Question {
    /// The request id to send.
    pub(crate) fn seal(
        &self,
        state: &McpState,
        binding: &str,
    ) -> Result<String, RequestStateError> {
        let ad = format!("question\0{binding}");
        let opts = rmcp::model::SealOptions::new().associated_data(ad.as_bytes());
        state.codecs[0].seal_json_with(self, &opts)
    }

    /// The question an answer's id names, if it was asked of this caller on this path.
    pub(crate) fn open(state: &McpState, id: &str, binding: &str) -> Option<Self> {
        let ad = format!("question\0{binding}");
        state
            .codecs
            .iter()
            .find_map(|c| c.open_json_with(id, ad.as_bytes()).ok())
    }
}
