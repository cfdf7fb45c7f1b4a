"""Render the chart as a cluster admin would install it, for the e2e tier (`make e2e`).

Writes every object `helm install` creates except the Deployment (hooks such as the `helm test`
Pod are left out too) to the file named by the first argument:
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
    objects = [o for o in installed(render()) if o["kind"] != "Deployment"]
    for o in objects:
        o.pop("__source__", None)
    out.parent.mkdir(parents=True, exist_ok=True)
    header = f"# The chart rendered as release {RELEASE!r} in namespace {NAMESPACE!r}, without its Deployment.\n"
    out.write_text(header + yaml.safe_dump_all(objects, sort_keys=False))


if __name__ == "__main__":
    main()
