//! Workflows loaded from manifest directories: the examples are Ready, broken manifests say why.

use crate::support;

use runway::api::Workflow;
use runway::engine::validate::Capabilities;
use runway::store::WorkflowSource;
use runway::store::manifests::ManifestWorkflows;
use support::harness::TempDir;

fn ready_condition(wf: &Workflow) -> (String, String, String) {
    let c = &wf.status.as_ref().expect("status").conditions[0];
    (c.status.clone(), c.reason.clone(), c.message.clone())
}

#[tokio::test]
async fn every_example_is_ready() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let src = ManifestWorkflows::load(&dir, Capabilities { jobs: false });
    assert!(src.problems().is_empty(), "{:?}", src.problems());
    let all = src.list("default").await;
    assert!(all.len() >= 6, "found {} workflows", all.len());
    for wf in &all {
        let name = wf.metadata.name.clone().unwrap();
        if wf.spec.steps.iter().any(|s| s.job.is_some()) {
            continue;
        }
        assert_eq!(
            ready_condition(wf).0,
            "True",
            "{name}: {:?}",
            ready_condition(wf)
        );
        assert!(wf.is_ready());
    }
}

#[tokio::test]
async fn every_example_is_ready_where_jobs_can_run() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let src = ManifestWorkflows::load(&dir, Capabilities { jobs: true });
    let all = src.list("default").await;
    assert!(
        all.iter()
            .any(|w| w.spec.steps.iter().any(|s| s.job.is_some())),
        "a job example exists"
    );
    for wf in &all {
        assert!(
            wf.is_ready(),
            "{:?}: {:?}",
            wf.metadata.name,
            ready_condition(wf)
        );
    }
}

fn load(files: &[(&str, &str)]) -> (TempDir, ManifestWorkflows) {
    let dir = TempDir::new();
    for (f, y) in files {
        std::fs::write(dir.path().join(f), y).unwrap();
    }
    let src = ManifestWorkflows::load(dir.path(), Capabilities { jobs: false });
    (dir, src)
}

fn wf(name: &str, spec: &str) -> String {
    format!(
        "apiVersion: runway.dev/v1alpha1\nkind: Workflow\nmetadata: {{ name: {name} }}\nspec:\n{spec}"
    )
}

