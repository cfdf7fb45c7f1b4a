"""What the rendered chart must be: least-privilege RBAC, a locked-down Deployment, the flags the
operator takes, values.schema.json covering every value, and manifests of the right shape."""

from __future__ import annotations

import base64
import copy
import json
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml

import check
from check import NAMESPACE, find, one, render

# The operator's documented permissions (docs/security.md): (apiGroup, resource) -> verbs.
OPERATOR_CLUSTER_RULES = {
    ("runway.dev", "runs"): {"get", "list", "watch", "create", "update", "patch", "delete"},
    ("runway.dev", "runs/status"): {"get", "update", "patch"},
    ("runway.dev", "workflows"): {"get", "list", "watch"},
    ("runway.dev", "workflows/status"): {"get", "update", "patch"},
    ("batch", "jobs"): {"get", "list", "watch", "create", "delete"},
    ("events.k8s.io", "events"): {"create", "patch"},
    ("", "events"): {"list"},
    ("", "secrets"): {"get"},
    ("", "pods"): {"get", "list"},
    ("authentication.k8s.io", "tokenreviews"): {"create"},
    ("authorization.k8s.io", "subjectaccessreviews"): {"create"},
}
LEASE_RULES = {
    ("coordination.k8s.io", "leases"): {"get", "list", "watch", "create", "update", "patch", "delete"}
}

VALUE_SETS = check.value_sets()


@pytest.fixture(scope="module", params=list(VALUE_SETS))
def rendered(request: pytest.FixtureRequest) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    values = VALUE_SETS[request.param]
    return values, render(values)


def grants(role: dict[str, Any]) -> dict[tuple[str, str], set[str]]:
    """A role's rules flattened to (apiGroup, resource) -> verbs; wildcards fail the caller's checks."""
    out: dict[tuple[str, str], set[str]] = {}
    for rule in role.get("rules", []):
        assert "resourceNames" not in rule and "nonResourceURLs" not in rule, rule
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                out.setdefault((group, resource), set()).update(rule["verbs"])
    return out


def no_wildcards(g: dict[tuple[str, str], set[str]]) -> None:
    for (group, resource), verbs in g.items():
        assert "*" not in (group, resource) and "*" not in verbs, (group, resource, verbs)


# --- lint, render, shapes ---------------------------------------------------------------------------


@pytest.mark.parametrize("label", list(VALUE_SETS))
def test_chart_lints_renders_and_every_manifest_has_a_valid_shape(label: str) -> None:
    objects = check.check_values(label, VALUE_SETS[label])
    assert objects


def test_chart_crds_are_the_generated_ones() -> None:
    assert check.check_crds() == 2


def test_examples_match_the_crd_schemas() -> None:
    assert check.check_examples() >= 7


def test_shape_validation_catches_misspelt_fields() -> None:
    deploy = copy.deepcopy(one(render(), "Deployment"))
    deploy["spec"]["template"]["spec"]["containers"][0]["securityContex"] = {}
    assert any("securityContex" in e for e in check.validate_object(deploy))
    assert check.validate_object({"apiVersion": "v1", "kind": "Nonsense", "metadata": {"name": "x"}})
    wf = {
        "apiVersion": "runway.dev/v1alpha1",
        "kind": "Workflow",
        "metadata": {"name": "x"},
        "spec": {"steps": [{"name": "a", "delay": {"duration": "1s"}, "dealy": {}}]},
    }
    assert any("dealy" in e for e in check.validate_runway_object(wf))
    job = {
        "apiVersion": "runway.dev/v1alpha1",
        "kind": "Workflow",
        "metadata": {"name": "x"},
        "spec": {"steps": [{"name": "a", "job": {"template": {"spec": {"containers": [{"name": "c"}]}}}}]},
    }
    assert any("image" in e for e in check.validate_runway_object(job))


# --- RBAC ---------------------------------------------------------------------------------------------


def test_operator_cluster_role_grants_exactly_the_documented_rules(rendered: Any) -> None:
    _, objects = rendered
    operator_roles = [r for r in find(objects, "ClusterRole") if r["metadata"]["name"].endswith("-operator")]
    assert len(operator_roles) == 1
    role = operator_roles[0]
    g = grants(role)
    no_wildcards(g)
    assert g == OPERATOR_CLUSTER_RULES
    binding = one(objects, "ClusterRoleBinding")
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role["metadata"]["name"]}
    assert [s["kind"] for s in binding["subjects"]] == ["ServiceAccount"]


