"""Schema compatibility of two releases' CustomResourceDefinitions.

`python crd_compat.py OLD_DIR NEW_DIR` compares every CRD of OLD_DIR with the one of the same
name in NEW_DIR and exits 1, naming each change, when the new one could refuse, prune or
misread an object the old one accepted: a served version or the storage version gone, a
property removed, a type or format changed, a field newly required, an enum narrowed, a bound
tightened, a pattern or a CEL rule added or changed, unknown fields no longer preserved. Those
changes need a new API version and a conversion (docs/operations.md, "Upgrading"). Widening
(new optional fields, looser bounds, descriptions) passes.

`--accept FILE` names changes that were reviewed and let through (one line of the output per
line, `#` comments): a bound added within v1alpha1 that no object Runway writes can exceed, say.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

# Bounds a newer schema may only loosen: (keyword, True when a larger value is looser).
UPPER = ("maximum", "maxLength", "maxItems", "maxProperties")
LOWER = ("minimum", "minLength", "minItems", "minProperties")
# Integer formats that mean the same to the API server (it checks none of them); the change of
# `uint32` (which it does not know) to `int64` widens nothing.
SAME_INTEGER_FORMATS = {None, "int32", "int64", "uint8", "uint16", "uint32", "uint64"}


def load_crds(directory: Path) -> dict[str, dict]:
    crds = {}
    for path in sorted(directory.glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "CustomResourceDefinition":
                crds[doc["metadata"]["name"]] = doc
    return crds


def schema_changes(old: dict, new: dict, path: str = "") -> list[str]:
    """What in `new` could refuse, prune or misread a value `old` accepted, one line each."""
    out: list[str] = []
    where = path or "<root>"
    if old.get("type") != new.get("type") and new.get("type") is not None:
        out.append(f"{where}: type {old.get('type')} -> {new.get('type')}")
    old_format, new_format = old.get("format"), new.get("format")
    if old_format != new_format and not (
        old.get("type") == "integer" and {old_format, new_format} <= SAME_INTEGER_FORMATS
    ):
        out.append(f"{where}: format {old_format} -> {new_format}")
    for key in UPPER:
        if key in new and (key not in old or new[key] < old[key]):
            out.append(f"{where}: {key} {old.get(key)} -> {new[key]}")
    for key in LOWER:
        if key in new and (key not in old or new[key] > old[key]):
            out.append(f"{where}: {key} {old.get(key)} -> {new[key]}")
    if "enum" in new and "enum" not in old:
        out.append(f"{where}: enum {new['enum']} added")
    elif "enum" in new:
        lost = [v for v in old["enum"] if v not in new["enum"]]
        if lost:
            out.append(f"{where}: enum no longer allows {lost}")
    if new.get("pattern") is not None and new.get("pattern") != old.get("pattern"):
        out.append(f"{where}: pattern {old.get('pattern')!r} -> {new['pattern']!r}")
    if old.get("nullable") and not new.get("nullable"):
        out.append(f"{where}: no longer nullable")
    if old.get("x-kubernetes-preserve-unknown-fields") and not new.get(
        "x-kubernetes-preserve-unknown-fields"
    ):
        out.append(f"{where}: unknown fields are no longer preserved (they would be pruned)")
    old_rules = {r.get("rule") for r in old.get("x-kubernetes-validations", [])}
    for rule in new.get("x-kubernetes-validations", []):
        if rule.get("rule") not in old_rules:
            out.append(f"{where}: new validation rule {rule.get('rule')!r}")
    new_required = set(new.get("required", [])) - set(old.get("required", []))
    for field in sorted(new_required):
        out.append(f"{where}: {field} is now required")
    old_props, new_props = old.get("properties", {}), new.get("properties", {})
    for name, old_sub in old_props.items():
        sub_path = f"{path}.{name}"
        if name not in new_props:
            if not new.get("x-kubernetes-preserve-unknown-fields"):
                out.append(f"{sub_path}: removed (stored values would be pruned)")
            continue
        out.extend(schema_changes(old_sub, new_props[name], sub_path))
    for key in ("items", "additionalProperties"):
        if isinstance(old.get(key), dict) and isinstance(new.get(key), dict):
            out.extend(schema_changes(old[key], new[key], f"{path}[{key}]"))
        elif isinstance(new.get(key), dict) and key not in old and key == "additionalProperties":
            out.append(f"{where}: additionalProperties now constrained")
    return out


def crd_changes(old: dict, new: dict) -> list[str]:
    """Breaking changes from one CRD to the next, named `<crd> <version> <path>: what`."""
    name = old["metadata"]["name"]
    out: list[str] = []
    if old["spec"].get("scope") != new["spec"].get("scope"):
        out.append(f"{name}: scope {old['spec'].get('scope')} -> {new['spec'].get('scope')}")
    old_names, new_names = old["spec"]["names"], new["spec"]["names"]
    for key in ("kind", "plural"):
        if old_names.get(key) != new_names.get(key):
            out.append(f"{name}: names.{key} {old_names.get(key)} -> {new_names.get(key)}")
    new_versions = {v["name"]: v for v in new["spec"]["versions"]}
    old_storage = [v["name"] for v in old["spec"]["versions"] if v.get("storage")]
    new_storage = [v["name"] for v in new["spec"]["versions"] if v.get("storage")]
    if old_storage != new_storage and not new["spec"].get("conversion", {}).get("webhook"):
        out.append(
            f"{name}: storage version {old_storage} -> {new_storage} without a conversion webhook"
        )
    for v in old["spec"]["versions"]:
        if not v.get("served"):
            continue
        nv = new_versions.get(v["name"])
        if nv is None or not nv.get("served"):
            out.append(f"{name}: version {v['name']} is no longer served")
            continue
        for sub in ("status", "scale"):
            if sub in v.get("subresources", {}) and sub not in nv.get("subresources", {}):
                out.append(f"{name} {v['name']}: subresource {sub} removed")
        old_schema = v.get("schema", {}).get("openAPIV3Schema", {})
        new_schema = nv.get("schema", {}).get("openAPIV3Schema", {})
        out.extend(f"{name} {v['name']} {c}" for c in schema_changes(old_schema, new_schema))
    return out


def compare(old_dir: Path, new_dir: Path) -> list[str]:
    old, new = load_crds(old_dir), load_crds(new_dir)
    out = [f"{n}: removed" for n in old if n not in new]
    for n in old:
        if n in new:
            out.extend(crd_changes(old[n], new[n]))
    return out


def accepted(path: Path | None) -> set[str]:
    if path is None:
        return set()
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return {line for line in lines if line}


def main(argv: list[str]) -> int:
    accept = None
    if len(argv) == 4 and argv[0] == "--accept":
        accept, argv = Path(argv[1]), argv[2:]
    if len(argv) != 2:
        print("usage: crd_compat.py [--accept FILE] OLD_DIR NEW_DIR", file=sys.stderr)
        return 2
    old_dir, new_dir = Path(argv[0]), Path(argv[1])
    reviewed = accepted(accept)
    changes = [c for c in compare(old_dir, new_dir) if c not in reviewed]
    for line in changes:
        print(line)
    if changes:
        print(f"{len(changes)} incompatible change(s) from {old_dir} to {new_dir}", file=sys.stderr)
        return 1
    print(f"{new_dir} accepts everything {old_dir} accepted", end="")
    print(f" (with {len(reviewed)} reviewed change(s))" if reviewed else "")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
