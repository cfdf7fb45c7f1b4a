//! The e2e tier's archive test, in a binary (and so a control plane) of its own because it
//! kills the operator: a finished Run is written to a real PostgreSQL server before the
//! operator deletes it from the cluster, and a crash between the two loses nothing and
//! duplicates nothing. The API server is made to refuse the delete (an admission policy) so
//! that the crash lands exactly there.

mod cluster;
#[path = "../support/mod.rs"]
mod support;

use cluster::{Cluster, cluster_with_crds, root, token, wait_until};
use serde_json::json;
use support::mcp::Client;

const SHORT: &str = r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: short }
spec:
  tool: { description: "Asks, then is deleted a second after it ends." }
  execution: { ttlAfterFinished: 1s }
  steps:
    - name: ask
      input:
        requests:
          - name: go
            message: "Go?"
            requestedSchema: { type: object, properties: { note: { type: string } } }
  result: { content: [ { type: text, text: "went: {{ inputs.go.note }}" } ] }
"#;

/// An admission policy that refuses every DELETE of Runs and ConfigMaps in `ns` (ConfigMaps
/// to probe, with a server-side dry run, whether it is in force).
fn hold(ns: &str) -> String {
    format!(
        r#"
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {{ name: hold-{ns} }}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
      - {{ apiGroups: ["runway.dev", ""], apiVersions: ["*"], operations: [DELETE], resources: [runs, configmaps] }}
  validations:
    - {{ expression: "false", message: "deletes are held" }}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {{ name: hold-{ns} }}
spec:
  policyName: hold-{ns}
  validationActions: [Deny]
  matchResources:
    namespaceSelector:
      matchLabels: {{ kubernetes.io/metadata.name: {ns} }}
"#
    )
}

/// Whether the API server refuses deletes in `ns` now.
fn held(c: &Cluster, ns: &str) -> bool {
    let out = c.kubectl(
        "admin",
        &["delete", "configmap", "probe", "-n", ns, "--dry-run=server"],
    );
    String::from_utf8_lossy(&out.stderr).contains("deletes are held")
}

fn archive_flag(url: &str) -> String {
    format!("--archive={url}")
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_is_archived_before_it_leaves_the_cluster_and_a_crash_between_loses_nothing() {
    let c = cluster_with_crds(&root().join("crds"));
    let url = support::postgres::database();
    let db = url.rsplit('/').next().unwrap().to_owned();
    let pg = support::postgres::server();
    c.start_operator_with("archiver-0", true, 1, &[&archive_flag(&url)]);
    let ns = c.namespace("archive");
    let out = c.apply("admin", &ns, SHORT);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    c.admin(&[
        "wait",
        "-n",
        &ns,
        "--for=condition=Ready",
        "--timeout=60s",
        "wf/short",
    ]);
    c.admin(&["create", "configmap", "probe", "-n", &ns]);
    let out = c.kubectl_stdin("admin", &["apply", "-f", "-"], &hold(&ns));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_until("the delete hold to be in force", || held(c, &ns));

    let alice = Client::new(
        &c.base(0),
        Some(&token("alice")),
        &format!("/namespaces/{ns}/mcp"),
    );
    let id = alice.call("short", json!({})).await.result()["taskId"]
        .as_str()
        .unwrap()
        .to_owned();
    alice.await_status(&id, "input_required").await;
    alice
        .update(
            &id,
            json!({"ask.go": {"action": "accept", "content": {"note": "ship it"}}}),
        )
        .await
        .assert_complete();
    c.wait_jsonpath(&ns, &format!("run/{id}"), "{.status.phase}", "Succeeded");
    let uid = c.admin(&[
        "get",
        "run",
        &id,
        "-n",
        &ns,
        "-o",
        "jsonpath={.metadata.uid}",
    ]);
    let count = format!("SELECT count(*) FROM archived_runs WHERE uid = '{uid}'");
    wait_until("the run to be archived", || {
        pg.psql(&db, &count).trim() == "1"
    });
    // Archived, and its delete refused: the operator dies between the two.
    c.kill("archiver-0");
    let still = c.kubectl("admin", &["get", "run", &id, "-n", &ns]);
    assert!(
        still.status.success(),
        "the run left the cluster before the crash"
    );

    c.admin(&[
        "delete",
        "validatingadmissionpolicybinding",
        &format!("hold-{ns}"),
    ]);
    wait_until("the delete hold to be lifted", || !held(c, &ns));
    c.start_operator_with("archiver-1", true, 1, &[&archive_flag(&url)]);
    c.admin(&[
        "wait",
        "-n",
        &ns,
        "--for=delete",
        &format!("run/{id}"),
        "--timeout=60s",
    ]);
    assert_eq!(pg.psql(&db, &count).trim(), "1", "archived once, not twice");
    let kept = pg.psql(
        &db,
        &format!(
            "SELECT entry->'run'->'status'->>'phase', \
                    entry->'run'->'spec'->'inputResponses'->'ask.go'->>'answeredBy' \
             FROM archived_runs WHERE uid = '{uid}'"
        ),
    );
    assert_eq!(kept.trim(), "Succeeded|alice");

    // Read back through the replica that deleted it, with its Events from the cluster.
    let alice = Client::new(
        &c.base(0),
        Some(&token("alice")),
        &format!("/namespaces/{ns}/mcp"),
    );
    let got = alice
        .call("runway_get_run", json!({"taskId": id, "archived": true}))
        .await;
    let full = &got.result()["structuredContent"];
    assert_eq!(full["phase"], "Succeeded");
    assert_eq!(full["result"]["content"][0]["text"], "went: ship it");
    let reasons = got.event_reasons();
    assert!(reasons.iter().any(|r| r == "InputAnswered"), "{reasons:?}");
    // Another caller of the namespace, who may get runs but neither asked nor answered it,
    // sees nothing.
    let bob = Client::new(
        &c.base(0),
        Some(&token("bob")),
        &format!("/namespaces/{ns}/mcp"),
    );
    let refused = bob
        .call("runway_get_run", json!({"taskId": id, "archived": true}))
        .await;
    assert_eq!(refused.error_code(), -32602);
}