def test_lease_role_is_namespaced_and_minimal(rendered: Any) -> None:
    _, objects = rendered
    role = one(objects, "Role")
    assert role["metadata"]["namespace"] == NAMESPACE
    assert grants(role) == LEASE_RULES
    assert one(objects, "RoleBinding")["roleRef"]["name"] == role["metadata"]["name"]


def test_no_other_role_grants_the_operator_anything() -> None:
    objects = render()
    bound = {b["roleRef"]["name"] for b in find(objects, "ClusterRoleBinding") + find(objects, "RoleBinding")}
    assert bound == {"runway-operator", "runway-leader-election"}


def test_tenant_roles_and_their_aggregation() -> None:
    objects = render()
    roles = {r["metadata"]["name"]: r for r in find(objects, "ClusterRole")}
    assert grants(roles["runway-caller"]) == {("runway.dev", "workflows"): {"list"}, ("runway.dev", "runs"): {"create", "get", "watch"}}
    assert grants(roles["runway-approver"]) == {("runway.dev", "runs"): {"get", "watch", "update", "patch"}}
    assert grants(roles["runway-viewer"]) == {
        ("runway.dev", "runs"): {"get", "list", "watch"},
        ("runway.dev", "workflows"): {"get", "list", "watch"},
    }
    agg = "rbac.authorization.k8s.io/aggregate-to-"
    labels = {n: {k[len(agg):] for k, v in r["metadata"]["labels"].items() if k.startswith(agg) and v == "true"} for n, r in roles.items()}
    assert labels["runway-caller"] == {"admin", "edit"}
    assert labels["runway-approver"] == {"admin", "edit"}
    assert labels["runway-viewer"] == {"admin", "edit", "view"}
    assert labels["runway-operator"] == set()

    plain = {r["metadata"]["name"]: r for r in find(render({"tenantRoles": {"aggregateToDefaultRoles": False}}), "ClusterRole")}
    assert all(not any(k.startswith(agg) for k in r["metadata"]["labels"]) for r in plain.values())
    assert {r["metadata"]["name"] for r in find(render({"tenantRoles": {"create": False}}), "ClusterRole")} == {"runway-operator"}


def test_rbac_can_be_left_to_the_cluster_admin() -> None:
    objects = render({"rbac": {"create": False}})
    assert not find(objects, "ClusterRoleBinding") and not find(objects, "Role") and not find(objects, "RoleBinding")
    assert check.cross_check(objects, {"rbac": {"create": False}}) == []


# --- Deployment ---------------------------------------------------------------------------------------


def test_deployment_security_context(rendered: Any) -> None:
    _, objects = rendered
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    psc = pod["securityContext"]
    assert psc["runAsNonRoot"] is True
    assert psc["runAsUser"] > 0 and psc["runAsGroup"] > 0
    assert psc["seccompProfile"] == {"type": "RuntimeDefault"}
    assert not pod.get("hostNetwork") and not pod.get("hostPID") and not pod.get("hostIPC")
    for c in pod["containers"]:
        sc = c["securityContext"]
        assert sc["runAsNonRoot"] is True
        assert sc["readOnlyRootFilesystem"] is True
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["capabilities"] == {"drop": ["ALL"]}
        assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
        assert not sc.get("privileged")
        assert c["resources"]["requests"]["cpu"] and c["resources"]["requests"]["memory"]
    # No writable volume at all: only the read-only state key.
    assert [v["name"] for v in pod["volumes"]] == ["state-key"]
    assert all(m["readOnly"] for c in pod["containers"] for m in c["volumeMounts"])


