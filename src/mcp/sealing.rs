//! State handed to clients and taken back: sealed `requestState` and idempotency keys turned
//! into Run names.

use hmac::{KeyInit, Mac};
use rmcp::model::{ErrorData, SealOptions};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use serde_json::{Map, Value};
use sha2::Sha256;

use super::errors::{internal, invalid};
use super::handler::RunwayMcp;
use super::state::Tenant;
use crate::api::{Run, Workflow};

/// What a `requestState` lets a retry resume.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "camelCase")]
pub(super) enum Resume {
    /// Arguments collected so far, before any Run exists: the tool, the round (its random id
    /// names the Run a completed round starts, so that a replay of the state finds that Run)
    /// and the one question it asked.
    Args {
        tool: String,
        args: Value,
        #[serde(default)]
        round: String,
        #[serde(default)]
        asked: String,
    },
    /// A blocking Run that waits for input: the Run by name and uid (a Run deleted and created
    /// again under the name is another Run) and the questions the state asked.
    Run {
        run: String,
        #[serde(default)]
        uid: String,
        #[serde(default)]
        asked: Option<Vec<String>>,
    },
}

impl Resume {
    /// The answers this state may carry: those to the questions it asked. A state sealed
    /// before rounds were named (no `asked`) keeps the answers it came with, and so does a call
    /// without a state: pre-run answers only fill arguments, which the caller could have passed
    /// as such (and the protocol asks servers to take what they can use).
    pub(super) fn answers(
        resume: Option<&Self>,
        responses: BTreeMap<String, Value>,
    ) -> BTreeMap<String, Value> {
        let asked = |k: &String| match resume {
            None => true,
            Some(Self::Args { asked, .. }) => asked.is_empty() || asked == k,
            Some(Self::Run { asked, .. }) => asked.as_ref().is_none_or(|a| a.contains(k)),
        };
        responses.into_iter().filter(|(k, _)| asked(k)).collect()
    }
}

/// The idempotency key of the Run a completed pre-run round starts: the round's id, under a
/// prefix no caller's key can take (caller keys are HMACed under their principal and tool
/// alike, so only the prefix tells them apart in messages).
pub(super) fn round_key(round: &str) -> String {
    format!("{ROUND_KEY_PREFIX}{round}")
}

/// Prefix of [`round_key`]s.
pub(super) const ROUND_KEY_PREFIX: &str = "runway-round:";

/// A fresh round id: 128 random bits.
pub(super) fn fresh_round() -> String {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).expect("the OS random source works");
    data_encoding::BASE32_NOPAD.encode(&b).to_lowercase()
}

/// The Run an idempotency key named earlier, if it is the same call (same Workflow and
/// arguments); the same key with other arguments is refused.
pub(super) fn same_call(
    existing: Run,
    wf: &Workflow,
    args: &Map<String, Value>,
    key: &str,
) -> Result<Run, ErrorData> {
    let same = existing.spec.workflow_ref.name == wf.metadata.name.clone().unwrap_or_default()
        && existing.spec.arguments.as_ref().and_then(Value::as_object) == Some(args);
    if same {
        Ok(existing)
    } else if key.starts_with(ROUND_KEY_PREFIX) {
        Err(invalid(
            "invalid requestState: its question was answered already, otherwise; call the tool \
             again without it to start over",
        ))
    } else {
        Err(invalid("idempotency key reused with different arguments"))
    }
}

/// The Run name `key` maps to under one state key: an HMAC of (namespace, principal, tool, key),
/// so the same retry always names the same Run and nobody can name another caller's.
pub(super) fn idempotent_name(state_key: &[u8], t: &Tenant, wf: &Workflow, key: &str) -> String {
    let mut mac = hmac::Hmac::<Sha256>::new_from_slice(state_key).expect("HMAC takes any key");
    for part in [
        t.namespace.as_str(),
        t.identity.principal.username.as_str(),
        wf.tool_name(),
        key,
    ] {
        mac.update(part.as_bytes());
        mac.update(&[0]);
    }
    let digest = mac.finalize().into_bytes();
    let mut b = [0u8; 16];
    b.copy_from_slice(&digest[..16]);
    crate::api::task_id_from(wf.metadata.name.as_deref().unwrap_or("run"), &b)
}

impl RunwayMcp {
    pub(super) fn seal(&self, t: &Tenant, resume: &Resume) -> Result<String, ErrorData> {
        let ad = format!("{}\0{}", t.namespace, t.identity.principal.username);
        let opts = SealOptions::new()
            .associated_data(ad.as_bytes())
            .ttl(self.state.config.state_ttl);
        self.state.codecs[0]
            .seal_json_with(resume, &opts)
            .map_err(internal)
    }

    pub(super) fn open(&self, t: &Tenant, sealed: &str) -> Result<Resume, ErrorData> {
        let ad = format!("{}\0{}", t.namespace, t.identity.principal.username);
        let mut expired = false;
        for codec in &self.state.codecs {
            match codec.open_json_with(sealed, ad.as_bytes()) {
                Ok(resume) => return Ok(resume),
                Err(rmcp::model::RequestStateError::Expired) => expired = true,
                Err(_) => {}
            }
        }
        Err(invalid(if expired {
            "requestState expired: call the tool again without it to be asked again"
        } else {
            "invalid requestState"
        }))
    }

    /// The Run names an idempotency key maps to, one per state key, newest key first.
    pub(super) fn idempotent_names(&self, t: &Tenant, wf: &Workflow, key: &str) -> Vec<String> {
        self.state
            .config
            .state_keys
            .iter()
            .map(|k| idempotent_name(k, t, wf, key))
            .collect()
    }
}
