//! What the client commands print.

use std::io::Write;

use serde_json::Value;

use super::exit;

/// A JSON scalar as a person would type it.
pub(super) fn plain(v: &Value) -> String {
    v.as_str().map_or_else(|| v.to_string(), str::to_owned)
}

/// Print a line on stdout. A reader that went away (`| head`) ends the output, not the
/// process with a panic.
pub(super) fn out(line: &str) {
    let mut stdout = std::io::stdout().lock();
    if writeln!(stdout, "{line}")
        .and_then(|()| stdout.flush())
        .is_err()
    {
        std::process::exit(0);
    }
}

pub(super) fn print_result(result: &Value) -> u8 {
    let mut out = std::io::stdout();
    for item in result["content"].as_array().into_iter().flatten() {
        match item["type"].as_str() {
            Some("text") => {
                let _ = writeln!(out, "{}", item["text"].as_str().unwrap_or_default());
            }
            _ => {
                let _ = writeln!(out, "{item}");
            }
        }
    }
    if let Some(sc) = result.get("structuredContent") {
        let _ = writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(sc).unwrap_or_default()
        );
    }
    if result["isError"] == true {
        exit::FAILED
    } else {
        exit::OK
    }
}

/// Leave a task to run on: say how to come back to it.
pub(super) fn interrupted(id: &str) -> u8 {
    eprintln!(
        "interrupted; task {id} keeps running (runway tasks get {id}, runway tasks watch {id})"
    );
    exit::INTERRUPTED
}
