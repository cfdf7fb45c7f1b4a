//! JSON a Run keeps as its text: a value the engine writes once and the server only hands on.
//!
//! A store holds every Run it keeps, and a `serde_json::Value` costs several times its text:
//! a one-line `CallToolResult` parses into about a kilobyte of maps, vectors and strings, more
//! than any other part of a finished Run. Kept as text it costs its length, and an answer that
//! carries it writes the text as it is instead of serializing the maps again.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;

/// A JSON value held as its (compact) text; (de)serializes as the value itself.
#[derive(Clone, Serialize, Deserialize)]
#[serde(transparent)]
pub struct JsonText(Box<RawValue>);

impl JsonText {
    /// The text of `value`.
    pub fn of(value: &Value) -> Self {
        Self(serde_json::value::to_raw_value(value).expect("a JSON value always serializes"))
    }

    /// Text already known to be one JSON value; `None` when it is not.
    pub fn parse(text: String) -> Option<Self> {
        RawValue::from_string(text).ok().map(Self)
    }

    /// The value, parsed again (a copy).
    pub fn to_value(&self) -> Value {
        serde_json::from_str(self.0.get()).expect("held text is one JSON value")
    }

    /// The text.
    pub fn get(&self) -> &str {
        self.0.get()
    }

    /// Whether the value is a JSON object.
    pub fn is_object(&self) -> bool {
        self.0.get().trim_start().starts_with('{')
    }
}

/// Equal texts: what one writer made of equal values (the API server and this server both
/// write JSON compactly, keys in the order given). Two spellings of one value compare unequal,
/// which costs at most a status write that was not needed.
impl PartialEq for JsonText {
    fn eq(&self, other: &Self) -> bool {
        self.0.get() == other.0.get()
    }
}

impl fmt::Debug for JsonText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.get())
    }
}

impl From<Value> for JsonText {
    fn from(value: Value) -> Self {
        Self::of(&value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn keeps_the_value_and_writes_it_back_unchanged() {
        let value = json!({"content": [{"type": "text", "text": "done"}], "isError": false});
        let text = JsonText::of(&value);
        assert_eq!(text.to_value(), value);
        assert!(text.is_object());
        assert!(!JsonText::of(&json!([1])).is_object());
        let wrapped = json!({"result": text});
        assert_eq!(wrapped["result"], value);
        let back: JsonText = serde_json::from_str(&serde_json::to_string(&text).unwrap()).unwrap();
        assert_eq!(back, text);
        let from_value: JsonText = serde_json::from_value(value.clone()).unwrap();
        assert_eq!(from_value.to_value(), value);
    }

    #[test]
    fn text_that_is_not_one_value_is_refused() {
        assert!(JsonText::parse("{\"a\": 1}".into()).is_some());
        assert!(JsonText::parse("{\"a\": ".into()).is_none());
        assert!(JsonText::parse("1 2".into()).is_none());
    }
}
