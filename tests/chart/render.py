"""Render the chart as a cluster admin would install it, for the e2e tier (`make e2e`).

Writes every object `helm install` creates except the Deployment (hooks such as the `helm test`
Pod are left out too) to the file named by the first argument, and the Deployment alone to
`deployment.yaml` beside it, and the alerts (`rules.yaml`, a Prometheus rules file) and the
Grafana dashboard (`dashboard.json`) the chart can install:
the e2e tests run `runway operator` replicas themselves, as the chart's ServiceAccount, and apply
the rest (RBAC, tenant roles, admission policy, state-key Secret, Service) with server-side apply.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from check import NAMESPACE, RELEASE, installed, render  # noqa: E402


def main() -> None:
    out = Path(sys.argv[1])
    # The e2e control plane (Kubernetes 1.36) serves MutatingAdmissionPolicy, which `helm
    # install` would see (`fillRequester: auto`); an offline render cannot, so it is said.
    everything = installed(render({"admissionPolicy": {"fillRequester": True}}))
    for o in everything:
        o.pop("__source__", None)
    objects = [o for o in everything if o["kind"] != "Deployment"]
    out.parent.mkdir(parents=True, exist_ok=True)
    header = f"# The chart rendered as release {RELEASE!r} in namespace {NAMESPACE!r}, without its Deployment.\n"
    out.write_text(header + yaml.safe_dump_all(objects, sort_keys=False))
    # The Deployment beside it: the e2e tier starts the image with its container's args.
    deployment = next(o for o in everything if o["kind"] == "Deployment")
    (out.parent / "deployment.yaml").write_text(yaml.safe_dump(deployment, sort_keys=False))
    # The alerts as a Prometheus rules file and the dashboard, for promtool in the e2e tier.
    monitoring = render({"metrics": {"prometheusRule": {"enabled": True}, "dashboard": {"enabled": True}}})
    rule = next(o for o in monitoring if o["kind"] == "PrometheusRule")
    (out.parent / "rules.yaml").write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}, sort_keys=False))
    board = next(o for o in monitoring if o["kind"] == "ConfigMap")
    (out.parent / "dashboard.json").write_text(board["data"]["runway.json"])


if __name__ == "__main__":
    main()
