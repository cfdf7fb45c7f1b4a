//! `http` steps against a local endpoint: what goes on the wire.

use crate::support;

use serde_json::json;
use support::mcp::Mcp;
use support::sink::Sink;

fn posting(url: &str) -> String {
    format!(
        r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: {{ name: form, namespace: NS }}
spec:
  tool:
    description: Posts a form.
    inputSchema: {{ type: object, properties: {{ who: {{ type: string }} }} }}
  steps:
    - name: post
      http:
        method: POST
        url: "{url}"
        headers: [ {{ name: Content-Type, value: application/x-www-form-urlencoded }} ]
        body: "who={{{{ args.who }}}}"
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: {{ name: note, namespace: NS }}
spec:
  tool:
    description: Posts a line of text.
    inputSchema: {{ type: object, properties: {{ who: {{ type: string }} }} }}
  steps:
    - name: post
      http: {{ method: POST, url: "{url}", body: "hello {{{{ args.who }}}}" }}
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_text_body_goes_with_the_steps_own_content_type_once_else_as_plain_text() {
    let sink = Sink::start().await;
    let mcp = Mcp::start(&[("wf.yaml", &posting(&sink.url))]).await;
    let alice = mcp.client("alice-token");
    for (tool, n) in [("form", 1), ("note", 2)] {
        let id = alice.call(tool, json!({"who": "ada"})).await.task_id();
        alice.await_status(&id, "completed").await;
        sink.await_bodies(n).await;
    }
    let raw = sink.raw.lock().unwrap().clone();
    assert_eq!(
        raw,
        vec![
            (
                vec!["application/x-www-form-urlencoded".to_owned()],
                "who=ada".to_owned()
            ),
            (
                vec!["text/plain; charset=utf-8".to_owned()],
                "hello ada".to_owned()
            ),
        ]
    );
}
