"""The CRD schema-compatibility check: the previous release's CRDs against this tree's, and
that each kind of breaking change is caught."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

import crd_compat
from check import CRDS, ROOT

PREVIOUS = ROOT / "tests" / "e2e" / "upgrade"


def test_this_trees_crds_accept_what_the_previous_release_stored() -> None:
    reviewed = crd_compat.accepted(PREVIOUS / "accepted-changes.txt")
    changes = crd_compat.compare(PREVIOUS / "crds", CRDS)
    assert [c for c in changes if c not in reviewed] == []
    # Every reviewed line is still a change found: a stale list hides nothing.
    assert reviewed <= set(changes)


def run_crd() -> dict:
    return yaml.safe_load((CRDS / "runs.runway.dev.yaml").read_text().split("---", 1)[1])


def schema(crd: dict) -> dict:
    return crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def spec_props(crd: dict) -> dict:
    return schema(crd)["properties"]["spec"]["properties"]


def breaking(change) -> list[str]:
    old = run_crd()
    new = copy.deepcopy(old)
    change(new)
    return crd_compat.crd_changes(old, new)


@pytest.mark.parametrize(
    ("what", "change", "expect"),
    [
        ("a removed field", lambda n: spec_props(n).pop("cancel"), ".spec.cancel: removed"),
        ("a type change", lambda n: spec_props(n)["cancel"].update(type="string"), ".spec.cancel: type object -> string"),
        ("a new required field", lambda n: schema(n)["properties"]["spec"]["required"].append("cancel"), "cancel is now required"),
        ("a lower maximum", lambda n: spec_props(n)["cancel"]["properties"]["reason"].update(maxLength=10), "maxLength 1024 -> 10"),
        ("a new pattern", lambda n: spec_props(n)["cancel"]["properties"]["reason"].update(pattern="^a$"), "pattern None -> '^a$'"),
        ("a new rule", lambda n: schema(n)["properties"]["spec"].setdefault("x-kubernetes-validations", []).append({"rule": "false"}), "new validation rule 'false'"),
        ("no longer served", lambda n: n["spec"]["versions"][0].update(served=False), "version v1alpha1 is no longer served"),
        ("unknown fields pruned", lambda n: spec_props(n)["arguments"].pop("x-kubernetes-preserve-unknown-fields"), "no longer preserved"),
    ],
)
def test_each_breaking_change_is_named(what: str, change, expect: str) -> None:
    found = breaking(change)
    assert any(expect in line for line in found), (what, found)


def test_widening_passes() -> None:
    def widen(n: dict) -> None:
        spec_props(n)["newField"] = {"type": "string"}
        spec_props(n)["cancel"]["properties"]["reason"]["maxLength"] = 4096
        spec_props(n)["cancel"]["description"] = "reworded"

    assert breaking(widen) == []


def test_the_command_fails_on_a_breaking_change_and_passes_with_it_reviewed(tmp_path: Path) -> None:
    old_dir, new_dir = tmp_path / "old", tmp_path / "new"
    old_dir.mkdir()
    new_dir.mkdir()
    crd = run_crd()
    (old_dir / "runs.yaml").write_text(yaml.safe_dump(crd))
    spec_props(crd).pop("cancel")
    (new_dir / "runs.yaml").write_text(yaml.safe_dump(crd))
    assert crd_compat.main([str(old_dir), str(new_dir)]) == 1
    (tmp_path / "ok.txt").write_text("# reviewed\nruns.runway.dev v1alpha1 .spec.cancel: removed (stored values would be pruned)\n")
    assert crd_compat.main(["--accept", str(tmp_path / "ok.txt"), str(old_dir), str(new_dir)]) == 0
