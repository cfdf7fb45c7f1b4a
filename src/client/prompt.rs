//! The terminal side of input requests: asking a person, and noticing Ctrl-C.

use std::io::Write;

use rmcp::model::JsonObject;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

use super::errors::ClientError;
use super::output::{plain, shown};
use crate::engine::input::{AnswerSchemaError, answer_schema_error};

/// Reads answers to input requests from the terminal, and notices Ctrl-C.
pub struct Prompter {
    lines: tokio::io::Lines<BufReader<tokio::io::Stdin>>,
    /// One listener for the whole command: a Ctrl-C pressed between two waits is kept for the
    /// next one instead of being lost (SIGINT no longer ends the process once it is listened to).
    interrupts: tokio::signal::unix::Signal,
}

impl Prompter {
    /// A prompter on standard input; must be created inside the runtime.
    pub fn new() -> std::io::Result<Self> {
        Ok(Self {
            lines: BufReader::new(tokio::io::stdin()).lines(),
            interrupts: tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?,
        })
    }

    /// Resolves when Ctrl-C is pressed (or was, since the last time this resolved).
    pub(crate) async fn interrupted(&mut self) {
        self.interrupts.recv().await;
    }

    async fn ask(&mut self, prompt: &str) -> Result<String, ClientError> {
        eprint!("{prompt}");
        let _ = std::io::stderr().flush();
        // Once a Ctrl-C handler exists the terminal's SIGINT no longer ends the process, so
        // the prompt listens for it itself.
        tokio::select! {
            line = self.lines.next_line() => match line {
                Ok(Some(l)) => Ok(l.trim().to_owned()),
                _ => Err(ClientError::Usage("no answer on standard input".into())),
            },
            _ = self.interrupts.recv() => {
                eprintln!();
                Err(ClientError::Interrupted)
            }
        }
    }