def test_deployment_defaults_run_two_leader_elected_replicas_with_probes() -> None:
    deploy = one(render(), "Deployment")
    assert deploy["spec"]["replicas"] == 2
    c = deploy["spec"]["template"]["spec"]["containers"][0]
    assert {p["name"]: p["containerPort"] for p in c["ports"]} == {"mcp": 8080, "metrics": 9090}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert c["args"] == [
        "operator",
        "--listen=0.0.0.0:8080",
        "--metrics-listen=0.0.0.0:9090",
        "--lease-name=runway-controller",
        f"--lease-namespace={NAMESPACE}",
        "--shards=1",
        "--lease-duration=15s",
        "--lease-renew-deadline=10s",
        "--lease-retry-period=2s",
        "--allowed-host=runway",
        f"--allowed-host=runway.{NAMESPACE}",
        f"--allowed-host=runway.{NAMESPACE}.svc",
        f"--allowed-host=runway.{NAMESPACE}.svc.cluster.local",
        "--task-access=owner",
        "--request-state-ttl=1h",
        "--hold-limit=50s",
        "--state-key-file=/etc/runway/state/state-key",
        "--token-audience=runway",
        "--auth-cache-ttl=10s",
        "--egress-deny=10.0.0.0/8",
        "--egress-deny=172.16.0.0/12",
        "--egress-deny=192.168.0.0/16",
        "--egress-deny=100.64.0.0/10",
        "--egress-deny=fc00::/7",
        "--egress-deny=$(POD_IP)",
        "--log-format=json",
    ]
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in c["env"]}
    assert env == {
        "POD_NAMESPACE": "metadata.namespace",
        "POD_NAME": "metadata.name",
        "POD_IP": "status.podIP",
    }


def test_tokens_for_the_api_server_can_be_accepted_by_choice() -> None:
    c = one(render({"auth": {"tokenAudiences": []}}), "Deployment")
    args = c["spec"]["template"]["spec"]["containers"][0]["args"]
    assert not any(a.startswith("--token-audience") for a in args)


def test_every_option_reaches_the_operator() -> None:
    values = check.all_options()
    c = one(render(values), "Deployment")["spec"]["template"]["spec"]["containers"][0]
    args = c["args"]
    for expected in [
        "--listen=0.0.0.0:8181",
        "--metrics-listen=0.0.0.0:9191",
        "--lease-name=runway-all-controller",
        "--shards=6",
        "--lease-duration=20s",
        "--lease-renew-deadline=12s",
        "--lease-retry-period=3s",
        "--allowed-host=runway-all.runway-system.svc.corp.local",
        "--allowed-host=runway.example.com",
        "--allowed-host=runway.example.com:8443",
        "--allowed-origin=https://console.example.com",
        "--task-access=namespace",
        "--request-state-ttl=15m",
        "--hold-limit=40s",
        "--state-key-file=/etc/runway/state/hmac",
        "--token-audience=runway",
        "--token-audience=https://kubernetes.default.svc",
        "--auth-cache-ttl=30s",
        "--workers=16",
        "--no-step-events",
        "--log-format=text",
        "--allowed-origin=https://tools.example.com",
        "--no-list-tool",
        "--no-list-tool-in=team-b",
        "--no-console",
        "--egress-allow=10.0.0.0/8",
        "--egress-deny=10.20.0.0/16",
        "--egress-proxy=http://proxy.corp.example:3128",
    ]:
        assert expected in args, expected
    assert "--egress-deny=$(POD_IP)" not in args
    assert c["image"] == "runway/operator@" + values["image"]["digest"]


def test_leader_election_off_for_a_single_replica_and_refused_for_more() -> None:
    objects = render({"replicaCount": 1, "leaderElection": {"enabled": False}})
    args = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert "--no-leader-election" in args and not any(a.startswith("--lease") for a in args)
    assert not find(objects, "Role") and not find(objects, "PodDisruptionBudget")
    with pytest.raises(helm.HelmRenderError, match="leaderElection"):
        render({"replicaCount": 2, "leaderElection": {"enabled": False}})


