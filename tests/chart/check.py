"""Chart checks: lint charts/runway with the Helm v4 engine, render it with its defaults and with
tests/chart/all-options.yaml, and validate every rendered manifest's shape.

Run through `make chart-check`, which installs the pinned Python packages of
tests/chart/requirements.txt into a virtualenv, runs this script, then the pytest tests beside it
(RBAC, security context, the admission policy's CEL). The helpers here are what those tests use.

Shape validation: each rendered object must be a known apiVersion/kind with its required fields
(tests/chart/kinds.py); Runway's own kinds (the examples' Workflows, the test fixtures' Runs) are
checked against the openAPIV3Schema of the generated CRDs in crds/; cross-references between
objects (selectors, ports, roleRefs, the policy binding, the state key volume) must resolve.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any, Iterator

import helm_python as helm
import jsonschema
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from kinds import KINDS, POD_TEMPLATE  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "runway"
CRDS = ROOT / "crds"
EXAMPLES = ROOT / "examples"
ALL_OPTIONS = Path(__file__).resolve().parent / "all-options.yaml"

RELEASE = "runway"
NAMESPACE = "runway-system"
# The oldest Kubernetes the chart supports (Chart.yaml kubeVersion).
KUBE_VERSION = "v1.30.0"

Manifest = dict[str, Any]


class CheckError(Exception):
    """A chart check failed; the message says which and why."""


def all_options() -> dict[str, Any]:
    """The values file that turns every option on."""
    return yaml.safe_load(ALL_OPTIONS.read_text())


def value_sets() -> dict[str, dict[str, Any] | None]:
    """The values the chart is checked with: its defaults, and every option on."""
    return {"defaults": None, "all-options": all_options()}


def lint(values: dict[str, Any] | None) -> None:
    """`helm lint --strict`: warnings and errors fail; info messages (like a missing icon) do not."""
    report = helm.lint(CHART, values, strict=True, namespace=NAMESPACE, kube_version=KUBE_VERSION)
    problems = [m for m in report.get("messages", []) if m.get("severity", 0) >= 2]
    problems += [{"error": e} for e in report.get("errors") or []]
    if problems:
        raise CheckError("helm lint: " + "; ".join(f"{m.get('path', '')}: {m['error']}" for m in problems))


def render(values: dict[str, Any] | None = None, *, upgrade: bool = False) -> list[Manifest]:
    """Validate the values against values.schema.json and render the chart offline.

    Returns the rendered objects, each with the template it came from under `__source__`.
    """
    with helm.Chart.load(CHART) as chart:
        chart.validate_schema(values)
        rendered = chart.render(
            values,
            name=RELEASE,
            namespace=NAMESPACE,
            is_install=not upgrade,
            is_upgrade=upgrade,
        )
    objects: list[Manifest] = []
    for source, text in sorted(rendered.items()):
        if not source.endswith((".yaml", ".yml")):
            continue  # NOTES.txt
        for doc in yaml.safe_load_all(text):
            if doc is None:
                continue
            if not isinstance(doc, dict):
                raise CheckError(f"{source}: a document is not an object: {doc!r}")
            doc["__source__"] = source
            objects.append(doc)
    return objects


def notes(values: dict[str, Any] | None = None) -> str:
    """The rendered NOTES.txt."""
    with helm.Chart.load(CHART) as chart:
        rendered = chart.render(values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    return next(text for source, text in rendered.items() if source.endswith("NOTES.txt"))


def chart_crds() -> list[dict[str, str]]:
    """The CRD files the chart ships (`crds/`), as Helm loads them."""
    with helm.Chart.load(CHART) as chart:
        return chart.crds


def is_hook(obj: Manifest) -> bool:
    """Whether Helm keeps `obj` for a hook (`helm test`…) instead of installing it."""
    return "helm.sh/hook" in obj["metadata"].get("annotations", {})


def installed(objects: list[Manifest]) -> list[Manifest]:
    """What `helm install` creates: the objects that are not hooks."""
    return [o for o in objects if not is_hook(o)]


def find(objects: list[Manifest], kind: str, name: str | None = None) -> list[Manifest]:
    """Objects of a kind (and name)."""
    return [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]


def one(objects: list[Manifest], kind: str, name: str | None = None) -> Manifest:
    """The one object of a kind (and name)."""
    found = find(objects, kind, name)
    if len(found) != 1:
        raise CheckError(f"expected one {kind} {name or ''}, found {len(found)}")
    return found[0]


# --- Runway's own kinds: the CRD schemas --------------------------------------------------------


def _structural_to_jsonschema(node: Any, top: bool = False) -> Any:
    """Turn a CRD openAPIV3Schema into a JSON Schema with the API server's semantics:
    `nullable` admits null, objects with `properties` reject unknown fields (strict field
    validation) unless `x-kubernetes-preserve-unknown-fields`, and the top level admits
    apiVersion, kind and metadata."""
    if isinstance(node, list):
        return [_structural_to_jsonschema(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _structural_to_jsonschema(v) for k, v in node.items() if not k.startswith("x-kubernetes-")}
    for key in ("properties", "patternProperties"):
        if key in node:
            out[key] = {name: _structural_to_jsonschema(s) for name, s in node[key].items()}
    if node.get("x-kubernetes-int-or-string"):
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if node.get("nullable"):
        if "type" in out:
            out["type"] = [out["type"], "null"]
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
    out.pop("nullable", None)
    if top:
        out.setdefault("properties", {})
        out["properties"].update({"apiVersion": {"type": "string"}, "kind": {"type": "string"}, "metadata": {"type": "object"}})
    if (
        "properties" in node
        and "additionalProperties" not in node
        and not node.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


def crd_schemas() -> dict[tuple[str, str], jsonschema.protocols.Validator]:
    """(apiVersion, kind) → a validator of the CRD's openAPIV3Schema, for every CRD in crds/."""
    validators = {}
    for path in sorted(CRDS.glob("*.yaml")):
        for crd in yaml.safe_load_all(path.read_text()):
            if not crd:
                continue
            group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
            for version in crd["spec"]["versions"]:
                schema = _structural_to_jsonschema(version["schema"]["openAPIV3Schema"], top=True)
                validators[(f"{group}/{version['name']}", kind)] = jsonschema.Draft7Validator(schema)
    return validators


