//! The e2e tier: Runway installed on a real Kubernetes control plane (see `cluster.rs`), used
//! the way its users do — kubectl, GitOps status checks, MCP through two operator replicas —
//! asserting what they would look at. `make e2e` runs it.

mod cluster;
mod monitoring;
#[path = "../support/mod.rs"]
mod support;

use cluster::{AUDIENCE, Cluster, cluster, token};
use serde_json::{Value, json};
use support::mcp::Client;

/// Both replicas serve MCP; one of them leads the controller.
fn up() -> &'static Cluster {
    cluster(2)
}

fn mcp(c: &Cluster, replica: usize, user: &str, ns: &str) -> Client {
    Client::new(
        &c.base(replica),
        Some(&token(user)),
        &format!("/namespaces/{ns}/mcp"),
    )
}

fn get_json(c: &Cluster, ns: &str, what: &str) -> Value {
    serde_json::from_str(&c.admin(&["get", "-n", ns, what, "-o", "json"])).unwrap()
}

const NAP: &str = r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: nap }
spec:
  tool:
    inputSchema:
      type: object
      properties: { wait: { type: string } }
      required: [wait]
  execution: { ttlAfterFinished: 1h }
  steps:
    - name: sleep
      delay: { duration: "{{ args.wait }}" }
  result:
    content: [ { type: text, text: "slept {{ args.wait }}" } ]
"#;

const APPROVAL: &str = r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: approve }
spec:
  steps:
    - name: approval
      input:
        requests:
          - name: decision
            message: "Deploy {{ args.service }}?"
            requestedSchema:
              type: object
              properties: { approve: { type: boolean } }
              required: [approve]
            approvers: { groups: [ops] }
            distinctFromRequester: true
    - name: rejected
      when: "not inputs.decision.approve"
      fail: { message: "rejected" }
  result:
    content: [ { type: text, text: "approved {{ args.service }}" } ]
"#;

fn apply_ok(c: &Cluster, ns: &str, yaml: &str) {
    let out = c.apply("admin", ns, yaml);
    assert!(
        out.status.success(),
        "apply failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    c.admin(&[
        "wait",
        "-n",
        ns,
        "--for=condition=Ready",
        "--timeout=60s",
        "wf",
        "--all",
    ]);
}

