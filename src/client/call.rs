//! `runway call`: call a tool, then follow the task it may become.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResponse, GetTaskParams, JsonObject, TaskPayload,
    UpdateTaskParams,
};
use serde_json::Value;

use crate::protocol::META_AWAITING_YOU;
use crate::protocol::codes::INVALID_PARAMS;

use super::errors::ClientError;
use super::exit;
use super::outage::{OUTAGE_LIMIT, Outage};
use super::output::{interrupted, print_result, shown};
use super::prompt::Prompter;
use super::target::{Target, connect};
use crate::dial::Session;

/// Parse `--arg k=v` pairs over `--json`. A value is JSON when it parses, else a string; a
/// property the tool's schema declares as a string always stays a string (`--arg version=1.2`).
pub fn arguments(
    json_args: Option<&str>,
    pairs: &[String],
    schema: Option<&Value>,
) -> Result<JsonObject, ClientError> {
    let mut args = match json_args {
        Some(s) => match serde_json::from_str::<Value>(s) {
            Ok(Value::Object(m)) => m,
            _ => return Err(ClientError::Usage("--json must be a JSON object".into())),
        },
        None => JsonObject::new(),
    };
    for p in pairs {
        let (k, v) = p
            .split_once('=')
            .ok_or_else(|| ClientError::Usage(format!("--arg {p:?}: expected key=value")))?;
        let declared = schema.and_then(|s| s["properties"][k]["type"].as_str());
        let v = if declared == Some("string") {
            Value::String(v.to_owned())
        } else {
            serde_json::from_str(v).unwrap_or_else(|_| Value::String(v.to_owned()))
        };
        args.insert(k.to_owned(), v);
    }
    Ok(args)
}

/// `runway call`: call a tool, follow its task (or hold the call), prompt for input, print the result.
pub async fn call(
    target: &Target,
    tool: &str,
    json_args: Option<&str>,
    pairs: &[String],
    no_task: bool,
    prompter: &mut Prompter,
) -> Result<u8, ClientError> {
    let session = connect(target, !no_task).await?;
    let schema = match pairs.is_empty() {
        true => None,
        false => session
            .list_all_tools()
            .await?
            .into_iter()
            .find(|t| t.name == tool)
            .map(|t| Value::Object((*t.input_schema).clone())),
    };
    let args = arguments(json_args, pairs, schema.as_ref())?;
    let mut params = CallToolRequestParams::new(tool.to_owned()).with_arguments(args.clone());
    loop {
        let response = tokio::select! {
            r = session.call_tool_once(params.clone()) => match r.map_err(ClientError::from) {
                Ok(response) => response,
                // A blocking call whose work failed ends as a failed task does: same words,
                // same exit status. Errors about the request itself stay usage errors.
                Err(ClientError::Rpc { code, message }) if !refused_request(code) => {
                    eprintln!("call failed: {} ({code})", shown(&message));
                    return Ok(exit::FAILED);
                }
                Err(e) => return Err(e),
            },
            _ = prompter.interrupted() => {
                // Dropping a blocking call's connection cancels its Run on the server.
                eprintln!("interrupted; the run was cancelled");
                return Ok(exit::INTERRUPTED);
            }
        };
        match response {
            CallToolResponse::Complete(result) => {
                return Ok(print_result(
                    &serde_json::to_value(result).unwrap_or(Value::Null),
                ));
            }
            CallToolResponse::InputRequired(ir) => {
                let requests = serde_json::to_value(&ir.input_requests).unwrap_or(Value::Null);
                let mut answers = BTreeMap::new();
                for (key, req) in requests.as_object().into_iter().flatten() {
                    match prompter.answer(key, req).await {
                        Ok(a) => answers.insert(key.clone(), a),
                        Err(ClientError::Interrupted) => {
                            eprintln!("interrupted; nothing was started");
                            return Ok(exit::INTERRUPTED);
                        }
                        Err(e) => return Err(e),
                    };
                }
                let mut next =
                    CallToolRequestParams::new(tool.to_owned()).with_arguments(args.clone());
                next.input_responses = Some(answers.into_iter().collect());
                next.request_state = ir.request_state.clone();
                params = next;
            }
            CallToolResponse::Task(t) => {
                let id = t.task.task_id.clone();
                eprintln!("task {id}");
                return follow(target, session, &id, t.task.poll_interval_ms, prompter).await;
            }
            _ => return Err(ClientError::Protocol("unexpected response".into())),
        }
    }
}

