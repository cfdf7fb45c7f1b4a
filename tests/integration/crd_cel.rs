//! The CEL rules of the CRDs, evaluated client-side exactly as the API server would.

use runway::api::{Run, Workflow};
use serde_json::{Value, json};

fn workflow(spec: Value) -> Workflow {
    serde_json::from_value(json!({
        "apiVersion": "runway.dev/v1alpha1", "kind": "Workflow",
        "metadata": {"name": "wf", "namespace": "default"},
        "spec": spec,
    }))
    .unwrap()
}

fn run(spec: Value) -> Run {
    serde_json::from_value(json!({
        "apiVersion": "runway.dev/v1alpha1", "kind": "Run",
        "metadata": {"name": "wf-abc", "namespace": "default"},
        "spec": spec,
    }))
    .unwrap()
}

fn errors(r: Result<(), impl std::fmt::Display>) -> String {
    match r {
        Ok(()) => String::new(),
        Err(e) => e.to_string(),
    }
}

#[test]
fn a_valid_workflow_passes() {
    let wf = workflow(json!({
        "tool": {"name": "deploy.v2"},
        "steps": [{"name": "wait", "delay": {"duration": "1s"}}],
        "finally": [{"name": "cleanup", "delay": {"duration": "1s"}}],
    }));
    assert_eq!(errors(wf.validate_cel()), "");
}

#[test]
fn a_step_must_have_exactly_one_kind() {
    let none = workflow(json!({"steps": [{"name": "a"}]}));
    assert!(errors(none.validate_cel()).contains("exactly one of"));
    let two = workflow(
        json!({"steps": [{"name": "a", "delay": {"duration": "1s"}, "fail": {"message": "x"}}]}),
    );
    assert!(errors(two.validate_cel()).contains("exactly one of"));
}

/// What the API server enforces with list-map keys and `pattern` (no CEL cost, and checked for
/// real in the e2e tier) the embedded store checks in `validate`.
fn validation(wf: &Workflow) -> String {
    use runway::engine::validate::{self, Capabilities};
    match validate::workflow(wf, Capabilities { jobs: false }) {
        Ok(()) => String::new(),
        Err(e) => e.message,
    }
}

#[test]
fn step_names_are_unique_across_steps_and_finally() {
    let dup = workflow(json!({"steps": [
        {"name": "a", "delay": {"duration": "1s"}},
        {"name": "a", "delay": {"duration": "1s"}},
    ]}));
    assert!(validation(&dup).contains("unique"));
    let dup_finally = workflow(json!({
        "steps": [{"name": "a", "delay": {"duration": "1s"}}],
        "finally": [{"name": "a", "delay": {"duration": "1s"}}],
    }));
    // Across the two lists it is a CEL rule, so also the API server's.
    assert!(errors(dup_finally.validate_cel()).contains("unique"));
    assert!(validation(&dup_finally).contains("unique"));
}

#[test]
fn step_names_are_labels_without_dots() {
    for bad in ["a.b", "-a", "a-", "has space", ""] {
        let wf = workflow(json!({"steps": [{"name": bad, "delay": {"duration": "1s"}}]}));
        assert!(validation(&wf).contains("step name"), "{bad:?} accepted");
    }
    let ok = workflow(json!({"steps": [{"name": "Build_2-x", "delay": {"duration": "1s"}}]}));
    assert_eq!(validation(&ok), "");
}

#[test]
fn tool_names_follow_the_mcp_pattern() {
    for bad in ["has space", "", "slash/name", &"x".repeat(129)] {
        let wf = workflow(
            json!({"tool": {"name": bad}, "steps": [{"name": "a", "delay": {"duration": "1s"}}]}),
        );
        assert!(validation(&wf).contains("must match"), "{bad:?} accepted");
    }
    let upstream = workflow(
        json!({"steps": [{"name": "a", "tool": {"server": {"url": "http://x"}, "name": "bad name"}}]}),
    );
    assert!(validation(&upstream).contains("must match"));
}

#[test]
fn a_header_sets_exactly_one_value_source() {
    let wf = workflow(
        json!({"steps": [{"name": "a", "http": {"url": "http://x", "headers": [{"name": "X"}]}}]}),
    );
    assert!(errors(wf.validate_cel()).contains("exactly one of value, valueFrom"));
}

