# Runway developer commands. CI (.ci/run) runs `make test`, `make chart-check`, `make conformance`,
# `make sdk`, `make console`, `make sbom` and `make e2e`.

CARGO ?= cargo
RUNWAY := target/debug/runway

.PHONY: build run test lint fmt-check clippy doc crds crds-check unit conformance clean

build:
	$(CARGO) build

## Run the embedded server with the examples on 127.0.0.1:8080.
run: build
	$(RUNWAY) serve --workflows examples --db runway.db --listen 127.0.0.1:8080 --no-auth

## Everything CI checks: formatting, lints, API docs without warnings, generated CRDs, the
## dependencies' licences and sources, all tests (tests/integration/layering.rs among them
## keeps the module graph one-way).
test: fmt-check clippy doc crds-check deny unit

fmt-check:
	$(CARGO) fmt --all -- --check

clippy:
	$(CARGO) clippy --all-targets --features e2e -- -D warnings

doc:
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --no-deps --lib

# Every test binary runs even when one fails, so one failure does not hide others.
unit:
	$(CARGO) test --all-targets --no-fail-fast

## Regenerate crds/ (and the chart's copy) from the Rust types.
crds: build
	$(RUNWAY) crds --dir crds
	cp crds/*.yaml charts/runway/crds/

## Fail when crds/ (or the chart's copy) differs from what the code generates.
crds-check: build
	@tmp=$$(mktemp -d); $(RUNWAY) crds --dir $$tmp; \
	if ! diff -ru crds $$tmp; then echo "crds/ is stale: run make crds" >&2; rm -rf $$tmp; exit 1; fi; \
	if ! diff -ru crds charts/runway/crds; then echo "charts/runway/crds/ is stale: run make crds" >&2; rm -rf $$tmp; exit 1; fi; \
	rm -rf $$tmp

## Lint, render and validate the Helm chart; test its RBAC, security context and admission
## policy, and the Argo CD health checks with lua5.4 (tests/chart/); check that crds/ accepts what the previous release's CRDs accepted. Installs the pinned Python packages into .cache/chart-venv.
CHART_VENV := .cache/chart-venv
.PHONY: chart-check
chart-check: $(CHART_VENV)/.installed
	$(CHART_VENV)/bin/python tests/chart/check.py
	$(CHART_VENV)/bin/python tests/chart/crd_compat.py --accept tests/e2e/upgrade/accepted-changes.txt \
	  tests/e2e/upgrade/crds crds
	$(CHART_VENV)/bin/python -m pytest -q -p no:cacheprovider tests/chart

$(CHART_VENV)/.installed: tests/chart/requirements.txt
	python3 -m venv $(CHART_VENV)
	$(CHART_VENV)/bin/pip install -q --disable-pip-version-check -r tests/chart/requirements.txt
	touch $@

## The official MCP conformance suite against `runway serve` (installs Node and the suite).
conformance: build
	tests/conformance/run.sh

## The official MCP SDKs as clients (TypeScript 1.x, Python 1.x and 2.x, pinned) against
## `runway serve`: both protocol eras, progress, questions, sampling, disconnects, tasks.
.PHONY: sdk
sdk: build
	tests/sdk/run.sh

## The web console and the MCP Apps view in headless Chromium (installs Node, playwright-core,
## the MCP Apps SDK and Debian's chromium when missing); screenshots in target/console/.
.PHONY: console
console: build
	tests/console/run.sh

## Benchmarks against the HTTP, storage and rmcp baselines: release build, a table and
## target/bench/report.json (see docs/performance.md). `make bench BENCH_ARGS=--quick` for a smoke run.
.PHONY: bench
bench:
	$(CARGO) bench --bench runway -- $(BENCH_ARGS)

## The same load generator against `runway operator` replicas on the real control plane of
## the e2e tier (release build, chart RBAC, admission policy): target/bench/kube-report.json.
## `make bench-kube BENCH_ARGS=--quick` for a smoke run. See docs/performance.md.
.PHONY: bench-kube
bench-kube: $(CHART_VENV)/.installed
	$(CHART_VENV)/bin/python tests/chart/render.py target/e2e/chart.yaml
	KUBEBUILDER_ASSETS="$${KUBEBUILDER_ASSETS:-$(K8S_ASSETS)}" $(CARGO) bench --bench runway -- kube $(BENCH_ARGS)

clean:
	$(CARGO) clean

## Tools built from crates.io into .cache/tools, pinned.
TOOLS := $(CURDIR)/.cache/tools
CARGO_DENY_VERSION := 0.20.2
CARGO_CYCLONEDX_VERSION := 0.5.9
$(TOOLS)/bin/cargo-deny:
	$(CARGO) install --locked --quiet --root $(TOOLS) cargo-deny@$(CARGO_DENY_VERSION)
$(TOOLS)/bin/cargo-cyclonedx:
	$(CARGO) install --locked --quiet --root $(TOOLS) cargo-cyclonedx@$(CARGO_CYCLONEDX_VERSION)

## Licences, duplicate crates and sources of every dependency in Cargo.lock (deny.toml).
.PHONY: deny
deny: $(TOOLS)/bin/cargo-deny
	$(TOOLS)/bin/cargo-deny --offline check licenses bans sources

## Known vulnerabilities: Cargo.lock against the RustSec advisory database (fetched from its
## git repository, so this needs network access to it).
.PHONY: audit
audit: $(TOOLS)/bin/cargo-deny
	$(TOOLS)/bin/cargo-deny check advisories

## The bill of materials of the runway binary (CycloneDX JSON from Cargo.lock, the dependencies
## that ship: no dev or build-only crates) in target/sbom/, checked by tests/chart/sbom.py.
.PHONY: sbom
sbom: $(TOOLS)/bin/cargo-cyclonedx $(CHART_VENV)/.installed
	tests/chart/sbom.sh $(TOOLS)/bin/cargo-cyclonedx target/sbom

## The Runway image as a reproducible OCI archive, target/image/runway-<version>.oci.tar, built
## without a container daemon (image/build.sh with umoci); the Dockerfile builds the same image
## with a container builder. IMAGE_PROFILE=dev builds it from a debug binary (the e2e tier does).
IMAGE_PROFILE ?= release
IMAGE_DIR ?= target/image
IMAGE_BIN_DIR = $(if $(filter dev,$(IMAGE_PROFILE)),debug,$(IMAGE_PROFILE))
.PHONY: image
image:
	$(CARGO) build --locked --bin runway --profile $(IMAGE_PROFILE)
	image/build.sh target/$(IMAGE_BIN_DIR)/runway $(IMAGE_DIR)

## The e2e tier on a real Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager
## from KUBEBUILDER_ASSETS; default .cache/k8s when it holds them), with the image built from a
## debug binary for the upgrade test (tests/e2e/upgrade.rs). See docs/kubernetes.md.
K8S_ASSETS ?= $(CURDIR)/.cache/k8s
.PHONY: e2e
e2e: $(CHART_VENV)/.installed
	$(CHART_VENV)/bin/python tests/chart/render.py target/e2e/chart.yaml
	$(MAKE) image IMAGE_PROFILE=dev IMAGE_DIR=target/e2e/image
	KUBEBUILDER_ASSETS="$${KUBEBUILDER_ASSETS:-$(K8S_ASSETS)}" RUNWAY_E2E_IMAGE_DIR=$(CURDIR)/target/e2e/image \
	  $(CARGO) test --no-fail-fast --features e2e --test e2e --test e2e_failover --test e2e_upgrade --test e2e_archive

## The long crash test: `runway serve` killed with SIGKILL CRASH_KILLS times at seeded random
## instants under retried idempotent calls (the short version runs in `make test`).
CRASH_KILLS ?= 50
CRASH_SEED ?= 1
.PHONY: crash-soak
crash-soak:
	RUNWAY_CRASH_KILLS=$(CRASH_KILLS) RUNWAY_CRASH_SEED=$(CRASH_SEED) $(CARGO) test --test integration crash_retry:: -- --nocapture

## Property tests with many more inputs than CI gives them (zero panics expected).
FUZZ_CASES ?= 20000
.PHONY: fuzz-soak
fuzz-soak:
	PROPTEST_CASES=$(FUZZ_CASES) $(CARGO) test --release --test integration properties::
