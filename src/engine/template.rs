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

fn env() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_undefined_behavior(UndefinedBehavior::Strict);
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
pub fn check_value(value: &Value) -> Result<(), TemplateError> {
    match value {
        Value::String(s) => check(s),
        Value::Array(items) => items.iter().try_for_each(check_value),
        Value::Object(map) => map.values().try_for_each(check_value),
        _ => Ok(()),
    }
}

/// Check that a `when`-style expression compiles.
pub fn check_condition(expr: &str) -> Result<(), TemplateError> {
    check(expr)
}

/// Render a string template.
pub fn render(template: &str, ctx: &Value) -> Result<String, TemplateError> {
    if !template.contains("{{") && !template.contains("{%") {
        return Ok(template.to_owned());
    }
    env()
        .render_str(template, minijinja::value::Serde(ctx))
        .map_err(|e| error(template, e))
}

/// Render every string leaf; a leaf that is a lone `{{ expr }}` keeps the JSON type of its value.
pub fn render_value(value: &Value, ctx: &Value) -> Result<Value, TemplateError> {
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
    fn check_finds_syntax_errors() {
        assert!(check("{{ unclosed").is_err());
        assert!(check("{{ a + }}").is_err());
        assert!(check("fine {{ a }}").is_ok());
    }
}
