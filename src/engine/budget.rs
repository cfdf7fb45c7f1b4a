//! Budgets that keep one Run's data bounded whatever its callers and upstreams send: depth and
//! size of arguments, answers and outputs, the size of the whole status, retries and the
//! attempts kept. A Run that would exceed one fails (or is truncated) cleanly; nothing retries
//! a write the store would refuse.

use crate::api::JsonText;
use jiff::SignedDuration;
use serde_json::Value;

/// Deepest JSON nesting accepted in arguments, answers and kept outputs.
pub const MAX_DEPTH: usize = 32;
/// Largest `tools/call` arguments (serialized JSON).
pub(crate) const MAX_ARGUMENT_BYTES: usize = 256 * 1024;
/// Largest content of one input answer (serialized JSON).
pub(crate) const MAX_ANSWER_BYTES: usize = 64 * 1024;
/// Largest Run status (serialized JSON), well under the API server's 1.5 MiB object limit
/// together with the spec.
pub const MAX_STATUS_BYTES: usize = 1024 * 1024;
/// Most items of one `forEach` step.
pub const MAX_ITEMS: usize = 1000;
/// Deepest nesting of child Runs (a child of a top-level Run is at depth 1).
pub const MAX_CHILD_DEPTH: u32 = 8;
/// Most child Runs one Run starts over its life (items and retries included).
pub const MAX_CHILDREN: usize = 500;
/// Most Runs below one top-level Run, at every depth together. Child Runs are kept until their
/// top-level Run is deleted, so the Runs that exist are the durable count.
pub const MAX_DESCENDANTS: usize = 1000;
/// Most retries a step may declare.
pub(crate) const MAX_RETRY_LIMIT: u32 = 100;
/// Shortest backoff between attempts, whatever a Workflow says.
pub const MIN_BACKOFF: SignedDuration = SignedDuration::from_millis(50);
/// Longest one attempt of an `http` step may take, whatever its `timeout` says (it runs in a
/// controller worker; longer work belongs in a `job` or `tool` step).
pub const MAX_HTTP_ATTEMPT: std::time::Duration = std::time::Duration::from_secs(15 * 60);
/// Attempt records kept per step (the newest).
pub const MAX_ATTEMPTS_KEPT: usize = 10;

/// Nesting depth of a JSON value (a scalar is 0).
pub fn depth(v: &Value) -> usize {
    // Iterative, so that depth itself cannot overflow the stack on hostile input.
    let mut deepest = 0;
    let mut stack = vec![(v, 0usize)];
    while let Some((v, d)) = stack.pop() {
        deepest = deepest.max(d);
        match v {
            Value::Array(items) => stack.extend(items.iter().map(|i| (i, d + 1))),
            Value::Object(map) => stack.extend(map.values().map(|i| (i, d + 1))),
            _ => {}
        }
    }
    deepest
}

/// A value over one of the budgets; the message names the value.
#[derive(Debug, thiserror::Error)]
pub enum BudgetError {
    /// Nested deeper than [`MAX_DEPTH`].
    #[error("{what} nests deeper than {MAX_DEPTH} levels")]
    TooDeep {
        /// What the value is (`arguments`, `inputResponses.<key>`).
        what: String,
    },
    /// Larger, as JSON, than its budget.
    #[error("{what} is {size} bytes; at most {max_bytes} are accepted")]
    TooLarge {
        /// What the value is.
        what: String,
        /// Its size in bytes of JSON.
        size: usize,
        /// The budget.
        max_bytes: usize,
    },
}

/// The length of `v` as JSON, counted as it is written rather than kept (a Run's status with
/// a thousand step records is measured on every decision); `usize::MAX` if it cannot be.
pub fn encoded_len(v: &impl serde::Serialize) -> usize {
    struct Counter(usize);
    impl std::io::Write for Counter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut c = Counter(0);
    serde_json::to_writer(&mut c, v).map_or(usize::MAX, |()| c.0)
}

