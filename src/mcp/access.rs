//! Who may do what to which task: RBAC per method, the owner rule, named approvers.

use std::sync::Arc;

use rmcp::model::ErrorData;

use super::config::TaskAccess;
use super::errors::internal;
use super::state::{McpState, Tenant};
use crate::api::Run;
use crate::auth::{Resource, Verb};
use crate::engine::input::{AnswerRefusal, is_named_approver, may_answer};

pub(super) async fn allowed(
    state: &McpState,
    t: &Tenant,
    verb: Verb,
    resource: Resource,
) -> Result<bool, ErrorData> {
    state
        .authz
        .allowed(&t.identity, verb, resource, &t.namespace)
        .await
        .map_err(internal)
}

/// What a caller wants to do with a task; each needs its RBAC verb and the owner rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Access {
    /// `tasks/get`, `subscriptions/listen`: `get runs`.
    Read,
    /// `tasks/update`: `update runs`.
    Answer,
    /// `tasks/cancel`: `update runs`.
    Cancel,
}

impl Access {
    pub(super) fn verb(self) -> Verb {
        match self {
            Self::Read => Verb::Get,
            Self::Answer | Self::Cancel => Verb::Update,
        }
    }
}

/// Whether an open input request of `run` names `me` among its approvers.
pub(super) fn awaits_answer_from(run: &Run, me: &crate::api::Principal) -> bool {
    let Some(open) = run
        .status
        .as_ref()
        .map(|s| &s.input_requests)
        .filter(|open| !open.is_empty())
    else {
        return false;
    };
    // Every read of a task asks this: the snapshot is only worth decoding when questions wait.
    let Some(snapshot) = run.workflow_snapshot() else {
        return false;
    };
    open.iter().any(|(_, req)| {
        snapshot
            .input_request(&req.step, &req.name)
            .is_some_and(|spec| {
                is_named_approver(
                    spec,
                    run.spec.requested_by.as_ref(),
                    &me.username,
                    &me.groups,
                )
            })
    })
}

/// The open input keys of `run` the caller may answer (RBAC `update runs` and the approver
/// rule), so that a person sees which questions wait for them; `None` when nothing is asked.
pub(super) async fn awaiting_answer_from(
    state: &McpState,
    t: &Tenant,
    run: &Run,
) -> Option<Vec<String>> {
    if run
        .status
        .as_ref()
        .is_none_or(|s| s.input_requests.is_empty())
    {
        return None;
    }
    let may_update = allowed(state, t, Verb::Update, Resource::Runs)
        .await
        .unwrap_or(false);
    let for_anyone = acts_for_anyone(state, t, run).await.unwrap_or(false);
    awaiting_keys(run, &t.identity.principal, may_update, for_anyone)
}

/// [`awaiting_answer_from`] for a caller whose `update runs` right and standing under the
/// owner rule ([`acts_for_anyone`]) are known.
pub(super) fn awaiting_keys(
    run: &Run,
    me: &crate::api::Principal,
    may_update: bool,
    for_anyone: bool,
) -> Option<Vec<String>> {
    let open = run
        .status
        .as_ref()
        .map(|s| &s.input_requests)
        .filter(|o| !o.is_empty() && !run.phase().is_terminal())?;
    if !may_update {
        return Some(vec![]);
    }
    let snapshot = run.workflow_snapshot();
    let mut mine: Vec<(&String, &crate::api::OpenInputRequest)> = open
        .iter()
        .filter(|(key, req)| {
            req.answer_key(key, &run.spec.input_responses, &me.username)
                .is_some()
                && may_answer_question(
                    snapshot
                        .as_ref()
                        .and_then(|w| w.input_request(&req.step, &req.name)),
                    run,
                    me,
                    for_anyone,
                )
                .is_ok()
        })
        .collect();
    // In the manifest's order, which is the order a person is asked in.
    if let Some(w) = &snapshot {
        mine.sort_by_key(|(key, req)| (w.input_request_place(&req.step, &req.name), *key));
    }
    Some(mine.into_iter().map(|(key, _)| key.clone()).collect())
}

/// Why a caller may not answer one question of a Run.
#[derive(Debug, thiserror::Error)]
pub(super) enum QuestionRefusal {
    /// The question is not one of the Workflow's input requests (an upstream tool's, the
    /// caller's model's), and the caller may not act on the whole Run.
    #[error("only the requester may answer this question")]
    RequesterOnly,
    /// The request's own rules (approvers, `distinctFromRequester`) refuse the caller.
    #[error(transparent)]
    Refused(#[from] AnswerRefusal),
    /// The request names no approvers, and the caller may not act on the whole Run.
    #[error(
        "{request} names no approvers: only the requester or someone who may list runs may answer it"
    )]
    NoApprovers {
        /// The request's name.
        request: String,
    },
}

/// Whether `me` may answer one question of `run`: its approvers (and the requester rule) when
/// it names approvers; otherwise only whoever may act on the whole Run (`for_anyone`), so that
/// being the approver of one question gives no say over another.
pub(super) fn may_answer_question(
    spec: Option<&crate::api::InputRequestSpec>,
    run: &Run,
    me: &crate::api::Principal,
    for_anyone: bool,
) -> Result<(), QuestionRefusal> {
    let Some(spec) = spec else {
        return if for_anyone {
            Ok(())
        } else {
            Err(QuestionRefusal::RequesterOnly)
        };
    };
    may_answer(
        spec,
        run.spec.requested_by.as_ref(),
        &me.username,
        &me.groups,
    )?;
    if for_anyone
        || is_named_approver(
            spec,
            run.spec.requested_by.as_ref(),
            &me.username,
            &me.groups,
        )
    {
        Ok(())
    } else {
        Err(QuestionRefusal::NoApprovers {
            request: spec.name.clone(),
        })
    }
}

