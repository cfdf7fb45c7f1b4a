//! What a form may ask: the one rule that keeps secrets out of elicitation forms, applied to
//! input steps and `spec.elicit` when a Workflow is validated, and to the questions upstream
//! servers pass through `tool` steps when they arrive.
//!
//! Form answers are stored in the Run (`spec.inputResponses`, and for `spec.elicit` in
//! `spec.arguments`), where whoever may read the Run reads them; the protocol asks servers not
//! to collect sensitive information through forms and to send the person to a URL instead.

use serde_json::Value;

/// Words that, as a whole word of a field's name or title, mean a secret.
const SECRET_WORDS: &[&str] = &[
    "password",
    "passwd",
    "passphrase",
    "secret",
    "token",
    "apikey",
    "credential",
    "credentials",
    "cardnumber",
    "cvv",
    "cvc",
    "pin",
    "otp",
    "totp",
    "iban",
    "ssn",
    "privatekey",
];

/// Pairs of adjacent words that together mean a secret (`api_key`, `card-number`, `privateKey`).
const SECRET_PAIRS: &[(&str, &str)] = &[
    ("api", "key"),
    ("card", "number"),
    ("private", "key"),
    ("access", "key"),
    ("security", "code"),
    ("one", "time"),
];

/// The words of a name or title: split at anything not a letter or digit and at lower-to-upper
/// case changes (`apiKey` is `api key`), lowercased.
fn words(s: &str) -> Vec<String> {
    let mut out = vec![];
    let mut word = String::new();
    let mut prev_lower = false;
    for c in s.chars() {
        if !c.is_alphanumeric() {
            if !word.is_empty() {
                out.push(std::mem::take(&mut word));
            }
            prev_lower = false;
            continue;
        }
        if c.is_uppercase() && prev_lower && !word.is_empty() {
            out.push(std::mem::take(&mut word));
        }
        prev_lower = c.is_lowercase() || c.is_ascii_digit();
        word.extend(c.to_lowercase());
    }
    if !word.is_empty() {
        out.push(word);
    }
    out
}

/// Whether a name or title reads as a secret.
fn names_a_secret(s: &str) -> bool {
    let w = words(s);
    w.iter().any(|x| SECRET_WORDS.contains(&x.as_str()))
        || w.windows(2)
            .any(|p| SECRET_PAIRS.contains(&(p[0].as_str(), p[1].as_str())))
}

/// The first property of an elicitation form's `requestedSchema` that asks for a secret: by
/// schema (`format: password`, `writeOnly: true`) or by its name or title.
pub fn secret_field(schema: &Value) -> Option<String> {
    let props = schema.get("properties")?.as_object()?;
    props.iter().find_map(|(name, p)| {
        let title = p.get("title").and_then(Value::as_str).unwrap_or_default();
        let secret = p.get("format").and_then(Value::as_str) == Some("password")
            || p.get("writeOnly") == Some(&Value::Bool(true))
            || names_a_secret(name)
            || names_a_secret(title);
        secret.then(|| name.clone())
    })
}

/// Why a Run cannot pass on the questions an upstream server asked through a `tool` step:
/// a request other than elicitation and sampling (`roots/list`: a Run has no roots to list), or
/// a form that asks for a secret. `None` when every question can be put to the caller.
pub fn unanswerable(requests: &std::collections::BTreeMap<String, Value>) -> Option<String> {
    use crate::protocol::{METHOD_ELICITATION, METHOD_SAMPLING};
    requests.iter().find_map(|(key, request)| {
        let method = request
            .get("method")
            .and_then(Value::as_str)
            .unwrap_or(METHOD_ELICITATION);
        let params = request.get("params");
        if method != METHOD_ELICITATION && method != METHOD_SAMPLING {
            return Some(format!(
                "the upstream server asked {method} ({key}), which a Run cannot answer"
            ));
        }
        let form = method == METHOD_ELICITATION
            && params.and_then(|p| p.get("mode")).and_then(Value::as_str) != Some("url");
        let schema = params.and_then(|p| p.get("requestedSchema"));
        let secret = schema.filter(|_| form).and_then(secret_field)?;
        Some(format!(
            "the upstream server asked for a secret through a form (field {secret} of {key}); \
             forms must not collect secrets, the upstream should use URL mode"
        ))
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn field(name: &str, prop: Value) -> Option<String> {
        secret_field(&json!({"type": "object", "properties": {name: prop}}))
    }

    #[test]
    fn secrets_are_found_by_schema_and_by_name() {
        for (name, prop) in [
            ("password", json!({"type": "string"})),
            ("db_passwd", json!({"type": "string"})),
            ("apiKey", json!({"type": "string"})),
            ("api-key", json!({"type": "string"})),
            ("card_number", json!({"type": "string"})),
            ("pin", json!({"type": "string"})),
            ("otp", json!({"type": "string"})),
            ("iban", json!({"type": "string"})),
            ("SSN", json!({"type": "string"})),
            ("privateKey", json!({"type": "string"})),
            ("code", json!({"type": "string", "format": "password"})),
            ("x", json!({"type": "string", "writeOnly": true})),
            (
                "x",
                json!({"type": "string", "title": "Your one-time code"}),
            ),
            ("x", json!({"type": "string", "title": "GitHub token"})),
        ] {
            assert_eq!(
                field(name, prop.clone()),
                Some(name.into()),
                "{name} {prop}"
            );
        }
    }

    #[test]
    fn upstream_questions_a_run_cannot_pass_on_are_named() {
        let ask = |req: Value| unanswerable(&[("k".to_owned(), req)].into());
        let form = |props: Value| {
            json!({"method": "elicitation/create", "params": {"mode": "form", "message": "?",
                "requestedSchema": {"type": "object", "properties": props}}})
        };
        assert_eq!(ask(form(json!({"ok": {"type": "boolean"}}))), None);
        assert_eq!(
            ask(json!({"method": "sampling/createMessage", "params": {"messages": []}})),
            None
        );
        let why = ask(form(json!({"pin": {"type": "string"}}))).unwrap();
        assert!(
            why.contains("field pin of k") && why.contains("URL mode"),
            "{why}"
        );
        let url = json!({"method": "elicitation/create", "params": {"mode": "url",
            "message": "sign in", "url": "https://x/login", "elicitationId": "e"}});
        assert_eq!(ask(url), None, "a URL is how secrets are asked");
        let why = ask(json!({"method": "roots/list", "params": {}})).unwrap();
        assert!(why.contains("roots/list (k)"), "{why}");
    }

    #[test]
    fn ordinary_fields_are_not_secrets() {
        for name in [
            "spinner",
            "shipping",
            "opinion",
            "tokenizer_model",
            "keyboard",
            "env",
            "reason",
            "approved",
            "pinned_version",
        ] {
            assert_eq!(field(name, json!({"type": "string"})), None, "{name}");
        }
    }
}
