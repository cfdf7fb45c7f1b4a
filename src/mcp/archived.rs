//! Reading finished Runs back from the archive, after the store deleted them: the
//! `archived` form of `runway_get_run` (the list tool's is a source switch in `builtin`).

use std::sync::Arc;

use rmcp::model::{CallToolResponse, ErrorData};
use serde_json::json;

use super::access::{archived_run, is_owner};
use super::errors::{internal, invalid, unknown_task};
use super::handler::RunwayMcp;
use super::state::Tenant;
use super::views::{for_approver, full, structured};
use crate::store::archive::Archive;

/// What a request for the archive gets where there is none.
pub(super) const NO_ARCHIVE: &str = "this server keeps no archive of finished runs";

impl RunwayMcp {
    /// The archive, or the error a caller who asks for it gets where there is none.
    pub(super) fn archive(&self) -> Result<&Arc<dyn Archive>, ErrorData> {
        self.state
            .config
            .archive
            .as_ref()
            .map(|a| a.archive())
            .ok_or_else(|| invalid(NO_ARCHIVE))
    }

    /// `runway_get_run` with `archived`: the Run as the archive kept it, with the Events it
    /// had, for whoever could read it when it was live.
    pub(super) async fn archived_in_full(
        &self,
        t: &Tenant,
        task_id: &str,
    ) -> Result<CallToolResponse, ErrorData> {
        let archive = self.archive()?;
        let entry = archived_run(&self.state, t, &**archive, task_id)
            .await?
            .ok_or_else(unknown_task)?;
        let run = &entry.run;
        let events = serde_json::to_value(&entry.events).map_err(internal)?;
        let whole = full(run, None, &[], events);
        let mut detail = if super::access::acts_for_anyone(&self.state, t, run).await? {
            whole
        } else {
            for_approver(&whole, &t.identity.principal.username)
        };
        detail["archived"] = json!(true);
        detail["archivedAt"] = json!(entry.archived_at.to_string());
        detail["youMayCancel"] = json!(false);
        // A retry starts from the live Run it retries; an archived one is gone.
        detail["youMayRetry"] = json!(false);
        detail["requestedByYou"] = json!(is_owner(run, &t.identity.principal));
        let text = format!(
            "{} {} (archived) {}",
            task_id,
            run.phase().as_str(),
            detail["statusMessage"].as_str().unwrap_or_default()
        );
        Ok(structured(detail, text))
    }
}
