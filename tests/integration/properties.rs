//! Property tests over everything that takes untrusted input: the HTTP/JSON-RPC gate and its
//! headers, Workflow manifests, templates, durations and names, Runs written by others (of any
//! depth, with any markers) and the seals Runway trusts on them. Whatever comes in, the answer
//! is a defined one and nothing panics. `PROPTEST_CASES` sets how many inputs each property
//! sees (CI: the default 256); `make fuzz-soak` runs a long version.

use crate::support;

use std::sync::OnceLock;

use proptest::prelude::*;
use serde_json::{Value, json};
use support::mcp::{Client, Mcp};

const WORKFLOWS: &str = r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: echo, namespace: NS }
spec:
  tool:
    inputSchema: { type: object, properties: { word: { type: string } } }
  execution: { mode: sync }
  result:
    content: [ { type: text, text: "echo {{ args.word }}" } ]
"#;

/// One server (and one runtime) for all cases of the gate properties.
fn server() -> &'static (tokio::runtime::Runtime, Mcp) {
    static SERVER: OnceLock<(tokio::runtime::Runtime, Mcp)> = OnceLock::new();
    SERVER.get_or_init(|| {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let mcp = rt.block_on(Mcp::start(&[("wf.yaml", WORKFLOWS)]));
        (rt, mcp)
    })
}

/// JSON values of bounded size and depth, including the shapes JSON-RPC uses.
fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        ".{0,12}".prop_map(Value::from),
        prop_oneof![
            Just("tools/call"),
            Just("tasks/get"),
            Just("tasks/update"),
            Just("tasks/cancel"),
            Just("subscriptions/listen"),
            Just("tools/list"),
            Just("2026-07-28"),
            Just("io.modelcontextprotocol/tasks"),
        ]
        .prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 32, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::from),
            prop::collection::btree_map(
                prop_oneof![
                    Just("jsonrpc".to_owned()),
                    Just("id".to_owned()),
                    Just("method".to_owned()),
                    Just("params".to_owned()),
                    Just("_meta".to_owned()),
                    Just("taskId".to_owned()),
                    Just("name".to_owned()),
                    Just("arguments".to_owned()),
                    Just("inputResponses".to_owned()),
                    ".{0,8}",
                ],
                inner,
                0..6
            )
            .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// What the gate may answer: a status it documents, and JSON-RPC when it is JSON.
fn assert_defined(status: u16, content_type: &str, body: &str) {
    assert!(
        [
            200, 202, 400, 401, 403, 404, 405, 406, 408, 413, 415, 429, 503
        ]
        .contains(&status),
        "undocumented status {status}: {body}"
    );
    if content_type.starts_with("application/json") && !body.is_empty() {
        let v: Value = serde_json::from_str(body).expect("a JSON answer parses");
        assert!(v.get("result").is_some() || v.get("error").is_some(), "{v}");
    }
}