_CRD_SCHEMAS: dict[tuple[str, str], jsonschema.protocols.Validator] | None = None


def validate_runway_object(obj: Manifest) -> list[str]:
    """Errors of a Runway object (Workflow, Run) against its CRD schema."""
    global _CRD_SCHEMAS
    if _CRD_SCHEMAS is None:
        _CRD_SCHEMAS = crd_schemas()
    validator = _CRD_SCHEMAS.get((obj.get("apiVersion"), obj.get("kind")))
    if validator is None:
        return [f"unknown Runway kind {obj.get('apiVersion')}/{obj.get('kind')}"]
    body = {k: v for k, v in obj.items() if k != "__source__"}
    errors = [f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}" for e in validator.iter_errors(body)]
    # A job step's pod template is kept verbatim by the CRD: check it as the pod template it is.
    for i, step in enumerate([*body.get("spec", {}).get("steps", []), *body.get("spec", {}).get("finally", [])]):
        if isinstance(step, dict) and isinstance(step.get("job"), dict):
            for e in jsonschema.Draft7Validator(POD_TEMPLATE).iter_errors(step["job"].get("template")):
                errors.append(f"step {step.get('name', i)}: job.template/{'/'.join(map(str, e.absolute_path))}: {e.message}")
    return errors


# --- Kubernetes kinds -----------------------------------------------------------------------------


def validate_object(obj: Manifest) -> list[str]:
    """Errors of one rendered object: unknown kind, missing or misspelt fields."""
    key = (obj.get("apiVersion"), obj.get("kind"))
    if key[0] and key[0].startswith("runway.dev/"):
        return validate_runway_object(obj)
    schema = KINDS.get(key)
    if schema is None:
        return [f"unknown apiVersion/kind {key[0]}/{key[1]}"]
    body = {k: v for k, v in obj.items() if k != "__source__"}
    return [
        f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
        for e in jsonschema.Draft7Validator(schema).iter_errors(body)
    ]


