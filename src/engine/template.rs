//! Template rendering for step fields and results (MiniJinja, strict undefined).

use minijinja::{Environment, UndefinedBehavior};
use serde_json::Value;

/// A template that did not compile or render.
#[derive(Debug, thiserror::Error)]
#[error("template {template:?}: {message}")]
pub struct TemplateError {
    /// The template source.
    pub template: String,
    /// What went wrong.
    pub message: String,
}

/// Instructions one rendering may execute: plenty for any real template, and an end to loops
/// over hostile input.
pub(crate) const FUEL: u64 = 200_000;
/// Largest output of one rendering.
pub(crate) const MAX_RENDERED_BYTES: usize = 1024 * 1024;

fn env() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    env.set_fuel(Some(FUEL));
    // Workflows speak JSON: booleans render as `true`/`false`, not Python's `True`/`False`.
    env.set_formatter(|out, state, value| {
        if value.kind() == minijinja::value::ValueKind::Bool {
            let text = if value.is_true() { "true" } else { "false" };
            out.write_str(text).map_err(minijinja::Error::from)
        } else {
            minijinja::escape_formatter(out, state, value)
        }
    });
    env
}

fn error(template: &str, e: minijinja::Error) -> TemplateError {
    let mut message = e.kind().to_string();
    if let Some(detail) = e.detail() {
        message = format!("{message}: {detail}");
    }
    TemplateError {
        template: template.to_owned(),
        message,
    }
}

/// If the string is exactly one `{{ expr }}`, the expression inside.
fn lone_expression(s: &str) -> Option<&str> {
    let inner = s.trim().strip_prefix("{{")?.strip_suffix("}}")?;
    (!inner.contains("{{") && !inner.contains("}}")).then(|| inner.trim())
}

/// Whether the string is exactly one `{{ expr }}` (rendered keeping the value's JSON type).
pub(crate) fn is_lone_expression(s: &str) -> bool {
    lone_expression(s).is_some()
}

/// Check that a template compiles, without rendering it.
pub fn check(template: &str) -> Result<(), TemplateError> {
    let env = env();
    if let Some(expr) = lone_expression(template) {
        env.compile_expression(expr)
            .map(|_| ())
            .map_err(|e| error(template, e))
    } else {
        env.template_from_str(template)
            .map(|_| ())
            .map_err(|e| error(template, e))
    }
}

/// Check every string leaf of a JSON value.
pub(crate) fn check_value(value: &Value) -> Result<(), TemplateError> {
    match value {
        Value::String(s) => check(s),
        Value::Array(items) => items.iter().try_for_each(check_value),
        Value::Object(map) => map.values().try_for_each(check_value),
        _ => Ok(()),
    }
}

/// Check that a `when` condition compiles the way [`truthy`] reads it: a bare expression
/// (`not inputs.ok`), one `{{ expression }}`, or a template with text around its tags.
pub(crate) fn check_condition(expr: &str) -> Result<(), TemplateError> {
    if expr.contains("{{") && lone_expression(expr).is_none() {
        return check(expr);
    }
    let source = lone_expression(expr).unwrap_or(expr);
    env()
        .compile_expression(source)
        .map(|_| ())
        .map_err(|e| error(expr, e))
}

/// Render a string template.
pub fn render(template: &str, ctx: &Value) -> Result<String, TemplateError> {
    render_in(&env(), template, ctx)
}

fn render_in(env: &Environment<'_>, template: &str, ctx: &Value) -> Result<String, TemplateError> {
    if !template.contains("{{") && !template.contains("{%") {
        return Ok(template.to_owned());
    }
    let out = env
        .render_str(template, minijinja::value::Serde(ctx))
        .map_err(|e| error(template, e))?;
    if out.len() > MAX_RENDERED_BYTES {
        return Err(TemplateError {
            template: template.to_owned(),
            message: format!("renders {} bytes; at most {MAX_RENDERED_BYTES}", out.len()),
        });
    }
    Ok(out)
}

/// Characters an interpolated URL value keeps as they are (RFC 3986 unreserved).
const URL_VALUE: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'.')
    .remove(b'_')
    .remove(b'~');

