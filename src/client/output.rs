//! What the client commands print.

use std::io::Write;

use serde_json::Value;

use super::exit;

/// `text` as it may reach a terminal: control characters other than line breaks and tabs
/// (an escape sequence could move the cursor, rewrite what was printed, or set the window
/// title) are shown escaped. Everything a server sends goes through this before it is printed.
pub(super) fn shown(text: &str) -> std::borrow::Cow<'_, str> {
    if !text
        .chars()
        .any(|c| c.is_control() && c != '\n' && c != '\t')
    {
        return std::borrow::Cow::Borrowed(text);
    }
    std::borrow::Cow::Owned(
        text.chars()
            .map(|c| {
                if c.is_control() && c != '\n' && c != '\t' {
                    c.escape_unicode().to_string()
                } else {
                    c.to_string()
                }
            })
            .collect(),
    )
}

/// A JSON scalar as a person would type it.
pub(super) fn plain(v: &Value) -> String {
    v.as_str().map_or_else(|| v.to_string(), str::to_owned)
}

/// Print a line on stdout. A reader that went away (`| head`) ends the output, not the
/// process with a panic.
pub(super) fn out(line: &str) {
    let mut stdout = std::io::stdout().lock();
    if writeln!(stdout, "{}", shown(line))
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
                let _ = writeln!(out, "{}", shown(item["text"].as_str().unwrap_or_default()));
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_sequences_from_a_server_are_shown_not_obeyed() {
        assert_eq!(shown("plain\ttext\nline"), "plain\ttext\nline");
        assert_eq!(
            shown("\u{1b}]0;owned\u{7}red\u{1b}[31m"),
            "\\u{1b}]0;owned\\u{7}red\\u{1b}[31m"
        );
        assert_eq!(shown("\u{9b}2J"), "\\u{9b}2J", "C1 controls too");
    }
}