proptest! {
    #[test]
    fn the_gate_answers_any_json_rpc_shaped_body(msg in json_value(), method in "[a-z/]{0,20}", name in ".{0,20}") {
        let (rt, s) = server();
        let c = s.client("alice-token");
        rt.block_on(async {
            let mut req = c.request(&method, None).body(msg.to_string());
            if let Ok(v) = reqwest::header::HeaderValue::from_str(&name) {
                req = req.header("mcp-name", v);
            }
            let resp = req.send().await.unwrap();
            let status = resp.status().as_u16();
            let ct = resp.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
            let body = if ct.starts_with("text/event-stream") { String::new() } else { resp.text().await.unwrap() };
            assert_defined(status, &ct, &body);
        });
    }

    #[test]
    fn the_gate_answers_any_bytes_and_headers(body in prop::collection::vec(any::<u8>(), 0..256), version in ".{0,16}", path in "/[a-zA-Z0-9_%./-]{0,30}") {
        let (rt, s) = server();
        rt.block_on(async {
            let c = Client::new(&format!("http://{}", s.addr), Some("alice-token"), &path);
            let mut req = c.request("tools/list", None).body(body);
            if let Ok(v) = reqwest::header::HeaderValue::from_str(&version) {
                req = req.header("mcp-protocol-version", v);
            }
            let resp = req.send().await.unwrap();
            let status = resp.status().as_u16();
            let ct = resp.headers().get("content-type").and_then(|v| v.to_str().ok()).unwrap_or("").to_owned();
            let text = resp.text().await.unwrap();
            assert_defined(status, &ct, &text);
        });
    }

    #[test]
    fn task_ids_of_any_shape_get_the_unknown_task_answer(id in ".{0,300}") {
        let (rt, s) = server();
        let c = s.client("alice-token");
        rt.block_on(async {
            let r = c.rpc("tasks/get", None, json!({"taskId": id})).await;
            let code = r.last()["error"]["code"].as_i64();
            // -32602 unknown task (or invalid params); -32020 when the id cannot be a header
            prop_assert!(matches!(code, Some(-32602) | Some(-32020)), "{:?}", r.messages);
            Ok(())
        })?;
    }

    #[test]
    fn manifests_of_any_text_load_or_say_why(text in ".{0,400}", yaml in json_value()) {
        let dir = support::harness::TempDir::new();
        std::fs::write(dir.path().join("a.yaml"), &text).unwrap();
        let doc = json!({"apiVersion": "runway.dev/v1alpha1", "kind": "Workflow",
            "metadata": {"name": "w"}, "spec": yaml});
        std::fs::write(dir.path().join("b.yaml"), serde_json::to_string(&doc).unwrap()).unwrap();
        let loaded = runway::store::manifests::ManifestWorkflows::load(
            dir.path(),
            runway::engine::validate::Capabilities { jobs: false },
        );
        let _ = loaded.problems();
    }

    #[test]
    fn templates_of_any_text_render_or_fail_cleanly(template in ".{0,80}", ctx in json_value()) {
        let ctx = json!({"args": ctx});
        let _ = runway::engine::template::check(&template);
        let _ = runway::engine::template::render(&template, &ctx);
        let _ = runway::engine::template::truthy(&template, &ctx);
        if let Ok(url) = runway::engine::template::render_url(&template, &ctx) {
            let parsed = reqwest::Url::parse(&url).unwrap();
            prop_assert!(matches!(parsed.scheme(), "http" | "https"));
        }
    }

    #[test]
    fn durations_parse_within_the_cap_or_are_refused(s in ".{0,24}", n in any::<u64>(), unit in prop_oneof![Just("h"), Just("m"), Just("s"), Just("ms")]) {
        for text in [s, format!("{n}{unit}")] {
            if let Ok(d) = runway::engine::duration::parse(&text) {
                prop_assert!(!d.is_negative() && d <= runway::engine::duration::MAX);
            }
        }
    }

    #[test]
    fn names_accepted_are_names(s in ".{0,70}") {
        if runway::api::is_dns_subdomain(&s) {
            prop_assert!(s.len() <= 253 && !s.contains(['/', '?', '%', '#', ' ']));
        }
        if runway::api::is_dns_label(&s) {
            prop_assert!(runway::api::is_dns_subdomain(&s) && !s.contains('.'));
        }
    }

    #[test]
    fn runs_of_any_depth_decode_whole_or_read_as_unreadable(levels in 0usize..300, leaf in json_value()) {
        // What kubectl may write: the API server keeps JSON of any depth.
        let deep = (0..levels).fold(leaf, |v, i| if i % 2 == 0 { json!([v]) } else { json!({"k": v}) });
        let text = format!(
            r#"{{"apiVersion":"runway.dev/v1alpha1","kind":"Run","metadata":{{"name":"r"}},"spec":{{"workflowRef":{{"name":"w"}},"arguments":{},"inputResponses":{{"k":{{"action":"accept","content":{}}}}}}}}}"#,
            deep, deep
        );
        let run: runway::api::Run = serde_json::from_str(&text).expect("a Run of any depth decodes");
        let unreadable = json!(runway::api::UNREADABLE);
        // A bare `null` reads as absent: compare it as the null it was.
        let arguments = run.spec.arguments.clone().unwrap_or(Value::Null);
        let content = run.spec.input_responses["k"].content.clone().unwrap_or(Value::Null);
        for got in [arguments.clone(), content] {
            prop_assert!(got == deep || got == unreadable);
            // Whatever was read meets the budget or is refused by it, naming the value.
            let checked = runway::engine::budget::check("arguments", &got, usize::MAX);
            prop_assert_eq!(checked.is_ok(), runway::engine::budget::depth(&got) <= runway::engine::budget::MAX_DEPTH);
            if let Err(e) = checked {
                prop_assert!(e.to_string().starts_with("arguments "));
            }
        }
        // A value the parser could read comes back whole; only one past its limit is replaced.
        if runway::engine::budget::depth(&deep) < 100 {
            prop_assert_eq!(arguments, deep);
        }
    }

    #[test]
    fn run_manifests_of_any_shape_decode_or_fail_cleanly(metadata in json_value(), spec in json_value(), status in json_value()) {
        let doc = json!({"apiVersion": "runway.dev/v1alpha1", "kind": "Run",
            "metadata": metadata, "spec": spec, "status": status});
        if let Ok(run) = serde_json::from_value::<runway::api::Run>(doc) {
            let _ = run.phase();
            let _ = run.workflow_snapshot();
        }
    }

    #[test]
    fn seals_hold_only_for_what_was_sealed(
        key in prop::collection::vec(any::<u8>(), 1..40),
        parts in prop::collection::vec(".{0,12}", 1..7),
        mark in ".{0,64}",
        other in ".{0,12}",
    ) {
        use runway::engine::marks::{Marks, Sealed};
        let marks = Marks::new(vec![key]);
        let refs: Vec<&str> = parts.iter().map(String::as_str).collect();
        let seal = marks.seal(Sealed::Child, &refs);
        prop_assert!(marks.verify(Sealed::Child, &refs, Some(&seal)));
        // Another kind, another key, or any other part breaks it.
        prop_assert!(!marks.verify(Sealed::Job, &refs, Some(&seal)));
        prop_assert!(!marks.verify(Sealed::Scheduled, &refs, Some(&seal)));
        prop_assert!(!Marks::new(vec![b"another key".to_vec()]).verify(Sealed::Child, &refs, Some(&seal)));
        if other != parts[0] {
            let mut changed = refs.clone();
            changed[0] = &other;
            prop_assert!(!marks.verify(Sealed::Child, &changed, Some(&seal)));
        }
        // A mark written by anyone else holds only if it is the seal itself.
        if mark.to_lowercase() != seal {
            prop_assert!(!marks.verify(Sealed::Child, &refs, Some(&mark)));
        }
    }
}