#[tokio::test]
async fn broken_manifests_are_not_ready_and_say_why() {
    let cases = [
        (
            "template",
            "  steps:\n    - name: a\n      delay: { duration: \"{{ args. }}\" }\n",
            "InvalidTemplate",
            "step a: delay.duration",
        ),
        (
            "duration",
            "  steps:\n    - name: a\n      delay: { duration: soon }\n",
            "InvalidDuration",
            "soon",
        ),
        (
            "twokinds",
            "  steps:\n    - name: a\n      delay: { duration: 1s }\n      fail: { message: x }\n",
            "InvalidSpec",
            "exactly one of",
        ),
        ("shape", "  steps: nope\n", "InvalidManifest", "steps"),
        (
            "schema",
            "  tool: { inputSchema: { type: object, properties: { a: { type: 12 } } } }\n  steps: []\n",
            "InvalidSchema",
            "tool.inputSchema at /properties/a/type",
        ),
        // YAML 1.1, as kubectl reads it: `y` is `true`.
        (
            "yamlenum",
            "  steps:\n    - name: pick\n      input:\n        requests:\n          - { name: which, message: m, requestedSchema: { type: object, properties: { v: { type: string, enum: [x, true, z] } } } }\n",
            "InvalidSchema",
            "at /properties/v/enum/1: true is not of type string",
        ),
        (
            "baddefault",
            "  tool: { inputSchema: { type: object, properties: { n: { type: integer, default: \"two\" } } } }\n  steps: []\n",
            "InvalidSchema",
            "tool.inputSchema at /properties/n/default: \"two\" is not of type integer",
        ),
        (
            "required",
            "  tool: { inputSchema: { type: object, properties: { a: { type: string } }, required: [a, b] } }\n  steps: []\n",
            "InvalidSchema",
            "tool.inputSchema at /required/1: \"b\" names no property",
        ),
        (
            "elicitform",
            "  elicit: [ { key: k, message: m, requestedSchema: { type: object, properties: { c: { const: 1, type: string } } } } ]\n  steps: []\n",
            "InvalidSchema",
            "elicit k: requestedSchema at /properties/c/const",
        ),
        (
            "job",
            "  steps:\n    - name: build\n      job: { template: { spec: { containers: [] } } }\n",
            "UnsupportedStep",
            "Kubernetes store",
        ),
        (
            "url",
            "  steps:\n    - name: a\n      http: { url: \"ftp://x\" }\n",
            "InvalidSpec",
            "scheme",
        ),
        (
            "result",
            "  steps: []\n  result: { content: [ { type: video } ] }\n",
            "InvalidSpec",
            "result.content[0].type",
        ),
        (
            "secretform",
            "  steps:\n    - name: login\n      input:\n        requests:\n          - { name: creds, message: m, requestedSchema: { type: object, properties: { user: { type: string }, password: { type: string } } } }\n",
            "InvalidSpec",
            "field password asks for a secret",
        ),
        (
            "pinform",
            "  steps:\n    - name: pay\n      input:\n        requests:\n          - { name: card, message: m, requestedSchema: { type: object, properties: { cardPin: { type: string, writeOnly: true } } } }\n",
            "InvalidSpec",
            "field cardPin asks for a secret",
        ),
        (
            "nonform",
            "  steps:\n    - name: ask\n      input:\n        requests:\n          - { name: t, message: m, requestedSchema: { type: object, properties: { ticket: { type: string, pattern: \"^OPS-\" } } } }\n",
            "InvalidSchema",
            "input.requests[t].requestedSchema: property ticket: pattern is not part of a form field",
        ),
        (
            "nestedform",
            "  steps:\n    - name: ask\n      input:\n        requests:\n          - { name: t, message: m, requestedSchema: { type: object, properties: { where: { type: object } } } }\n",
            "InvalidSchema",
            "property where is not a form field",
        ),
        (
            "secretelicit",
            "  elicit:\n    - { key: who, message: m, requestedSchema: { type: object, properties: { otp: { type: string } } } }\n  steps: []\n",
            "InvalidSpec",
            "elicit who: requestedSchema: field otp asks for a secret",
        ),
        (
            "urlandform",
            "  steps:\n    - name: pay\n      input:\n        requests:\n          - { name: p, message: m, url: \"https://pay.example.com\", requestedSchema: { type: object } }\n",
            "InvalidSpec",
            "url mode takes no requestedSchema",
        ),
        (
            "urlscheme",
            "  steps:\n    - name: pay\n      input:\n        requests:\n          - { name: p, message: m, url: \"ftp://pay.example.com\" }\n",
            "InvalidSpec",
            "scheme",
        ),
        (
            "typo",
            "  stpes:\n    - name: a\n      delay: { duration: 1s }\n",
            "InvalidManifest",
            "unknown field spec.stpes (line 5)",
        ),
        (
            "nestedtypo",
            "  steps:\n    - name: a\n      delay: { duration: 1s }\n      retry: { limt: 3 }\n",
            "InvalidManifest",
            "unknown field spec.steps.0.retry.limt (line 8)",
        ),
        (
            "condition",
            "  steps:\n    - name: a\n      when: \"inputs.x ==\"\n      delay: { duration: 1s }\n",
            "InvalidTemplate",
            "step a: when",
        ),
        (
            "words",
            "  steps:\n    - name: a\n      timeout: 5 minutes\n      delay: { duration: 1s }\n",
            "InvalidDuration",
            "5 minutes",
        ),
    ];
    let files: Vec<(String, String)> = cases
        .iter()
        .map(|(n, s, _, _)| (format!("{n}.yaml"), wf(n, s)))
        .collect();
    let refs: Vec<(&str, &str)> = files
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    let (_d, src) = load(&refs);
    for (name, _, reason, needle) in cases {
        let w = src
            .get("default", name)
            .await
            .unwrap_or_else(|| panic!("{name} missing"));
        let (status, r, message) = ready_condition(&w);
        assert_eq!(
            (status.as_str(), r.as_str()),
            ("False", reason),
            "{name}: {message}"
        );
        assert!(
            message.contains(needle),
            "{name}: {message:?} lacks {needle:?}"
        );
        assert!(!w.is_ready());
    }
}