/// Create the object `json` in `ns` with kubectl as `user`; it must be accepted. The API
/// server answers 503 for a custom resource while it rebuilds that resource's handler (its
/// message says "There can be a delay…"): then the CRD is waited for and the create repeated.
fn create_as(c: &Cluster, user: &str, ns: &str, json: &str) {
    let mut out = c.kubectl_stdin(user, &["create", "-n", ns, "-f", "-"], json);
    for _ in 0..3 {
        let unavailable = String::from_utf8_lossy(&out.stderr).contains("(ServiceUnavailable)");
        if out.status.success() || !unavailable {
            break;
        }
        c.admin(&[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd/runs.runway.dev",
        ]);
        out = c.kubectl_stdin(user, &["create", "-n", ns, "-f", "-"], json);
    }
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A task id from a `tools/call` answer.
fn task_id(reply: &support::mcp::Reply) -> String {
    reply.result()["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("not a task: {:?}", reply.messages))
        .to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn crds_install_and_kubectl_shows_workflows_with_gitops_status() {
    let c = up();
    let ns = c.namespace("gitops");
    apply_ok(c, &ns, NAP);
    let table = c.admin(&["get", "wf", "-n", &ns]);
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["NAME", "TOOL", "MODE", "STEPS", "SUSPENDED", "READY", "AGE"]
    );
    let row: Vec<&str> = table.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(&row[..5], ["nap", "nap", "auto", "1", "True"], "{table}");

    // kstatus (Flux) and Argo CD read Ready with observedGeneration.
    let wf = get_json(c, &ns, "wf/nap");
    let ready = &wf["status"]["conditions"][0];
    assert_eq!(ready["type"], "Ready");
    assert_eq!(ready["observedGeneration"], wf["metadata"]["generation"]);
    assert_eq!(
        wf["status"]["observedGeneration"],
        wf["metadata"]["generation"]
    );

    // A broken edit says why, for the new generation.
    let broken = NAP.replace(r#""{{ args.wait }}""#, r#""{{ args.wait ""#);
    assert!(c.apply("admin", &ns, &broken).status.success());
    c.admin(&[
        "wait",
        "-n",
        &ns,
        "--for=condition=Ready=False",
        "--timeout=60s",
        "wf/nap",
    ]);
    let wf = get_json(c, &ns, "wf/nap");
    let ready = &wf["status"]["conditions"][0];
    assert_eq!(ready["reason"], "InvalidTemplate", "{ready}");
    assert!(
        ready["message"].as_str().unwrap().contains("sleep"),
        "{ready}"
    );
    assert_eq!(ready["observedGeneration"], 2);
    assert_eq!(wf["status"]["observedGeneration"], 2);

    // The API server refuses what the schema can tell is wrong.
    for (bad, why) in [
        (NAP.replace("name: sleep", "name: sl.eep"), "should match"),
        (
            NAP.replace("delay:", "fail: { message: x }\n      delay:"),
            "exactly one",
        ),
        (
            NAP.replace("  steps:", "  tool: { name: \"has space\" }\n  steps:"),
            "should match",
        ),
    ] {
        let out = c.apply("admin", &ns, &bad.replace("name: nap", "name: bad"));
        assert!(!out.status.success(), "{bad} was accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(why), "{err}");
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn typos_are_refused_and_a_tool_name_stays_with_the_older_workflow() {
    let c = up();
    let ns = c.namespace("strict");
    // kubectl validates fields strictly against the CRD schema: misspelt fields are errors.
    for (bad, field) in [
        (NAP.replace("  steps:", "  stpes:"), "stpes"),
        (
            NAP.replace(
                "    - name: sleep",
                "    - name: sleep\n      retry: { limt: 3 }",
            ),
            "limt",
        ),
    ] {
        let out = c.apply("admin", &ns, &bad);
        assert!(!out.status.success(), "{bad} was accepted");
        let err = String::from_utf8_lossy(&out.stderr);
        // Server-side apply words it "field not declared in schema", client-side "unknown field".
        assert!(
            err.contains(field)
                && (err.contains("not declared in schema") || err.contains("unknown field")),
            "{err}"
        );
    }
    // What only Runway can check is a Ready=False reason: a `when` that does not compile, a
    // duration in words.
    for (bad, reason) in [
        (
            NAP.replace(
                "    - name: sleep",
                "    - name: sleep\n      when: \"args.wait ==\"",
            ),
            "InvalidTemplate",
        ),
        (
            NAP.replace(r#""{{ args.wait }}""#, "5 minutes"),
            "InvalidDuration",
        ),
    ] {
        assert!(c.apply("admin", &ns, &bad).status.success());
        c.admin(&[
            "wait",
            "-n",
            &ns,
            "--for=condition=Ready=False",
            "--timeout=60s",
            "wf/nap",
        ]);
        let wf = get_json(c, &ns, "wf/nap");
        assert_eq!(wf["status"]["conditions"][0]["reason"], reason, "{wf}");
        c.admin(&["delete", "-n", &ns, "wf/nap", "--wait"]);
    }

    // Two Workflows offering one tool: the older keeps it, whatever the names.
    apply_ok(
        c,
        &ns,
        &NAP.replace("name: nap", "name: older")
            .replace("  steps:", "  tool: { name: nap }\n  steps:"),
    );
    let created = get_json(c, &ns, "wf/older")["metadata"]["creationTimestamp"]
        .as_str()
        .unwrap()
        .to_owned();
    // creationTimestamp has whole seconds: the newer one must be created in a later second
    // for "older" to mean anything.
    let created: jiff::Timestamp = created.parse().unwrap();
    let later = created + jiff::SignedDuration::from_secs(1);
    if let Ok(wait) = std::time::Duration::try_from(jiff::Timestamp::now().duration_until(later)) {
        tokio::time::sleep(wait).await;
    }
    let newer = NAP
        .replace("name: nap", "name: a-newer")
        .replace("  steps:", "  tool: { name: nap }\n  steps:");
    assert!(c.apply("admin", &ns, &newer).status.success());
    c.admin(&[
        "wait",
        "-n",
        &ns,
        "--for=condition=Ready=False",
        "--timeout=60s",
        "wf/a-newer",
    ]);
    let wf = get_json(c, &ns, "wf/a-newer");
    assert_eq!(
        wf["status"]["conditions"][0]["reason"], "DuplicateTool",
        "{wf}"
    );
    assert!(
        wf["status"]["conditions"][0]["message"]
            .as_str()
            .unwrap()
            .contains("workflow older"),
        "{wf}"
    );
    assert_eq!(
        get_json(c, &ns, "wf/older")["status"]["conditions"][0]["status"],
        "True"
    );
    // When the older one goes, the newer one takes the tool without being touched.
    c.admin(&["delete", "-n", &ns, "wf/older"]);
    c.admin(&[
        "wait",
        "-n",
        &ns,
        "--for=condition=Ready",
        "--timeout=60s",
        "wf/a-newer",
    ]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_tool_call_is_a_run_that_any_replica_and_kubectl_follow() {
    let c = up();
    let ns = c.namespace("calls");
    apply_ok(c, &ns, NAP);
    let reply = mcp(c, 0, "alice", &ns)
        .call("nap", json!({"wait": "1s"}))
        .await;
    let id = task_id(&reply);
    // The other replica knows the task at once (it reads the same API server).
    let other = mcp(c, 1, "alice", &ns);
    let got = other.get(&id).await;
    assert_eq!(got.result()["taskId"], id);

    let table = c.admin(&["get", "runs", "-n", &ns]);
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        [
            "NAME",
            "WORKFLOW",
            "PHASE",
            "STEP",
            "WAITING-FOR",
            "PAUSED",
            "REQUESTED-BY",
            "AGE"
        ]
    );
    assert!(table.contains(&id) && table.contains("alice"), "{table}");
    c.wait_jsonpath(&ns, &format!("run/{id}"), "{.status.phase}", "Succeeded");
    let done = other.await_status(&id, "completed").await;
    assert_eq!(done["result"]["content"][0]["text"], "slept 1s");
}

const ONE_AT_A_TIME: &str = r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: rollout }
spec:
  execution: { concurrency: { limit: 1, key: "{{ args.env }}" } }
  steps:
    - name: hold
      input:
        requests: [ { name: go, message: "Roll out to {{ args.env }}?" } ]
  result:
    content: [ { type: text, text: "rolled out to {{ args.env }}" } ]
"#;

#[tokio::test(flavor = "multi_thread")]
async fn runs_past_a_concurrency_limit_queue_visibly_and_start_in_order() {
    let c = up();
    let ns = c.namespace("queue");
    apply_ok(c, &ns, ONE_AT_A_TIME);
    // Called through both replicas: the line is the Runs themselves, not a replica's memory.
    let (a0, a1) = (mcp(c, 0, "alice", &ns), mcp(c, 1, "alice", &ns));
    let first = task_id(&a0.call("rollout", json!({"env": "prod"})).await);
    a0.await_status(&first, "input_required").await;
    let second = task_id(&a1.call("rollout", json!({"env": "prod"})).await);
    let third = task_id(&a0.call("rollout", json!({"env": "prod"})).await);
    c.wait_jsonpath(&ns, &format!("run/{second}"), "{.status.phase}", "Queued");
    c.wait_jsonpath(&ns, &format!("run/{third}"), "{.status.phase}", "Queued");
    let table = c.admin(&["get", "runs", "-n", &ns]);
    let line = table.lines().find(|l| l.starts_with(&third)).unwrap();
    assert!(line.contains("Queued"), "{table}");
    let why = c.admin(&[
        "get",
        &format!("run/{third}"),
        "-n",
        &ns,
        "-o",
        "jsonpath={.status.statusMessage}",
    ]);
    assert_eq!(why, "queued behind 2 run(s): at most 1 at once for prod");
    let staging = task_id(&a1.call("rollout", json!({"env": "staging"})).await);
    a1.await_status(&staging, "input_required").await;

    let go = json!({"hold.go": {"action": "accept", "content": {}}});
    a1.update(&first, go.clone()).await.assert_complete();
    c.wait_jsonpath(&ns, &format!("run/{first}"), "{.status.phase}", "Succeeded");
    a0.await_status(&second, "input_required").await;
    c.wait_jsonpath(
        &ns,
        &format!("run/{third}"),
        "{.status.statusMessage}",
        "queued behind 1 run(s): at most 1 at once for prod",
    );
    a0.update(&second, go).await.assert_complete();
    a1.await_status(&third, "input_required").await;
}

const WAVES: &str = r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: waves }
spec:
  steps:
    - name: naps
      dependsOn: []
      forEach: { items: "{{ args.waits }}", parallelism: 2 }
      delay: { duration: "{{ item }}" }
    - name: ask
      dependsOn: []
      input: { requests: [ { name: ok, message: "Go on?" } ] }
    - name: child
      dependsOn: [naps, ask]
      workflow: { name: leaf, arguments: { count: "{{ steps.naps.output | length }}" } }
  result:
    content: [ { type: text, text: "done" } ]
    structuredContent: { count: "{{ steps.child.output.count }}" }
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: leaf }
spec:
  steps:
    - name: hold
      input: { requests: [ { name: go, message: "Leaf {{ args.count }}?" } ] }
  result:
    content: [ { type: text, text: "leaf" } ]
    structuredContent: { count: "{{ args.count }}" }
"#;

#[tokio::test(flavor = "multi_thread")]
async fn branches_items_and_a_child_run_on_the_cluster() {
    let c = up();
    let ns = c.namespace("waves");
    apply_ok(c, &ns, WAVES);
    let (a0, a1) = (mcp(c, 0, "alice", &ns), mcp(c, 1, "alice", &ns));
    let id = task_id(
        &a0.call("waves", json!({"waits": ["10ms", "20ms", "30ms"]}))
            .await,
    );
    a0.await_status(&id, "input_required").await;
    // The items run beside the open question, each a record of its own.
    c.wait_jsonpath(
        &ns,
        &format!("run/{id}"),
        r#"{.status.steps[?(@.name=="naps")].phase}"#,
        "Succeeded",
    );
    let items = c.admin(&[
        "get",
        &format!("run/{id}"),
        "-n",
        &ns,
        "-o",
        r#"jsonpath={.status.steps[?(@.name=="naps[2]")].phase}"#,
    ]);
    assert_eq!(items, "Succeeded");
    a1.update(&id, json!({"ask.ok": {"action": "accept", "content": {}}}))
        .await
        .assert_complete();
    // The child: a Run of its own, as alice, owned by the parent.
    let child = format!("{id}-child-1");
    c.wait_jsonpath(&ns, &format!("run/{child}"), "{.status.phase}", "Waiting");
    let run = get_json(c, &ns, &format!("run/{child}"));
    assert_eq!(run["spec"]["requestedBy"]["username"], "alice");
    assert_eq!(run["spec"]["arguments"], json!({"count": 3}));
    assert_eq!(run["metadata"]["labels"]["runway.dev/parent"], id.as_str());
    assert_eq!(run["metadata"]["ownerReferences"][0]["name"], id.as_str());
    assert_eq!(run["metadata"]["ownerReferences"][0]["kind"], "Run");
    a0.update(
        &child,
        json!({"hold.go": {"action": "accept", "content": {}}}),
    )
    .await
    .assert_complete();
    let done = a1.await_status(&id, "completed").await;
    assert_eq!(done["result"]["structuredContent"], json!({"count": 3}));

    // Deleting a parent deletes its child (the garbage collector follows the owner reference).
    let id = task_id(&a0.call("waves", json!({"waits": []})).await);
    a0.await_status(&id, "input_required").await;
    a0.update(&id, json!({"ask.ok": {"action": "accept", "content": {}}}))
        .await
        .assert_complete();
    let child = format!("{id}-child-1");
    c.wait_jsonpath(&ns, &format!("run/{child}"), "{.status.phase}", "Waiting");
    c.admin(&["delete", &format!("run/{id}"), "-n", &ns, "--wait=true"]);
    c.admin(&[
        "wait",
        "--for=delete",
        &format!("run/{child}"),
        "-n",
        &ns,
        "--timeout=60s",
    ]);
}

const SCHEDULED: &str = r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: tick }
spec:
  steps: [ { name: work, delay: { duration: 10ms } } ]
  schedules:
    - { name: often, cron: "*/2 * * * * *", timeZone: Europe/Berlin, successfulRunsHistoryLimit: 10 }
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_schedule_starts_runs_on_the_cluster_in_its_own_name() {
    let c = up();
    let ns = c.namespace("sched");
    apply_ok(c, &ns, SCHEDULED);
    // The scheduler runs with the first shard; its Runs are plain Runs with a label. (The
    // history limit keeps the first Run for the whole test: ten Runs two seconds apart.)
    let deadline = std::time::Instant::now() + support::harness::PATIENCE;
    let names = loop {
        let out = c.admin(&[
            "get",
            "runs",
            "-n",
            &ns,
            "-l",
            "runway.dev/schedule=often",
            "-o",
            "name",
        ]);
        let names: Vec<String> = out
            .lines()
            .map(|l| l.trim_start_matches("run.runway.dev/").to_owned())
            .collect();
        if names.len() >= 2 || std::time::Instant::now() > deadline {
            break names;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    assert!(names.len() >= 2, "{names:?}");
    let first = &names[0];
    c.wait_jsonpath(&ns, &format!("run/{first}"), "{.status.phase}", "Succeeded");
    let who = c.admin(&[
        "get",
        &format!("run/{first}"),
        "-n",
        &ns,
        "-o",
        "jsonpath={.spec.requestedBy.username}",
    ]);
    assert_eq!(who, "runway:schedule:tick/often");
    let events = c.admin(&["describe", &format!("run/{first}"), "-n", &ns]);
    assert!(events.contains("Scheduled"), "{events}");
}

#[tokio::test(flavor = "multi_thread")]
async fn approvers_answer_and_cancel_with_kubectl_and_cannot_forge_identities() {
    let c = up();
    let ns = c.namespace("approve");
    apply_ok(c, &ns, APPROVAL);
    let alice = mcp(c, 0, "alice", &ns);
    let first = task_id(&alice.call("approve", json!({"service": "api"})).await);
    alice.await_status(&first, "input_required").await;
    let run = format!("run/{first}");

    // Forged identities are refused by the admission policy.
    let forged = json!({"spec": {"inputResponses": {"approval.decision":
        {"action": "accept", "content": {"approve": true}, "answeredBy": "alice"}}}});
    let out = c.patch("carol", &ns, &run, &forged);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("ValidatingAdmissionPolicy"), "{err}");
    let forged_cancel = json!({"spec": {"cancel": {"reason": "x", "requestedBy": "alice"}}});
    let out = c.patch("carol", &ns, &run, &forged_cancel);
    assert!(!out.status.success(), "a forged cancel was accepted");
    let forged_run = "apiVersion: runway.dev/v1alpha1\nkind: Run\nmetadata: { name: forged }\n\
        spec:\n  workflowRef: { name: approve }\n  arguments: { service: x }\n  \
        requestedBy: { username: bob }\n";
    let out = c.kubectl_stdin("alice", &["create", "-n", &ns, "-f", "-"], forged_run);
    assert!(
        !out.status.success(),
        "a Run requested in bob's name was created"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("ValidatingAdmissionPolicy"));
    // In one's own name, a Run created with kubectl is a task like any other.
    let own_run = forged_run.replace("forged", "by-kubectl").replace(
        "username: bob",
        "username: alice, uid: alice-uid, groups: [devs, system:authenticated]",
    );
    let out = c.kubectl_stdin("alice", &["create", "-n", &ns, "-f", "-"], &own_run);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    c.wait_jsonpath(&ns, "run/by-kubectl", "{.status.phase}", "Waiting");
    assert_eq!(
        alice.get("by-kubectl").await.result()["status"],
        "input_required"
    );
    // Nobody but the operator writes status.
    let out = c.kubectl(
        "carol",
        &[
            "patch",
            &run,
            "-n",
            &ns,
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"phase":"Succeeded"}}"#,
        ],
    );
    assert!(!out.status.success(), "a tenant wrote status");
    assert!(String::from_utf8_lossy(&out.stderr).contains("forbidden"));

    // The documented recipe, with the runway-approver role only: kubectl patch.
    let answer = json!({"spec": {"inputResponses": {"approval.decision":
        {"action": "accept", "content": {"approve": true}, "answeredBy": "carol",
         "answeredByGroups": ["ops"]}}}});
    let out = c.patch("carol", &ns, &run, &answer);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    c.wait_jsonpath(&ns, &run, "{.status.phase}", "Succeeded");
    // GitOps tools read a finished Run as current: its status describes its latest generation
    // (the answer made that generation 2).
    let obj = get_json(c, &ns, &run);
    assert_eq!(obj["metadata"]["generation"], 2);
    assert_eq!(
        obj["status"]["observedGeneration"],
        obj["metadata"]["generation"]
    );
    assert_eq!(obj["status"]["conditions"][0]["type"], "Finished");
    assert_eq!(obj["status"]["conditions"][0]["observedGeneration"], 2);
    let done = alice.get(&first).await;
    assert_eq!(
        done.result()["result"]["content"][0]["text"],
        "approved api"
    );
    let events = c.admin(&["describe", &run, "-n", &ns]);
    assert!(
        events.contains("InputAnswered") && events.contains("carol"),
        "{events}"
    );

    // kubectl edit's way: read, change, replace (an update, not a patch).
    let second = task_id(&alice.call("approve", json!({"service": "db"})).await);
    alice.await_status(&second, "input_required").await;
    let mut obj = get_json(c, &ns, &format!("run/{second}"));
    obj["spec"]["inputResponses"] = json!({"approval.decision":
        {"action": "accept", "content": {"approve": false}, "answeredBy": "carol",
         "answeredByGroups": ["ops"]}});
    let out = c.kubectl_stdin(
        "carol",
        &["replace", "-n", &ns, "-f", "-"],
        &obj.to_string(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    c.wait_jsonpath(&ns, &format!("run/{second}"), "{.status.phase}", "Failed");

    // Cancel with kubectl patch, in one's own name.
    let third = task_id(&alice.call("approve", json!({"service": "web"})).await);
    alice.await_status(&third, "input_required").await;
    let cancel = json!({"spec": {"cancel": {"reason": "not today", "requestedBy": "carol"}}});
    let out = c.patch("carol", &ns, &format!("run/{third}"), &cancel);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    c.wait_jsonpath(&ns, &format!("run/{third}"), "{.status.phase}", "Cancelled");
    let events = c.admin(&["describe", &format!("run/{third}"), "-n", &ns]);
    assert!(events.contains("CancelRequested"), "{events}");

    // Over MCP, with the tenant roles and no `list runs`: the approver the question names
    // reads and answers alice's Run; bob, with the same roles but not in ops, sees nothing. A
    // null among the arguments is a value the answer's write keeps.
    let args = json!({"service": "queue", "ticket": null});
    let fourth = task_id(&alice.call("approve", args.clone()).await);
    alice.await_status(&fourth, "input_required").await;
    assert_eq!(
        mcp(c, 1, "bob", &ns).get(&fourth).await.error_code(),
        -32602
    );
    let carol = mcp(c, 1, "carol", &ns);
    let asked = carol.get(&fourth).await;
    assert_eq!(
        asked.result()["inputRequests"]["approval.decision"]["params"]["message"],
        "Deploy queue?"
    );
    let reply = carol
        .update(
            &fourth,
            json!({"approval.decision": {"action": "accept", "content": {"approve": true}}}),
        )
        .await;
    reply.assert_complete();
    c.wait_jsonpath(
        &ns,
        &format!("run/{fourth}"),
        "{.status.phase}",
        "Succeeded",
    );
    assert_eq!(
        get_json(c, &ns, &format!("run/{fourth}"))["spec"]["arguments"],
        args
    );

    // The list tool and the console's view of a Run, on the API server: carol, who may not
    // list runs, finds the Runs that asked her or that she answered (over MCP or kubectl);
    // bob, asked nothing, finds nothing; the Run's Events, which its requester reads, come
    // from the API server.
    let hers = carol.call("runway_list_runs", json!({})).await.listed();
    assert!(hers.contains(&second) && hers.contains(&fourth), "{hers:?}");
    let bobs = mcp(c, 1, "bob", &ns)
        .call("runway_list_runs", json!({}))
        .await;
    assert!(bobs.listed().is_empty());
    let mine = alice
        .call("runway_list_runs", json!({"workflow": "approve"}))
        .await
        .listed();
    assert!(mine.contains(&second) && mine.contains(&third) && mine.contains(&fourth));
    // Carol, an approver, reads her answer and how it ended, not the requester's Events.
    let hers = carol
        .call("runway_get_run", json!({"taskId": fourth}))
        .await;
    let sc = &hers.result()["structuredContent"];
    assert_eq!(sc["answers"][0]["answeredBy"], "carol");
    assert_eq!(sc["phase"], "Succeeded");
    assert!(sc.get("events").is_none(), "{sc}");
    let deadline = std::time::Instant::now() + support::harness::PATIENCE;
    let events = loop {
        let full = alice
            .call("runway_get_run", json!({"taskId": fourth}))
            .await;
        let sc = full.result()["structuredContent"].clone();
        assert_eq!(sc["answers"][0]["answeredBy"], "carol");
        let reasons: Vec<String> = sc["events"]
            .as_array()
            .expect("events read from the API server")
            .iter()
            .map(|e| e["reason"].as_str().unwrap().to_owned())
            .collect();
        // Events are published in the background; follow them until the last one is there.
        if reasons.iter().any(|r| r == "Finished") || std::time::Instant::now() > deadline {
            break reasons;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    for reason in ["InputRequested", "InputAnswered", "Finished"] {
        assert!(events.iter().any(|r| r == reason), "{reason} in {events:?}");
    }
    let namespaces: Value = reqwest::Client::new()
        .get(format!("{}/ui/api/namespaces", c.base(0)))
        .bearer_auth(token("carol"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(namespaces["user"], "carol");
    assert!(
        namespaces["namespaces"]
            .as_array()
            .unwrap()
            .contains(&json!(ns)),
        "{namespaces}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_manifest_without_a_requester_gets_its_creator_from_the_api_server() {
    let c = up();
    let ns = c.namespace("gitops");
    apply_ok(c, &ns, APPROVAL);
    // A Run as it can live in git: nothing in it differs per cluster or per user.
    let manifest = "apiVersion: runway.dev/v1alpha1\nkind: Run\nmetadata: { name: from-git }\n\
        spec:\n  workflowRef: { name: approve }\n  arguments: { service: api }\n";
    create_as(c, "alice", &ns, manifest);
    let run = get_json(c, &ns, "run/from-git");
    assert_eq!(
        run["spec"]["requestedBy"],
        json!({"username": "alice", "uid": "alice-uid", "groups": ["devs", "system:authenticated"]})
    );
    c.wait_jsonpath(&ns, "run/from-git", "{.status.phase}", "Waiting");
    // It is alice's task like one she started over MCP; bob, who may not list Runs, does not see it.
    let alice = mcp(c, 0, "alice", &ns);
    assert_eq!(
        alice.get("from-git").await.result()["status"],
        "input_required"
    );
    // The approver rule reads the filled requester: carol may answer alice's Run, not her own.
    create_as(c, "carol", &ns, &manifest.replace("from-git", "carols"));
    let carols = get_json(c, &ns, "run/carols");
    assert_eq!(carols["spec"]["requestedBy"]["username"], "carol");
    c.wait_jsonpath(&ns, "run/carols", "{.status.phase}", "Waiting");
    let carol = mcp(c, 0, "carol", &ns);
    let yes = json!({"approval.decision": {"action": "accept", "content": {"approve": true}}});
    let own = carol
        .call(
            "runway_answer_run",
            json!({"taskId": "carols", "inputResponses": yes}),
        )
        .await;
    assert!(own.last().get("error").is_some(), "{}", own.last());
    let theirs = carol
        .call(
            "runway_answer_run",
            json!({"taskId": "from-git", "inputResponses": yes}),
        )
        .await;
    assert!(theirs.last().get("result").is_some(), "{}", theirs.last());
    c.wait_jsonpath(&ns, "run/from-git", "{.status.phase}", "Succeeded");
    // A requester that is written is kept, and checked.
    let forged = format!(
        "{}  requestedBy: {{ username: bob }}\n",
        manifest.replace("from-git", "forged")
    );
    let out = c.kubectl_stdin("alice", &["create", "-n", &ns, "-f", "-"], &forged);
    assert!(!out.status.success(), "a Run in bob's name was created");
    assert!(String::from_utf8_lossy(&out.stderr).contains("ValidatingAdmissionPolicy"));
}

fn pause_patch(paused: bool, who: &str, reason: &str) -> String {
    json!({"spec": {"pause": {
        "paused": paused, "requestedBy": who, "reason": reason,
        "requestedAt": jiff::Timestamp::now().to_string(),
    }}})
    .to_string()
}

#[tokio::test(flavor = "multi_thread")]
async fn runs_and_workflows_pause_and_resume_with_kubectl() {
    let c = up();
    let ns = c.namespace("pausing");
    apply_ok(c, &ns, APPROVAL);
    apply_ok(c, &ns, NAP);
    let alice = mcp(c, 0, "alice", &ns);
    let id = task_id(&alice.call("approve", json!({"service": "api"})).await);
    let run = format!("run/{id}");
    c.wait_jsonpath(&ns, &run, "{.status.phase}", "Waiting");

    // A pause in someone else's name is refused; one in her own is taken.
    let patch = |user: &str, body: &str| {
        c.kubectl(
            user,
            &["patch", "-n", &ns, &run, "--type=merge", "-p", body],
        )
    };
    let forged = patch("alice", &pause_patch(true, "bob", "not mine"));
    assert!(!forged.status.success(), "a pause in bob's name was taken");
    assert!(String::from_utf8_lossy(&forged.stderr).contains("spec.pause"));
    let own = patch("alice", &pause_patch(true, "alice", "freeze"));
    assert!(
        own.status.success(),
        "{}",
        String::from_utf8_lossy(&own.stderr)
    );
    c.wait_jsonpath(&ns, &run, "{.status.paused.by}", "alice");
    let table = c.admin(&["get", "-n", &ns, &run]);
    assert!(table.contains("PAUSED"), "{table}");

    // The question is still answered; the step after it does not start.
    let carol = mcp(c, 1, "carol", &ns);
    let yes = json!({"approval.decision": {"action": "accept", "content": {"approve": true}}});
    assert!(carol.update(&id, yes).await.last().get("result").is_some());
    c.wait_jsonpath(&ns, &run, "{.status.steps[0].phase}", "Succeeded");
    let paused = get_json(c, &ns, &run);
    assert_eq!(
        paused["status"]["steps"].as_array().unwrap().len(),
        1,
        "{paused}"
    );
    let task = alice.get(&id).await;
    assert_eq!(task.result()["status"], "working");
    assert_eq!(task.result()["statusMessage"], "paused by alice");

    // Carol (ops) resumes it by hand; the Events say who did what.
    let resumed = patch("carol", &pause_patch(false, "carol", "freeze over"));
    assert!(
        resumed.status.success(),
        "{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    c.wait_jsonpath(&ns, &run, "{.status.phase}", "Succeeded");
    let events = c.admin(&[
        "get",
        "events",
        "-n",
        &ns,
        &format!("--field-selector=involvedObject.name={id}"),
        "-o",
        "jsonpath={range .items[*]}{.reason}: {.message}{\"\\n\"}{end}",
    ]);
    assert!(
        events.contains("Paused: paused by alice: freeze"),
        "{events}"
    );
    assert!(events.contains("Resumed: resumed by carol"), "{events}");

    // A paused Workflow takes calls; their Runs wait unstarted until it is resumed.
    let suspend = |on: bool| {
        let body = json!({"spec": {"suspend": on}}).to_string();
        c.admin(&[
            "patch",
            "-n",
            &ns,
            "workflow/nap",
            "--type=merge",
            "-p",
            &body,
        ]);
        let generation = get_json(c, &ns, "workflow/nap")["metadata"]["generation"].to_string();
        c.wait_jsonpath(
            &ns,
            "workflow/nap",
            "{.status.observedGeneration}",
            &generation,
        );
    };
    suspend(true);
    let waiting = task_id(&alice.call("nap", json!({"wait": "1s"})).await);
    let waiting_run = format!("run/{waiting}");
    c.wait_jsonpath(
        &ns,
        &waiting_run,
        "{.status.statusMessage}",
        "waiting: workflow nap is paused",
    );
    assert!(get_json(c, &ns, &waiting_run)["status"]["startedAt"].is_null());
    suspend(false);
    c.wait_jsonpath(&ns, &waiting_run, "{.status.phase}", "Succeeded");
}

const SHIP: &str = r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: ship }
spec:
  steps:
    - { name: build, delay: { duration: 10ms } }
    - name: go
      input: { requests: [ { name: ok, message: "Ship it?" } ] }
  result: { content: [ { type: text, text: "shipped" } ] }
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_run_is_retried_from_its_failed_step_with_kubectl() {
    let c = up();
    let ns = c.namespace("retry");
    apply_ok(c, &ns, SHIP);
    let alice = mcp(c, 0, "alice", &ns);
    let id = task_id(&alice.call("ship", json!({})).await);
    c.wait_jsonpath(&ns, &format!("run/{id}"), "{.status.phase}", "Waiting");
    let no = json!({"go.ok": {"action": "decline"}});
    assert!(alice.update(&id, no).await.last().get("result").is_some());
    c.wait_jsonpath(&ns, &format!("run/{id}"), "{.status.phase}", "Failed");

    // A retry as it can be written by hand: the API server fills in who asks.
    let manifest = |name: &str| {
        format!(
            "apiVersion: runway.dev/v1alpha1\nkind: Run\nmetadata: {{ name: {name} }}\n\
             spec:\n  workflowRef: {{ name: ship }}\n  arguments: {{}}\n  retryOf: {{ name: {id} }}\n"
        )
    };
    create_as(c, "alice", &ns, &manifest("ship-again"));
    c.wait_jsonpath(&ns, "run/ship-again", "{.status.phase}", "Waiting");
    let again = get_json(c, &ns, "run/ship-again");
    assert_eq!(again["status"]["steps"][0]["name"], "build");
    assert_eq!(again["status"]["steps"][0]["reusedFrom"], id.as_str());
    let yes = json!({"go.ok": {"action": "accept", "content": {}}});
    assert!(
        alice
            .update("ship-again", yes)
            .await
            .last()
            .get("result")
            .is_some()
    );
    c.wait_jsonpath(&ns, "run/ship-again", "{.status.phase}", "Succeeded");
    // Someone else's retry of it fails, unstarted, saying why.
    create_as(c, "bob", &ns, &manifest("bobs-retry"));
    c.wait_jsonpath(&ns, "run/bobs-retry", "{.status.phase}", "Failed");
    let bobs = get_json(c, &ns, "run/bobs-retry");
    let text = bobs["status"]["result"]["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(text.contains("requested by alice"), "{text}");
    assert!(bobs["status"]["startedAt"].is_null(), "{bobs}");
    // spec.retryOf cannot be changed afterwards.
    let out = c.kubectl(
        "alice",
        &[
            "patch",
            "-n",
            &ns,
            "run/ship-again",
            "--type=merge",
            "-p",
            r#"{"spec":{"retryOf":{"name":"other"}}}"#,
        ],
    );
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("spec.retryOf is immutable"));
}

const QUEUE_TIMEOUT: &str = r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: release }
spec:
  execution: { concurrency: { limit: 1, queueTimeout: 3s } }
  steps:
    - name: hold
      input: { requests: [ { name: go, message: "Release?" } ] }
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_queued_run_shows_its_priority_and_gives_up_after_its_queue_timeout() {
    let c = up();
    let ns = c.namespace("queue");
    apply_ok(c, &ns, QUEUE_TIMEOUT);
    let alice = mcp(c, 0, "alice", &ns);
    let first = task_id(&alice.call("release", json!({})).await);
    c.wait_jsonpath(&ns, &format!("run/{first}"), "{.status.phase}", "Waiting");
    let manifest = "apiVersion: runway.dev/v1alpha1\nkind: Run\nmetadata: { name: urgent }\n\
        spec:\n  workflowRef: { name: release }\n  arguments: {}\n  priority: 7\n";
    create_as(c, "alice", &ns, manifest);
    c.wait_jsonpath(&ns, "run/urgent", "{.status.phase}", "Queued");
    let wide = c.admin(&["get", "-n", &ns, "run/urgent", "-o", "wide"]);
    let mut lines = wide.lines();
    let (header, row) = (lines.next().unwrap(), lines.next().unwrap());
    let at = header.find("PRIORITY").expect("a PRIORITY column");
    assert_eq!(row[at..].split_whitespace().next(), Some("7"), "{wide}");
    assert!(
        get_json(c, &ns, "run/urgent")["status"]["statusMessage"]
            .as_str()
            .unwrap()
            .contains("at priority 7")
    );
    let out = c.kubectl(
        "alice",
        &[
            "patch",
            "-n",
            &ns,
            "run/urgent",
            "--type=merge",
            "-p",
            r#"{"spec":{"priority":5000}}"#,
        ],
    );
    assert!(!out.status.success(), "a priority out of range was taken");
    c.wait_jsonpath(&ns, "run/urgent", "{.status.phase}", "Failed");
    let failed = get_json(c, &ns, "run/urgent");
    assert!(failed["status"]["startedAt"].is_null(), "{failed}");
    assert_eq!(
        alice.get(&first).await.result()["status"],
        "input_required",
        "the Run holding the slot is untouched"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn tenants_are_isolated_by_token_review_and_access_review() {
    let c = up();
    let ns = c.namespace("tenant-a");
    let elsewhere = c.namespace("tenant-b");
    apply_ok(c, &ns, NAP);
    apply_ok(c, &elsewhere, NAP);
    let id = task_id(
        &mcp(c, 0, "alice", &ns)
            .call("nap", json!({"wait": "30s"}))
            .await,
    );

    // Another principal with the same roles in the same namespace: the owner rule.
    let bob = mcp(c, 1, "bob", &ns);
    assert_eq!(bob.get(&id).await.error_code(), -32602);
    assert_eq!(bob.cancel(&id).await.error_code(), -32602);
    // The same principal asking through another namespace.
    let alice_b = mcp(c, 0, "alice", &elsewhere);
    assert_eq!(alice_b.get(&id).await.error_code(), -32602);
    // A valid token and no RBAC at all: nothing, and the same answer for a task.
    let mallory = mcp(c, 1, "mallory", &ns);
    let unknown = mallory.get(&id).await;
    assert_eq!(unknown.error_code(), -32602);
    assert_eq!(
        unknown.last()["error"]["message"],
        bob.get(&id).await.last()["error"]["message"]
    );
    assert_eq!(
        mallory
            .rpc("tools/list", None, json!({}))
            .await
            .error_code(),
        -32003
    );
    assert_eq!(
        mallory
            .call("nap", json!({"wait": "1s"}))
            .await
            .error_code(),
        -32003
    );
    // Following tasks needs `watch runs`; with it, someone else's task still shows nothing.
    let follow = json!({"notifications": {"taskIds": [id]}});
    assert_eq!(
        mallory
            .rpc("subscriptions/listen", None, follow.clone())
            .await
            .error_code(),
        -32003
    );
    let ack = bob.rpc("subscriptions/listen", None, follow).await;
    assert_eq!(
        ack.notifications("notifications/subscriptions/acknowledged")[0]["params"]["notifications"]
            ["taskIds"],
        json!([]),
        "{:?}",
        ack.messages
    );
    // A taskId that is not a name never reaches the API server's URL.
    let hostile = "?labelSelector=runway.dev%2Fworkflow%3Dnap";
    let reply = mallory.cancel(hostile).await;
    assert_eq!(reply.error_code(), -32602, "{:?}", reply.messages);
    // A token the API server does not know.
    let stranger = Client::new(
        &c.base(0),
        Some("no-such-token"),
        &format!("/namespaces/{ns}/mcp"),
    );
    let reply = stranger.rpc("tools/list", None, json!({})).await;
    assert_eq!(reply.status, 401);
    assert!(reply.headers.contains_key("www-authenticate"));
    // The owner may still do everything.
    let alice = mcp(c, 1, "alice", &ns);
    assert!(alice.cancel(&id).await.last().get("error").is_none());
    c.wait_jsonpath(&ns, &format!("run/{id}"), "{.status.phase}", "Cancelled");
}

#[tokio::test(flavor = "multi_thread")]
async fn only_tokens_minted_for_runway_are_accepted() {
    let c = up();
    let ns = c.namespace("audience");
    apply_ok(c, &ns, NAP);
    c.admin(&["create", "serviceaccount", "agent", "-n", &ns]);
    c.admin(&[
        "create",
        "rolebinding",
        "agent-call",
        "-n",
        &ns,
        "--clusterrole=runway-caller",
        &format!("--serviceaccount={ns}:agent"),
    ]);
    let mint = |audience: Option<&str>| {
        let mut args = vec!["create", "token", "agent", "-n", &ns];
        args.extend(audience.map(|a| ["--audience", a]).into_iter().flatten());
        c.admin(&args).trim().to_owned()
    };
    // A ServiceAccount's own namespace is served on `/mcp` without naming it.
    let agent = |token: &str| Client::new(&c.base(0), Some(token), "/mcp");

    let ours = agent(&mint(Some(AUDIENCE)))
        .rpc("tools/list", None, json!({}))
        .await;
    assert_eq!(ours.status, 200, "{:?}", ours.messages);
    assert_eq!(ours.result()["tools"][0]["name"], "nap");
    // A token for the API server alone and one minted for another service are both refused.
    // (A token requested without an audience gets all of the API server's `--api-audiences`,
    // which here include Runway's, so it would pass: see docs/security.md.)
    for audience in [Some(cluster::API_AUDIENCE), Some("vault")] {
        let reply = agent(&mint(audience))
            .rpc("tools/list", None, json!({}))
            .await;
        assert_eq!(reply.status, 401, "{audience:?}: {:?}", reply.messages);
        assert_eq!(reply.error_code(), -32001);
    }
}

const JOB: &str = r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: build }
spec:
  steps:
    - name: compile
      job:
        backoffLimit: 0
        template:
          spec:
            restartPolicy: Never
            containers:
              - name: main
                image: busybox:1.36
                command: [sh, -c, "echo done"]
  result:
    content: [ { type: text, text: "built {{ steps.compile.output.artifacts }}" } ]
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: build-each }
spec:
  steps:
    - name: compile
      forEach: { items: [arm, x86], parallelism: 2 }
      job:
        backoffLimit: 0
        template:
          spec:
            restartPolicy: Never
            containers:
              - name: main
                image: busybox:1.36
                command: [sh, -c, "echo $RUNWAY_ITEM"]
  result:
    content: [ { type: text, text: "built" } ]
    structuredContent: { each: "{{ steps.compile.output }}" }
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: build-twice }
spec:
  steps:
    - name: compile
      job:
        backoffLimit: 1
        template:
          spec:
            restartPolicy: Never
            containers:
              - name: main
                image: busybox:1.36
                command: [sh, -c, "echo done"]
  result:
    content: [ { type: text, text: "built {{ steps.compile.output.artifacts }}" } ]
"#;

/// Play the kubelet: the Job's Pod ends with `message` as its termination message.
fn finish_pod(c: &Cluster, ns: &str, job: &str, message: &str) {
    end_pod(c, ns, job, "Succeeded", message);
}

/// Play the kubelet: the Job's Pod that has not ended yet ends in `phase` (`Succeeded` or
/// `Failed`) with `message` as its termination message.
fn end_pod(c: &Cluster, ns: &str, job: &str, phase: &str, message: &str) {
    // The Job controller has made the Pod once the Job counts it as active.
    c.wait_jsonpath(ns, &format!("job/{job}"), "{.status.active}", "1");
    let pod = c
        .admin(&[
            "get",
            "pods",
            "-n",
            ns,
            "-l",
            &format!("job-name={job}"),
            "--field-selector=status.phase=Pending",
            "-o",
            "jsonpath={.items[0].metadata.name}",
        ])
        .trim()
        .to_owned();
    let now = jiff::Timestamp::now().to_string();
    let exit = i32::from(phase != "Succeeded");
    let status = json!({"status": {"phase": phase, "containerStatuses": [{
        "name": "main", "image": "busybox:1.36", "imageID": "x", "ready": false,
        "restartCount": 0, "started": false,
        "state": {"terminated": {"exitCode": exit, "reason": "Completed", "message": message,
            "startedAt": now, "finishedAt": now}}}]}});
    c.admin(&[
        "patch",
        &format!("pod/{pod}"),
        "-n",
        ns,
        "--subresource=status",
        "--type=merge",
        "-p",
        &status.to_string(),
    ]);
}

fn job_of(c: &Cluster, ns: &str, run: &str) -> String {
    let what = format!("run/{run}");
    c.admin(&[
        "wait",
        "-n",
        ns,
        "--for=jsonpath={.status.steps[0].jobName}",
        &what,
        &format!("--timeout={}s", cluster::PATIENCE.as_secs()),
    ]);
    c.admin(&[
        "get",
        &what,
        "-n",
        ns,
        "-o",
        "jsonpath={.status.steps[0].jobName}",
    ])
    .trim()
    .to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn job_steps_run_as_owned_jobs_and_cancel_deletes_them() {
    let c = up();
    let ns = c.namespace("jobs");
    apply_ok(c, &ns, JOB);
    let alice = mcp(c, 0, "alice", &ns);
    let id = task_id(&alice.call("build", json!({})).await);
    let job = job_of(c, &ns, &id);
    let owner = get_json(c, &ns, &format!("job/{job}"))["metadata"]["ownerReferences"][0].clone();
    assert_eq!(owner["kind"], "Run");
    assert_eq!(owner["name"], id);
    finish_pod(c, &ns, &job, r#"{"artifacts": 3}"#);
    let done = alice.await_status(&id, "completed").await;
    assert_eq!(done["result"]["content"][0]["text"], "built 3");

    // Cancelling deletes the Job (and the garbage collector its Pod).
    let id = task_id(&alice.call("build", json!({})).await);
    let job = job_of(c, &ns, &id);
    assert!(alice.cancel(&id).await.last().get("error").is_none());
    alice.await_status(&id, "cancelled").await;
    c.admin(&[
        "wait",
        "-n",
        &ns,
        "--for=delete",
        &format!("job/{job}"),
        "--timeout=60s",
    ]);

    // One Job per item, both at once, labelled with the item; outputs in item order.
    let id = task_id(&alice.call("build-each", json!({})).await);
    let (arm, x86) = (format!("{id}-compile-0-1"), format!("{id}-compile-1-1"));
    finish_pod(c, &ns, &x86, r#"{"arch": "x86"}"#);
    finish_pod(c, &ns, &arm, r#"{"arch": "arm"}"#);
    let job = get_json(c, &ns, &format!("job/{arm}"));
    assert_eq!(job["metadata"]["labels"]["runway.dev/step"], "compile.0");
    assert_eq!(
        job["spec"]["template"]["spec"]["containers"][0]["env"],
        json!([{"name": "RUNWAY_ITEM", "value": "arm"}, {"name": "RUNWAY_INDEX", "value": "0"}])
    );
    let done = alice.await_status(&id, "completed").await;
    assert_eq!(
        done["result"]["structuredContent"]["each"],
        json!([{"arch": "arm"}, {"arch": "x86"}])
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_step_reads_the_pod_that_succeeded_and_fails_when_its_job_is_deleted() {
    let c = up();
    let ns = c.namespace("job-pods");
    apply_ok(c, &ns, JOB);
    let alice = mcp(c, 0, "alice", &ns);
    // The first pod fails with a message of its own; the Job's second pod succeeds: the
    // output is the second pod's.
    let id = task_id(&alice.call("build-twice", json!({})).await);
    let job = job_of(c, &ns, &id);
    end_pod(c, &ns, &job, "Failed", r#"{"artifacts": 1}"#);
    c.wait_jsonpath(&ns, &format!("job/{job}"), "{.status.failed}", "1");
    finish_pod(c, &ns, &job, r#"{"artifacts": 2}"#);
    let done = alice.await_status(&id, "completed").await;
    assert_eq!(done["result"]["content"][0]["text"], "built 2", "{done}");

    // A Job deleted by someone else never finishes: the step fails at once, saying so.
    let id = task_id(&alice.call("build", json!({})).await);
    let job = job_of(c, &ns, &id);
    c.admin(&["delete", "-n", &ns, &format!("job/{job}"), "--wait=false"]);
    let done = alice.await_status(&id, "completed").await;
    assert_eq!(done["result"]["isError"], true, "{done}");
    let run = get_json(c, &ns, &format!("run/{id}"));
    let message = run["status"]["steps"][0]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(
        message.contains("deleted before it finished"),
        "{}",
        run["status"]["steps"]
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn secrets_reach_headers_and_finished_runs_are_garbage_collected() {
    let c = up();
    let ns = c.namespace("secrets");
    let sink = support::sink::Sink::start().await;
    let url = &sink.url;
    c.admin(&[
        "create",
        "secret",
        "generic",
        "hook",
        "-n",
        &ns,
        "--from-literal=token=Bearer s3cret",
    ]);
    let wf = format!(
        r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: {{ name: hook }}
spec:
  execution: {{ ttlAfterFinished: 2s }}
  steps:
    - name: post
      http:
        method: POST
        url: "{url}"
        headers:
          - name: Authorization
            valueFrom: {{ secretKeyRef: {{ name: hook, key: token }} }}
"#
    );
    apply_ok(c, &ns, &wf);
    let alice = mcp(c, 0, "alice", &ns);
    let id = task_id(&alice.call("hook", json!({})).await);
    alice.await_status(&id, "completed").await;
    assert_eq!(*sink.authorization.lock().unwrap(), ["Bearer s3cret"]);
    c.admin(&[
        "wait",
        "-n",
        &ns,
        "--for=delete",
        &format!("run/{id}"),
        "--timeout=60s",
    ]);
    assert_eq!(alice.get(&id).await.error_code(), -32602);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_sample_step_waits_on_the_cluster_for_the_callers_model() {
    let c = up();
    let ns = c.namespace("sample");
    apply_ok(
        c,
        &ns,
        r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: muse }
spec:
  tool: { description: Asks the caller's model for a word. }
  steps:
    - name: word
      sample: { prompt: "One word, please", maxTokens: 5, timeout: 10m }
  result:
    content: [ { type: text, text: "{{ steps.word.output.text }}" } ]
"#,
    );
    let alice = mcp(c, 0, "alice", &ns)
        .with_caps(json!({"extensions": {"io.modelcontextprotocol/tasks": {}}, "sampling": {}}));
    let id = task_id(&alice.call("muse", json!({})).await);
    c.wait_jsonpath(
        &ns,
        &format!("run/{id}"),
        "{.status.waitingFor}",
        "word.sample",
    );
    let asked = alice.await_status(&id, "input_required").await;
    assert_eq!(
        asked["inputRequests"]["word.sample"]["method"],
        "sampling/createMessage"
    );
    // Answered through the other replica: the answer is in the Run, not in a process.
    mcp(c, 1, "alice", &ns)
        .with_caps(json!({"extensions": {"io.modelcontextprotocol/tasks": {}}, "sampling": {}}))
        .update(
            &id,
            json!({"word.sample": {"role": "assistant", "model": "m",
                "content": {"type": "text", "text": "granite"}}}),
        )
        .await
        .assert_complete();
    c.wait_jsonpath(&ns, &format!("run/{id}"), "{.status.phase}", "Succeeded");
    let done = alice.await_status(&id, "completed").await;
    assert_eq!(done["result"]["content"][0]["text"], "granite");
}

const ASK_NAME: &str = r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: ask-name }
spec:
  steps:
    - name: ask
      input:
        requests:
          - name: who
            message: "Your name?"
            requestedSchema: { type: object, properties: { name: { type: string } }, required: [name] }
  result:
    content: [ { type: text, text: "hello {{ inputs.who.name }}" } ]
"#;

/// A 2025-era client of `user` whose session was opened on replica `at`, and the same session
/// pointed at replica `other`.
async fn old_pair(
    c: &Cluster,
    ns: &str,
    user: &str,
    caps: Value,
) -> (support::mcp::Old, support::mcp::Old) {
    let url = |i: usize| format!("{}/namespaces/{ns}/mcp", c.base(i));
    let first = support::mcp::Old::connect(&url(0), &token(user), caps.clone()).await;
    let mut second = support::mcp::Old::connect(&url(1), &token(user), caps).await;
    second.session = first.session.clone();
    (first, second)
}

#[tokio::test(flavor = "multi_thread")]
async fn clients_of_the_2025_era_are_served_by_any_replica() {
    let c = up();
    let ns = c.namespace("era2025");
    apply_ok(c, &ns, ASK_NAME);
    apply_ok(c, &ns, NAP);

    // A held call on one replica, its question answered through the other.
    let (on0, on1) = old_pair(c, &ns, "alice", json!({"elicitation": {}})).await;
    let mut held = on0
        .open("tools/call", json!({"name": "ask-name", "arguments": {}}))
        .await;
    let ask = held.next().await.expect("a question on the held call");
    assert_eq!(ask["method"], "elicitation/create", "{ask}");
    let status = on1
        .answer(
            &ask["id"],
            json!({"action": "accept", "content": {"name": "Ada"}}),
        )
        .await;
    assert_eq!(status, reqwest::StatusCode::ACCEPTED);
    let last = held.next().await.expect("the call's result");
    assert_eq!(last["result"]["content"][0]["text"], "hello Ada", "{last}");

    // notifications/cancelled sent to the other replica ends a held call.
    let mut napping = on0
        .open(
            "tools/call",
            json!({"name": "nap", "arguments": {"wait": "1h"}, "_meta": {"progressToken": 1}}),
        )
        .await;
    napping.next().await.expect("progress");
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": "held"}});
    assert_eq!(
        on1.post(&cancel).send().await.unwrap().status(),
        reqwest::StatusCode::ACCEPTED
    );
    let runs = get_json(c, &ns, "runs");
    let nap = runs["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["spec"]["workflowRef"]["name"] == "nap")
        .expect("the nap Run")["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_owned();
    c.wait_jsonpath(&ns, &format!("run/{nap}"), "{.status.phase}", "Cancelled");

    // 2025-11-25 tasks: created on one replica, followed on the other; bob sees nothing of it.
    let (t0, t1) = old_pair(c, &ns, "alice", json!({"tasks": {}})).await;
    let created = t0
        .result(
            "tools/call",
            json!({"name": "nap", "arguments": {"wait": "1s"}, "task": {}}),
        )
        .await;
    let task = created["task"]["taskId"].as_str().unwrap().to_owned();
    let result = t1.result("tasks/result", json!({"taskId": task})).await;
    assert_eq!(result["content"][0]["text"], "slept 1s");
    let listed = t1.result("tasks/list", json!({})).await;
    assert!(listed.to_string().contains(&task), "{listed}");
    let (b0, _) = old_pair(c, &ns, "bob", json!({"tasks": {}})).await;
    let foreign = b0.error("tasks/get", json!({"taskId": task})).await;
    assert_eq!(foreign["code"], -32602);
    assert!(
        !b0.result("tasks/list", json!({}))
            .await
            .to_string()
            .contains(&task)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn the_official_sdks_call_tools_on_both_operator_replicas() {
    let c = up();
    let ns = c.namespace("sdk");
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let tools = std::fs::read_to_string(root.join("tests/sdk/workflows/tools.yaml")).unwrap();
    apply_ok(
        c,
        &ns,
        &tools.replace("namespace: team-a", &format!("namespace: {ns}")),
    );
    // tests/sdk/run.sh with a URL runs the clients only: the TypeScript SDK 1.x and the Python
    // SDK 1.x (2025 era), the Python SDK 2.x (2026-07-28), each the way run.sh runs them
    // against `runway serve`, against each replica in turn (an SDK sends all its requests to
    // one URL; a session opened on one replica and answered on the other is the test above).
    // The lister is the cluster admin (may list every Run).
    for replica in 0..2 {
        let out = std::process::Command::new(root.join("tests/sdk/run.sh"))
            .env(
                "RUNWAY_URL",
                format!("{}/namespaces/{ns}/mcp", c.base(replica)),
            )
            .env("RUNWAY_TOKEN", token("alice"))
            .env("RUNWAY_LISTER_TOKEN", token("admin"))
            .output()
            .expect("tests/sdk/run.sh runs");
        assert!(
            out.status.success(),
            "SDK clients against replica {replica} failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn kubectl_written_runs_meet_the_schema_and_a_deep_one_stops_no_replica() {
    let c = up();
    let ns = c.namespace("deep");
    apply_ok(c, &ns, NAP);
    let me = json!({"username": "alice", "uid": "alice-uid", "groups": ["devs", "system:authenticated"]});
    let run = |name: &str, spec: Value| {
        let mut spec = spec;
        spec["workflowRef"] = json!({"name": "nap"});
        spec["requestedBy"] = me.clone();
        json!({"apiVersion": "runway.dev/v1alpha1", "kind": "Run",
            "metadata": {"name": name}, "spec": spec})
        .to_string()
    };
    // The API server itself refuses a cancel reason longer than Runway keeps.
    let long = run(
        "long-reason",
        json!({"arguments": {"wait": "1s"}, "cancel": {"reason": "x".repeat(1025)}}),
    );
    let out = c.kubectl_stdin("alice", &["create", "-n", &ns, "-f", "-"], &long);
    assert!(!out.status.success(), "a 1025-character reason was stored");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("spec.cancel.reason"), "{err}");
    // Arguments 200 levels deep, past what a JSON parser reads by default: the API server
    // keeps them, and no replica's cache of every tenant's Runs may choke on them.
    let deep = (0..200).fold(json!(1), |v, _| json!([v]));
    create_as(
        c,
        "alice",
        &ns,
        &run("deep", json!({"arguments": {"wait": "1s", "x": deep}})),
    );
    c.wait_jsonpath(&ns, "run/deep", "{.status.phase}", "Failed");
    // (Read with a JSONPath: the test's own parser would choke on the whole object too.)
    let why = c.admin(&[
        "get",
        "-n",
        &ns,
        "run/deep",
        "-o",
        "jsonpath={.status.conditions[0].message}",
    ]);
    assert!(why.contains("nest too deeply to be read"), "{why}");
    // A replica started now fills its cache (it turns ready) and serves.
    c.start_operator("fresh-after-deep");
    let fresh = Client::new(
        &c.base_of("fresh-after-deep"),
        Some(&token("alice")),
        &format!("/namespaces/{ns}/mcp"),
    );
    let id = task_id(&fresh.call("nap", json!({"wait": "1s"})).await);
    assert_eq!(
        fresh.await_status(&id, "completed").await["status"],
        "completed"
    );
    c.stop("fresh-after-deep");
}

const FORGED_LEAF: &str = r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: forged-leaf }
spec:
  result:
    content: [ { type: text, text: "forged" } ]
    structuredContent: { count: 99 }
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_child_run_created_ahead_with_kubectl_is_never_adopted() {
    let c = up();
    let ns = c.namespace("planted");
    apply_ok(c, &ns, &format!("{WAVES}\n---\n{FORGED_LEAF}"));
    let alice = mcp(c, 0, "alice", &ns);
    let id = task_id(&alice.call("waves", json!({"waits": []})).await);
    alice.await_status(&id, "input_required").await;
    let uid = c.admin(&[
        "get",
        &format!("run/{id}"),
        "-n",
        &ns,
        "-o",
        "jsonpath={.metadata.uid}",
    ]);
    // Someone who may create Runs knows the child's name and the parent's uid, and gets there
    // first with a Run whose result is theirs, dressed with every marker a child has.
    let child = format!("{id}-child-1");
    let planted = json!({"apiVersion": "runway.dev/v1alpha1", "kind": "Run",
        "metadata": {"name": child,
            "labels": {"runway.dev/parent": id, "runway.dev/root": uid},
            "annotations": {"runway.dev/parent-uid": uid, "runway.dev/depth": "1",
                "runway.dev/lineage": "waves", "runway.dev/mark": "forged"}},
        "spec": {"workflowRef": {"name": "forged-leaf"},
            "requestedBy": {"username": "alice", "uid": "alice-uid", "groups": ["devs", "system:authenticated"]}}});
    create_as(c, "alice", &ns, &planted.to_string());
    c.wait_jsonpath(&ns, &format!("run/{child}"), "{.status.phase}", "Succeeded");
    alice
        .update(&id, json!({"ask.ok": {"action": "accept", "content": {}}}))
        .await
        .assert_complete();
    c.wait_jsonpath(&ns, &format!("run/{id}"), "{.status.phase}", "Failed");
    let message = c.admin(&[
        "get",
        &format!("run/{id}"),
        "-n",
        &ns,
        "-o",
        r#"jsonpath={.status.steps[?(@.name=="child")].message}"#,
    ]);
    assert!(message.contains("is not this step's child"), "{message}");
    let result = alice.get(&id).await.result().clone();
    assert_ne!(
        result["result"]["structuredContent"]["count"], 99,
        "{result}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_run_dressed_as_a_schedules_does_not_stop_it_on_the_cluster() {
    let c = up();
    let ns = c.namespace("sched-forged");
    apply_ok(c, &ns, SCHEDULED);
    // Anyone who may create Runs can write a schedule's label and a time; dated 2999, such a
    // Run would hold a schedule that believed it until then.
    let forged = json!({"apiVersion": "runway.dev/v1alpha1", "kind": "Run",
        "metadata": {"name": "tick-forged",
            "labels": {"runway.dev/workflow": "tick", "runway.dev/schedule": "often"},
            "annotations": {"runway.dev/scheduled-for": "2999-01-01T00:00:00Z"}},
        "spec": {"workflowRef": {"name": "tick"},
            "requestedBy": {"username": "alice", "uid": "alice-uid", "groups": ["devs", "system:authenticated"]}}});
    create_as(c, "alice", &ns, &forged.to_string());
    // The schedule goes on: three of its own Runs (every two seconds) after the forged one.
    let deadline = std::time::Instant::now() + support::harness::PATIENCE;
    let started = loop {
        let out = c.admin(&[
            "get",
            "runs",
            "-n",
            &ns,
            "-l",
            "runway.dev/schedule=often",
            "-o",
            "name",
        ]);
        let started = out.lines().filter(|l| !l.ends_with("/tick-forged")).count();
        if started >= 3 || std::time::Instant::now() > deadline {
            break started;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    };
    assert!(started >= 3, "the schedule stopped at {started} runs");
    let who = c.admin(&[
        "get",
        "run/tick-forged",
        "-n",
        &ns,
        "-o",
        "jsonpath={.spec.requestedBy.username}",
    ]);
    assert_eq!(who, "alice", "the forged Run is still there, as alice's");
}

const GATED_BUILD: &str = r#"
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: gated-build }
spec:
  steps:
    - name: ask
      input:
        requests:
          - name: go
            message: "Build?"
            requestedSchema: { type: object, properties: {} }
    - name: compile
      job:
        backoffLimit: 0
        template:
          spec:
            restartPolicy: Never
            containers:
              - name: main
                image: busybox:1.36
                command: [sh, -c, "echo done"]
  result:
    content: [ { type: text, text: "built {{ steps.compile.output.artifacts }}" } ]
"#;

#[tokio::test(flavor = "multi_thread")]
async fn a_job_planted_ahead_with_kubectl_is_never_adopted() {
    let c = up();
    let ns = c.namespace("planted-job");
    apply_ok(c, &ns, GATED_BUILD);
    let alice = mcp(c, 0, "alice", &ns);
    let id = task_id(&alice.call("gated-build", json!({})).await);
    alice.await_status(&id, "input_required").await;
    let uid = c.admin(&[
        "get",
        &format!("run/{id}"),
        "-n",
        &ns,
        "-o",
        "jsonpath={.metadata.uid}",
    ]);
    // Someone who may create Jobs knows the step's Job name and the Run's uid, and gets there
    // first: the Job names the Run as its controller and carries a guessed seal.
    let job = format!("{id}-compile-1");
    let planted = json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": job,
            "labels": {"runway.dev/run": id, "runway.dev/step": "compile"},
            "annotations": {"runway.dev/mark": "forged"},
            "ownerReferences": [{"apiVersion": "runway.dev/v1alpha1", "kind": "Run",
                "name": id, "uid": uid, "controller": true}]},
        "spec": {"backoffLimit": 0, "template": {"spec": {"restartPolicy": "Never",
            "containers": [{"name": "main", "image": "busybox:1.36"}]}}}});
    create_as(c, "admin", &ns, &planted.to_string());
    finish_pod(c, &ns, &job, r#"{"artifacts": 99}"#);
    c.wait_jsonpath(&ns, &format!("job/{job}"), "{.status.succeeded}", "1");
    alice
        .update(&id, json!({"ask.go": {"action": "accept", "content": {}}}))
        .await
        .assert_complete();
    c.wait_jsonpath(&ns, &format!("run/{id}"), "{.status.phase}", "Failed");
    let message = c.admin(&[
        "get",
        &format!("run/{id}"),
        "-n",
        &ns,
        "-o",
        r#"jsonpath={.status.steps[?(@.name=="compile")].message}"#,
    ]);
    assert!(message.contains("not created by Runway"), "{message}");
    let task = alice.get(&id).await.result().clone();
    assert!(
        !task.to_string().contains("built 99"),
        "the planted Job's output reached the task: {task}"
    );
}

const BUILD_ITEMS: &str = r#"
apiVersion: v1
kind: Secret
metadata: { name: db }
stringData: { password: s3cret-value }
---
apiVersion: runway.dev/v1alpha1
kind: Workflow
metadata: { name: build-items }
spec:
  tool:
    inputSchema:
      type: object
      properties: { targets: { type: array, items: { type: string } } }
      required: [targets]
  steps:
    - name: compile
      forEach: { items: "{{ args.targets }}" }
      job:
        backoffLimit: 0
        template:
          spec:
            restartPolicy: Never
            containers:
              - name: main
                image: busybox:1.36
                env:
                  - name: DB_PASSWORD
                    valueFrom: { secretKeyRef: { name: db, key: password } }
                command: [sh, -c, "echo \"$RUNWAY_ITEM\" > /dev/termination-log"]
  result:
    content: [ { type: text, text: "built" } ]
"#;

#[tokio::test(flavor = "multi_thread")]
async fn an_item_that_names_a_variable_reaches_the_pod_as_it_was_written() {
    let c = up();
    let ns = c.namespace("job-items");
    apply_ok(c, &ns, BUILD_ITEMS);
    let alice = mcp(c, 0, "alice", &ns);
    // The kubelet expands `$(NAME)` in env values with the container's earlier variables and
    // reads `$$` as `$`: an item written either way would hand the caller the Secret behind
    // DB_PASSWORD.
    let written = "$(DB_PASSWORD) $$(DB_PASSWORD)";
    let id = task_id(
        &alice
            .call("build-items", json!({"targets": [written]}))
            .await,
    );
    let job = format!("{id}-compile-0-1");
    c.wait_jsonpath(&ns, &format!("job/{job}"), "{.status.active}", "1");
    let env = get_json(c, &ns, &format!("job/{job}"))["spec"]["template"]["spec"]["containers"][0]
        ["env"]
        .clone();
    let item = env
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "RUNWAY_ITEM")
        .unwrap_or_else(|| panic!("no RUNWAY_ITEM in {env}"));
    // `$$` is the kubelet's escape for a literal `$`: the container sees the item verbatim.
    assert_eq!(item["value"], "$$(DB_PASSWORD) $$$$(DB_PASSWORD)", "{env}");
    // The item comes after DB_PASSWORD, which is where an expansion could reach it.
    let names: Vec<&str> = env
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["name"].as_str())
        .collect();
    assert_eq!(names, ["DB_PASSWORD", "RUNWAY_ITEM", "RUNWAY_INDEX"]);
    finish_pod(c, &ns, &job, written);
    alice.await_status(&id, "completed").await;
}

/// The commands of the `bash` blocks under `heading` in `doc`, as a person pastes them: a
/// backslash continues a line, a `  #` starts a comment.
fn recipes(doc: &str, heading: &str) -> Vec<String> {
    let text = std::fs::read_to_string(cluster::root().join(doc)).unwrap();
    let section = text
        .split(heading)
        .nth(1)
        .expect("the heading is in the doc");
    let section = section.split("\n## ").next().unwrap();
    let mut out = vec![];
    for block in section.split("```bash\n").skip(1) {
        let block = block.split("```").next().unwrap();
        let mut line = String::new();
        for l in block.lines() {
            let l = l.split("  #").next().unwrap().trim_end();
            match l.strip_suffix('\\') {
                Some(part) => line.push_str(part),
                None => {
                    line.push_str(l);
                    if !line.trim().is_empty() {
                        out.push(line.trim().to_owned());
                    }
                    line.clear();
                }
            }
        }
    }
    out
}

/// Run a documented command as `user` (their kubeconfig, `$USER`), in `ns` for `team-a`.
fn paste(c: &Cluster, user: &str, ns: &str, command: &str) -> String {
    let command = command.replace("team-a", ns);
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(&command)
        .current_dir(cluster::root())
        .env("KUBECONFIG", c.kubeconfig(user))
        .env("USER", user)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{command}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_kubectl_recipes_of_docs_kubernetes_run_as_written() {
    let c = up();
    let mut b = [0u8; 4];
    getrandom::fill(&mut b).unwrap();
    let ns = format!("recipes-{}", data_encoding::HEXLOWER.encode(&b));
    c.admin(&["create", "namespace", &ns]);
    c.admin(&["create", "serviceaccount", "agent", "-n", &ns]);
    // §4: the tenant's bindings, and nothing else, in a namespace of its own.
    let grants = recipes("docs/kubernetes.md", "## 4. Grant a tenant access");
    assert_eq!(grants.len(), 3, "{grants:?}");
    for g in &grants {
        paste(c, "admin", &ns, g);
    }
    // §5: the example, seen through kubectl.
    let follow = recipes("docs/kubernetes.md", "## 5. Follow Runs with kubectl");
    let line = |needle: &str| {
        follow
            .iter()
            .find(|l| l.contains(needle))
            .unwrap_or_else(|| panic!("no {needle} in {follow:?}"))
            .clone()
    };
    paste(
        c,
        "admin",
        &ns,
        &line("kubectl apply -f examples/approval.yaml"),
    );
    c.wait_ready(&ns, &["approve-deploy"]);
    let wf = paste(c, "admin", &ns, &line("kubectl get wf"));
    assert!(
        wf.contains("TOOL") && wf.contains("READY") && wf.contains("True"),
        "{wf}"
    );
    // The agent calls the tool on `POST /mcp`, its own namespace, with a token for Runway.
    let token = c.admin(&[
        "create",
        "token",
        "agent",
        "-n",
        &ns,
        &format!("--audience={AUDIENCE}"),
    ]);
    let agent = Client::new(&c.base(0), Some(token.trim()), "/mcp");
    let id = task_id(
        &agent
            .call("approve-deploy", json!({"service": "api"}))
            .await,
    );
    agent.await_status(&id, "input_required").await;
    let run = |l: String, id: &str| l.replace("approve-deploy-<id>", id);
    let described = paste(c, "admin", &ns, &run(line("kubectl describe run"), &id));
    assert!(described.contains("InputRequested"), "{described}");
    // carol (ops) answers with kubectl, as herself.
    paste(c, "carol", &ns, &run(line("\"inputResponses\""), &id));
    paste(
        c,
        "admin",
        &ns,
        &run(line("kubectl wait --for=jsonpath"), &id),
    );
    // The replica serving MCP reads its own cache, which may be a moment behind the API server
    // kubectl waited on: follow the task there until it shows the end.
    let done = agent.await_status(&id, "completed").await;
    assert_eq!(done["status"], "completed", "{done}");
    let answered = c.admin(&[
        "get",
        &format!("run/{id}"),
        "-n",
        &ns,
        "-o",
        "jsonpath={.spec.inputResponses.approval\\.decision.answeredBy}",
    ]);
    assert_eq!(answered, "carol");
    // The cancel recipe, on a Run still working: carol may, with runway-approver.
    let id = task_id(
        &agent
            .call("approve-deploy", json!({"service": "web"}))
            .await,
    );
    agent.await_status(&id, "input_required").await;
    paste(c, "carol", &ns, &run(line("\"cancel\""), &id));
    agent.await_status(&id, "cancelled").await;
}

/// Starting a control plane removes the etcd data that earlier, finished runs left under
/// `target/e2e`, and keeps their logs and everything of a run still going.
#[test]
fn a_finished_runs_etcd_data_is_removed_and_its_logs_kept() {
    let parent = support::harness::TempDir::new();
    let mut exited = std::process::Command::new("true").spawn().unwrap();
    exited.wait().unwrap();
    let finished = parent.path().join(format!("cluster-{}", exited.id()));
    let running = parent
        .path()
        .join(format!("cluster-{}", std::process::id()));
    for dir in [&finished, &running] {
        std::fs::create_dir_all(dir.join("etcd/member")).unwrap();
        std::fs::write(dir.join("kube-apiserver.log"), "log").unwrap();
    }
    let other = parent.path().join("image");
    std::fs::create_dir_all(other.join("etcd")).unwrap();

    cluster::prune_finished(parent.path());

    assert!(!finished.join("etcd").exists());
    assert!(finished.join("kube-apiserver.log").is_file());
    assert!(running.join("etcd/member").is_dir());
    assert!(other.join("etcd").is_dir());
}
