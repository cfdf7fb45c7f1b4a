"""Check the bill of materials `make sbom` wrote: valid CycloneDX 1.5 JSON, and exactly the
crates the runway binary links — the normal dependencies cargo resolves for the image's target
(`cargo metadata`), each with its version, licence, crates.io checksum and package URL.

    python sbom.py target/sbom/runway.cdx.json
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from cyclonedx.schema import SchemaVersion
from cyclonedx.validation.json import JsonStrictValidator

TARGET = "x86_64-unknown-linux-gnu"


def shipped_crates() -> set[tuple[str, str]]:
    """(name, version) of every crate reachable from runway through normal dependencies."""
    meta = json.loads(
        subprocess.run(
            ["cargo", "metadata", "--format-version", "1", "--locked", "--filter-platform", TARGET],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )
    packages = {p["id"]: p for p in meta["packages"]}
    nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}
    root = next(p["id"] for p in meta["packages"] if p["name"] == "runway")
    seen, todo = set(), [root]
    while todo:
        node = nodes[todo.pop()]
        for dep in node["deps"]:
            if any(k["kind"] is None for k in dep["dep_kinds"]) and dep["pkg"] not in seen:
                seen.add(dep["pkg"])
                todo.append(dep["pkg"])
    return {(packages[i]["name"], packages[i]["version"]) for i in seen}


def main(path: Path) -> int:
    text = path.read_text()
    error = JsonStrictValidator(SchemaVersion.V1_5).validate_str(text)
    if error is not None:
        print(f"{path}: not valid CycloneDX 1.5: {error}", file=sys.stderr)
        return 1
    bom = json.loads(text)
    problems = []
    if bom["metadata"]["component"]["name"] != "runway":
        problems.append("the BOM does not describe runway")
    listed = {(c["name"], c["version"]) for c in bom["components"]}
    expected = shipped_crates()
    problems += [f"missing: {n} {v}" for n, v in sorted(expected - listed)]
    problems += [f"not shipped: {n} {v}" for n, v in sorted(listed - expected)]
    for c in bom["components"]:
        name = f"{c['name']} {c['version']}"
        if not c.get("licenses"):
            problems.append(f"{name}: no licence")
        if not any(h.get("alg") == "SHA-256" for h in c.get("hashes", [])):
            problems.append(f"{name}: no SHA-256 checksum")
        if not c.get("purl", "").startswith(f"pkg:cargo/{c['name']}@{c['version']}"):
            problems.append(f"{name}: package URL {c.get('purl')!r}")
    for p in problems:
        print(p, file=sys.stderr)
    if problems:
        return 1
    print(f"{path}: CycloneDX 1.5, {len(listed)} crates, each with version, licence, checksum and package URL")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
