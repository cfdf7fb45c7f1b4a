//! The Kubernetes wiring against an in-memory API server, asserting the requests sent:
//! TokenReview and SubjectAccessReview (and their caches), Jobs, Events, the Lease, Workflow
//! status, garbage collection — and the whole operator serving MCP on top.

use crate::support;

use std::time::{Duration, Instant};

use runway::auth::kube::KubeAuth;
use runway::auth::{Authenticator, Authorizer, Resource, Verb};
use runway::engine::{Action, Effect, Outcome};
use runway::steps::Executor;
use runway::steps::job::JobExecutor;
use runway::telemetry::Metrics;
use serde_json::{Value, json};
use support::fakeapi::FakeApi;
use support::mcp::{Client, OneConnection};
use support::process::free_port;
use tokio_util::sync::CancellationToken;

const TOKENS: &str = "authentication.k8s.io/v1/tokenreviews";
const ACCESS: &str = "authorization.k8s.io/v1/subjectaccessreviews";
const RUNS: &str = "runway.dev/v1alpha1/runs";
const JOBS: &str = "batch/v1/jobs";

fn reviews(api: &FakeApi) {
    api.on_review(TOKENS, |body| match body["spec"]["token"].as_str() {
        Some("agent-token") => json!({"authenticated": true, "audiences": ["runway"], "user": {
            "username": "system:serviceaccount:team-a:agent", "uid": "u-1", "groups": ["system:serviceaccounts"]}}),
        // Valid, but minted for another service.
        Some("vault-token") => json!({"authenticated": true, "audiences": ["vault"], "user": {
            "username": "system:serviceaccount:team-a:agent", "uid": "u-1"}}),
        Some("nameless-token") => json!({"authenticated": true, "audiences": ["runway"], "user": {
            "username": ""}}),
        Some("scoped-token") => json!({"authenticated": true, "audiences": ["runway"], "user": {
            "username": "carl", "uid": "u-2", "extra": {"scopes": ["runs:read"]}}}),
        Some("dana-token") => json!({"authenticated": true, "audiences": ["runway"], "user": {
            "username": "dana", "uid": "u-3"}}),
        _ => json!({"authenticated": false, "error": "invalid token"}),
    });
    api.on_review(ACCESS, |body| {
        let attrs = &body["spec"]["resourceAttributes"];
        let allowed = attrs["namespace"] == "team-a" && attrs["group"] == "runway.dev";
        json!({"allowed": allowed})
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_is_trusted_until_its_review_expires_wherever_it_is_found() {
    let api = FakeApi::start().await;
    reviews(&api);
    let ttl = Duration::from_secs(60);
    let auth = std::sync::Arc::new(KubeAuth::new(
        api.client(),
        vec!["runway".into()],
        ttl,
        Metrics::new(),
    ));
    let asked = Instant::now();
    let (_, reviewed) = auth.authenticate_until(Some("agent-token")).await.unwrap();
    let reviewed = reviewed.expect("a review's answer expires");
    assert!(reviewed >= asked + ttl && reviewed <= Instant::now() + ttl);
    // From this thread's memo, and from the shared cache on a thread that never saw the
    // token: the same answer, the same expiry — a later lookup does not extend it.
    let (_, remembered) = auth.authenticate_until(Some("agent-token")).await.unwrap();
    let elsewhere = {
        let auth = std::sync::Arc::clone(&auth);
        std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(auth.authenticate_until(Some("agent-token")))
                .unwrap()
                .1
        })
        .join()
        .unwrap()
    };
    assert_eq!(remembered, Some(reviewed));
    assert_eq!(elsewhere, Some(reviewed));
    assert_eq!(api.requests("POST", "tokenreviews").len(), 1);
}

#[tokio::test]
async fn token_and_access_reviews_are_sent_and_cached() {
    let api = FakeApi::start().await;
    reviews(&api);
    let metrics = Metrics::new();
    let auth = KubeAuth::new(
        api.client(),
        vec!["runway".into()],
        Duration::from_secs(60),
        metrics.clone(),
    );
    let id = auth.authenticate(Some("agent-token")).await.unwrap();
    assert_eq!(id.principal.username, "system:serviceaccount:team-a:agent");
    assert_eq!(
        id.namespace.as_deref(),
        Some("team-a"),
        "a ServiceAccount's /mcp is its own namespace"
    );
    auth.authenticate(Some("agent-token")).await.unwrap();
    let sent = api.requests("POST", "tokenreviews");
    assert_eq!(sent.len(), 1, "the second authentication is cached");
    assert_eq!(
        sent[0].body["spec"],
        json!({"token": "agent-token", "audiences": ["runway"]})
    );
    assert!(auth.authenticate(Some("wrong")).await.is_err());
    assert!(auth.authenticate(None).await.is_err());
    assert!(
        auth.authenticate(Some("vault-token")).await.is_err(),
        "a token for another audience"
    );
    assert!(
        auth.authenticate(Some("nameless-token")).await.is_err(),
        "an empty user name"
    );

    assert!(
        auth.allowed(&id, Verb::Create, Resource::Runs, "team-a")
            .await
            .unwrap()
    );
    assert!(
        auth.allowed(&id, Verb::Create, Resource::Runs, "team-a")
            .await
            .unwrap()
    );
    assert!(
        !auth
            .allowed(&id, Verb::Create, Resource::Runs, "team-b")
            .await
            .unwrap()
    );
    let sars = api.requests("POST", "subjectaccessreviews");
    assert_eq!(sars.len(), 2, "one review per distinct question");
    assert_eq!(
        sars[0].body["spec"],
        json!({"user": "system:serviceaccount:team-a:agent", "uid": "u-1", "groups": ["system:serviceaccounts"],
               "resourceAttributes": {"group": "runway.dev", "resource": "runs", "verb": "create", "namespace": "team-a"}})
    );
    // user.extra reaches the access review, and is part of what the answer is cached for.
    let scoped = auth.authenticate(Some("scoped-token")).await.unwrap();
    auth.allowed(&scoped, Verb::Get, Resource::Runs, "team-a")
        .await
        .unwrap();
    let mut unscoped = (*scoped).clone();
    unscoped.extra.clear();
    auth.allowed(&unscoped, Verb::Get, Resource::Runs, "team-a")
        .await
        .unwrap();
    let sars = api.requests("POST", "subjectaccessreviews");
    assert_eq!(sars.len(), 4, "with and without extra are two questions");
    assert_eq!(
        sars[2].body["spec"]["extra"],
        json!({"scopes": ["runs:read"]})
    );
    let text = metrics.encode();
    assert!(
        text.contains("runway_auth_cache_requests_total{cache=\"token\",result=\"hit\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("runway_auth_cache_requests_total{cache=\"access\",result=\"hit\"} 1"),
        "{text}"
    );
}

fn a_run(api: &FakeApi) -> runway::api::Run {
    let v = api.put(RUNS, json!({"apiVersion": "runway.dev/v1alpha1", "kind": "Run",
        "metadata": {"name": "deploy-abc", "namespace": "team-a"}, "spec": {"workflowRef": {"name": "deploy"}}}));
    serde_json::from_value(v).unwrap()
}

/// The cleanup of step `step` of the Run `a_run` makes: delete its Job `deploy-abc-build-1`, or
/// cancel its child Run `deploy-abc-call-1`.
fn cleanup_effect(step: &str, job: bool) -> Effect {
    Effect {
        step: step.into(),
        attempt: 0,
        deadline: Some(jiff::Timestamp::now() + jiff::SignedDuration::from_secs(120)),
        idempotency_key: format!("uid/{step}"),
        action: Action::Cleanup(runway::api::Cleanup {
            step: step.into(),
            cancel_upstream_task: None,
            delete_job: job.then(|| "deploy-abc-build-1".into()),
            cancel_run: (!job).then(|| "deploy-abc-call-1".into()),
        }),
    }
}

fn job_effect(deadline_secs: i64) -> Effect {
    Effect {
        step: "build".into(),
        attempt: 1,
        deadline: Some(jiff::Timestamp::now() + jiff::SignedDuration::from_secs(deadline_secs)),
        idempotency_key: "uid/build".into(),
        action: Action::Job {
            step: serde_json::from_value(json!({"template": {"spec": {"containers": [{"name": "main", "image": "busybox"}]}}})).unwrap(),
            job_name: "deploy-abc-build-1".into(),
            env: vec![],
        },
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_steps_create_an_owned_job_find_it_after_a_restart_and_delete_it_on_cleanup() {
    let api = FakeApi::start().await;
    let run = a_run(&api);
    let effect = job_effect(120);
    let exec = JobExecutor::new(api.client(), test_marks());
    let pending = {
        let (run, effect) = (run.clone(), effect.clone());
        tokio::spawn(async move { exec.execute(&run, &effect, CancellationToken::new()).await })
    };
    api.wait_until("job created", |a| {
        a.get(JOBS, "team-a", "deploy-abc-build-1").is_some()
    })
    .await;
    let job = api
        .requests("POST", "/namespaces/team-a/jobs")
        .pop()
        .unwrap()
        .body;
    assert_eq!(
        job["metadata"]["ownerReferences"],
        json!([{"apiVersion": "runway.dev/v1alpha1", "kind": "Run", "name": "deploy-abc",
                "uid": run.metadata.uid.clone().unwrap(), "controller": true, "blockOwnerDeletion": true}])
    );
    assert_eq!(
        job["metadata"]["labels"],
        json!({"runway.dev/run": "deploy-abc", "runway.dev/step": "build"})
    );
    assert_eq!(job["spec"]["backoffLimit"], 0);
    let deadline = job["spec"]["activeDeadlineSeconds"].as_i64().unwrap();
    assert!((100..=120).contains(&deadline), "{deadline}");
    assert_eq!(job["spec"]["template"]["spec"]["restartPolicy"], "Never");

    // the container finishes with a JSON termination message (its pod `Succeeded`, as the
    // kubelet says of a pod whose containers all exited 0); the Job completes. A pod with the
    // Job's label that the Job does not control is never read.
    let job_uid = api.get(JOBS, "team-a", "deploy-abc-build-1").unwrap()["metadata"]["uid"].clone();
    api.put("v1/pods", json!({"metadata": {"name": "deploy-abc-build-1-fake", "namespace": "team-a",
        "labels": {"batch.kubernetes.io/job-name": "deploy-abc-build-1"}},
        "status": {"phase": "Succeeded", "containerStatuses": [{"name": "main", "state": {"terminated": {"exitCode": 0, "message": "{\"image\":\"evil\"}"}}}]}}));
    api.put("v1/pods", json!({"metadata": {"name": "deploy-abc-build-1-x", "namespace": "team-a",
        "labels": {"batch.kubernetes.io/job-name": "deploy-abc-build-1"},
        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "deploy-abc-build-1",
            "uid": job_uid, "controller": true}]},
        "status": {"phase": "Succeeded", "containerStatuses": [{"name": "main", "state": {"terminated": {"exitCode": 0, "message": "{\"image\":\"api:v2\"}"}}}]}}));
    let mut done = api.get(JOBS, "team-a", "deploy-abc-build-1").unwrap();
    done["status"] = json!({"conditions": [{"type": "Complete", "status": "True"}]});
    api.put(JOBS, done);
    let outcome = pending.await.unwrap();
    assert_eq!(
        outcome,
        Some(Outcome::Succeeded(json!({"image": "api:v2"})))
    );

    // a restarted controller runs the same attempt again: it finds the Job, creates none
    let again = JobExecutor::new(api.client(), test_marks())
        .execute(&run, &effect, CancellationToken::new())
        .await;
    assert_eq!(again, Some(Outcome::Succeeded(json!({"image": "api:v2"}))));
    assert_eq!(api.requests("POST", "/namespaces/team-a/jobs").len(), 1);
    // ... also when it comes back after the attempt's deadline: the Job finished in time, and
    // its verdict stands rather than a timeout (which a retry would run again).
    let late = Effect {
        deadline: Some(jiff::Timestamp::now() - jiff::SignedDuration::from_secs(5)),
        ..effect.clone()
    };
    let again = JobExecutor::new(api.client(), test_marks())
        .execute(&run, &late, CancellationToken::new())
        .await;
    assert_eq!(again, Some(Outcome::Succeeded(json!({"image": "api:v2"}))));
    assert_eq!(api.requests("POST", "/namespaces/team-a/jobs").len(), 1);
    // A Job still running at that point has timed out.
    let mut unfinished = late.clone();
    if let Action::Job { job_name, .. } = &mut unfinished.action {
        *job_name = "deploy-abc-build-2".into();
    }
    let out = JobExecutor::new(api.client(), test_marks())
        .execute(&run, &unfinished, CancellationToken::new())
        .await;
    let Some(Outcome::Failed { class, message, .. }) = out else {
        panic!("timed out: {out:?}")
    };
    assert_eq!(class, runway::api::ErrorClass::Timeout);
    assert_eq!(message, "job deploy-abc-build-2 timed out");

    // cleanup deletes it with background propagation, through an API server that stumbles
    // twice first (a Job left behind would run on until its Run is deleted)
    let deletes = |a: &FakeApi| {
        a.requests("DELETE", "/namespaces/team-a/jobs/deploy-abc-build-1")
            .len()
    };
    api.fail_next(2, 500, |r| r.method == "DELETE");
    let cleanup = cleanup_effect("build", true);
    let ours = api.get(JOBS, "team-a", "deploy-abc-build-1").unwrap();
    let out = JobExecutor::new(api.client(), test_marks())
        .execute(&run, &cleanup, CancellationToken::new())
        .await;
    assert!(matches!(out, Some(Outcome::Succeeded(_))), "{out:?}");
    assert_eq!(deletes(&api), 3, "two refused, the third deletes");
    let del = api
        .requests("DELETE", "/namespaces/team-a/jobs/deploy-abc-build-1")
        .pop()
        .unwrap();
    assert_eq!(del.body["propagationPolicy"], "Background");
    // ... that Job and no other one put in its place meanwhile.
    assert_eq!(del.body["preconditions"]["uid"], ours["metadata"]["uid"]);
    assert!(api.get(JOBS, "team-a", "deploy-abc-build-1").is_none());

    // A Job already gone counts as deleted; a refusal that will not pass fails the cleanup at
    // once, naming it (the engine notes it on the step).
    let again = JobExecutor::new(api.client(), test_marks());
    let out = again
        .execute(&run, &cleanup, CancellationToken::new())
        .await;
    assert!(matches!(out, Some(Outcome::Succeeded(_))), "{out:?}");
    assert_eq!(deletes(&api), 3, "nothing to delete");
    api.put(JOBS, ours);
    api.fail_next(1, 403, |r| r.method == "DELETE");
    let out = again
        .execute(&run, &cleanup, CancellationToken::new())
        .await;
    let Some(Outcome::Failed { message, .. }) = out else {
        panic!("the cleanup fails: {out:?}")
    };
    assert!(
        message.starts_with("deleting job deploy-abc-build-1: "),
        "{message}"
    );
    assert_eq!(deletes(&api), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_watch_is_watched_again_and_a_deleted_job_fails_the_attempt() {
    let api = FakeApi::start().await;
    let run = a_run(&api);
    let exec = std::sync::Arc::new(JobExecutor::new(api.client(), test_marks()));
    // The API server stumbles twice as the Job is watched (its list and its watch): the step
    // waits on instead of failing, which would delete a Job that runs on fine.
    api.fail_next(2, 500, |r| {
        r.method == "GET" && r.path.ends_with("/jobs") && r.query.contains_key("fieldSelector")
    });
    let pending = {
        let (run, effect, exec) = (run.clone(), job_effect(60), exec.clone());
        tokio::spawn(async move { exec.execute(&run, &effect, CancellationToken::new()).await })
    };
    api.wait_until("the watch failed twice and was started again", |a| {
        a.requests("GET", "/namespaces/team-a/jobs")
            .iter()
            .filter(|r| r.path.ends_with("/jobs") && r.query.contains_key("fieldSelector"))
            .count()
            >= 3
    })
    .await;
    let mut done = api.get(JOBS, "team-a", "deploy-abc-build-1").unwrap();
    done["status"] = json!({"conditions": [{"type": "Complete", "status": "True"}]});
    api.put(JOBS, done);
    assert_eq!(
        pending.await.unwrap(),
        Some(Outcome::Succeeded(json!(null)))
    );

    // A Job deleted by someone else will never finish: the attempt fails at once, saying so.
    let other = Effect {
        attempt: 2,
        action: Action::Job {
            step: serde_json::from_value(json!({"template": {"spec": {"containers": [{"name": "main", "image": "busybox"}]}}})).unwrap(),
            job_name: "deploy-abc-build-2".into(),
            env: vec![],
        },
        ..job_effect(60)
    };
    let pending = {
        let (run, exec) = (run.clone(), exec.clone());
        tokio::spawn(async move { exec.execute(&run, &other, CancellationToken::new()).await })
    };
    api.wait_until("second job created", |a| {
        a.get(JOBS, "team-a", "deploy-abc-build-2").is_some()
    })
    .await;
    let jobs: kube::Api<k8s_openapi::api::batch::v1::Job> =
        kube::Api::namespaced(api.client(), "team-a");
    jobs.delete("deploy-abc-build-2", &Default::default())
        .await
        .unwrap();
    let Some(Outcome::Failed { message, .. }) = pending.await.unwrap() else {
        panic!("the attempt fails")
    };
    assert!(message.contains("deleted before it finished"), "{message}");

    // A refusal that will not pass (the operator lost its rights to watch Jobs) fails the
    // attempt at once, saying why, and leaves the Job alone.
    api.fail_next(1, 403, |r| {
        r.method == "GET" && r.path.ends_with("/jobs") && r.query.contains_key("fieldSelector")
    });
    let third = Effect {
        attempt: 3,
        action: Action::Job {
            step: serde_json::from_value(json!({"template": {"spec": {"containers": [{"name": "main", "image": "busybox"}]}}})).unwrap(),
            job_name: "deploy-abc-build-3".into(),
            env: vec![],
        },
        ..job_effect(60)
    };
    let out = exec.execute(&run, &third, CancellationToken::new()).await;
    let Some(Outcome::Failed { class, message, .. }) = out else {
        panic!("the attempt fails: {out:?}")
    };
    assert_eq!(class, runway::api::ErrorClass::ClientError);
    assert!(
        message.contains("reading job deploy-abc-build-3"),
        "{message}"
    );
    assert!(api.get(JOBS, "team-a", "deploy-abc-build-3").is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_job_fails_the_attempt_and_cancellation_abandons_the_wait() {
    let api = FakeApi::start().await;
    let run = a_run(&api);
    let exec = std::sync::Arc::new(JobExecutor::new(api.client(), test_marks()));
    let effect = job_effect(60);
    let pending = {
        let (run, effect, exec) = (run.clone(), effect.clone(), exec.clone());
        tokio::spawn(async move { exec.execute(&run, &effect, CancellationToken::new()).await })
    };
    api.wait_until("job created", |a| {
        a.get(JOBS, "team-a", "deploy-abc-build-1").is_some()
    })
    .await;
    let mut failed = api.get(JOBS, "team-a", "deploy-abc-build-1").unwrap();
    failed["status"] = json!({"conditions": [{"type": "Failed", "status": "True", "message": "BackoffLimitExceeded"}]});
    api.put(JOBS, failed);
    let Some(Outcome::Failed { message, .. }) = pending.await.unwrap() else {
        panic!()
    };
    assert!(message.contains("BackoffLimitExceeded"), "{message}");

    let token = CancellationToken::new();
    let second = Effect {
        action: Action::Job {
            step: serde_json::from_value(json!({"template": {"spec": {}}})).unwrap(),
            job_name: "deploy-abc-build-2".into(),
            env: vec![],
        },
        ..effect
    };
    // Once it follows the Job (a list or watch of the Jobs), not while it makes it.
    let follows = |a: &FakeApi| {
        let log = a.log().into_iter();
        log.filter(|r| r.method == "GET" && r.path.ends_with("/jobs"))
            .count()
    };
    let before = follows(&api);
    let pending = {
        let (run, exec, token) = (run.clone(), exec.clone(), token.clone());
        tokio::spawn(async move { exec.execute(&run, &second, token).await })
    };
    api.wait_until("second job followed", |a| follows(a) > before)
        .await;
    token.cancel();
    assert_eq!(
        pending.await.unwrap(),
        None,
        "a cancelled wait reports nothing; the engine queues the delete"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_made_while_its_step_was_stopped_is_reported_for_deletion() {
    let api = FakeApi::start().await;
    let run = a_run(&api);
    let exec = std::sync::Arc::new(JobExecutor::new(api.client(), test_marks()));
    let open = api.hold_next(|r| r.method == "POST" && r.path.ends_with("/jobs"));
    let token = CancellationToken::new();
    let pending = {
        let (run, exec, token) = (run.clone(), exec.clone(), token.clone());
        tokio::spawn(async move { exec.execute(&run, &job_effect(60), token).await })
    };
    api.wait_until("the create sent", |a| {
        !a.requests("POST", "/jobs").is_empty()
    })
    .await;
    token.cancel();
    open.send_replace(true);
    let made = Outcome::Checkpoint {
        upstream_task_id: None,
        job_name: Some("deploy-abc-build-1".into()),
    };
    assert_eq!(pending.await.unwrap(), Some(made));

    // Stopped before it began: nothing is made.
    let second = Effect {
        action: Action::Job {
            step: serde_json::from_value(json!({"template": {"spec": {}}})).unwrap(),
            job_name: "deploy-abc-build-2".into(),
            env: vec![],
        },
        ..job_effect(60)
    };
    let token = CancellationToken::new();
    token.cancel();
    assert_eq!(exec.execute(&run, &second, token).await, None);
    assert!(api.get(JOBS, "team-a", "deploy-abc-build-2").is_none());
    assert!(api.requests("POST", "/jobs").len() == 1, "one Job made");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_an_earlier_run_of_the_name_left_is_waited_out_not_refused() {
    use runway::engine::marks::Sealed;
    let api = FakeApi::start().await;
    let run = a_run(&api);
    let marks = test_marks();
    // An earlier Run of this name, deleted, left its Job for the garbage collector.
    let earlier = "uid-of-an-earlier-run";
    let mark = marks.seal(
        Sealed::Job,
        &["team-a", "deploy-abc-build-1", earlier, "build"],
    );
    api.put(
        JOBS,
        json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "deploy-abc-build-1", "namespace": "team-a",
            "annotations": {"runway.dev/mark": mark},
            "ownerReferences": [{"apiVersion": "runway.dev/v1alpha1", "kind": "Run",
                "name": "deploy-abc", "uid": earlier, "controller": true}]},
        "spec": {"template": {"spec": {"containers": [{"name": "main", "image": "busybox"}]}}}}),
    );
    let follows = |a: &FakeApi| {
        let log = a.log().into_iter();
        log.filter(|r| r.method == "GET" && r.path.ends_with("/jobs"))
            .count()
    };
    let exec = std::sync::Arc::new(JobExecutor::new(api.client(), marks));
    let pending = {
        let (run, exec) = (run.clone(), exec.clone());
        tokio::spawn(async move {
            exec.execute(&run, &job_effect(120), CancellationToken::new())
                .await
        })
    };
    api.wait_until("the earlier job watched", |a| follows(a) > 0)
        .await;
    let jobs: kube::Api<k8s_openapi::api::batch::v1::Job> =
        kube::Api::namespaced(api.client(), "team-a");
    jobs.delete("deploy-abc-build-1", &Default::default())
        .await
        .unwrap();
    let uid = run.metadata.uid.clone().unwrap();
    let mine = |a: &FakeApi| {
        a.get(JOBS, "team-a", "deploy-abc-build-1")
            .is_some_and(|j| j["metadata"]["ownerReferences"][0]["uid"] == uid.as_str())
    };
    api.wait_until("this run's job made", mine).await;
    let mut failed = api.get(JOBS, "team-a", "deploy-abc-build-1").unwrap();
    failed["status"] = json!({"conditions": [{"type": "Failed", "status": "True", "message": "BackoffLimitExceeded"}]});
    api.put(JOBS, failed);
    let Some(Outcome::Failed { message, .. }) = pending.await.unwrap() else {
        panic!("the run's own job is followed")
    };
    assert!(message.contains("BackoffLimitExceeded"), "{message}");
}

#[tokio::test]
async fn of_two_ready_workflows_offering_a_tool_every_replica_calls_the_older() {
    use runway::store::WorkflowSource;
    let api = FakeApi::start().await;
    // For the moment before the validator's verdict on the newer one, both are Ready.
    let ready = |name: &str, tool: &str, created: &str| {
        json!({"apiVersion": "runway.dev/v1alpha1", "kind": "Workflow",
            "metadata": {"name": name, "namespace": "team-a", "generation": 1,
                "creationTimestamp": created},
            "spec": {"tool": {"name": tool}, "steps": []},
            "status": {"observedGeneration": 1, "conditions": [{"type": "Ready", "status": "True",
                "reason": "Valid", "message": "", "lastTransitionTime": created}]}})
    };
    let workflows = "runway.dev/v1alpha1/workflows";
    api.put(workflows, ready("zeta", "first", "2026-01-01T00:00:00Z"));
    api.put(workflows, ready("alpha", "first", "2026-02-01T00:00:00Z"));
    api.put(workflows, ready("omega", "second", "2026-02-01T00:00:00Z"));
    api.put(workflows, ready("beta", "second", "2026-01-01T00:00:00Z"));
    let source = runway::store::kube_sources::KubeWorkflows::start(api.client())
        .await
        .unwrap();
    for (tool, older) in [("first", "zeta"), ("second", "beta")] {
        let chosen = source.tool("team-a", tool).await.expect("offered");
        assert_eq!(chosen.metadata.name.as_deref(), Some(older), "{tool}");
    }
}

/// An API server with the reviews above and Workflow `ask` in team-a: one step waiting for
/// an answer, so that its Runs stay open.
async fn asking() -> FakeApi {
    let api = FakeApi::start().await;
    reviews(&api);
    api.put("runway.dev/v1alpha1/workflows", json!({"apiVersion": "runway.dev/v1alpha1", "kind": "Workflow",
        "metadata": {"name": "ask", "namespace": "team-a"},
        "spec": {"steps": [{"name": "q", "input": {"requests": [{"name": "go", "message": "Go?"}]}}]}}));
    api
}

fn kubeconfig_free_options(lease_ns: &str) -> runway::operator::Options {
    let mut mcp = runway::mcp::Config::new();
    mcp.state_keys = vec![b"0123456789abcdef0123456789abcdef-op".to_vec()];
    runway::operator::Options {
        listen: format!("127.0.0.1:{}", free_port()).parse().unwrap(),
        metrics_listen: format!("127.0.0.1:{}", free_port()).parse().unwrap(),
        leader_election: true,
        lease: runway::operator::lease::Settings::new("runway-controller", lease_ns, "runway-0"),
        audiences: vec![],
        auth_cache_ttl: Duration::from_secs(10),
        workers: 4,
        mcp,
        egress: Default::default(),
        state_key_secret: "runway-state-key".into(),
        archive: Default::default(),
        step_events: true,
    }
}

/// The operator on `api` with `opts`, until the token is cancelled.
fn operator_on(
    api: &FakeApi,
    opts: runway::operator::Options,
) -> (
    CancellationToken,
    tokio::task::JoinHandle<Result<(), runway::operator::OperatorError>>,
) {
    let shutdown = CancellationToken::new();
    let op = tokio::spawn(runway::operator::run_with(
        api.client(),
        opts,
        shutdown.clone(),
    ));
    (shutdown, op)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_access_review_that_fails_for_a_moment_is_an_internal_error_not_an_unknown_task() {
    let api = asking().await;
    let mut opts = kubeconfig_free_options("runway");
    let dir = support::harness::TempDir::new();
    opts.archive.address = Some(format!(
        "sqlite:{}",
        dir.path().join("archive.db").display()
    ));
    let url = format!("http://{}/mcp", opts.listen);
    let listen = opts.listen;
    let (shutdown, op) = operator_on(&api, opts);
    // It listens once the archive is open.
    tokio::time::timeout(support::harness::PATIENCE, async {
        while tokio::net::TcpStream::connect(listen).await.is_err() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the operator listens");
    let agent = Client::new(&url.replace("/mcp", ""), Some("agent-token"), "/mcp");
    let task = support::mcp::until_created(&agent, "ask").await;
    // Two readers of the namespace whose rights were not asked yet (answers are cached).
    let base = url.replace("/mcp", "");
    let carl = Client::new(&base, Some("scoped-token"), "/namespaces/team-a/mcp");
    let at_ns = format!("{base}/namespaces/team-a/mcp");
    let old = support::mcp::Old::connect(&at_ns, "dana-token", json!({"tasks": {}})).await;
    // Each era's tasks/get while the access review fails (a 500: the client itself tries a
    // 503 again), then once it is back.
    let get_review = |r: &support::fakeapi::Recorded| {
        r.path.contains("subjectaccessreviews")
            && r.body["spec"]["resourceAttributes"]["verb"] == "get"
    };
    api.fail_next(1, 500, get_review);
    assert_eq!(carl.get(&task).await.error_code(), -32603);
    assert_eq!(carl.get(&task).await.result()["status"], "input_required");
    // Twice: the first failure sends the request from the fast path to the general one.
    api.fail_next(2, 500, get_review);
    let failed = old.error("tasks/get", json!({"taskId": task})).await;
    assert_eq!(failed["code"], -32603, "{failed}");
    let got = old.result("tasks/get", json!({"taskId": task})).await;
    assert_eq!(got["taskId"], task.as_str());
    // The archive is asked under the same rules (by a caller whose answer is not cached yet).
    let archived = json!({"taskId": "gone-a-while", "archived": true});
    api.fail_next(1, 500, get_review);
    let failed = agent.call("runway_get_run", archived.clone()).await;
    assert_eq!(failed.error_code(), -32603);
    let unknown = agent.call("runway_get_run", archived).await;
    assert_eq!(unknown.error_code(), -32602);
    shutdown.cancel();
    op.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_create_had_no_answer_is_cancelled_when_it_lands() {
    let api = asking().await;
    let opts = kubeconfig_free_options("runway");
    let base = format!("http://{}", opts.listen);
    let (shutdown, op) = operator_on(&api, opts);
    let agent = Client::new(&base, Some("agent-token"), "/mcp");
    support::mcp::until_created(&agent, "ask").await;
    let old = support::mcp::Old::connect(
        &format!("{base}/namespaces/team-a/mcp"),
        "dana-token",
        json!({}),
    )
    .await;
    let creates = |api: &FakeApi| api.requests("POST", "/runs").len();
    // A gateway's timeout, which the client sends again and finds the Run there (409); then an
    // error after the write, which it does not: either way the call fails and its Run stops.
    for (code, era) in [(504, "2026-07-28"), (500, "2025-11-25")] {
        let before = creates(&api);
        api.lose_next_answers(1, code, |r| r.method == "POST" && r.path.ends_with("/runs"));
        let failed = match era {
            "2026-07-28" => agent.call("ask", json!({})).await.error_code(),
            _ => old
                .error("tools/call", json!({"name": "ask", "arguments": {}}))
                .await["code"]
                .as_i64()
                .unwrap(),
        };
        assert_eq!(failed, -32603, "{era}");
        let posted = api.requests("POST", "/runs");
        let name = posted[before].body["metadata"]["name"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(
            api.get(RUNS, "team-a", &name).is_some(),
            "{era}: the run landed"
        );
        api.wait_until("the run nobody was told of is cancelled", |api| {
            api.get(RUNS, "team-a", &name)
                .is_some_and(|r| r["status"]["phase"] == "Cancelled")
        })
        .await;
    }
    // A retry of a task makes a Run under a fresh name the same way.
    let task = support::mcp::until_created(&agent, "ask").await;
    agent.cancel(&task).await;
    api.wait_until("the task ended", |api| {
        api.get(RUNS, "team-a", &task)
            .is_some_and(|r| r["status"]["phase"] == "Cancelled")
    })
    .await;
    let before = creates(&api);
    api.lose_next_answers(1, 504, |r| r.method == "POST" && r.path.ends_with("/runs"));
    let failed = agent
        .call("runway_retry_run", json!({"taskId": task}))
        .await;
    assert_eq!(failed.error_code(), -32603, "{:?}", failed.messages);
    let name = api.requests("POST", "/runs")[before].body["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_ne!(name, task);
    api.wait_until("the retry nobody was told of is cancelled", |api| {
        api.get(RUNS, "team-a", &name)
            .is_some_and(|r| r["status"]["phase"] == "Cancelled")
    })
    .await;
    shutdown.cancel();
    op.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_notification_reads_runs_only_for_who_may_call_and_stops_only_their_own() {
    let api = FakeApi::start().await;
    reviews(&api);
    api.put(
        "runway.dev/v1alpha1/workflows",
        json!({"apiVersion": "runway.dev/v1alpha1", "kind": "Workflow",
        "metadata": {"name": "nap", "namespace": "team-a"},
        "spec": {"steps": [{"name": "sleep", "delay": {"duration": "1h"}}]}}),
    );
    let mut opts = kubeconfig_free_options("runway");
    // Every notification asks for the caller's rights again.
    opts.auth_cache_ttl = Duration::ZERO;
    let base = format!("http://{}", opts.listen);
    let (shutdown, op) = operator_on(&api, opts);
    support::mcp::until_created(&Client::new(&base, Some("agent-token"), "/mcp"), "nap").await;
    let dana = support::mcp::Old::connect(
        &format!("{base}/namespaces/team-a/mcp"),
        "dana-token",
        json!({}),
    )
    .await;
    let mut held = dana
        .open(
            "tools/call",
            json!({"name": "nap", "arguments": {}, "_meta": {"progressToken": 1}}),
        )
        .await;
    held.next().await.unwrap();
    let call = |r: &Value| {
        r["metadata"]["labels"]["runway.dev/call"]
            .as_str()
            .map(str::to_owned)
    };
    let mine = api
        .requests("POST", "/runs")
        .into_iter()
        .find(|r| call(&r.body).is_some())
        .expect("the held call's run")
        .body;
    let name = mine["metadata"]["name"].as_str().unwrap().to_owned();
    // Someone who may edit Runs copies the label onto another's Run.
    let mut theirs = api.get(RUNS, "team-a", &name).unwrap();
    theirs["metadata"]["name"] = json!("someone-elses");
    theirs["metadata"]["uid"] = json!("uid-of-someone-elses");
    theirs["spec"]["requestedBy"] = json!({"username": "erin", "uid": "u-9"});
    api.put(RUNS, theirs);
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": "held", "reason": "user pressed stop"}});
    // Where the caller may not call (team-b), the notification is taken and reads nothing.
    let elsewhere = support::mcp::Old::connect(
        &format!("{base}/namespaces/team-b/mcp"),
        "dana-token",
        json!({}),
    )
    .await;
    assert_eq!(elsewhere.post(&cancel).send().await.unwrap().status(), 202);
    // The access review fails for a moment: the notification, never sent again, is acted on
    // once it answers.
    api.fail_next(1, 500, |r| {
        r.path.contains("subjectaccessreviews")
            && r.body["spec"]["resourceAttributes"]["verb"] == "create"
            && r.body["spec"]["resourceAttributes"]["namespace"] == "team-a"
    });
    assert_eq!(dana.post(&cancel).send().await.unwrap().status(), 202);
    api.wait_until("the caller's own run is cancelled", |api| {
        api.get(RUNS, "team-a", &name)
            .is_some_and(|r| r["spec"]["cancel"]["reason"] == "mcp-request-cancelled")
    })
    .await;
    let searched = |ns: &str| {
        api.requests("GET", &format!("/namespaces/{ns}/runs"))
            .into_iter()
            .filter(|r| r.query.contains_key("labelSelector"))
            .count()
    };
    assert_eq!(
        searched("team-b"),
        0,
        "nothing read for a caller without rights"
    );
    assert!(searched("team-a") > 0);
    let copied = api.get(RUNS, "team-a", "someone-elses").unwrap();
    assert!(copied["spec"]["cancel"].is_null(), "{copied}");
    shutdown.cancel();
    op.await.unwrap().unwrap();
}

/// The replica's `/metrics` text.
async fn scrape(metrics_addr: std::net::SocketAddr) -> String {
    reqwest::get(format!("http://{metrics_addr}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// Token lookups (hits and misses) the replica counted, from its `/metrics`.
async fn token_lookups(metrics_addr: std::net::SocketAddr) -> u64 {
    scrape(metrics_addr)
        .await
        .lines()
        .filter(|l| l.starts_with("runway_auth_cache_requests_total{cache=\"token\""))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<u64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_takes_its_last_token_for_the_same_caller_and_no_other() {
    let api = asking().await;
    let mut opts = kubeconfig_free_options("runway");
    // Answers outlast any pause of a loaded machine between the requests counted.
    opts.auth_cache_ttl = Duration::from_secs(3600);
    let (base, metrics_addr) = (format!("http://{}", opts.listen), opts.metrics_listen);
    let (shutdown, op) = operator_on(&api, opts);
    let agent = Client::new(&base, Some("agent-token"), "/mcp");
    let task = support::mcp::until_created(&agent, "ask").await;
    let mut conn = OneConnection::open(&base).await;
    assert_eq!(conn.send(agent.get_request(&task)).await.status, 200);
    let (reviews, lookups) = (
        api.requests("POST", "tokenreviews").len(),
        token_lookups(metrics_addr).await,
    );
    for _ in 0..3 {
        assert_eq!(conn.send(agent.get_request(&task)).await.status, 200);
    }
    assert_eq!(api.requests("POST", "tokenreviews").len(), reviews);
    assert_eq!(
        token_lookups(metrics_addr).await,
        lookups,
        "the connection's last token answered, not the caches"
    );
    // Other tokens on the same connection are other callers: dana has no namespace of her
    // own, and a token nobody vouches for is refused; the agent is still the agent after them.
    let refused = conn
        .send(agent.sharing(Some("dana-token")).get_request(&task))
        .await;
    assert_eq!(refused.status, 400, "{:?}", refused.messages);
    let stranger = agent.sharing(Some("wrong-token")).get_request(&task);
    assert_eq!(conn.send(stranger).await.status, 401);
    assert_eq!(conn.send(agent.get_request(&task)).await.status, 200);
    // One lookup each: dana's token had taken the agent's place on this connection, and the
    // stranger's was not remembered.
    assert_eq!(token_lookups(metrics_addr).await, lookups + 3);
    assert_eq!(conn.send(agent.get_request(&task)).await.status, 200);
    assert_eq!(token_lookups(metrics_addr).await, lookups + 3);
    shutdown.cancel();
    op.await.unwrap().unwrap();
}

/// The operator on an API server whose review answers expire at once, so that every request
/// and every check of a stream reviews its token again; the agent, and its task of `ask`.
async fn reviewing_every_time() -> (
    FakeApi,
    String,
    CancellationToken,
    tokio::task::JoinHandle<Result<(), runway::operator::OperatorError>>,
    Client,
    String,
) {
    let api = asking().await;
    let mut opts = kubeconfig_free_options("runway");
    opts.auth_cache_ttl = Duration::ZERO;
    let base = format!("http://{}", opts.listen);
    let (shutdown, op) = operator_on(&api, opts);
    let agent = Client::new(&base, Some("agent-token"), "/mcp");
    let task = support::mcp::until_created(&agent, "ask").await;
    (api, base, shutdown, op, agent, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_forgets_its_token_when_the_review_expires() {
    // The connection may keep no answer either.
    let (api, base, shutdown, op, agent, task) = reviewing_every_time().await;
    let mut conn = OneConnection::open(&base).await;
    assert_eq!(conn.send(agent.get_request(&task)).await.status, 200);
    let reviews = api.requests("POST", "tokenreviews").len();
    assert_eq!(conn.send(agent.get_request(&task)).await.status, 200);
    assert_eq!(
        api.requests("POST", "tokenreviews").len(),
        reviews + 1,
        "reviewed again on the same connection"
    );
    api.on_review(
        TOKENS,
        |_| json!({"authenticated": false, "error": "token revoked"}),
    );
    assert_eq!(conn.send(agent.get_request(&task)).await.status, 401);
    shutdown.cancel();
    op.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_stream_stops_once_its_token_no_longer_signs_its_caller_in() {
    let (api, base, shutdown, op, agent, task) = reviewing_every_time().await;
    // Settled first: a change of the controller's would otherwise come after the revocation.
    agent.await_status(&task, "input_required").await;
    let mut listen = agent.listen(&[&task]).await;
    let ack = listen.next().await.unwrap();
    assert_eq!(ack["params"]["notifications"]["taskIds"], json!([task]));
    listen.next().await.expect("the task as it is");
    let dana = support::mcp::Old::connect(
        &format!("{base}/namespaces/team-a/mcp"),
        "dana-token",
        json!({"tasks": {"requests": {"tools": {"call": {}}}}}),
    )
    .await;
    let mut result = dana.open("tasks/result", json!({"taskId": task})).await;
    // Both tokens are revoked; then the Run changes.
    api.on_review(
        TOKENS,
        |_| json!({"authenticated": false, "error": "token revoked"}),
    );
    let mut run = api.get(RUNS, "team-a", &task).unwrap();
    run["metadata"]["labels"]["touched"] = json!("yes");
    api.put(RUNS, run);
    let ended = tokio::time::timeout(support::harness::PATIENCE, async {
        let mut last = None;
        while let Some(m) = listen.next().await {
            assert_ne!(
                m["method"], "notifications/tasks",
                "nothing more shown: {m}"
            );
            last = Some(m);
        }
        last
    })
    .await
    .expect("the listen stream ended");
    // Not as if the task had ended: the client is told to sign in again.
    let ended = ended.unwrap();
    assert_eq!(ended["error"]["code"], -32001, "{ended}");
    let answer = tokio::time::timeout(support::harness::PATIENCE, async {
        loop {
            let m = result.next().await.expect("an answer before the end");
            if m.get("id").is_some() {
                return m;
            }
        }
    })
    .await
    .expect("the tasks/result stream ended");
    assert_eq!(answer["error"]["code"], -32001, "{answer}");
    shutdown.cancel();
    op.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_leads_validates_workflows_serves_mcp_records_events_and_collects_runs() {
    let api = FakeApi::start().await;
    reviews(&api);
    api.put("runway.dev/v1alpha1/workflows", json!({"apiVersion": "runway.dev/v1alpha1", "kind": "Workflow",
        "metadata": {"name": "quick", "namespace": "team-a"},
        "spec": {"execution": {"ttlAfterFinished": "1s"}, "steps": [], "result": {"content": [{"type": "text", "text": "hi {{ args.who }}"}]}}}));
    api.put("runway.dev/v1alpha1/workflows", json!({"apiVersion": "runway.dev/v1alpha1", "kind": "Workflow",
        "metadata": {"name": "broken", "namespace": "team-a"}, "spec": {"steps": [{"name": "a", "delay": {"duration": "soon"}}]}}));
    let opts = kubeconfig_free_options("runway");
    let (mcp_addr, metrics_addr) = (opts.listen, opts.metrics_listen);
    let (shutdown, op) = operator_on(&api, opts);

    // the leader holds the Lease and writes Ready conditions
    api.wait_until("lease held", |a| {
        a.get(
            "coordination.k8s.io/v1/leases",
            "runway",
            "runway-controller",
        )
        .is_some_and(|l| l["spec"]["holderIdentity"] == "runway-0")
    })
    .await;
    let ready = |a: &FakeApi, name: &str| -> Option<Value> {
        a.get("runway.dev/v1alpha1/workflows", "team-a", name)
            .and_then(|w| w["status"]["conditions"].get(0).cloned())
    };
    api.wait_until("workflows validated", |a| {
        ready(a, "quick").is_some() && ready(a, "broken").is_some()
    })
    .await;
    assert_eq!(ready(&api, "quick").unwrap()["status"], "True");
    let broken = ready(&api, "broken").unwrap();
    assert_eq!(
        (broken["status"].as_str(), broken["reason"].as_str()),
        (Some("False"), Some("InvalidDuration"))
    );
    let status_patch = api
        .requests("PATCH", "/namespaces/team-a/workflows/quick/status")
        .pop()
        .unwrap();
    assert_eq!(
        status_patch.query.get("fieldManager").map(String::as_str),
        Some("runway-controller")
    );
    assert_eq!(status_patch.body["status"]["observedGeneration"], 1);

    // a ServiceAccount calls the tool on POST /mcp (its own namespace); the Run is a custom resource
    let agent = Client::new(&format!("http://{mcp_addr}"), Some("agent-token"), "/mcp");
    // tools/list reads the Workflow reflector, which follows the API server's watch; poll the
    // endpoint (as a client would) until the validated Workflow shows up there.
    let deadline = tokio::time::Instant::now() + support::harness::PATIENCE;
    let names = loop {
        let listed = agent.rpc("tools/list", None, json!({})).await;
        let names: Vec<String> = listed.result()["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect();
        if names.iter().any(|n| n == "quick") || tokio::time::Instant::now() > deadline {
            break names;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(names, ["quick", "runway_list_runs"]);
    let created = agent.call("quick", json!({"who": "k8s"})).await;
    let task = created.result()["taskId"].as_str().unwrap().to_owned();
    let posted = api
        .requests("POST", "/namespaces/team-a/runs")
        .pop()
        .unwrap();
    assert_eq!(
        posted.body["spec"]["requestedBy"]["username"],
        "system:serviceaccount:team-a:agent"
    );
    assert_eq!(
        agent.get(&task).await.result()["taskId"],
        task.as_str(),
        "the handle resolves at once"
    );

    // the controller finishes it (its status replaced), records Events, and deletes it after its TTL
    api.wait_until("run deleted after its ttl", |a| {
        !a.requests("DELETE", &format!("/namespaces/team-a/runs/{task}"))
            .is_empty()
    })
    .await;
    let finished = api
        .requests("PUT", &format!("/namespaces/team-a/runs/{task}/status"))
        .into_iter()
        .map(|r| r.body)
        .find(|b| b["status"]["phase"] == "Succeeded")
        .expect("a Succeeded status was written");
    assert_eq!(finished["status"]["result"]["content"][0]["text"], "hi k8s");
    api.wait_until("finished event", |a| {
        a.requests("POST", "/namespaces/team-a/events")
            .iter()
            .any(|r| r.body["reason"] == "Finished")
    })
    .await;
    let event = api
        .requests("POST", "/namespaces/team-a/events")
        .into_iter()
        .find(|r| r.body["reason"] == "Finished")
        .unwrap()
        .body;
    assert_eq!(event["regarding"]["kind"], "Run");
    assert_eq!(event["regarding"]["name"], task.as_str());
    assert_eq!(event["reportingController"], "runway-controller");

    // metrics and health on the metrics port
    let metrics = scrape(metrics_addr).await;
    assert!(
        metrics.contains("runway_mcp_requests_total{method=\"tools/call\",status=\"200\"}"),
        "{metrics}"
    );
    assert!(metrics.contains("runway_queue_depth"), "{metrics}");
    let build = format!(
        "runway_build_info{{version=\"{}\",commit=\"{}\"}} 1",
        env!("CARGO_PKG_VERSION"),
        support::harness::head_commit()
    );
    assert!(metrics.contains(&build), "{build} in {metrics}");
    assert!(
        metrics.contains("runway_runs{phase=\"Succeeded\"}"),
        "{metrics}"
    );
    assert_eq!(
        reqwest::get(format!("http://{metrics_addr}/readyz"))
            .await
            .unwrap()
            .status(),
        200
    );

    shutdown.cancel();
    op.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_step_events_a_run_records_only_its_own_events_and_warnings() {
    let api = FakeApi::start().await;
    reviews(&api);
    api.put("runway.dev/v1alpha1/workflows", json!({"apiVersion": "runway.dev/v1alpha1", "kind": "Workflow",
        "metadata": {"name": "refuses", "namespace": "team-a"},
        "spec": {"steps": [{"name": "look", "delay": {"duration": "0s"}}, {"name": "refuse", "fail": {"message": "no"}}]}}));
    let mut opts = kubeconfig_free_options("runway");
    opts.step_events = false;
    let (mcp_addr, metrics_addr) = (opts.listen, opts.metrics_listen);
    let (shutdown, op) = operator_on(&api, opts);
    api.wait_until("workflow validated", |a| {
        a.get("runway.dev/v1alpha1/workflows", "team-a", "refuses")
            .is_some_and(|w| w["status"]["conditions"][0]["status"] == "True")
    })
    .await;
    let agent = Client::new(&format!("http://{mcp_addr}"), Some("agent-token"), "/mcp");
    // The tool appears once the Workflow reflector has seen the validated Workflow.
    let deadline = tokio::time::Instant::now() + support::harness::PATIENCE;
    let task = loop {
        let created = agent.call("refuses", json!({})).await;
        if let Some(task) = created.last()["result"]["taskId"].as_str() {
            break task.to_owned();
        }
        assert!(tokio::time::Instant::now() < deadline, "{created:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let reasons = |a: &FakeApi| -> Vec<String> {
        a.requests("POST", "/namespaces/team-a/events")
            .into_iter()
            .filter(|r| r.body["regarding"]["name"] == task.as_str())
            .map(|r| r.body["reason"].as_str().unwrap_or_default().to_owned())
            .collect()
    };
    api.wait_until("the run's last event", |a| {
        reasons(a).iter().any(|r| r == "Finished")
    })
    .await;
    // Written from a queue: everything queued before `Finished` has left it when none waits.
    let deadline = tokio::time::Instant::now() + support::harness::PATIENCE;
    loop {
        let metrics = scrape(metrics_addr).await;
        if metrics.lines().any(|l| l == "runway_events_queued 0") {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "{metrics}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mut got = reasons(&api);
    got.sort();
    assert_eq!(got, ["Finished", "StepFailed"]);
    let run = api
        .get("runway.dev/v1alpha1/runs", "team-a", &task)
        .expect("the run");
    let steps: Vec<(&str, &str)> = run["status"]["steps"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["name"].as_str().unwrap(), s["phase"].as_str().unwrap()))
        .collect();
    assert_eq!(
        steps,
        [("look", "Succeeded"), ("refuse", "Failed")],
        "the status still holds every step's progress"
    );

    shutdown.cancel();
    op.await.unwrap().unwrap();
}

#[tokio::test]
async fn header_secrets_are_read_from_the_runs_namespace() {
    use runway::store::SecretSource;
    let api = FakeApi::start().await;
    api.put("v1/secrets", json!({"metadata": {"name": "webhook", "namespace": "team-a"}, "data": {"token": "czNjcjN0"}}));
    let secrets = runway::store::kube_sources::KubeSecrets::new(api.client());
    assert_eq!(
        secrets.get("team-a", "webhook", "token").await.unwrap(),
        "s3cr3t"
    );
    assert_eq!(
        secrets.get("team-a", "webhook", "other").await.unwrap_err(),
        runway::store::StoreError::NotFound
    );
    assert_eq!(
        secrets.get("team-b", "webhook", "token").await.unwrap_err(),
        runway::store::StoreError::NotFound
    );
    assert!(
        api.requests("GET", "/api/v1/namespaces/team-b/secrets/webhook")
            .len()
            == 1,
        "asked in the Run's namespace only"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_of_the_expected_name_that_the_run_does_not_own_is_not_adopted() {
    let api = FakeApi::start().await;
    let run = a_run(&api);
    // Someone who may create Jobs got there first, with the deterministic name.
    api.put(
        JOBS,
        json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "deploy-abc-build-1", "namespace": "team-a"},
        "spec": {"template": {"spec": {"containers": [{"name": "main", "image": "evil"}]}}},
        "status": {"conditions": [{"type": "Complete", "status": "True"}]}}),
    );
    let outcome = JobExecutor::new(api.client(), test_marks())
        .execute(&run, &job_effect(120), CancellationToken::new())
        .await;
    match outcome {
        Some(Outcome::Fatal(e)) => assert!(e.message.contains("not created by Runway"), "{e:?}"),
        other => panic!("a foreign Job was adopted: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cleanup_deletes_only_a_job_its_run_controls() {
    let api = FakeApi::start().await;
    let run = a_run(&api);
    // A Job of the name a cleanup of this Run points at, which another Run controls: a Run
    // named to match someone else's Job would otherwise have it deleted.
    let foreign = json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "deploy-abc-build-1", "namespace": "team-a",
            "ownerReferences": [{"apiVersion": "runway.dev/v1alpha1", "kind": "Run",
                "name": "deploy", "uid": "another-runs-uid", "controller": true}]},
        "spec": {"template": {"spec": {"containers": [{"name": "main", "image": "theirs"}]}}}});
    api.put(JOBS, foreign);
    let cleanup = cleanup_effect("build", true);
    let out = JobExecutor::new(api.client(), test_marks())
        .execute(&run, &cleanup, CancellationToken::new())
        .await;
    assert_eq!(
        out,
        Some(Outcome::Succeeded(
            json!({"left": "deploy-abc-build-1", "reason": "not this run's job"})
        ))
    );
    assert!(api.get(JOBS, "team-a", "deploy-abc-build-1").is_some());
    assert!(
        api.requests("DELETE", "/namespaces/team-a/jobs/deploy-abc-build-1")
            .is_empty()
    );
    // One this Run controls is deleted, sealed or not (an older Runway sealed no Job).
    let unsealed = json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "deploy-abc-build-1", "namespace": "team-a",
            "ownerReferences": [{"apiVersion": "runway.dev/v1alpha1", "kind": "Run",
                "name": "deploy-abc", "uid": run.metadata.uid, "controller": true}]},
        "spec": {"template": {"spec": {"containers": [{"name": "main", "image": "ours"}]}}}});
    api.put(JOBS, unsealed);
    let out = JobExecutor::new(api.client(), test_marks())
        .execute(&run, &cleanup, CancellationToken::new())
        .await;
    assert_eq!(
        out,
        Some(Outcome::Succeeded(json!({"deleted": "deploy-abc-build-1"})))
    );
    assert!(api.get(JOBS, "team-a", "deploy-abc-build-1").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_that_only_claims_the_run_as_its_owner_is_not_adopted() {
    let api = FakeApi::start().await;
    let run = a_run(&api);
    // Whoever creates a Job can write any ownerReference: this one names the Run as its
    // controller, and even carries a seal made under another key.
    let forged = runway::engine::marks::Marks::new(vec![b"a guess".to_vec()]).seal(
        runway::engine::marks::Sealed::Job,
        &[
            "team-a",
            "deploy-abc-build-1",
            run.metadata.uid.as_deref().unwrap(),
            "build",
        ],
    );
    api.put(
        JOBS,
        json!({"apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "deploy-abc-build-1", "namespace": "team-a",
            "annotations": {"runway.dev/mark": forged},
            "ownerReferences": [{"apiVersion": "runway.dev/v1alpha1", "kind": "Run", "name": "deploy-abc",
                "uid": run.metadata.uid, "controller": true}]},
        "spec": {"template": {"spec": {"containers": [{"name": "main", "image": "evil"}]}}},
        "status": {"conditions": [{"type": "Complete", "status": "True"}]}}),
    );
    let outcome = JobExecutor::new(api.client(), test_marks())
        .execute(&run, &job_effect(120), CancellationToken::new())
        .await;
    match outcome {
        Some(Outcome::Fatal(e)) => assert!(e.message.contains("not created by Runway"), "{e:?}"),
        other => panic!("a forged Job was adopted: {other:?}"),
    }
}

/// The seals a test's executors make and trust.
fn test_marks() -> runway::engine::marks::Marks {
    runway::engine::marks::Marks::new(vec![b"kube-wiring-test-key".to_vec()])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_nested_deeper_than_a_parser_reads_does_not_stop_the_cache() {
    use runway::store::RunStore;
    let api = FakeApi::start().await;
    // The API server keeps JSON of any depth; kubectl can write this.
    let deep = (0..200).fold(json!(1), |v, _| json!([v]));
    api.put(
        RUNS,
        json!({"apiVersion": "runway.dev/v1alpha1", "kind": "Run",
            "metadata": {"name": "deep", "namespace": "team-a"},
            "spec": {"workflowRef": {"name": "deploy"}, "arguments": {"x": deep},
                "inputResponses": {"k": {"action": "accept", "content": {"y": deep}}}}}),
    );
    a_run(&api);
    let store = runway::store::kube::KubeStore::start(api.client())
        .await
        .expect("the cache fills");
    let read = store.get("team-a", "deep").await.unwrap().unwrap();
    assert_eq!(read.spec.arguments, Some(json!(runway::api::UNREADABLE)));
    assert_eq!(
        read.spec.input_responses["k"].content,
        Some(json!(runway::api::UNREADABLE))
    );
    assert!(store.get("team-a", "deploy-abc").await.unwrap().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_whose_create_was_under_way_when_its_step_stopped_is_cancelled_by_the_cleanup() {
    use std::sync::Arc;
    let api = FakeApi::start().await;
    let run = a_run(&api);
    let store: Arc<dyn runway::store::RunStore> = Arc::new(
        runway::store::kube::KubeStore::start(api.client())
            .await
            .unwrap(),
    );
    let changes =
        runway::store::changes::RunChanges::follow(store.clone(), CancellationToken::new());
    let exec = Arc::new(runway::steps::child::ChildExecutor::new(
        store,
        changes,
        test_marks(),
    ));
    let effect = Effect {
        step: "call".into(),
        attempt: 1,
        deadline: Some(jiff::Timestamp::now() + jiff::SignedDuration::from_secs(120)),
        idempotency_key: "uid/call".into(),
        action: Action::Child {
            workflow: "build".into(),
            arguments: json!({}),
            run_name: "deploy-abc-call-1".into(),
        },
    };
    // The child's create reaches the API server, whose answer is slow to come back.
    let open = api.hold_next(|r| r.method == "POST" && r.path.ends_with("/runs"));
    let stop = CancellationToken::new();
    let attempt = {
        let (exec, run, effect, stop) = (exec.clone(), run.clone(), effect.clone(), stop.clone());
        tokio::spawn(async move { exec.execute(&run, &effect, stop).await })
    };
    api.wait_until("the child's create is under way", |a| {
        !a.requests("POST", "/namespaces/team-a/runs").is_empty()
    })
    .await;
    // The step is stopped (the parent cancelled) and its cleanup starts at once.
    stop.cancel();
    let cleanup = cleanup_effect("call", false);
    let mut cleaning = {
        let (exec, run) = (exec.clone(), run.clone());
        tokio::spawn(async move { exec.execute(&run, &cleanup, CancellationToken::new()).await })
    };
    // It does not conclude the child is gone while the create is unanswered.
    let early = tokio::time::timeout(Duration::from_millis(300), &mut cleaning).await;
    assert!(early.is_err(), "the cleanup ended first: {early:?}");
    open.send(true).unwrap();
    assert_eq!(
        attempt.await.unwrap(),
        None,
        "a stopped attempt reports nothing"
    );
    let out = cleaning.await.unwrap();
    assert!(matches!(out, Some(Outcome::Succeeded(_))), "{out:?}");
    let child = api
        .get(RUNS, "team-a", "deploy-abc-call-1")
        .expect("the create landed");
    assert_eq!(
        child["spec"]["cancel"]["reason"], "parent run deploy-abc stopped waiting for it",
        "{child}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cleanup_cancels_only_a_child_of_its_run() {
    use std::sync::Arc;
    let api = FakeApi::start().await;
    let run = a_run(&api);
    // Another caller's Run, of the name this Run's cleanup points at (a parent named to match
    // can make that so), child of another parent: a cancel written on it would stop someone
    // else's work as "runway".
    api.put(
        RUNS,
        json!({"apiVersion": "runway.dev/v1alpha1", "kind": "Run",
        "metadata": {"name": "deploy-abc-call-1", "namespace": "team-a",
            "labels": {"runway.dev/parent": "deploy-abc"},
            "annotations": {"runway.dev/parent-uid": "another-parents-uid"}},
        "spec": {"workflowRef": {"name": "build"}}}),
    );
    let store: Arc<dyn runway::store::RunStore> = Arc::new(
        runway::store::kube::KubeStore::start(api.client())
            .await
            .unwrap(),
    );
    let changes =
        runway::store::changes::RunChanges::follow(store.clone(), CancellationToken::new());
    let mut child_changes = changes.subscribe("team-a", "deploy-abc-call-1");
    let exec = runway::steps::child::ChildExecutor::new(store, changes, test_marks());
    let cleanup = cleanup_effect("call", false);
    let out = exec.execute(&run, &cleanup, CancellationToken::new()).await;
    assert_eq!(
        out,
        Some(Outcome::Succeeded(json!(
            "run deploy-abc-call-1 is not this run's child; left"
        )))
    );
    let theirs = api.get(RUNS, "team-a", "deploy-abc-call-1").unwrap();
    assert!(theirs["spec"].get("cancel").is_none(), "{theirs}");
    // A child naming this Run as its parent is cancelled, sealed or not (an older Runway
    // sealed no child).
    let mut unsealed = theirs.clone();
    unsealed["metadata"]["annotations"]["runway.dev/parent-uid"] = json!(run.metadata.uid);
    api.put(RUNS, unsealed);
    // Once the executor's cache has the change.
    tokio::time::timeout(support::harness::PATIENCE, async {
        loop {
            if let Ok(runway::store::changes::Change::Updated(r)) = child_changes.recv().await
                && r.metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get("runway.dev/parent-uid"))
                    == run.metadata.uid.as_ref()
            {
                return;
            }
        }
    })
    .await
    .expect("the change reached the cache");
    let out = exec.execute(&run, &cleanup, CancellationToken::new()).await;
    assert_eq!(
        out,
        Some(Outcome::Succeeded(json!(
            "cancelled child run deploy-abc-call-1"
        )))
    );
    let ours = api.get(RUNS, "team-a", "deploy-abc-call-1").unwrap();
    assert_eq!(ours["spec"]["cancel"]["requestedBy"], "runway", "{ours}");
}