def test_existing_service_account() -> None:
    values = {"serviceAccount": {"create": False, "name": "platform-runway"}}
    objects = render(values)
    assert not find(check.installed(objects), "ServiceAccount")
    assert one(objects, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"] == "platform-runway"
    assert one(objects, "ClusterRoleBinding")["subjects"][0]["name"] == "platform-runway"
    assert check.cross_check(objects, values) == []
    with pytest.raises(helm.HelmRenderError, match="serviceAccount.name"):
        render({"serviceAccount": {"create": False}})


# --- the requestState key -------------------------------------------------------------------------------


def test_state_key_secret_is_random_and_long_enough() -> None:
    keys = set()
    for _ in range(2):
        secret = one(render(), "Secret")
        key = base64.b64decode(secret["data"]["state-key"])
        assert len(key) == 48 and key.isalnum()
        keys.add(key)
    assert len(keys) == 2  # a fresh install gets a fresh key; upgrades keep it through `lookup`


def test_state_key_secret_template_keeps_the_key_on_upgrade() -> None:
    # Offline rendering has no cluster to look the Secret up in, so check the template keeps the
    # looked-up value when there is one.
    text = (check.CHART / "templates" / "secret.yaml").read_text()
    assert 'lookup "v1" "Secret" .Release.Namespace $name' in text
    assert "$value = index $existing.data .Values.stateKey.key" in text
    assert "randAlphaNum 48" in text


def test_existing_state_key_secret() -> None:
    values = {"stateKey": {"existingSecret": "my-key", "key": "hmac"}}
    objects = render(values)
    assert not find(objects, "Secret")
    pod = one(objects, "Deployment")["spec"]["template"]["spec"]
    assert pod["volumes"][0]["secret"]["secretName"] == "my-key"
    assert "--state-key-file=/etc/runway/state/hmac" in pod["containers"][0]["args"]


# --- optional objects ------------------------------------------------------------------------------------


def test_optional_objects_are_off_by_default_and_on_with_all_options() -> None:
    defaults = {o["kind"] for o in render()}
    everything = {o["kind"] for o in render(check.all_options())}
    assert "ServiceMonitor" not in defaults and "NetworkPolicy" not in defaults
    assert {"ServiceMonitor", "NetworkPolicy", "PodDisruptionBudget"} <= everything
    assert {"ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"} <= defaults
    no_policy = {o["kind"] for o in render({"admissionPolicy": {"enabled": False}})}
    assert "ValidatingAdmissionPolicy" not in no_policy
    assert "WARNING" in check.notes({"admissionPolicy": {"enabled": False}})


def test_mcp_service_and_metrics_service_are_apart() -> None:
    objects = render()
    mcp = one(objects, "Service", "runway")
    metrics = one(objects, "Service", "runway-metrics")
    assert [p["targetPort"] for p in mcp["spec"]["ports"]] == ["mcp"]
    assert [p["targetPort"] for p in metrics["spec"]["ports"]] == ["metrics"]


# --- traces, alerts and the dashboard ---------------------------------------------------------------------


def test_tracing_sets_the_standard_otel_environment() -> None:
    values = check.all_options()
    container = one(render(values), "Deployment")["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e for e in container["env"]}
    assert env["OTEL_EXPORTER_OTLP_ENDPOINT"]["value"] == "http://otel-collector.observability:4318"
    assert env["OTEL_EXPORTER_OTLP_PROTOCOL"]["value"] == "http/protobuf"
    assert env["OTEL_TRACES_SAMPLER"]["value"] == "parentbased_traceidratio"
    assert env["OTEL_TRACES_SAMPLER_ARG"]["value"] == "0.25"
    assert env["OTEL_EXPORTER_OTLP_HEADERS"]["valueFrom"]["secretKeyRef"] == {"name": "otlp-auth", "key": "headers"}
    assert (
        env["OTEL_RESOURCE_ATTRIBUTES"]["value"]
        == f"k8s.namespace.name={NAMESPACE},k8s.pod.name=$(POD_NAME),deployment.environment=test"
    )
    # POD_NAME is defined before the variable that expands it.
    names = [e["name"] for e in container["env"]]
    assert names.index("POD_NAME") < names.index("OTEL_RESOURCE_ATTRIBUTES")
    defaults = one(render(), "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert not any(e["name"].startswith("OTEL_") for e in defaults["env"])
    with pytest.raises(helm.HelmRenderError, match="tracing.endpoint"):
        render({"tracing": {"enabled": True}})


def test_the_archive_url_comes_from_a_secret_with_its_retention() -> None:
    values = check.all_options()
    container = one(render(values), "Deployment")["spec"]["template"]["spec"]["containers"][0]
    env = {e["name"]: e for e in container["env"]}
    assert env["RUNWAY_ARCHIVE"]["valueFrom"]["secretKeyRef"] == {"name": "runway-archive", "key": "postgres-url"}
    assert "--archive-max-age=720h" in container["args"]
    assert "--archive-max-per-namespace=5000" in container["args"]
    # The URL carries a password: never an argument, never a plain value.
    assert not any("postgres" in a for a in container["args"])
    defaults = one(render(), "Deployment")["spec"]["template"]["spec"]["containers"][0]
    assert "RUNWAY_ARCHIVE" not in {e["name"] for e in defaults["env"]}
    assert not any(a.startswith("--archive") for a in defaults["args"])


def test_alerts_and_dashboard_are_optional_and_read_runway_metrics() -> None:
    assert not find(render(), "PrometheusRule") and not find(render(), "ConfigMap")
    objects = render(check.all_options())
    rules = one(objects, "PrometheusRule")["spec"]["groups"][0]["rules"]
    assert {r["alert"] for r in rules} == {
        "RunwayRunsFailing",
        "RunwayRunsQueuedWithoutStarting",
        "RunwayReconcileErrors",
        "RunwayShardWithoutHolder",
        "RunwayOperatorAbsent",
        "RunwayMCPServerErrors",
        "RunwayControllerBacklog",
    }
    assert "> 0.5" in next(r for r in rules if r["alert"] == "RunwayRunsFailing")["expr"]
    for rule in rules:
        assert "runway_" in rule["expr"] and rule["labels"]["severity"] in ("warning", "critical")
    dashboard = one(objects, "ConfigMap")
    assert dashboard["metadata"]["namespace"] == "monitoring"
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    board = json.loads(dashboard["data"]["runway.json"])
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    assert len(exprs) >= 15 and all("runway_" in e for e in exprs)


# --- Chart.yaml -----------------------------------------------------------------------------------------


def test_artifact_hub_annotations_match_the_chart() -> None:
    chart = yaml.safe_load((check.CHART / "Chart.yaml").read_text())
    annotations = chart["annotations"]
    assert annotations["artifacthub.io/license"] == "Apache-2.0"
    # The image Artifact Hub lists is the one the chart installs by default.
    images = yaml.safe_load(annotations["artifacthub.io/images"])
    default = one(render(), "Deployment")["spec"]["template"]["spec"]["containers"][0]["image"]
    assert images == [{"name": "runway", "image": default}]
    assert default == f"runway:{chart['appVersion']}"
    # The CRDs it lists are the ones the chart ships.
    listed = {(c["name"], c["kind"], c["version"]) for c in yaml.safe_load(annotations["artifacthub.io/crds"])}
    shipped = set()
    for path in sorted((check.CHART / "crds").glob("*.yaml")):
        crd = yaml.safe_load_all(path.read_text())
        for doc in crd:
            if doc:
                for version in doc["spec"]["versions"]:
                    shipped.add((doc["metadata"]["name"], doc["spec"]["names"]["kind"], version["name"]))
    assert listed == shipped
    for example in yaml.safe_load(annotations["artifacthub.io/crdsExamples"]):
        assert check.validate_runway_object(example) == [], example


def test_chart_and_binary_versions_agree() -> None:
    chart = yaml.safe_load((check.CHART / "Chart.yaml").read_text())
    cargo = (check.ROOT / "Cargo.toml").read_text()
    version = next(line.split('"')[1] for line in cargo.splitlines() if line.startswith("version = "))
    assert chart["appVersion"] == version
    assert f"## [{version}]" in (check.ROOT / "CHANGELOG.md").read_text()


# --- helm test -----------------------------------------------------------------------------------------


def _selects(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def test_helm_test_checks_readiness_and_discovery_with_a_token_for_runway() -> None:
    objects = render()
    pod = one(objects, "Pod")
    account = one(objects, "ServiceAccount", "runway-test")
    for hook in (pod, account):
        annotations = hook["metadata"]["annotations"]
        assert annotations["helm.sh/hook"] == "test"
        assert "hook-succeeded" in annotations["helm.sh/hook-delete-policy"]
    deployment = one(objects, "Deployment")
    operator = deployment["spec"]["template"]["spec"]
    spec = pod["spec"]
    container = spec["containers"][0]
    # The operator's own image, running its `runway check` against both Services.
    assert container["image"] == operator["containers"][0]["image"]
    assert container["args"] == [
        "check",
        f"--ready=http://runway-metrics.{NAMESPACE}.svc:9090/readyz",
        f"--url=http://runway.{NAMESPACE}.svc:80/mcp",
        "--token-file=/var/run/secrets/runway/token",
    ]
    # Its own ServiceAccount, no API token mounted; a projected token for Runway's audience.
    assert spec["serviceAccountName"] == "runway-test" and spec["automountServiceAccountToken"] is False
    source = spec["volumes"][0]["projected"]["sources"][0]["serviceAccountToken"]
    assert source == {"path": "token", "expirationSeconds": 600, "audience": "runway"}
    assert container["volumeMounts"][0]["mountPath"] == "/var/run/secrets/runway"
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    # No Service and no ReplicaSet of the Deployment may take the test Pod for an operator.
    labels = pod["metadata"]["labels"]
    for service in find(objects, "Service"):
        assert not _selects(service["spec"]["selector"], labels)
    assert not _selects(deployment["spec"]["selector"]["matchLabels"], labels)
    # No role is bound to it: discovery needs only a token Runway accepts.
    for binding in find(objects, "RoleBinding") + find(objects, "ClusterRoleBinding"):
        assert all(s.get("name") != "runway-test" for s in binding.get("subjects", []))
    # Without audiences (tokens for the API server accepted), the token carries none.
    source = one(render({"auth": {"tokenAudiences": []}}), "Pod")["spec"]["volumes"][0]["projected"]["sources"][0]
    assert "audience" not in source["serviceAccountToken"]
    assert not find(render({"tests": {"enabled": False}}), "Pod")


def test_a_network_policy_that_narrows_the_peers_still_admits_the_test_pod() -> None:
    objects = render(check.all_options())
    pod_labels = one(objects, "Pod")["metadata"]["labels"]
    rules = one(objects, "NetworkPolicy")["spec"]["ingress"]
    admitted = [
        {p["port"] for p in rule["ports"]}
        for rule in rules
        if any("namespaceSelector" not in peer and _selects(peer["podSelector"]["matchLabels"], pod_labels) for peer in rule.get("from", []))
    ]
    assert admitted == [{"mcp", "metrics"}]


# --- values.schema.json ---------------------------------------------------------------------------------


# Values that are free-form maps: their keys are the user's, not the chart's.
FREE_FORM = {"annotations", "labels", "podLabels", "podAnnotations", "nodeSelector", "affinity", "requests", "limits"}


def leaf_paths(values: Any, prefix: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
    """Paths of the values a user sets: into nested settings objects, not into free-form maps/lists."""
    if isinstance(values, dict) and values and (not prefix or prefix[-1] not in FREE_FORM):
        out: set[tuple[str, ...]] = set()
        for k, v in values.items():
            out |= leaf_paths(v, (*prefix, k))
        return out
    return {prefix}


def schema_at(schema: dict[str, Any], path: tuple[str, ...]) -> dict[str, Any] | None:
    node = schema
    for part in path:
        props = node.get("properties", {})
        if part not in props:
            return None
        node = props[part]
    return node


def test_schema_describes_every_value() -> None:
    schema = json.loads((check.CHART / "values.schema.json").read_text())
    defaults = yaml.safe_load((check.CHART / "values.yaml").read_text())
    for path in leaf_paths(defaults) | leaf_paths(check.all_options()):
        node = schema_at(schema, path)
        assert node is not None, f"values.schema.json has no entry for {'.'.join(path)}"
        assert node.get("description"), f"values.schema.json: {'.'.join(path)} has no description"


def test_all_options_sets_every_value() -> None:
    defaults = yaml.safe_load((check.CHART / "values.yaml").read_text())
    assert leaf_paths(defaults) <= leaf_paths(check.all_options()), leaf_paths(defaults) - leaf_paths(check.all_options())


@pytest.mark.parametrize(
    "bad",
    [
        {"mcp": {"taskAccess": "everyone"}},
        {"mcp": {"requestStateTTL": "an hour"}},
        {"mcp": {"holdLimit": "50 seconds"}},
        {"logFormat": "xml"},
        {"replicaCount": 0},
        {"unknownValue": True},
        {"mcp": {"port": 70000}},
        {"auth": {"cacheTTL": "ten seconds"}},
        {"admissionPolicy": {"validationActions": ["Allow"]}},
        {"podSecurityContext": {"runAsUser": 0, "runAsGroup": 0}},
        {"image": {"digest": "latest"}},
        {"mcp": {"allowedOrigins": ["console.example.com"]}},
        {"mcp": {"listToolDisabledIn": ["Team_B"]}},
        {"mcp": {"console": "yes"}},
    ],
)
def test_schema_refuses_bad_values(bad: dict[str, Any]) -> None:
    with helm.Chart.load(check.CHART) as chart:
        with pytest.raises(helm.HelmValuesError):
            chart.validate_schema(bad)


def test_values_file_and_schema_are_in_the_chart() -> None:
    with helm.Chart.load(check.CHART) as chart:
        assert chart.schema is not None
        assert chart.metadata["kubeVersion"] == ">=1.30.0-0"
    assert Path(check.CHART / "crds").is_dir()