/// Render a URL template: every interpolated value is percent-encoded (so a caller's argument
/// cannot add a path, a query or another host) unless marked `| safe` by the Workflow's author;
/// the result must be an absolute `http`/`https` URL with a host.
pub fn render_url(template: &str, ctx: &Value) -> Result<String, TemplateError> {
    let mut env = env();
    env.set_formatter(|out, _state, value| {
        let text = if value.kind() == minijinja::value::ValueKind::Bool {
            if value.is_true() { "true" } else { "false" }.to_owned()
        } else {
            value.to_string()
        };
        if value.is_safe() {
            out.write_str(&text)
        } else if text == "." || text == ".." {
            // Dot segments survive percent-encoding (URL parsers read `%2E%2E` as `..` too), so
            // such a value would climb the author's path: `/users/{{ u }}/sessions` with `..`
            // would become `/sessions`.
            return Err(minijinja::Error::new(
                minijinja::ErrorKind::InvalidOperation,
                format!(
                    "an interpolated value may not be {text:?}: it would change the URL's path"
                ),
            ));
        } else {
            let encoded = percent_encoding::utf8_percent_encode(&text, URL_VALUE).to_string();
            out.write_str(&encoded)
        }
        .map_err(minijinja::Error::from)
    });
    let url = render_in(&env, template, ctx)?;
    let fail = |message: String| TemplateError {
        template: template.to_owned(),
        message,
    };
    let parsed = url::Url::parse(&url).map_err(|e| fail(format!("{url:?} is no URL: {e}")))?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(fail(format!("{url:?}: the scheme must be http or https")));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(fail(format!("{url:?} has no host")));
    }
    Ok(url)
}

/// Render every string leaf; a leaf that is a lone `{{ expr }}` keeps the JSON type of its value.
pub(crate) fn render_value(value: &Value, ctx: &Value) -> Result<Value, TemplateError> {
    Ok(match value {
        Value::String(s) => match lone_expression(s) {
            Some(expr) => {
                let env = env();
                let compiled = env.compile_expression(expr).map_err(|e| error(s, e))?;
                let out = compiled
                    .eval(minijinja::value::Serde(ctx))
                    .map_err(|e| error(s, e))?;
                if out.is_undefined() {
                    return Err(TemplateError {
                        template: s.clone(),
                        message: "undefined value".into(),
                    });
                }
                serde_json::to_value(&out).map_err(|e| TemplateError {
                    template: s.clone(),
                    message: e.to_string(),
                })?
            }
            None => Value::String(render(s, ctx)?),
        },
        Value::Array(items) => Value::Array(
            items
                .iter()
                .map(|v| render_value(v, ctx))
                .collect::<Result<_, _>>()?,
        ),
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| Ok((k.clone(), render_value(v, ctx)?)))
                .collect::<Result<_, TemplateError>>()?,
        ),
        other => other.clone(),
    })
}

