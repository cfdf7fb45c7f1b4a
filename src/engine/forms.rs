//! What a form may ask: the shape the protocol gives forms and the one rule that keeps secrets
//! out of them, applied to input steps and `spec.elicit` when a Workflow is validated, and to
//! the questions upstream servers pass through `tool` steps when they arrive.
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

/// Why `schema` is not a form a client can show as it is written, `None` when it is. The
/// protocol's forms are flat objects of string, number, integer, boolean and enum properties
/// with a few keywords each, which is what rmcp's `ElicitationSchema` holds: a property of
/// any other shape is not put to clients at all, and a keyword outside the set (`pattern`, a
/// `format` other than email, uri, date and date-time) would be dropped on the way, so the
/// client would show a looser form than the answers are checked against.
pub fn not_a_form(schema: &Value) -> Option<String> {
    use rmcp::model::{ElicitationSchema, PrimitiveSchemaDefinition};
    let schema = &with_properties(schema.clone());
    if schema.get("type").and_then(Value::as_str) != Some("object") {
        return Some("a form is an object (type: object)".into());
    }
    let props = schema.get("properties").and_then(Value::as_object);
    for (name, prop) in props.into_iter().flatten() {
        let field = serde_json::from_value::<PrimitiveSchemaDefinition>(prop.clone());
        let Ok(field) = field else {
            return Some(format!(
                "property {name} is not a form field (a string, number, integer, boolean or \
                 enum, with the keywords forms have)"
            ));
        };
        let back = serde_json::to_value(field).unwrap_or_default();
        if let Some(lost) = lost(prop, &back) {
            return Some(format!(
                "property {name}: {lost} is not part of a form field"
            ));
        }
    }
    let whole = serde_json::from_value::<ElicitationSchema>(schema.clone());
    let Ok(whole) = whole else {
        return Some("not a form (type: object, properties, required, title, description)".into());
    };
    let back = serde_json::to_value(whole).unwrap_or_default();
    lost(schema, &back).map(|lost| format!("{lost} is not part of a form"))
}

/// Keywords a form may carry that clients need not see: they annotate, or they refuse what a
/// form cannot produce anyway (keys it has no field for, a choice made twice), so losing them
/// on the way loosens nothing a person can enter.
const NEEDLESS_TO_SHOW: &[&str] = &[
    "$comment",
    "$id",
    "examples",
    "deprecated",
    "additionalProperties",
    "uniqueItems",
];

/// The first keyword (as a path) of `written` that reads otherwise in `kept`, or is not in it
/// (but for those [`NEEDLESS_TO_SHOW`]).
fn lost(written: &Value, kept: &Value) -> Option<String> {
    match (written, kept) {
        (Value::Object(w), Value::Object(k)) => w.iter().find_map(|(key, v)| match k.get(key) {
            None if NEEDLESS_TO_SHOW.contains(&key.as_str()) => None,
            None => Some(key.clone()),
            Some(kv) => lost(v, kv).map(|inner| format!("{key}.{inner}")),
        }),
        (Value::Array(w), Value::Array(k)) if w.len() == k.len() => w
            .iter()
            .zip(k)
            .enumerate()
            .find_map(|(i, (a, b))| lost(a, b).map(|inner| format!("{i}.{inner}"))),
        (Value::Number(w), Value::Number(k)) if w.as_f64() == k.as_f64() => None,
        _ if written == kept => None,
        // The value itself reads otherwise: the path ends at its key.
        _ => Some(String::new()),
    }
    .map(|p| p.trim_end_matches('.').to_owned())
}

/// `schema` with an empty `properties` when it has none: a bare confirmation, which the
/// protocol's schema writes with an empty `properties`, and which clients would otherwise not
/// be shown as a form at all.
pub fn with_properties(mut schema: Value) -> Value {
    if let Some(o) = schema.as_object_mut()
        && !o.contains_key("properties")
    {
        o.insert("properties".into(), Value::Object(Default::default()));
    }
    schema
}

/// Why a Run cannot pass on the questions an upstream server asked through a `tool` step:
/// a request other than elicitation and sampling (`roots/list`: a Run has no roots to list), or
/// a form that asks for a secret. (A form that is no form never gets here: rmcp's types, which
/// the answers of upstreams are read into, refuse it.) `None` when every question can be put to the caller.
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

    fn one(prop: Value) -> Option<String> {
        not_a_form(&json!({"type": "object", "properties": {"f": prop}, "required": ["f"]}))
    }

    #[test]
    fn forms_are_the_protocols_shapes_with_nothing_dropped() {
        for prop in [
            json!({"type": "string", "title": "T", "description": "D", "minLength": 1,
                   "maxLength": 9, "format": "email", "default": "a@b.c"}),
            json!({"type": "string", "format": "date-time"}),
            json!({"type": "number", "minimum": 0, "maximum": 2.5, "default": 1}),
            json!({"type": "integer", "minimum": 1}),
            json!({"type": "boolean", "default": true}),
            json!({"type": "string", "enum": ["a", "b"]}),
            json!({"type": "string", "oneOf": [{"const": "a", "title": "A"}]}),
            json!({"type": "array", "items": {"type": "string", "enum": ["a", "b"]}}),
        ] {
            assert_eq!(one(prop.clone()), None, "{prop}");
        }
        for (prop, why) in [
            (
                json!({"type": "string", "pattern": "^OPS-"}),
                "property f: pattern",
            ),
            (
                json!({"type": "string", "format": "hostname"}),
                "property f is not a form field",
            ),
            (json!({"type": "object"}), "property f is not a form field"),
            (
                json!({"type": "array", "items": {"type": "number"}}),
                "property f is not",
            ),
            (
                json!({"anyOf": [{"type": "string"}]}),
                "property f is not a form field",
            ),
        ] {
            let got = one(prop.clone()).unwrap_or_default();
            assert!(got.starts_with(why), "{prop}: {got}");
        }
        let extra = json!({"type": "object", "properties": {}, "minProperties": 1});
        assert_eq!(
            not_a_form(&extra).unwrap(),
            "minProperties is not part of a form"
        );
        // What generators add and clients need not see passes.
        let generated = json!({"type": "object", "additionalProperties": false,
            "$comment": "made by a tool", "properties": {
                "tags": {"type": "array", "uniqueItems": true, "examples": [["a"]],
                         "items": {"type": "string", "enum": ["a", "b"]}}}});
        assert_eq!(not_a_form(&generated), None);
        let array = json!({"type": "array", "items": {"type": "string"}});
        assert!(not_a_form(&array).unwrap().contains("type: object"));
        // A bare confirmation is a form without fields.
        assert_eq!(not_a_form(&json!({"type": "object"})), None);
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