#[tokio::test]
async fn a_new_workflow_never_takes_a_tool_name_from_an_older_one() {
    let (d, src) = load(&[(
        "m.yaml",
        &wf("middle", "  tool: { name: same }\n  steps: []\n"),
    )]);
    assert!(src.get("default", "middle").await.unwrap().is_ready());
    // A later file whose Workflow sorts first by name: it waits, the older one keeps the tool.
    std::fs::write(
        d.path().join("a.yaml"),
        wf("aardvark", "  tool: { name: same }\n  steps: []\n"),
    )
    .unwrap();
    assert!(src.reload());
    assert!(src.get("default", "middle").await.unwrap().is_ready());
    let newer = src.get("default", "aardvark").await.unwrap();
    let (status, reason, message) = ready_condition(&newer);
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "DuplicateTool")
    );
    assert!(message.contains("workflow middle"), "{message}");
    // Once the older one is gone, the newer one serves the tool.
    std::fs::remove_file(d.path().join("m.yaml")).unwrap();
    assert!(src.reload());
    assert!(src.get("default", "aardvark").await.unwrap().is_ready());
}

#[tokio::test]
async fn documents_of_runway_dev_must_be_workflows_of_a_known_version() {
    for (doc, needle) in [
        (
            "apiVersion: runway.dev/v1alpha1\nkind: Workfow\nmetadata: { name: x }\nspec: { steps: [] }\n",
            "kind Workfow",
        ),
        (
            "apiVersion: runway.dev/v1\nkind: Workflow\nmetadata: { name: x }\nspec: { steps: [] }\n",
            "runway.dev/v1 kind Workflow",
        ),
        (
            "kind: Workflow\nmetadata: { name: x }\nspec: { steps: [] }\n",
            "without apiVersion",
        ),
    ] {
        let file = format!("{}\n---\n{doc}", wf("fine", "  steps: []\n"));
        let (_d, src) = load(&[("bad.yaml", &file)]);
        let problems = src.problems();
        assert_eq!(problems.len(), 1, "{doc}");
        assert!(
            problems[0].message.contains(needle) && problems[0].message.contains("line 8"),
            "{:?}",
            problems[0].message
        );
    }
    // Other groups' kinds (an Argo Workflow, a ConfigMap) are none of this server's business.
    let argo =
        "apiVersion: argoproj.io/v1alpha1\nkind: Workflow\nmetadata: { name: argo }\nspec: {}\n";
    let (_d, src) = load(&[("argo.yaml", argo)]);
    assert!(src.problems().is_empty());
    assert!(src.list("default").await.is_empty());
}

#[tokio::test]
async fn duplicate_tool_names_leave_the_second_not_ready() {
    let (_d, src) = load(&[
        (
            "a.yaml",
            &wf("alpha", "  tool: { name: same }\n  steps: []\n"),
        ),
        (
            "b.yaml",
            &wf("beta", "  tool: { name: same }\n  steps: []\n"),
        ),
    ]);
    assert!(src.get("default", "alpha").await.unwrap().is_ready());
    let beta = src.get("default", "beta").await.unwrap();
    assert_eq!(ready_condition(&beta).1, "DuplicateTool");
}

#[tokio::test]
async fn unparsable_files_are_reported_and_keep_their_last_good_workflows() {
    let (d, src) = load(&[("ok.yaml", &wf("keep", "  steps: []\n"))]);
    assert!(src.get("default", "keep").await.unwrap().is_ready());
    std::fs::write(d.path().join("ok.yaml"), "this: is: not: yaml: [").unwrap();
    std::fs::write(d.path().join("other.yaml"), wf("new", "  steps: []\n")).unwrap();
    assert!(src.reload());
    assert_eq!(src.problems().len(), 1);
    assert!(src.problems()[0].file.ends_with("ok.yaml"));
    assert!(
        src.get("default", "keep").await.unwrap().is_ready(),
        "last good version kept"
    );
    assert!(src.get("default", "new").await.unwrap().is_ready());
}