/// Evaluate a `when` condition: a template (or bare expression) whose result is truthy.
pub fn truthy(template: &str, ctx: &Value) -> Result<bool, TemplateError> {
    let source = lone_expression(template).unwrap_or(template);
    let env = env();
    if template.contains("{{") && lone_expression(template).is_none() {
        let s = render(template, ctx)?;
        let s = s.trim();
        return Ok(!(s.is_empty() || s == "false" || s == "0" || s == "False" || s == "none"));
    }
    let compiled = env
        .compile_expression(source)
        .map_err(|e| error(template, e))?;
    let out = compiled
        .eval(minijinja::value::Serde(ctx))
        .map_err(|e| error(template, e))?;
    if out.is_undefined() {
        return Err(TemplateError {
            template: template.to_owned(),
            message: "undefined value".into(),
        });
    }
    Ok(out.is_true())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn renders_strings_and_keeps_types_of_lone_expressions() {
        let ctx = json!({"args": {"n": 3, "name": "x", "tags": ["a"]}});
        assert_eq!(render("hi {{ args.name }}", &ctx).unwrap(), "hi x");
        assert_eq!(render("{{ args.n > 1 }}", &ctx).unwrap(), "true");
        let v = render_value(
            &json!({"count": "{{ args.n }}", "t": "{{args.tags}}", "s": "n={{ args.n }}"}),
            &ctx,
        )
        .unwrap();
        assert_eq!(v, json!({"count": 3, "t": ["a"], "s": "n=3"}));
    }

    #[test]
    fn conditions_are_checked_as_they_are_evaluated() {
        for good in [
            "not inputs.decision.approve",
            "{{ args.n > 1 }}",
            "x is {{ args.n }}",
        ] {
            assert!(check_condition(good).is_ok(), "{good}");
        }
        for bad in ["inputs.x ==", "not (args.n", "{{ args.n >", "a {{ b"] {
            assert!(check_condition(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn undefined_names_are_errors() {
        let ctx = json!({"args": {}});
        let e = render("{{ args.missing }}", &ctx).unwrap_err();
        assert!(e.message.contains("undefined"), "{e}");
        assert!(render_value(&json!("{{ nope }}"), &ctx).is_err());
    }

    #[test]
    fn conditions() {
        let ctx = json!({"args": {"go": true, "n": 0}});
        assert!(truthy("args.go", &ctx).unwrap());
        assert!(truthy("{{ args.go }}", &ctx).unwrap());
        assert!(!truthy("args.n > 1", &ctx).unwrap());
        assert!(!truthy("{{ args.n }} ", &ctx).unwrap());
        assert!(truthy("x {{ args.n }}", &ctx).unwrap());
        assert!(truthy("args.unknown", &ctx).is_err());
    }

    #[test]
    fn loops_and_output_are_bounded() {
        let ctx = json!({"args": {"n": 1_000_000}});
        let e = render("{% for i in range(args.n) %}{{ i }}{% endfor %}", &ctx).unwrap_err();
        assert!(
            e.message.contains("fuel") || e.message.contains("range"),
            "{e}"
        );
        let e = render("{{ 'x' * 2000000 }}", &ctx);
        assert!(e.is_err(), "{e:?}");
    }

    #[test]
    fn url_interpolations_are_encoded_and_the_result_checked() {
        let ctx = json!({"args": {"id": "a/b?c=d#e", "base": "https://api.example/v1", "n": 3}});
        assert_eq!(
            render_url("https://h.example/items/{{ args.id }}?n={{ args.n }}", &ctx).unwrap(),
            "https://h.example/items/a%2Fb%3Fc%3Dd%23e?n=3"
        );
        assert_eq!(
            render_url("{{ args.base | safe }}/x", &ctx).unwrap(),
            "https://api.example/v1/x"
        );
        // An argument cannot move the request to another host or scheme.
        let evil = json!({"args": {"h": "evil.example/x", "u": "file:///etc/passwd"}});
        assert!(render_url("https://{{ args.h }}.good.example/", &evil).is_err());
        assert_eq!(
            render_url("https://good.example/{{ args.h }}", &evil).unwrap(),
            "https://good.example/evil.example%2Fx"
        );
        assert!(
            render_url("{{ args.u | safe }}", &evil)
                .unwrap_err()
                .message
                .contains("scheme")
        );
        assert!(render_url("{{ args.u }}", &evil).is_err());
        // Dot segments from a value never change the path.
        for dots in [".", ".."] {
            let ctx = json!({"args": {"user": dots}});
            let e = render_url("https://h.example/v1/users/{{ args.user }}/sessions", &ctx)
                .unwrap_err();
            assert!(e.message.contains("change the URL's path"), "{e:?}");
        }
        let ctx = json!({"args": {"user": "...", "v": ".x"}});
        assert_eq!(
            render_url("https://h.example/u/{{ args.user }}/{{ args.v }}", &ctx).unwrap(),
            "https://h.example/u/.../.x"
        );
    }

    #[test]
    fn check_finds_syntax_errors() {
        assert!(check("{{ unclosed").is_err());
        assert!(check("{{ a + }}").is_err());
        assert!(check("fine {{ a }}").is_ok());
    }
}
