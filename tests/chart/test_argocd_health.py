"""Argo CD health checks (integrations/argocd/runway.dev/<Kind>/health.lua), run by a real Lua
5.4 interpreter against their test cases in Argo CD's format (health_test.yaml and testdata/),
the way Argo CD's own tests run a resource customization. Each input is first checked against
the CRD, so the cases stay objects the API server would store, and the cases of the Run must
cover every phase the CRD allows."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

import check

CUSTOMIZATIONS = check.ROOT / "integrations" / "argocd" / "runway.dev"
LUA = "lua5.4"


def lua_literal(value: Any) -> str:
    """`value` (as decoded from YAML) as a Lua expression, the shape Argo CD hands a script."""
    if value is None:
        return "nil"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        # A JSON string is a valid Lua string once its \u escapes are avoided.
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "{" + ", ".join(lua_literal(v) for v in value) + "}"
    if isinstance(value, dict):
        fields = (f"[{lua_literal(str(k))}] = {lua_literal(v)}" for k, v in value.items())
        return "{" + ", ".join(fields) + "}"
    raise TypeError(f"no Lua form for {value!r}")


def health(script: Path, obj: dict[str, Any]) -> dict[str, str]:
    """What `script` says of `obj`: its `status` and `message`."""
    program = (
        f"obj = {lua_literal(obj)}\n"
        f"local hs = (function()\n{script.read_text()}\nend)()\n"
        'io.write(hs.status, "\\n", hs.message or "")\n'
    )
    out = subprocess.run([LUA, "-"], input=program, capture_output=True, text=True, check=False)
    assert out.returncode == 0, f"{script}: {out.stderr}"
    status, _, message = out.stdout.partition("\n")
    return {"status": status, "message": message}


def cases() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for kind_dir in sorted(CUSTOMIZATIONS.iterdir()):
        spec = yaml.safe_load((kind_dir / "health_test.yaml").read_text())
        found.extend((kind_dir.name, case) for case in spec["tests"])
    return found


def test_lua_is_installed() -> None:
    assert shutil.which(LUA), f"{LUA} is needed (Debian package lua5.4; .ci/run installs it)"


@pytest.mark.parametrize(("kind", "case"), cases(), ids=lambda c: c if isinstance(c, str) else c["inputPath"])
def test_health_script_answers_each_case(kind: str, case: dict[str, Any]) -> None:
    kind_dir = CUSTOMIZATIONS / kind
    obj = yaml.safe_load((kind_dir / case["inputPath"]).read_text())
    assert obj["kind"] == kind
    assert check.validate_runway_object(obj) == [], case["inputPath"]
    assert health(kind_dir / "health.lua", obj) == case["healthStatus"]


def test_every_run_phase_has_a_case() -> None:
    crd = yaml.safe_load((check.CRDS / "runs.runway.dev.yaml").read_text().split("---", 1)[1])
    status = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    phases = set(status["properties"]["phase"]["enum"])
    covered = set()
    for kind, case in cases():
        if kind == "Run":
            obj = yaml.safe_load((CUSTOMIZATIONS / kind / case["inputPath"]).read_text())
            covered.add((obj.get("status") or {}).get("phase", "Pending"))
    assert phases <= covered, sorted(phases - covered)


def test_every_kind_has_a_script_and_cases() -> None:
    kinds = {p.name for p in CUSTOMIZATIONS.iterdir()}
    assert kinds == {"Workflow", "Run"}
    for kind in kinds:
        assert (CUSTOMIZATIONS / kind / "health.lua").is_file()
        assert (CUSTOMIZATIONS / kind / "health_test.yaml").is_file()