#[tokio::test]
async fn reload_picks_up_changes_and_bumps_generation() {
    let (d, src) = load(&[("w.yaml", &wf("w", "  steps: []\n"))]);
    let changes = src.changes();
    let before = src.get("default", "w").await.unwrap();
    assert_eq!(before.metadata.generation, Some(1));
    assert!(!src.reload(), "nothing changed");
    std::fs::write(
        d.path().join("w.yaml"),
        wf("w", "  execution: { mode: sync }\n  steps: []\n") + "\n# edited\n",
    )
    .unwrap();
    assert!(src.reload());
    assert!(changes.has_changed().unwrap());
    let after = src.get("default", "w").await.unwrap();
    assert_eq!(after.metadata.generation, Some(2));
    assert_eq!(after.metadata.uid, before.metadata.uid);
    assert!(after.is_ready());
    std::fs::remove_file(d.path().join("w.yaml")).unwrap();
    assert!(src.reload());
    assert!(src.get("default", "w").await.is_none());
}

#[tokio::test]
async fn namespaces_come_from_metadata() {
    let (_d, src) = load(&[(
        "ns.yaml",
        "apiVersion: runway.dev/v1alpha1\nkind: Workflow\nmetadata: { name: x, namespace: team-a }\nspec: { steps: [] }\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: { name: ignored }\n",
    )]);
    assert!(src.get("team-a", "x").await.is_some());
    assert!(src.list("default").await.is_empty());
}

#[tokio::test]
async fn the_older_workflow_keeps_its_tool_across_restarts_whatever_the_file_order() {
    use runway::store::identities::WorkflowBook;
    let dir = TempDir::new();
    let db = dir.path().join("runs.db");
    let manifests = dir.path().join("workflows");
    std::fs::create_dir_all(&manifests).unwrap();
    let offering = |name: &str| {
        wf(
            name,
            &format!("  tool: {{ name: shared, description: from {name} }}\n  steps: []\n"),
        )
    };
    let holder_of = |src: &ManifestWorkflows| {
        src.snapshot()
            .into_iter()
            .filter(|w| w.is_ready())
            .map(|w| w.metadata.name.unwrap())
            .collect::<Vec<_>>()
    };
    let caps = Capabilities { jobs: false };
    // zed is served first; alpha, in a file that sorts before it, comes later.
    std::fs::write(manifests.join("z.yaml"), offering("zed")).unwrap();
    let src =
        ManifestWorkflows::load_with(&manifests, caps, Some(WorkflowBook::open(&db).unwrap()));
    std::fs::write(manifests.join("a.yaml"), offering("alpha")).unwrap();
    assert!(src.reload());
    assert_eq!(holder_of(&src), ["zed"]);
    drop(src);
    // Restarted, the files are read a then z: the book, not the order, says who is older.
    let src =
        ManifestWorkflows::load_with(&manifests, caps, Some(WorkflowBook::open(&db).unwrap()));
    assert_eq!(holder_of(&src), ["zed"]);
    let alpha = src
        .snapshot()
        .into_iter()
        .find(|w| w.metadata.name.as_deref() == Some("alpha"))
        .unwrap();
    let ready = &alpha.status.unwrap().conditions[0];
    assert_eq!(ready.reason, "DuplicateTool");
    assert!(
        ready.message.contains("workflow zed, which is older"),
        "{}",
        ready.message
    );
    // `runway workflows --db` reads the same book (and writes nothing); without it, a fresh
    // start's file order decides.
    let check = |db: Option<&std::path::Path>| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_runway"));
        cmd.args(["workflows", "--workflows"]).arg(&manifests);
        if let Some(db) = db {
            cmd.arg("--db").arg(db);
        }
        String::from_utf8(cmd.output().unwrap().stdout).unwrap()
    };
    let with_db = check(Some(&db));
    assert!(
        with_db
            .lines()
            .any(|l| l.contains("alpha") && l.contains("DuplicateTool")),
        "{with_db}"
    );
    let fresh = check(None);
    assert!(
        fresh
            .lines()
            .any(|l| l.contains("zed") && l.contains("DuplicateTool")),
        "{fresh}"
    );
}
