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

/// Secrets whose first read fails as an API server in trouble fails it; `upstream/token` is
/// the only Secret key there is.
#[derive(Default)]
struct FlakySecrets(std::sync::atomic::AtomicUsize);

#[async_trait::async_trait]
impl runway::store::SecretSource for FlakySecrets {
    async fn get(
        &self,
        _namespace: &str,
        name: &str,
        key: &str,
    ) -> Result<String, runway::store::StoreError> {
        use runway::store::StoreError;
        if self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
            return Err(StoreError::Backend("503 Service Unavailable".into()));
        }
        match (name, key) {
            ("upstream", "token") => Ok("Bearer t".into()),
            _ => Err(StoreError::NotFound),
        }
    }
}

fn keyed(url: &str) -> String {
    let step = |wf: &str, secret: &str| {
        format!(
            "---\napiVersion: runway.dev/v1alpha1\nkind: Workflow\nmetadata: {{ name: {wf} }}\nspec:\n  steps:\n    - name: call\n      retry: {{ limit: 2, backoff: 10ms }}\n      http:\n        method: POST\n        url: \"{url}\"\n        headers: [ {{ name: Authorization, valueFrom: {{ secretKeyRef: {{ name: {secret}, key: token }} }} }} ]\n"
        )
    };
    step("keyed", "upstream") + &step("unkeyed", "absent")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_the_store_cannot_read_for_a_moment_is_retried_and_a_missing_one_is_not() {
    use runway::api::RunPhase;
    let sink = Sink::start().await;
    let dir = support::harness::workflows_dir(&[("wf.yaml", &keyed(&sink.url))]);
    let executor = runway::steps::Executors::new(
        std::sync::Arc::new(FlakySecrets::default()),
        &support::harness::local_egress(),
    );
    let h = support::harness::Harness::start_with(dir, std::sync::Arc::new(executor), 2);
    let name = h.create("keyed", json!({})).await.metadata.name.unwrap();
    let done = h
        .wait_for(&name, "ended", |r| r.phase().is_terminal())
        .await;
    assert_eq!(done.phase(), RunPhase::Succeeded, "{:?}", done.status);
    assert_eq!(done.status.unwrap().steps[0].attempt, 2);
    assert_eq!(*sink.authorization.lock().unwrap(), ["Bearer t"]);

    let name = h.create("unkeyed", json!({})).await.metadata.name.unwrap();
    let done = h
        .wait_for(&name, "ended", |r| r.phase().is_terminal())
        .await;
    assert_eq!(done.phase(), RunPhase::Failed);
    let st = done.status.unwrap();
    assert_eq!(st.steps[0].attempt, 1, "not retried");
    let message = st.error.unwrap().message;
    assert!(message.contains("secret absent/token"), "{message}");
    h.stop().await;
}