/// What one `tasks/get` while following gave.
enum Polled {
    /// The task.
    Task(Box<rmcp::model::GetTaskResult>),
    /// The server was unreachable; a fresh session is ready for the next try.
    Retry,
    /// Stop with this exit code (the person pressed Ctrl-C).
    Exit(u8),
}

/// One `tasks/get`. A server restart or a dropped connection is waited out with bounded
/// backoff, up to a limit: the Run carries on without us.
async fn poll(
    target: &Target,
    session: &mut Session,
    id: &str,
    outage: &mut Outage,
    prompter: &mut Prompter,
) -> Result<Polled, ClientError> {
    let why = match session.get_task(GetTaskParams::new(id.to_owned())).await {
        Ok(got) => {
            outage.over();
            return Ok(Polled::Task(Box::new(got)));
        }
        Err(e) => match ClientError::from(e) {
            ClientError::Unreachable(why) => why,
            other => return Err(other),
        },
    };
    let Some(wait) = outage.next(&why) else {
        eprintln!(
            "giving up after {}s; task {id} keeps running (runway tasks get {id})",
            OUTAGE_LIMIT.as_secs()
        );
        return Err(ClientError::Unreachable(why));
    };
    tokio::select! {
        _ = tokio::time::sleep(wait) => {}
        _ = prompter.interrupted() => return Ok(Polled::Exit(interrupted(id))),
    }
    // A failed transport may not recover by itself: start a fresh session.
    match connect(target, true).await {
        Ok(fresh) => *session = fresh,
        Err(ClientError::Unreachable(_)) => {}
        Err(e) => return Err(e),
    }
    Ok(Polled::Retry)
}

pub(super) async fn follow(
    target: &Target,
    mut session: Session,
    id: &str,
    poll_ms: Option<u64>,
    prompter: &mut Prompter,
) -> Result<u8, ClientError> {
    // The status line and the note about questions for others are told apart: sharing one
    // "last printed" value made each undo the other, and both were printed on every poll.
    let mut last_message = None;
    let mut last_note: Option<String> = None;
    let mut interval = Duration::from_millis(poll_ms.unwrap_or(1000).max(50));
    // Keys answered here: the server takes answers eventually, so a poll may still list them.
    let mut answered = BTreeSet::new();
    let mut outage = Outage::default();
    loop {
        let got = match poll(target, &mut session, id, &mut outage, prompter).await? {
            Polled::Task(got) => got,
            Polled::Retry => continue,
            Polled::Exit(code) => return Ok(code),
        };
        // Runway says which open questions this caller may answer; other servers do not, and
        // then every question is asked.
        let awaiting: Option<Vec<String>> = got
            .meta
            .as_ref()
            .and_then(|m| m.0.get(META_AWAITING_YOU))
            .and_then(|v| serde_json::from_value(v.clone()).ok());
        let task = got.task;
        if let Some(ms) = task.task.poll_interval_ms {
            interval = Duration::from_millis(ms.max(50));
        }
        if task.task.status_message != last_message {
            if let Some(m) = &task.task.status_message {
                eprintln!("  {}", shown(m));
            }
            last_message = task.task.status_message.clone();
        }
        match &task.payload {
            TaskPayload::Completed { result } => {
                return Ok(print_result(&Value::Object(result.clone())));
            }
            TaskPayload::Failed { error } => {
                eprintln!(
                    "call failed: {} ({})",
                    shown(error.get("message").and_then(Value::as_str).unwrap_or("?")),
                    error.get("code").cloned().unwrap_or(Value::Null)
                );
                return Ok(exit::FAILED);
            }
            TaskPayload::Cancelled => {
                eprintln!("task cancelled");
                return Ok(exit::FAILED);
            }
            TaskPayload::InputRequired { input_requests } => {
                let requests = serde_json::to_value(input_requests).unwrap_or(Value::Null);
                let mine = Mine {
                    awaiting: awaiting.as_deref(),
                    answered: &mut answered,
                };
                match ask(&session, id, &requests, mine, prompter).await? {
                    Asked::Answered => {}
                    Asked::Interrupted => return Ok(interrupted(id)),
                    Asked::NotMine(note) if last_note.as_deref() != Some(note.as_str()) => {
                        eprintln!("  {}", shown(&note));
                        last_note = Some(note);
                    }
                    Asked::NotMine(_) => {}
                }
            }
            _ => {}
        }
        tokio::select! {
            _ = tokio::time::sleep(interval) => {}
            _ = prompter.interrupted() => return Ok(interrupted(id)),
        }
    }
}

