//! Schema helpers for fields that hold arbitrary JSON and must survive the API server verbatim.

use schemars::{Schema, SchemaGenerator, json_schema};

/// Any JSON value, kept as written (`x-kubernetes-preserve-unknown-fields`).
pub fn any_value(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "x-kubernetes-preserve-unknown-fields": true })
}

/// A JSON object kept as written (schemas, arguments, pod templates).
pub fn any_object(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "object", "x-kubernetes-preserve-unknown-fields": true })
}

/// A list of any JSON values, kept as written.
pub fn any_list(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "type": "array", "items": { "x-kubernetes-preserve-unknown-fields": true } })
}

/// Integer formats the API server knows; schemars also writes `uint8`…`uint64` for unsigned
/// fields, which every `kubectl apply` then warns about ("unrecognized format").
const KUBE_INTEGER_FORMATS: [&str; 2] = ["int32", "int64"];

/// The CustomResourceDefinitions as they are installed: `(file name, definition)`, with each
/// unsigned integer written as an `int64`, a format the API server knows (its `minimum`, which
/// schemars always writes for unsigned fields, keeps it from going below zero).
pub fn crds() -> Vec<(
    &'static str,
    k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
)> {
    use kube::CustomResourceExt;
    [
        ("workflows.runway.dev.yaml", super::Workflow::crd()),
        ("runs.runway.dev.yaml", super::Run::crd()),
    ]
    .into_iter()
    .map(|(file, crd)| {
        let mut v = serde_json::to_value(&crd).expect("a CRD serializes");
        known_integer_formats(&mut v);
        (
            file,
            serde_json::from_value(v).expect("a CRD with known formats deserializes"),
        )
    })
    .collect()
}

fn known_integer_formats(v: &mut serde_json::Value) {
    use serde_json::Value;
    match v {
        Value::Object(map) => {
            let unsigned = map.get("type").and_then(Value::as_str) == Some("integer")
                && map
                    .get("format")
                    .and_then(Value::as_str)
                    .is_some_and(|f| !KUBE_INTEGER_FORMATS.contains(&f));
            if unsigned {
                map.insert("format".into(), "int64".into());
            }
            map.values_mut().for_each(known_integer_formats);
        }
        Value::Array(items) => items.iter_mut().for_each(known_integer_formats),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_integer_format_in_the_crds_is_one_the_api_server_knows() {
        for (file, crd) in crds() {
            let text = serde_json::to_string(&crd).unwrap();
            let v: serde_json::Value = serde_json::from_str(&text).unwrap();
            let mut formats = vec![];
            collect_formats(&v, &mut formats);
            assert!(!formats.is_empty(), "{file} has integer fields");
            for (format, _) in formats {
                assert!(
                    KUBE_INTEGER_FORMATS.contains(&format.as_str()),
                    "{file}: {format}"
                );
            }
        }
    }

    #[test]
    fn an_unsigned_integer_becomes_an_int64_that_keeps_its_minimum() {
        let mut v = serde_json::json!({"properties": {
            "a": {"type": "integer", "format": "uint32", "minimum": 0.0},
            "b": {"type": "integer", "format": "uint64", "minimum": 1.0},
            "c": {"type": "integer", "format": "int32"},
        }});
        known_integer_formats(&mut v);
        let mut formats = vec![];
        collect_formats(&v, &mut formats);
        assert_eq!(
            formats,
            vec![
                ("int64".to_owned(), Some(0.0)),
                ("int64".to_owned(), Some(1.0)),
                ("int32".to_owned(), None)
            ]
        );
    }

    fn collect_formats(v: &serde_json::Value, out: &mut Vec<(String, Option<f64>)>) {
        match v {
            serde_json::Value::Object(map) => {
                if map.get("type").and_then(|t| t.as_str()) == Some("integer")
                    && let Some(f) = map.get("format").and_then(|f| f.as_str())
                {
                    out.push((f.to_owned(), map.get("minimum").and_then(|m| m.as_f64())));
                }
                map.values().for_each(|x| collect_formats(x, out));
            }
            serde_json::Value::Array(items) => items.iter().for_each(|x| collect_formats(x, out)),
            _ => {}
        }
    }
}
