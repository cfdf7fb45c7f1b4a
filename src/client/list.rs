//! `runway tasks list`: the caller's tasks of a namespace through `runway_list_runs`, with the
//! console's filters, as a table or JSON.

use rmcp::model::{CallToolRequestParams, JsonObject};
use serde_json::{Value, json};

use super::errors::ClientError;
use super::exit;
use super::output::out;
use super::target::{Target, connect};

/// The list tool's name on every Runway server.
const LIST_TOOL: &str = "runway_list_runs";
/// Runs asked for per page.
const PAGE: u32 = 100;

/// What to list: `runway tasks list`'s flags.
#[derive(Debug, Default, Clone, clap::Args)]
pub struct ListFilters {
    /// Only tasks of this Workflow.
    #[arg(long)]
    pub workflow: Option<String>,
    /// Only tasks in this Run phase (Pending, Queued, Running, Waiting, Cancelling,
    /// Succeeded, Failed, Cancelled).
    #[arg(long)]
    pub phase: Option<String>,
    /// Only tasks with a question you may answer.
    #[arg(long)]
    pub waiting_for_me: bool,
    /// Only tasks you requested.
    #[arg(long)]
    pub mine: bool,
    /// Only tasks this user requested.
    #[arg(long)]
    pub requested_by: Option<String>,
    /// Only tasks created at or after this: RFC 3339, or a duration back from now (`2h`).
    #[arg(long)]
    pub since: Option<String>,
    /// Only tasks created before this, read as `--since` is.
    #[arg(long)]
    pub until: Option<String>,
    /// Label selector, as `kubectl -l` takes it (`team=payments,!canary`).
    #[arg(long = "selector", short = 'l', value_name = "SELECTOR")]
    pub labels: Option<String>,
    /// Oldest first.
    #[arg(long)]
    pub oldest: bool,
    /// At most this many tasks (default: all).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub limit: Option<u32>,
    /// Print the list as JSON.
    #[arg(long)]
    pub json: bool,
    /// Finished tasks from the archive (kept after their Runs are deleted) instead of the
    /// live ones.
    #[arg(long)]
    pub archived: bool,
}

/// An instant as the flags take it: RFC 3339, or a duration back from `now`.
fn instant(flag: &str, text: &str, now: jiff::Timestamp) -> Result<String, ClientError> {
    if let Ok(t) = text.parse::<jiff::Timestamp>() {
        return Ok(t.to_string());
    }
    let back = crate::engine::duration::parse(text).map_err(|_| {
        ClientError::Usage(format!(
            "--{flag} {text:?}: give an RFC 3339 time (2026-12-01T10:00:00Z) or a duration back from now (90m, 2h)"
        ))
    })?;
    Ok(now
        .checked_sub(back)
        .map_err(|e| ClientError::Usage(format!("--{flag}: {e}")))?
        .to_string())
}

/// The list tool's arguments for `f`, without paging.
fn arguments(f: &ListFilters, now: jiff::Timestamp) -> Result<JsonObject, ClientError> {
    let mut a = JsonObject::new();
    let mut put = |k: &str, v: Value| {
        a.insert(k.to_owned(), v);
    };
    if let Some(w) = &f.workflow {
        put("workflow", json!(w));
    }
    if let Some(p) = &f.phase {
        put("phase", json!(p));
    }
    if f.waiting_for_me {
        put("waitingForMe", json!(true));
    }
    if f.mine {
        put("requestedByMe", json!(true));
    }
    if let Some(u) = &f.requested_by {
        put("requestedBy", json!(u));
    }
    if let Some(s) = &f.since {
        put("since", json!(instant("since", s, now)?));
    }
    if let Some(u) = &f.until {
        put("until", json!(instant("until", u, now)?));
    }
    if let Some(l) = &f.labels {
        put("labels", json!(l));
    }
    if f.oldest {
        put("order", json!("oldest"));
    }
    if f.archived {
        put("archived", json!(true));
    }
    Ok(a)
}