/// Whether `v` fits `max_bytes` and [`MAX_DEPTH`]; the error names `what`.
pub fn check(what: &str, v: &Value, max_bytes: usize) -> Result<(), BudgetError> {
    if depth(v) > MAX_DEPTH {
        return Err(BudgetError::TooDeep { what: what.into() });
    }
    let size = encoded_len(v);
    if size > max_bytes {
        return Err(BudgetError::TooLarge {
            what: what.into(),
            size,
            max_bytes,
        });
    }
    Ok(())
}

/// Validate arguments (or an answer) against a schema; the schema errors, as `{path,
/// message}`. `format` is asserted (`email`, `date`, `uri`…), as forms promise their users.
/// `Err` when the schema itself does not compile.
pub(crate) fn schema_errors(
    schema: &Value,
    args: &Value,
) -> Result<Vec<Value>, jsonschema::ValidationError<'static>> {
    let validator = jsonschema::draft202012::options()
        .should_validate_formats(true)
        .build(schema)?;
    Ok(validator
        .iter_errors(args)
        .map(|e| serde_json::json!({"path": e.instance_path().to_string(), "message": e.to_string()}))
        .collect())
}

/// Cut an oversized (or too deeply nested) value down to a string prefix of its JSON; the flag
/// says it happened.
pub fn guard_output(v: Value, limit: usize) -> (Value, bool) {
    let text = v.to_string();
    if text.len() <= limit && depth(&v) <= MAX_DEPTH {
        return (v, false);
    }
    if text.len() <= limit {
        return (Value::String(text), true);
    }
    let mut cut = limit;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    (Value::String(text[..cut].to_owned()), true)
}

/// [`guard_output`] for a value kept as its text: the text measured is the text kept.
pub fn guard_text(v: Value, limit: usize) -> JsonText {
    let text = v.to_string();
    if text.len() <= limit && depth(&v) <= MAX_DEPTH {
        return JsonText::parse(text).expect("a value's own JSON is one value");
    }
    JsonText::of(&guard_output(v, limit).0)
}

/// What is left of a step's message once a finished Run's status had to be cut to fit.
const CUT_MESSAGE: &str = "(cut: the run's status had no room for it)";

/// `st`, a finished Run's status past [`MAX_STATUS_BYTES`] with its step outputs dropped,
/// made to fit without touching how it ended (phase, ending, error, conditions): step messages
/// and notes go first, then the attempts kept, and only if still too large the result.
pub(crate) fn fit_finished(mut st: crate::api::RunStatus) -> crate::api::RunStatus {
    if encoded_len(&st) <= MAX_STATUS_BYTES {
        return st;
    }
    for rec in &mut st.steps {
        if rec.message.is_some() {
            rec.message = Some(CUT_MESSAGE.to_owned());
        }
    }
    st.notes.clear();
    if encoded_len(&st) <= MAX_STATUS_BYTES {
        return st;
    }
    for rec in &mut st.steps {
        rec.attempts.clear();
    }
    if encoded_len(&st) <= MAX_STATUS_BYTES {
        return st;
    }
    st.result = None;
    st
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn nested(levels: usize) -> Value {
        (0..levels).fold(json!(1), |v, _| json!([v]))
    }

    #[test]
    fn depth_and_size_are_bounded() {
        assert_eq!(depth(&json!(1)), 0);
        assert_eq!(depth(&json!({"a": [1, {"b": 2}]})), 3);
        assert!(check("x", &nested(MAX_DEPTH), 1024).is_ok());
        assert!(
            check("x", &nested(MAX_DEPTH + 1), 1024)
                .unwrap_err()
                .to_string()
                .contains("deeper")
        );
        let big = json!("x".repeat(100));
        assert!(
            check("x", &big, 50)
                .unwrap_err()
                .to_string()
                .contains("at most 50")
        );
        // Deeper than serde_json would even parse (128).
        assert_eq!(depth(&nested(1000)), 1000);
    }
}