fn base_run() -> Value {
    json!({
        "workflowRef": {"name": "wf"},
        "arguments": {"a": 1},
        "requestedBy": {"username": "alice"},
    })
}

fn with(mut v: Value, key: &str, val: Value) -> Value {
    v[key] = val;
    v
}

#[test]
fn run_spec_is_immutable_but_cancel_and_new_answers() {
    let old = run(base_run());
    let ok = |new: Value| errors(run(new).validate_cel_update(&old));
    assert_eq!(ok(base_run()), "");
    assert!(ok(with(base_run(), "arguments", json!({"a": 2}))).contains("arguments is immutable"));
    assert!(
        ok(with(base_run(), "workflowRef", json!({"name": "other"})))
            .contains("workflowRef is immutable")
    );
    assert!(
        ok(with(
            base_run(),
            "requestedBy",
            json!({"username": "mallory"})
        ))
        .contains("requestedBy is immutable")
    );
    assert_eq!(
        ok(with(base_run(), "cancel", json!({"reason": "stop"}))),
        ""
    );
    assert_eq!(
        ok(with(
            base_run(),
            "inputResponses",
            json!({"k": {"action": "accept", "content": {"ok": true}}})
        )),
        ""
    );
}

#[test]
fn cancel_is_set_once() {
    let old = run(with(
        base_run(),
        "cancel",
        json!({"reason": "stop", "requestedBy": "alice"}),
    ));
    let changed = run(with(
        base_run(),
        "cancel",
        json!({"reason": "other", "requestedBy": "alice"}),
    ));
    assert!(errors(changed.validate_cel_update(&old)).contains("spec.cancel"));
    let removed = run(base_run());
    assert!(errors(removed.validate_cel_update(&old)).contains("spec.cancel"));
    let same = run(with(
        base_run(),
        "cancel",
        json!({"reason": "stop", "requestedBy": "alice"}),
    ));
    assert_eq!(errors(same.validate_cel_update(&old)), "");
}

#[test]
fn answers_are_never_changed_or_removed() {
    let answered = json!({"k": {"action": "accept", "content": {"ok": true}, "answeredBy": "bob"}});
    let old = run(with(base_run(), "inputResponses", answered.clone()));
    let mut more = answered.clone();
    more["k2"] = json!({"action": "decline"});
    assert_eq!(
        errors(run(with(base_run(), "inputResponses", more)).validate_cel_update(&old)),
        ""
    );
    let changed = json!({"k": {"action": "decline", "answeredBy": "bob"}});
    assert!(
        errors(run(with(base_run(), "inputResponses", changed)).validate_cel_update(&old))
            .contains("inputResponses")
    );
    assert!(errors(run(base_run()).validate_cel_update(&old)).contains("inputResponses"));
}

#[test]
fn retry_limits_and_durations_are_capped() {
    let wf = workflow(
        json!({"steps": [{"name": "a", "http": {"url": "http://x"}, "retry": {"limit": 101}}]}),
    );
    assert!(validation(&wf).contains("exceeds the maximum of 100"));
    let wf = workflow(json!({"steps": [{"name": "a", "delay": {"duration": "9000h"}}]}));
    assert!(validation(&wf).contains("maximum"));
    let ok = workflow(
        json!({"steps": [{"name": "a", "http": {"url": "http://x"}, "retry": {"limit": 100}}]}),
    );
    assert_eq!(validation(&ok), "");
}

#[test]
fn an_output_schema_needs_the_structured_result_it_describes() {
    let schema = json!({"type": "object", "properties": {"n": {"type": "integer"}}});
    let without = workflow(json!({
        "tool": {"outputSchema": schema},
        "steps": [{"name": "a", "delay": {"duration": "1s"}}],
        "result": {"content": [{"type": "text", "text": "done"}]},
    }));
    assert!(
        validation(&without).contains("tool.outputSchema needs result.structuredContent"),
        "{}",
        validation(&without)
    );
    let with = workflow(json!({
        "tool": {"outputSchema": schema},
        "steps": [{"name": "a", "delay": {"duration": "1s"}}],
        "result": {"structuredContent": {"n": 1}},
    }));
    assert_eq!(validation(&with), "");
}