/// Which open questions are this caller's to answer now.
struct Mine<'a> {
    /// The keys the server says wait for this caller (`None`: it does not say, so all).
    awaiting: Option<&'a [String]>,
    /// The keys answered already; each is answered once.
    answered: &'a mut BTreeSet<String>,
}

/// What became of a task's open questions.
enum Asked {
    /// The caller answered (or an answer was refused and its question stays open).
    Answered,
    /// None is the caller's to answer: this says whose turn it is.
    NotMine(String),
    /// The person pressed Ctrl-C at a prompt.
    Interrupted,
}

/// Ask the person the open questions that wait for them (all of them when the server does not
/// say which), and send the answers in one `tasks/update`.
async fn ask(
    session: &Session,
    id: &str,
    requests: &Value,
    me: Mine<'_>,
    prompter: &mut Prompter,
) -> Result<Asked, ClientError> {
    let open = requests.as_object().into_iter().flatten();
    let mine: Vec<(&String, &Value)> = open
        .clone()
        .filter(|(k, _)| me.awaiting.is_none_or(|a| a.contains(k)))
        .collect();
    if !mine.is_empty() && mine.iter().all(|(k, _)| me.answered.contains(*k)) {
        // Sent already; the server has not taken them yet.
        return Ok(Asked::Answered);
    }
    let mut mine: Vec<(&String, &Value)> = mine
        .into_iter()
        .filter(|(k, _)| !me.answered.contains(*k))
        .collect();
    // Runway lists the caller's questions in the order the Workflow asks them.
    if let Some(order) = me.awaiting {
        mine.sort_by_key(|(k, _)| order.iter().position(|a| a == *k));
    }
    if mine.is_empty() {
        let others: Vec<&str> = open.map(|(k, _)| k.as_str()).collect();
        return Ok(Asked::NotMine(format!(
            "waiting for someone else to answer {}",
            others.join(", ")
        )));
    }
    let mut answers = BTreeMap::new();
    for (key, req) in mine {
        match prompter.answer(key, req).await {
            Ok(a) => answers.insert(key.clone(), a),
            Err(ClientError::Interrupted) => return Ok(Asked::Interrupted),
            Err(e) => return Err(e),
        };
    }
    // A refused answer leaves its question open: say why, and the next round asks again.
    let keys: Vec<String> = answers.keys().cloned().collect();
    let update = UpdateTaskParams::new(id.to_owned(), answers.into_iter().collect());
    match session.update_task(update).await.map_err(ClientError::from) {
        Ok(()) => me.answered.extend(keys),
        Err(ClientError::Rpc { code, message }) if code == INVALID_PARAMS => {
            eprintln!("  {}", shown(&message));
        }
        Err(e) => return Err(e),
    }
    Ok(Asked::Answered)
}

/// Whether a JSON-RPC error code says the request was refused (malformed, unauthorized, unknown
/// tool, bad arguments, missing capability) rather than that the work it started failed.
fn refused_request(code: i64) -> bool {
    use crate::protocol::codes;
    [
        codes::PARSE_ERROR,
        codes::INVALID_REQUEST,
        codes::METHOD_NOT_FOUND,
        INVALID_PARAMS,
        codes::HEADER_MISMATCH,
        codes::MISSING_CAPABILITY,
        codes::UNSUPPORTED_VERSION,
        codes::UNAUTHENTICATED,
        codes::FORBIDDEN,
    ]
    .contains(&code)
}