def _subset(labels: dict[str, str], of: dict[str, str]) -> bool:
    return all(of.get(k) == v for k, v in labels.items())


def cross_check(objects: list[Manifest], values: dict[str, Any] | None) -> list[str]:
    """References between rendered objects that must resolve."""
    errors: list[str] = []
    merged = merged_values(values)
    names = {(o["kind"], o["metadata"]["name"]) for o in objects}
    deploy = one(objects, "Deployment")
    pod = deploy["spec"]["template"]
    pod_labels = pod["metadata"]["labels"]
    container = pod["spec"]["containers"][0]
    port_names = {p["name"] for p in container.get("ports", [])}

    if not _subset(deploy["spec"]["selector"]["matchLabels"], pod_labels):
        errors.append("Deployment selector does not match its pod template labels")
    for svc in find(objects, "Service"):
        if not _subset(svc["spec"]["selector"], pod_labels) or not svc["spec"]["selector"]:
            errors.append(f"Service {svc['metadata']['name']} selects no operator pod")
        for port in svc["spec"]["ports"]:
            if isinstance(port.get("targetPort"), str) and port["targetPort"] not in port_names:
                errors.append(f"Service {svc['metadata']['name']}: targetPort {port['targetPort']} is no container port")
        if len(svc["metadata"]["name"]) > 63:
            errors.append(f"Service name {svc['metadata']['name']} is longer than 63 characters")
    for probe in ("livenessProbe", "readinessProbe"):
        port = container[probe]["httpGet"]["port"]
        if isinstance(port, str) and port not in port_names:
            errors.append(f"{probe} port {port} is no container port")
    for sm in find(objects, "ServiceMonitor"):
        selected = [s for s in find(objects, "Service") if _subset(sm["spec"]["selector"]["matchLabels"], s["metadata"]["labels"])]
        if len(selected) != 1:
            errors.append(f"ServiceMonitor selects {len(selected)} Services, not exactly the metrics one")
        else:
            svc_ports = {p.get("name") for p in selected[0]["spec"]["ports"]}
            for ep in sm["spec"]["endpoints"]:
                if ep["port"] not in svc_ports:
                    errors.append(f"ServiceMonitor port {ep['port']} is not a port of {selected[0]['metadata']['name']}")
    for np in find(objects, "NetworkPolicy"):
        if not _subset(np["spec"]["podSelector"]["matchLabels"], pod_labels):
            errors.append("NetworkPolicy does not select the operator pods")
        for rule in np["spec"].get("ingress", []):
            for port in rule.get("ports", []):
                if isinstance(port["port"], str) and port["port"] not in port_names:
                    errors.append(f"NetworkPolicy port {port['port']} is no container port")
    for pdb in find(objects, "PodDisruptionBudget"):
        if not _subset(pdb["spec"]["selector"]["matchLabels"], pod_labels):
            errors.append("PodDisruptionBudget does not select the operator pods")

    sa = pod["spec"]["serviceAccountName"]
    if merged["serviceAccount"]["create"] and ("ServiceAccount", sa) not in names:
        errors.append(f"the pods' ServiceAccount {sa} is not rendered")
    for binding in find(objects, "ClusterRoleBinding") + find(objects, "RoleBinding"):
        ref = binding["roleRef"]
        if (ref["kind"], ref["name"]) not in names:
            errors.append(f"{binding['kind']} {binding['metadata']['name']} refers to {ref['kind']} {ref['name']}, which is not rendered")
        for subject in binding.get("subjects", []):
            if subject["kind"] == "ServiceAccount" and (subject["name"], subject.get("namespace")) != (sa, NAMESPACE):
                errors.append(f"{binding['kind']} {binding['metadata']['name']} binds {subject['name']}, not the operator's ServiceAccount")
    for policy in ("ValidatingAdmissionPolicy", "MutatingAdmissionPolicy"):
        for b in find(objects, f"{policy}Binding"):
            if (policy, b["spec"]["policyName"]) not in names:
                errors.append(f"binding {b['metadata']['name']} refers to a policy that is not rendered")

    volumes = {v["name"]: v for v in pod["spec"].get("volumes", [])}
    for mount in container.get("volumeMounts", []):
        if mount["name"] not in volumes:
            errors.append(f"volumeMount {mount['name']} has no volume")
    secret_name = volumes["state-key"]["secret"]["secretName"]
    key = merged["stateKey"]["key"]
    if merged["stateKey"]["existingSecret"]:
        if secret_name != merged["stateKey"]["existingSecret"]:
            errors.append("the state key volume does not use stateKey.existingSecret")
    else:
        secret = find(objects, "Secret", secret_name)
        if not secret or key not in secret[0].get("data", {}):
            errors.append(f"the state key volume's Secret {secret_name} with key {key} is not rendered")
    mount_path = next(m["mountPath"] for m in container["volumeMounts"] if m["name"] == "state-key")
    if f"--state-key-file={mount_path}/{key}" not in container["args"]:
        errors.append("--state-key-file does not point into the state key volume")
    return errors


