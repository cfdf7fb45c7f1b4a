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