/// How long ago `created` was, as kubectl's AGE column says it.
fn age(created: Option<&str>, now: jiff::Timestamp) -> String {
    let Some(t) = created.and_then(|c| c.parse::<jiff::Timestamp>().ok()) else {
        return "?".into();
    };
    let s = now.duration_since(t).as_secs().max(0);
    match s {
        0..120 => format!("{s}s"),
        120..7200 => format!("{}m", s / 60),
        7200..172_800 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

/// The Runs as an aligned table, one line each; the status message last, as it is long.
fn table(runs: &[Value], now: jiff::Timestamp) -> Vec<String> {
    let text = |r: &Value, k: &str| r[k].as_str().unwrap_or("").to_owned();
    let rows: Vec<[String; 6]> = runs
        .iter()
        .map(|r| {
            let you = if r["awaitingYou"].as_array().is_some_and(|a| !a.is_empty()) {
                " (your answer)"
            } else {
                ""
            };
            [
                text(r, "taskId"),
                text(r, "workflow"),
                format!("{}{you}", text(r, "phase")),
                text(r, "requestedBy"),
                age(r["createdAt"].as_str(), now),
                text(r, "statusMessage"),
            ]
        })
        .collect();
    let head = ["TASK", "WORKFLOW", "PHASE", "REQUESTED BY", "AGE", "STATUS"].map(String::from);
    let mut widths = [0usize; 6];
    for row in std::iter::once(&head).chain(&rows) {
        for (w, c) in widths.iter_mut().zip(row) {
            *w = (*w).max(c.chars().count());
        }
    }
    std::iter::once(&head)
        .chain(&rows)
        .map(|row| {
            let cells: Vec<String> = row[..5]
                .iter()
                .zip(widths)
                .map(|(c, w)| format!("{c:<w$}"))
                .collect();
            format!("{}   {}", cells.join("   "), row[5])
                .trim_end()
                .to_owned()
        })
        .collect()
}

/// `runway tasks list`.
pub async fn list(target: &Target, f: &ListFilters) -> Result<u8, ClientError> {
    let now = jiff::Timestamp::now();
    let base = arguments(f, now)?;
    let session = connect(target, true).await?;
    let mut runs: Vec<Value> = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let want = f.limit.map_or(PAGE, |l| (l - runs.len() as u32).min(PAGE));
        let mut args = base.clone();
        args.insert("limit".into(), json!(want));
        if let Some(c) = &cursor {
            args.insert("cursor".into(), json!(c));
        }
        let result = session
            .call_tool(CallToolRequestParams::new(LIST_TOOL).with_arguments(args))
            .await?;
        if result.is_error == Some(true) {
            let why: Vec<String> = result
                .content
                .iter()
                .filter_map(|c| c.as_text().map(|t| t.text.clone()))
                .collect();
            return Err(ClientError::Protocol(why.join(" ")));
        }
        let page = result.structured_content.unwrap_or_default();
        runs.extend(page["runs"].as_array().cloned().unwrap_or_default());
        cursor = page["nextCursor"].as_str().map(str::to_owned);
        let full = f.limit.is_some_and(|l| runs.len() as u32 >= l);
        if cursor.is_none() || full {
            break;
        }
    }
    if f.json {
        out(&serde_json::to_string_pretty(&runs).unwrap_or_default());
    } else if runs.is_empty() {
        eprintln!("no tasks");
    } else {
        for line in table(&runs, now) {
            out(&line);
        }
    }
    Ok(exit::OK)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> jiff::Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn times_are_rfc3339_or_a_duration_back() {
        let now = at("2026-12-03T10:00:00Z");
        assert_eq!(
            instant("since", "2026-12-01T11:00:00+01:00", now).unwrap(),
            "2026-12-01T10:00:00Z"
        );
        assert_eq!(
            instant("since", "90m", now).unwrap(),
            "2026-12-03T08:30:00Z"
        );
        let e = instant("until", "yesterday", now).unwrap_err();
        assert!(e.to_string().contains("--until"), "{e}");
    }

    #[test]
    fn the_table_keeps_columns_aligned_and_says_whose_answer_is_awaited() {
        let now = at("2026-12-03T10:00:00Z");
        let runs = vec![
            json!({"taskId": "deploy-abc", "workflow": "deploy", "phase": "Waiting", "requestedBy": "alice",
                   "createdAt": "2026-12-03T09:55:00Z", "statusMessage": "waiting for approval", "awaitingYou": ["approve"]}),
            json!({"taskId": "backup-x", "workflow": "backup", "phase": "Succeeded", "requestedBy": "runway:schedule:backup/nightly",
                   "createdAt": "2026-12-01T02:00:00Z", "awaitingYou": []}),
        ];
        let lines = table(&runs, now);
        assert_eq!(lines.len(), 3);
        let col = |l: &str| {
            l.find("REQUESTED BY")
                .or_else(|| l.find("alice"))
                .or_else(|| l.find("runway:"))
        };
        assert_eq!(col(&lines[0]), col(&lines[1]));
        assert_eq!(col(&lines[1]), col(&lines[2]));
        assert!(lines[1].contains("Waiting (your answer)") && lines[1].contains("5m"));
        assert!(
            lines[2].contains("2d") && lines[2].ends_with("2d"),
            "{}",
            lines[2]
        );
    }
}
