//! `runway tasks get|answer|cancel|watch`.

use std::collections::BTreeMap;

use futures::StreamExt;
use rmcp::model::{CancelTaskParams, GetTaskParams, TaskPayload, TaskStatus, UpdateTaskParams};
use serde_json::{Value, json};

use crate::protocol::codes::INVALID_PARAMS;
use crate::protocol::{
    HEADER_METHOD, HEADER_PROTOCOL_VERSION, META_CLIENT_CAPABILITIES, META_PROTOCOL_VERSION,
    METHOD_LISTEN, PROTOCOL_VERSION, TASKS_EXTENSION,
};

use super::errors::ClientError;
use super::exit;
use super::output::{out, shown};
use super::target::{Target, connect};

/// `runway tasks get`: print the task as JSON.
pub async fn get(target: &Target, id: &str) -> Result<u8, ClientError> {
    let session = connect(target, true).await?;
    let task = session.get_task(GetTaskParams::new(id.to_owned())).await?;
    out(&serde_json::to_string_pretty(&task).unwrap_or_default());
    Ok(exit::OK)
}

/// `runway tasks answer`.
pub async fn answer(
    target: &Target,
    id: &str,
    key: &str,
    response: Value,
) -> Result<u8, ClientError> {
    let session = connect(target, true).await?;
    // The server acknowledges answers to keys that are not open without taking them (a retry
    // must not fail), so the client looks first to tell the person what happened.
    let task = session.get_task(GetTaskParams::new(id.to_owned())).await?;
    let open: Vec<String> = match &task.task.payload {
        TaskPayload::InputRequired { input_requests } => input_requests.keys().cloned().collect(),
        _ => vec![],
    };
    if !open.iter().any(|k| k == key) {
        let now = if open.is_empty() {
            "it asks nothing now".to_owned()
        } else {
            format!("open: {}", open.join(", "))
        };
        eprintln!("answer not taken: {key} is not an open question of task {id} ({now})");
        return Ok(exit::NOT_TAKEN);
    }
    let mut responses = BTreeMap::new();
    responses.insert(key.to_owned(), response);
    match session
        .update_task(UpdateTaskParams::new(
            id.to_owned(),
            responses.into_iter().collect(),
        ))
        .await
        .map_err(ClientError::from)
    {
        Ok(()) => {
            eprintln!("answer to {key} taken");
            Ok(exit::OK)
        }
        Err(ClientError::Rpc { code, message }) if code == INVALID_PARAMS => {
            eprintln!("answer not taken: {}", shown(&message));
            Ok(exit::NOT_TAKEN)
        }
        Err(e) => Err(e),
    }
}

/// `runway tasks cancel`: ask for the cancellation, then say what it did: a task that had
/// already ended is left as it was; a running one is being stopped (its `finally` steps run
/// first), or is stopped already.
pub async fn cancel(target: &Target, id: &str) -> Result<u8, ClientError> {
    let session = connect(target, true).await?;
    let before = session.get_task(GetTaskParams::new(id.to_owned())).await?;
    let was = before.task.task.status;
    if was.is_terminal() {
        eprintln!(
            "task {id} had already ended ({}); nothing to cancel",
            status_name(was)
        );
        return Ok(exit::NOT_TAKEN);
    }
    session
        .cancel_task(CancelTaskParams::new(id.to_owned()))
        .await?;
    let after = session.get_task(GetTaskParams::new(id.to_owned())).await?;
    let now = after.task.task.status;
    if now.is_terminal() {
        eprintln!(
            "task {id} cancelled (it was {}; now {})",
            status_name(was),
            status_name(now)
        );
    } else {
        eprintln!(
            "cancel of task {id} requested (it was {}): it stops at its next step boundary, after its finally steps; `runway tasks watch {id}` follows it",
            status_name(was)
        );
    }
    Ok(exit::OK)
}

/// A task status as the protocol spells it.
fn status_name(s: TaskStatus) -> String {
    serde_json::to_value(s)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| format!("{s:?}"))
}

/// One message of a listen stream: print task states; `Some` with the exit code once the task
/// ended or the stream answered, or the error when the task is unknown.
fn on_frame(msg: &Value, id: &str, acknowledged: &mut bool) -> Option<Result<u8, ClientError>> {
    if msg["method"] == crate::protocol::NOTIFICATION_ACKNOWLEDGED {
        *acknowledged = msg["params"]["notifications"]["taskIds"]
            .as_array()
            .is_some_and(|a| !a.is_empty());
        return (!*acknowledged).then(|| Err(ClientError::Usage(format!("unknown task {id}"))));
    }
    if msg["method"] == crate::protocol::NOTIFICATION_TASK {
        let p = &msg["params"];
        let status = p["status"].as_str().unwrap_or("?");
        out(&format!(
            "{status}\t{}",
            p["statusMessage"].as_str().unwrap_or("")
        ));
        return match status {
            "completed" if p["result"]["isError"] == true => Some(Ok(exit::FAILED)),
            "completed" => Some(Ok(exit::OK)),
            "failed" | "cancelled" => Some(Ok(exit::FAILED)),
            _ => None,
        };
    }
    if let Some(e) = msg.get("error") {
        return Some(Err(ClientError::Rpc {
            code: e["code"].as_i64().unwrap_or_default(),
            message: e["message"].as_str().unwrap_or("stream ended").to_owned(),
        }));
    }
    // The stream's end before the task's: the task can no longer be read (gone, or the right
    // to read it lost), which says nothing of how it ends.
    msg.get("id").is_some().then(|| {
        Err(ClientError::Usage(format!(
            "task {id} can no longer be followed (deleted, or no longer readable by you)"
        )))
    })
}