def merged_values(values: dict[str, Any] | None) -> dict[str, Any]:
    """The chart defaults coalesced with `values`, as an install would use them."""
    with helm.Chart.load(CHART) as chart:
        return chart.merge_values(copy.deepcopy(values) if values else None)


def check_values(label: str, values: dict[str, Any] | None) -> list[Manifest]:
    """Lint, render and validate the chart with one set of values; raise on any problem."""
    lint(values)
    objects = render(values)
    errors = []
    for obj in objects:
        for e in validate_object(obj):
            errors.append(f"{obj['__source__']}: {obj.get('kind')} {obj.get('metadata', {}).get('name')}: {e}")
    errors += cross_check(objects, values)
    if errors:
        raise CheckError(f"{label}:\n  " + "\n  ".join(errors))
    return objects


def example_objects() -> Iterator[tuple[str, Manifest]]:
    """Every object in examples/*.yaml."""
    for path in sorted(EXAMPLES.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc:
                yield path.name, doc


def check_crds() -> int:
    """The chart's CRDs are the generated ones, byte for byte, and well-formed."""
    generated = {p.name: p.read_text() for p in CRDS.glob("*.yaml")}
    shipped = {Path(c["filename"]).name: c["data"] for c in chart_crds()}
    if not generated:
        raise CheckError("crds/ holds no CRDs")
    if shipped != generated:
        raise CheckError("charts/runway/crds/ differs from crds/: run make crds")
    count = 0
    for name, text in shipped.items():
        for doc in yaml.safe_load_all(text):
            if doc:
                errors = validate_object(doc)
                if errors:
                    raise CheckError(f"charts/runway/crds/{name}: " + "; ".join(errors))
                count += 1
    return count


def check_examples() -> int:
    """Every example object is valid: Runway's kinds against their CRD schema, others (the
    Secret an example reads) against their kind's shape, in the namespace kubectl would use."""
    count = 0
    for name, obj in example_objects():
        if not str(obj.get("apiVersion", "")).startswith("runway.dev/"):
            obj = copy.deepcopy(obj)
            obj.setdefault("metadata", {}).setdefault("namespace", "default")
        errors = validate_object(obj)
        if errors:
            raise CheckError(f"examples/{name}: " + "; ".join(errors))
        count += 1
    return count


def main() -> int:
    try:
        for label, values in value_sets().items():
            objects = check_values(label, values)
            kinds = sorted({o["kind"] for o in objects})
            print(f"chart-check: {label}: lint clean, {len(objects)} objects valid ({', '.join(kinds)})")
        print(f"chart-check: {check_crds()} CRDs in the chart match crds/")
        print(f"chart-check: {check_examples()} example objects are valid (Runway kinds against the CRD schemas)")
    except (CheckError, helm.HelmError) as e:
        print(f"chart-check: FAILED: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
