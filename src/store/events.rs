//! Reading a Run's Events back, for people looking at the Run: the embedded server keeps the
//! latest in memory (`controller::history`), the operator asks the API server.

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

/// One Event about a Run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RecordedEvent {
    /// When it was (last) recorded, RFC 3339.
    pub time: Option<String>,
    /// `Normal` or `Warning`.
    #[serde(rename = "type")]
    pub type_: String,
    /// Reason (`api::event_reasons`).
    pub reason: String,
    /// What happened.
    pub message: String,
}

/// Errors reading Events back.
#[derive(Debug, thiserror::Error)]
#[error("cannot read events: {0}")]
pub struct EventLogError(pub String);

/// Reads a Run's Events back, oldest first.
#[async_trait]
pub trait EventLog: Send + Sync + 'static {
    /// The Events recorded about Run `name` of `namespace` with `uid`: a Run deleted and made
    /// again under its name is another Run, whose readers must not see the first one's Events.
    async fn recent(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
    ) -> Result<Vec<RecordedEvent>, EventLogError>;
}
