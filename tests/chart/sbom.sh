#!/usr/bin/env bash
# `make sbom`: the CycloneDX bill of materials of the runway binary, from Cargo.lock, with
# cargo-cyclonedx; then tests/chart/sbom.py checks it against the CycloneDX schema and against
# the dependency graph cargo itself resolves.
#
#   tests/chart/sbom.sh CARGO_CYCLONEDX OUT_DIR
set -euo pipefail
cd "$(dirname "$0")/../.."
tool=$1
out=$2
mkdir -p "$out"
# The crates that ship: normal dependencies for the image's target, no build-only or dev crates.
"$tool" cyclonedx --quiet --format json --spec-version 1.5 --no-build-deps \
  --target x86_64-unknown-linux-gnu --override-filename runway.cdx
mv runway.cdx.json "$out/runway.cdx.json"
.cache/chart-venv/bin/python tests/chart/sbom.py "$out/runway.cdx.json"