/// Whether `me` requested `run` (the uid must match too when both sides have one).
pub(super) fn is_owner(run: &Run, me: &crate::api::Principal) -> bool {
    run.spec.requested_by.as_ref().is_some_and(|p| {
        p.username == me.username && (p.uid.is_none() || me.uid.is_none() || p.uid == me.uid)
    })
}

/// Whether the caller may act on all of `run` under the owner rule: the rule is off
/// (`--task-access=namespace`), they requested it, or they may `list runs` (an error when
/// that cannot be told now: a "no" would be an answer the caller acts on).
pub(super) async fn acts_for_anyone(
    state: &McpState,
    t: &Tenant,
    run: &Run,
) -> Result<bool, ErrorData> {
    if state.config.task_access == TaskAccess::Namespace || is_owner(run, &t.identity.principal) {
        return Ok(true);
    }
    allowed(state, t, Verb::List, Resource::Runs).await
}

/// Whether `me` answered one of `run`'s questions: who took part may follow how it ends.
pub(super) fn answered(run: &Run, me: &crate::api::Principal) -> bool {
    run.spec
        .input_responses
        .values()
        .any(|r| r.answered_by.as_deref() == Some(me.username.as_str()))
}

/// Whether the caller, whose RBAC allows `access`, may act on `run` under the owner rule: the
/// requester, whoever may list runs, — to read and answer, not to cancel — the approvers an open
/// question names, and — to read — whoever answered one of its questions.
async fn owner_rule_allows(
    state: &McpState,
    t: &Tenant,
    run: &Run,
    access: Access,
) -> Result<bool, ErrorData> {
    let me = &t.identity.principal;
    if (access != Access::Cancel && awaits_answer_from(run, me))
        || (access == Access::Read && answered(run, me))
    {
        return Ok(true);
    }
    acts_for_anyone(state, t, run).await
}

/// The Run behind a task id if the caller may act on it; `None` for every kind of "no". The
/// id's shape and the caller's namespace rights are checked before the store is asked, so a
/// caller without rights learns nothing, and no id reaches an API path unless it is a name.
/// A store or an access review that cannot answer now is an internal error (`-32603`), not a
/// "no": an unknown task is final to a client, and the task is not.
pub(super) async fn task_run(
    state: &McpState,
    t: &Tenant,
    task_id: &str,
    access: Access,
) -> Result<Option<Arc<Run>>, ErrorData> {
    if !crate::api::is_dns_subdomain(task_id)
        || !allowed(state, t, access.verb(), Resource::Runs).await?
    {
        return Ok(None);
    }
    let Some(run) = state
        .store
        .get_shared(&t.namespace, task_id)
        .await
        .map_err(internal)?
    else {
        return Ok(None);
    };
    crate::telemetry::record_run(&run);
    crate::telemetry::link_run(&tracing::Span::current(), &run);
    Ok(owner_rule_allows(state, t, &run, access)
        .await?
        .then_some(run))
}

/// The Run behind a task id if the caller may read it; `None` for every kind of "no".
pub(super) async fn readable_run(
    state: &McpState,
    t: &Tenant,
    task_id: &str,
) -> Result<Option<Arc<Run>>, ErrorData> {
    task_run(state, t, task_id, Access::Read).await
}

/// Whether the caller may still read `run`, a version of a task it was shown before: a stream
/// asks again at each change, since an answer given, a question closed or a RoleBinding
/// removed can end what it was allowed to read. An authorization check that fails (the
/// access review unavailable for a moment) keeps the reader: it was allowed, and the next
/// change asks again; only a "no" ends it.
pub(super) async fn may_read(state: &McpState, t: &Tenant, run: &Run) -> bool {
    let me = &t.identity.principal;
    let Ok(get) = allowed(state, t, Verb::Get, Resource::Runs).await else {
        return true;
    };
    if !get {
        return false;
    }
    if awaits_answer_from(run, me)
        || answered(run, me)
        || state.config.task_access == TaskAccess::Namespace
        || is_owner(run, me)
    {
        return true;
    }
    allowed(state, t, Verb::List, Resource::Runs)
        .await
        .unwrap_or(true)
}

/// Whether `token`, the bearer token a stream was opened with, still names the stream's
/// caller: asked at each change beside [`may_read`], so that a token revoked or expired while
/// the stream is open stops it within one authentication cache lifetime, as it stops
/// requests. An authenticator that cannot answer keeps the stream, as [`may_read`] does.
pub(super) async fn still_signed_in(state: &McpState, t: &Tenant, token: Option<&str>) -> bool {
    match state.authn.authenticate(token).await {
        Ok(identity) => identity.principal == t.identity.principal,
        Err(crate::auth::AuthError::Unauthenticated(_)) => false,
        Err(_) => true,
    }
}

/// The archive entry behind a task id if the caller may read it, under the rules of a live
/// Run (`get runs` and the owner rule); `None` for every kind of "no".
pub(super) async fn archived_run(
    state: &McpState,
    t: &Tenant,
    archive: &dyn crate::store::archive::Archive,
    task_id: &str,
) -> Result<Option<crate::store::archive::Entry>, ErrorData> {
    if !crate::api::is_dns_subdomain(task_id)
        || !allowed(state, t, Verb::Get, Resource::Runs).await?
    {
        return Ok(None);
    }
    let Some(entry) = archive.get(&t.namespace, task_id).await.map_err(internal)? else {
        return Ok(None);
    };
    Ok(owner_rule_allows(state, t, &entry.run, Access::Read)
        .await?
        .then_some(entry))
}