/// `runway tasks watch`: follow a task on `subscriptions/listen` until it ends.
pub async fn watch(target: &Target, id: &str) -> Result<u8, ClientError> {
    crate::install_crypto_provider();
    let meta = json!({
        META_PROTOCOL_VERSION: PROTOCOL_VERSION,
        META_CLIENT_CAPABILITIES: {"extensions": {TASKS_EXTENSION: {}}},
    });
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": METHOD_LISTEN,
        "params": {"_meta": meta, "notifications": {"taskIds": [id]}}});
    let mut req = reqwest::Client::new()
        .post(&target.url)
        .header("accept", "application/json, text/event-stream")
        .header(HEADER_PROTOCOL_VERSION, PROTOCOL_VERSION)
        .header(HEADER_METHOD, METHOD_LISTEN)
        .json(&body);
    if let Some(t) = &target.token {
        req = req.bearer_auth(t);
    }
    let resp = req
        .send()
        .await
        .map_err(|e| ClientError::Protocol(e.to_string()))?;
    if !resp.status().is_success() {
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap_or_default();
        let why = serde_json::from_str::<Value>(&text)
            .ok()
            .and_then(|v| v["error"]["message"].as_str().map(str::to_owned))
            .unwrap_or(text);
        return Err(ClientError::Protocol(format!(
            "HTTP {status} from {}: {why}",
            target.url
        )));
    }
    // A refusal (no `watch runs`, a bad request) is a plain JSON-RPC response, not a stream.
    let json_reply = resp
        .headers()
        .get(reqwest::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if json_reply {
        let reply: Value = resp
            .json()
            .await
            .map_err(|e| ClientError::Protocol(e.to_string()))?;
        return Err(ClientError::Rpc {
            code: reply["error"]["code"].as_i64().unwrap_or_default(),
            message: reply["error"]["message"]
                .as_str()
                .unwrap_or("unexpected reply")
                .to_owned(),
        });
    }
    let mut stream = resp.bytes_stream();
    let mut buf = String::new();
    let mut acknowledged = false;
    while let Some(chunk) = stream.next().await {
        buf.push_str(&String::from_utf8_lossy(
            &chunk.map_err(|e| ClientError::Protocol(e.to_string()))?,
        ));
        while let Some(end) = buf.find("\n\n") {
            let event: String = buf.drain(..end + 2).collect();
            for data in event.lines().filter_map(|l| l.strip_prefix("data:")) {
                let Ok(msg) = serde_json::from_str::<Value>(data.trim()) else {
                    continue;
                };
                if let Some(done) = on_frame(&msg, id, &mut acknowledged) {
                    return done;
                }
            }
        }
    }
    Err(ClientError::Protocol(if acknowledged {
        "stream ended".into()
    } else {
        "no acknowledgement".into()
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ended_with(frames: &[Value]) -> Option<Result<u8, ClientError>> {
        let mut acknowledged = false;
        frames
            .iter()
            .find_map(|f| on_frame(f, "t-1", &mut acknowledged))
    }

    fn ack() -> Value {
        json!({"jsonrpc": "2.0", "method": crate::protocol::NOTIFICATION_ACKNOWLEDGED,
            "params": {"notifications": {"taskIds": ["t-1"]}}})
    }

    fn task(status: &str) -> Value {
        json!({"jsonrpc": "2.0", "method": crate::protocol::NOTIFICATION_TASK,
            "params": {"taskId": "t-1", "status": status}})
    }

    #[test]
    fn a_watch_succeeds_only_on_the_tasks_own_end() {
        let done = json!({"jsonrpc": "2.0", "id": 1, "result": {"resultType": "complete"}});
        assert_eq!(
            ended_with(&[ack(), task("working"), task("completed")])
                .unwrap()
                .unwrap(),
            exit::OK
        );
        assert_eq!(
            ended_with(&[ack(), task("cancelled")]).unwrap().unwrap(),
            exit::FAILED
        );
        // The stream ends before the task did: no longer followable, not a success.
        let lost = ended_with(&[ack(), task("working"), done]).unwrap();
        assert!(
            matches!(&lost, Err(ClientError::Usage(m)) if m.contains("can no longer be followed")),
            "{lost:?}"
        );
        // Signed out mid-stream: the server's error, to be acted on.
        let refused = json!({"jsonrpc": "2.0", "id": 1,
            "error": {"code": -32001, "message": "unauthenticated: token no longer accepted"}});
        let out = ended_with(&[ack(), task("working"), refused]).unwrap();
        assert!(
            matches!(&out, Err(ClientError::Rpc { code: -32001, .. })),
            "{out:?}"
        );
    }
}