    /// Ask one elicitation request; returns the `{action, content}` answer.
    pub async fn answer(&mut self, key: &str, request: &Value) -> Result<Value, ClientError> {
        let params = &request["params"];
        eprintln!(
            "\n[{key}] {}",
            shown(params["message"].as_str().unwrap_or("input requested"))
        );
        if request["method"] != crate::protocol::METHOD_ELICITATION {
            eprintln!("  (this client answers only elicitation requests; declining)");
            return Ok(json!({"action": "decline"}));
        }
        if params["mode"] == "url" {
            // URL mode: the page does the work; this client only shows where to go.
            eprintln!("  open: {}", shown(params["url"].as_str().unwrap_or("?")));
            let a = self.ask("  opened it (or will)? [y/n] ").await?;
            return Ok(if a.starts_with('y') {
                json!({"action": "accept"})
            } else {
                json!({"action": "decline"})
            });
        }
        let props = params["requestedSchema"]["properties"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        if props.is_empty() {
            let a = self.ask("  accept? [y/n] ").await?;
            return Ok(if a.starts_with('y') {
                json!({"action": "accept", "content": {}})
            } else {
                json!({"action": "decline"})
            });
        }
        let required: Vec<&str> = params["requestedSchema"]["required"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .collect();
        let mut content = JsonObject::new();
        // Properties come in the order the server sent them: the manifest's order.
        for (name, schema) in props {
            let field = Field::new(&name, &schema, required.contains(&name.as_str()));
            loop {
                let raw = self.ask(&field.prompt()).await?;
                match field.read(&raw) {
                    Ok(Some(v)) => {
                        content.insert(name.clone(), v);
                        break;
                    }
                    Ok(None) => break,
                    Err(why) => eprintln!("  {why}; try again"),
                }
            }
        }
        Ok(json!({"action": "accept", "content": content}))
    }
}

/// Why a value typed at a prompt is not taken (the person is asked again).
#[derive(Debug, thiserror::Error)]
enum Refused {
    /// Nothing typed for a required property without a default.
    #[error("an answer is required")]
    Required,
    /// Not one of the words a boolean is typed as.
    #[error("not a boolean (y/n)")]
    NotABoolean,
    /// Starts like a JSON list and is not one.
    #[error("not a list (type values separated by commas, or a JSON array)")]
    NotAList,
    /// An integer property, and no integer.
    #[error("not an integer")]
    NotAnInteger(#[source] std::num::ParseIntError),
    /// A number property, and no number.
    #[error("not a number")]
    NotANumber(#[source] std::num::ParseFloatError),
    /// The value breaks the property's schema (the message without the form's wording).
    #[error("{}", field_message(field, source))]
    Schema {
        /// The property.
        field: String,
        /// What the server's check says.
        #[source]
        source: AnswerSchemaError,
    },
}

/// The server's check of an answer, said of one field: without the form's wording and the
/// field's path.
fn field_message(field: &str, e: &AnswerSchemaError) -> String {
    e.to_string()
        .replace("the answer does not match requestedSchema: ", "")
        .replace(&format!("/{field}: "), "")
}

/// One property of an elicitation form, as the terminal asks it.
struct Field<'a> {
    name: &'a str,
    schema: &'a Value,
    required: bool,
}

impl<'a> Field<'a> {
    fn new(name: &'a str, schema: &'a Value, required: bool) -> Self {
        Self {
            name,
            schema,
            required,
        }
    }

    fn ty(&self) -> &str {
        self.schema["type"].as_str().unwrap_or("string")
    }

    /// Allowed values: `enum`, or the `const`s of a titled `oneOf`; for an array, its items'.
    fn choices(&self) -> Vec<Value> {
        let of = if self.ty() == "array" {
            &self.schema["items"]
        } else {
            self.schema
        };
        if let Some(e) = of["enum"].as_array() {
            return e.clone();
        }
        of["anyOf"]
            .as_array()
            .or_else(|| of["oneOf"].as_array())
            .into_iter()
            .flatten()
            .filter_map(|o| o.get("const").cloned())
            .collect()
    }

    /// One item of an array property, typed as its items' `type` says.
    fn item(&self, raw: &str) -> Result<Value, Refused> {
        Ok(
            match self.schema["items"]["type"].as_str().unwrap_or("string") {
                "boolean" => Value::Bool(boolean(raw)?),
                "integer" => raw
                    .parse::<i64>()
                    .map(Value::from)
                    .map_err(Refused::NotAnInteger)?,
                "number" => raw
                    .parse::<f64>()
                    .map(Value::from)
                    .map_err(Refused::NotANumber)?,
                _ => Value::String(raw.to_owned()),
            },
        )
    }

    /// `  Channel* (string, one of stable|beta, default beta): `; an array says how to type
    /// several values.
    fn prompt(&self) -> String {
        let title = self.schema["title"].as_str().unwrap_or(self.name);
        let mut hints = vec![match self.ty() {
            "array" => format!(
                "list of {}, comma-separated",
                self.schema["items"]["type"].as_str().unwrap_or("string")
            ),
            other => other.to_owned(),
        }];
        let choices = self.choices();
        if !choices.is_empty() {
            let list: Vec<String> = choices.iter().map(plain).collect();
            hints.push(format!("one of {}", list.join("|")));
        }
        if let Some(d) = self.schema.get("default") {
            hints.push(format!("default {}", plain(d)));
        } else if !self.required {
            hints.push("optional, Enter skips".into());
        }
        let mark = if self.required { "*" } else { "" };
        format!("  {title}{mark} ({}): ", hints.join(", "))
    }

    /// The value typed, `None` to leave the property out, or why the input is not accepted.
    fn read(&self, raw: &str) -> Result<Option<Value>, Refused> {
        if raw.is_empty() {
            return match (self.schema.get("default"), self.required) {
                (Some(d), _) => Ok(Some(d.clone())),
                (None, false) => Ok(None),
                (None, true) => Err(Refused::Required),
            };
        }
        let ty = self.ty();
        let v = match ty {
            "boolean" => Value::Bool(boolean(raw)?),
            // `x, z` or JSON (`["x", "z"]`).
            "array" if raw.trim_start().starts_with('[') => {
                serde_json::from_str(raw).map_err(|_| Refused::NotAList)?
            }
            "array" => Value::Array(
                raw.split(',')
                    .map(str::trim)
                    .filter(|x| !x.is_empty())
                    .map(|x| self.item(x))
                    .collect::<Result<_, _>>()?,
            ),
            "integer" => raw
                .parse::<i64>()
                .map(Value::from)
                .map_err(Refused::NotAnInteger)?,
            "number" => raw
                .parse::<f64>()
                .map(Value::from)
                .map_err(Refused::NotANumber)?,
            _ => Value::String(raw.to_owned()),
        };
        // The same check the server makes, field by field, so a mistake is caught here.
        let one = json!({"type": "object", "properties": {self.name: self.schema}});
        match answer_schema_error(Some(&one), Some(&json!({self.name: v}))) {
            None => Ok(Some(v)),
            Some(source) => Err(Refused::Schema {
                field: self.name.to_owned(),
                source,
            }),
        }
    }
}

/// A boolean as a person types it.
fn boolean(raw: &str) -> Result<bool, Refused> {
    match raw.to_ascii_lowercase().as_str() {
        "y" | "yes" | "true" => Ok(true),
        "n" | "no" | "false" => Ok(false),
        _ => Err(Refused::NotABoolean),
    }
}
