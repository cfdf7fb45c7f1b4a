//! The e2e tier's upgrade test, in a binary (and so a control plane) of its own. A cluster that
//! ran the previous release — its CRDs, its Workflows and the Runs its operator left in flight,
//! captured from that release's own operator into tests/e2e/upgrade/ — gets this tree's CRDs,
//! and the operator is started again from this tree's image, the way the kubelet starts a
//! replica of the chart's Deployment. Every Run finishes. The image itself is checked here too:
//! what it holds, how it is configured, that it says which build it is.

mod cluster;
mod image;
#[path = "../support/mod.rs"]
mod support;

use std::path::PathBuf;
use std::process::Command;

use cluster::{Cluster, cluster_with_crds, root, token};
use image::Image;
use serde_json::{Value, json};
use support::mcp::Client;

/// The previous release's CRDs, Workflows and Runs.
fn fixture() -> PathBuf {
    root().join("tests/e2e/upgrade")
}

/// This binary's control plane: the previous release's CRDs, no operator yet.
fn up() -> &'static Cluster {
    cluster_with_crds(&fixture().join("crds"))
}

fn apply_workflows(c: &Cluster, ns: &str) {
    let text = std::fs::read_to_string(fixture().join("workflows.yaml")).unwrap();
    let out = c.apply("admin", ns, &text);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn runs_json(c: &Cluster, ns: &str) -> Vec<Value> {
    let all: Value =
        serde_json::from_str(&c.admin(&["get", "runs", "-n", ns, "-o", "json"])).unwrap();
    all["items"].as_array().unwrap().clone()
}

/// Every RFC 3339 time in `v` moved by `by`: the Runs were captured in the past, and their
/// deadlines and timers keep their distance to now.
fn shift_times(v: &mut Value, by: jiff::SignedDuration) {
    match v {
        Value::String(s) => {
            if let Ok(t) = s.parse::<jiff::Timestamp>() {
                *s = (t + by).to_string();
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|i| shift_times(i, by)),
        Value::Object(map) => map.values_mut().for_each(|i| shift_times(i, by)),
        _ => {}
    }
}

/// The captured Runs, by the name of their Workflow and their first argument.
struct Captured {
    runs: Vec<Value>,
    captured_at: jiff::Timestamp,
}

impl Captured {
    fn load() -> Self {
        let v: Value =
            serde_json::from_slice(&std::fs::read(fixture().join("runs.json")).unwrap()).unwrap();
        Self {
            runs: v["runs"].as_array().unwrap().clone(),
            captured_at: v["capturedAt"].as_str().unwrap().parse().unwrap(),
        }
    }

    /// Create each Run in `ns` as its requester did (through kubectl, which the admission
    /// policy allows for one's own identity), then give it the status the previous release's
    /// operator wrote, as the operator's ServiceAccount.
    fn restore(&self, c: &Cluster, ns: &str) {
        let by = jiff::Timestamp::now().duration_since(self.captured_at);
        for run in &self.runs {
            let name = run["metadata"]["name"].as_str().unwrap();
            let object = json!({"apiVersion": "runway.dev/v1alpha1", "kind": "Run",
                "metadata": run["metadata"], "spec": run["spec"]});
            let out = c.kubectl_stdin(
                "alice",
                &["create", "-n", ns, "-f", "-"],
                &object.to_string(),
            );
            assert!(
                out.status.success(),
                "{name}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            let mut status = run["status"].clone();
            shift_times(&mut status, by);
            // A timer due in an hour is brought to three seconds from now, as if the capture
            // had been taken just before it fires: a restarted timer would not end in time.
            let soon = (jiff::Timestamp::now() + jiff::SignedDuration::from_secs(3)).to_string();
            for step in status["steps"].as_array_mut().into_iter().flatten() {
                if step["wakeAt"].is_string() {
                    step["wakeAt"] = json!(soon);
                }
            }
            let out = c.kubectl(
                "operator",
                &[
                    "patch",
                    &format!("run/{name}"),
                    "-n",
                    ns,
                    "--subresource=status",
                    "--type=merge",
                    "-p",
                    &json!({ "status": status }).to_string(),
                ],
            );
            assert!(
                out.status.success(),
                "{name}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }

    fn name_of(&self, workflow: &str, n: Option<i64>) -> String {
        self.runs
            .iter()
            .find(|r| {
                r["spec"]["workflowRef"]["name"] == workflow
                    && n.is_none_or(|n| r["spec"]["arguments"]["n"] == n)
            })
            .unwrap_or_else(|| panic!("no captured Run of {workflow} {n:?}"))["metadata"]["name"]
            .as_str()
            .unwrap()
            .to_owned()
    }
}

/// The container args of the chart's Deployment (`make e2e` renders it beside the chart).
fn chart_args() -> Vec<String> {
    let path = std::env::var_os(cluster::CHART_ENV)
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target/e2e/chart.yaml"))
        .with_file_name("deployment.yaml");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}: run the tier with `make e2e`", path.display()));
    let deployment: Value = serde_saphyr::from_str(&text).unwrap();
    deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn runs_of_the_previous_release_finish_after_an_upgrade_to_this_image() {
    let c = up();
    let ns = c.namespace("upgrade");
    apply_workflows(c, &ns);
    let captured = Captured::load();
    captured.restore(c, &ns);

    // The upgrade, as an admin does it: this tree's CRDs by server-side apply, without a
    // warning, over objects stored under the previous ones.
    let crds = root().join("crds");
    let out = c.kubectl(
        "admin",
        &[
            "apply",
            "--server-side",
            "--force-conflicts",
            "-f",
            crds.to_str().unwrap(),
        ],
    );
    assert!(out.status.success());
    let warnings = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        warnings.trim().is_empty(),
        "kubectl apply warned: {warnings}"
    );
    c.admin(&[
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/workflows.runway.dev",
        "crd/runs.runway.dev",
    ]);
    // Every stored object is one the new schemas accept whole (a create is checked without
    // the ratcheting an update of unchanged fields gets).
    for run in runs_json(c, &ns) {
        let mut copy = json!({"apiVersion": "runway.dev/v1alpha1", "kind": "Run",
            "metadata": {"name": format!("{}-check", run["metadata"]["name"].as_str().unwrap())},
            "spec": run["spec"]});
        copy["metadata"]["labels"] = run["metadata"]["labels"].clone();
        let out = c.kubectl_stdin(
            "operator",
            &["create", "--dry-run=server", "-n", &ns, "-f", "-"],
            &copy.to_string(),
        );
        assert!(
            out.status.success(),
            "a stored Run the new CRD refuses: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    // The operator again, from this tree's image, with the chart's arguments.
    let image = Image::unpacked();
    let (mut operator, mcp, _) = image.start_operator(c, "image-replica-0", &chart_args());
    let alice = Client::new(
        &format!("http://127.0.0.1:{mcp}"),
        Some(&token("alice")),
        &format!("/namespaces/{ns}/mcp"),
    );

    // A finished Run reads as it did.
    let quick = captured.name_of("quick", None);
    let done = alice.get(&quick).await.result().clone();
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(done["result"]["content"][0]["text"], "quick 1");

    // The question asked before the upgrade is still open and takes its answer.
    let gate = captured.name_of("gate", None);
    let asked = alice.await_status(&gate, "input_required").await;
    assert_eq!(
        asked["inputRequests"]["ask.go"]["params"]["message"],
        "Ship v2?"
    );
    alice
        .update(
            &gate,
            json!({"ask.go": {"action": "accept", "content": {"ok": true}}}),
        )
        .await
        .assert_complete();
    let shipped = alice.await_status(&gate, "completed").await;
    assert_eq!(shipped["result"]["content"][0]["text"], "shipped v2: true");

    // The hour-long delay keeps its wake time: a restarted timer would not end in time.
    let nap = captured.name_of("nap", None);
    let rested = alice.await_status(&nap, "completed").await;
    assert_eq!(rested["result"]["content"][0]["text"], "rested");

    // The job step finds its Job by name (made again here: the Job of the previous cluster
    // did not travel with the fixture) and finishes with its Pod.
    let build = captured.name_of("build", None);
    let job = c
        .admin(&[
            "get",
            &format!("run/{build}"),
            "-n",
            &ns,
            "-o",
            "jsonpath={.status.steps[0].jobName}",
        ])
        .trim()
        .to_owned();
    assert_eq!(job, format!("{build}-compile-1"));
    finish_pod(c, &ns, &job, r#"{"artifacts": 7}"#);
    let built = alice.await_status(&build, "completed").await;
    assert_eq!(built["result"]["content"][0]["text"], "built 7");

    // The concurrency limit of one still holds across the upgrade: the queued Run starts
    // only when the one ahead of it finishes.
    let (first, second) = (
        captured.name_of("serial", Some(1)),
        captured.name_of("serial", Some(2)),
    );
    alice.await_status(&first, "input_required").await;
    let queued = alice.get(&second).await.result().clone();
    assert_eq!(queued["status"], "working", "{queued}");
    assert_eq!(
        c.admin(&[
            "get",
            &format!("run/{second}"),
            "-n",
            &ns,
            "-o",
            "jsonpath={.status.phase}"
        ]),
        "Queued"
    );
    for run in [&first, &second] {
        alice.await_status(run, "input_required").await;
        alice
            .update(run, json!({"ask.go": {"action": "accept", "content": {}}}))
            .await
            .assert_complete();
        alice.await_status(run, "completed").await;
    }
    let _ = operator.kill();
}

/// Play the kubelet: the Job's Pod ends with `message` as its termination message.
fn finish_pod(c: &Cluster, ns: &str, job: &str, message: &str) {
    c.wait_jsonpath(ns, &format!("job/{job}"), "{.status.active}", "1");
    let pod = c
        .admin(&[
            "get",
            "pods",
            "-n",
            ns,
            "-l",
            &format!("job-name={job}"),
            "-o",
            "jsonpath={.items[0].metadata.name}",
        ])
        .trim()
        .to_owned();
    let now = jiff::Timestamp::now().to_string();
    let status = json!({"status": {"phase": "Succeeded", "containerStatuses": [{
        "name": "main", "image": "busybox:1.36", "imageID": "x", "ready": false,
        "restartCount": 0, "started": false,
        "state": {"terminated": {"exitCode": 0, "reason": "Completed", "message": message,
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

#[test]
fn the_image_holds_the_binary_its_libraries_and_certificates_and_nothing_else() {
    let image = Image::unpacked();
    let paths = image.paths();
    let mut expected = vec![
        "etc",
        "etc/group",
        "etc/nsswitch.conf",
        "etc/passwd",
        "etc/ssl",
        "etc/ssl/certs",
        "etc/ssl/certs/ca-certificates.crt",
        "home",
        "home/nonroot",
        "tmp",
        "usr",
        "usr/local",
        "usr/local/bin",
        "usr/local/bin/runway",
        "usr/share",
        "usr/share/doc",
    ]
    .into_iter()
    .map(str::to_owned)
    .collect::<Vec<_>>();
    // The C libraries the binary links, where the dynamic linker asks for them, each with its
    // package's copyright file.
    let linked = Command::new("ldd")
        .arg(image.rootfs().join("usr/local/bin/runway"))
        .output()
        .unwrap();
    for line in String::from_utf8_lossy(&linked.stdout).lines() {
        let path = match line.split_whitespace().collect::<Vec<_>>()[..] {
            [_, "=>", path, ..] if path.starts_with('/') => path.to_owned(),
            [path, ..] if path.starts_with('/') => path.to_owned(),
            _ => continue,
        };
        let path = path.trim_start_matches('/');
        let mut dir = std::path::Path::new(path).parent();
        while let Some(d) = dir.filter(|d| !d.as_os_str().is_empty()) {
            expected.push(d.to_string_lossy().into_owned());
            dir = d.parent();
        }
        expected.push(path.to_owned());
    }
    let docs: Vec<&String> = paths
        .iter()
        .filter(|p| p.starts_with("usr/share/doc/"))
        .collect();
    assert!(
        docs.iter().any(|p| p.ends_with("libc6/copyright")),
        "{docs:?}"
    );
    assert!(
        docs.iter()
            .any(|p| p.ends_with("ca-certificates/copyright")),
        "{docs:?}"
    );
    expected.extend(docs.into_iter().cloned());
    expected.sort();
    expected.dedup();
    assert_eq!(paths, expected, "the image holds exactly these paths");
    // No shell to exec into, no package manager.
    assert!(
        !paths
            .iter()
            .any(|p| p.ends_with("bin/sh") || p.contains("busybox"))
    );
    // The user the chart runs as, from the image's own /etc/passwd.
    let passwd = std::fs::read_to_string(image.rootfs().join("etc/passwd")).unwrap();
    assert!(passwd.contains("nonroot:x:65532:65532:"), "{passwd}");
}

#[test]
fn the_image_is_configured_as_the_dockerfile_and_the_chart_say() {
    let image = Image::unpacked();
    let config = &image.config;
    // The chart's podSecurityContext runs as 65532:65532; the image's user is the same, so
    // it also runs as itself under a plain `docker run`.
    assert_eq!(image.user(), "65532:65532");
    assert_eq!(config["Entrypoint"], json!(["/usr/local/bin/runway"]));
    assert_eq!(config["Cmd"], json!(["operator"]));
    assert_eq!(config["WorkingDir"], "/");
    let labels = &config["Labels"];
    assert_eq!(
        labels["org.opencontainers.image.version"],
        env!("CARGO_PKG_VERSION")
    );
    assert_eq!(
        labels["org.opencontainers.image.revision"],
        support::harness::head_commit()
    );
    assert_eq!(labels["org.opencontainers.image.licenses"], "Apache-2.0");
    // The Dockerfile's final stage declares the same: user, entrypoint, command, working
    // directory, environment and label keys.
    let dockerfile = std::fs::read_to_string(root().join("Dockerfile")).unwrap();
    let last = dockerfile.rsplit("\nFROM ").next().unwrap();
    let instruction = |name: &str| {
        last.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no {name} in the Dockerfile's final stage"))
            .trim()
            .to_owned()
    };
    assert_eq!(instruction("USER"), image.user());
    assert_eq!(instruction("WORKDIR"), "/");
    assert_eq!(
        serde_json::from_str::<Value>(&instruction("ENTRYPOINT")).unwrap(),
        config["Entrypoint"]
    );
    assert_eq!(
        serde_json::from_str::<Value>(&instruction("CMD")).unwrap(),
        config["Cmd"]
    );
    let env: Vec<String> = image
        .env()
        .into_iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    assert_eq!(vec![instruction("ENV")], env);
    let mut keys: Vec<&str> = labels
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort();
    let mut declared: Vec<&str> = last
        .split("org.opencontainers.image.")
        .skip(1)
        .map(|rest| rest.split('=').next().unwrap())
        .collect();
    declared.sort();
    let declared: Vec<String> = declared
        .iter()
        .map(|k| format!("org.opencontainers.image.{k}"))
        .collect();
    assert_eq!(keys, declared);
}

#[test]
fn the_image_says_which_build_it_is() {
    let image = Image::unpacked();
    let out = image.output(Some(&["--version".to_owned()]));
    assert_eq!(
        out.trim(),
        format!(
            "runway {} (commit {})",
            env!("CARGO_PKG_VERSION"),
            support::harness::head_commit()
        )
    );
}

/// The build of the previous release to capture from (`RUNWAY_PREVIOUS_BIN`).
const PREVIOUS_BIN_ENV: &str = "RUNWAY_PREVIOUS_BIN";

/// Not part of the tier: run by hand, with a build of the previous release, to write
/// tests/e2e/upgrade/runs.json (see the README there).
#[tokio::test(flavor = "multi_thread")]
#[ignore = "writes the upgrade fixture from a build of the previous release"]
async fn capture_runs_of_the_previous_release() {
    let bin = PathBuf::from(
        std::env::var_os(PREVIOUS_BIN_ENV)
            .unwrap_or_else(|| panic!("{PREVIOUS_BIN_ENV} names the previous release's runway")),
    );
    let c = up();
    let ns = c.namespace("previous");
    apply_workflows(c, &ns);
    let (mcp, metrics) = (cluster::free_port(), cluster::free_port());
    let mut cmd = Command::new(&bin);
    cmd.env("KUBECONFIG", c.kubeconfig("operator"))
        .env("POD_NAMESPACE", cluster::SYSTEM_NS)
        .env("POD_NAME", "previous-0")
        .args([
            "operator",
            &format!("--listen=127.0.0.1:{mcp}"),
            &format!("--metrics-listen=127.0.0.1:{metrics}"),
            &format!("--lease-name={}", cluster::LEASE),
            &format!("--token-audience={}", cluster::AUDIENCE),
            &format!("--state-key-file={}", c.state_key.display()),
        ]);
    let mut previous = c.spawn_logged(cmd, "previous-0");
    cluster::wait_until("the previous release to serve", || {
        cluster::http_status(metrics, "/readyz") == Some(200)
    });
    c.wait_ready(&ns, &["gate", "nap", "build", "quick", "serial"]);
    let alice = Client::new(
        &format!("http://127.0.0.1:{mcp}"),
        Some(&token("alice")),
        &format!("/namespaces/{ns}/mcp"),
    );
    let task = |r: support::mcp::Reply| r.result()["taskId"].as_str().unwrap().to_owned();
    let quick = task(alice.call("quick", json!({"n": 1})).await);
    alice.await_status(&quick, "completed").await;
    let gate = task(alice.call("gate", json!({"change": "v2"})).await);
    alice.await_status(&gate, "input_required").await;
    let nap = task(alice.call("nap", json!({})).await);
    c.wait_jsonpath(
        &ns,
        &format!("run/{nap}"),
        "{.status.steps[0].phase}",
        "Running",
    );
    let build = task(alice.call("build", json!({})).await);
    c.wait_jsonpath(
        &ns,
        &format!("run/{build}"),
        "{.status.steps[0].jobName}",
        &format!("{build}-compile-1"),
    );
    let first = task(alice.call("serial", json!({"n": 1})).await);
    alice.await_status(&first, "input_required").await;
    let second = task(alice.call("serial", json!({"n": 2})).await);
    c.wait_jsonpath(&ns, &format!("run/{second}"), "{.status.phase}", "Queued");
    let _ = previous.kill();
    let _ = previous.wait();

    let runs: Vec<Value> = runs_json(c, &ns)
        .into_iter()
        .map(|r| {
            let meta = &r["metadata"];
            json!({"metadata": {"name": meta["name"], "labels": meta["labels"],
                    "annotations": meta["annotations"]},
                "spec": r["spec"], "status": r["status"]})
        })
        .collect();
    let version =
        String::from_utf8(Command::new(&bin).arg("--version").output().unwrap().stdout).unwrap();
    let out = json!({
        "release": version.trim(),
        "capturedAt": jiff::Timestamp::now().to_string(),
        "runs": runs,
    });
    std::fs::write(
        fixture().join("runs.json"),
        serde_json::to_string_pretty(&out).unwrap() + "\n",
    )
    .unwrap();
}
