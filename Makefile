# Runway developer commands. CI (.ci/run) runs `make test`, `make chart-check` and `make conformance`.

CARGO ?= cargo
RUNWAY := target/debug/runway

.PHONY: build run test lint fmt-check clippy doc crds crds-check unit conformance clean

build:
	$(CARGO) build

## Run the embedded server with the examples on 127.0.0.1:8080.
run: build
	$(RUNWAY) serve --workflows examples --db runway.db --listen 127.0.0.1:8080 --no-auth

## Everything CI checks: formatting, lints, API docs without warnings, generated CRDs, all
## tests (tests/integration/layering.rs among them keeps the module graph one-way).
test: fmt-check clippy doc crds-check unit

fmt-check:
	$(CARGO) fmt --all -- --check

clippy:
	$(CARGO) clippy --all-targets --features e2e -- -D warnings

doc:
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --no-deps --lib

unit:
	$(CARGO) test --all-targets

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
## policy (tests/chart/). Installs the pinned Python packages into .cache/chart-venv.
CHART_VENV := .cache/chart-venv
.PHONY: chart-check
chart-check: $(CHART_VENV)/.installed
	$(CHART_VENV)/bin/python tests/chart/check.py
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

## The e2e tier on a real Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager
## from KUBEBUILDER_ASSETS; default .cache/k8s when it holds them). See docs/kubernetes.md.
K8S_ASSETS ?= $(CURDIR)/.cache/k8s
.PHONY: e2e
e2e: $(CHART_VENV)/.installed
	$(CHART_VENV)/bin/python tests/chart/render.py target/e2e/chart.yaml
	KUBEBUILDER_ASSETS="$${KUBEBUILDER_ASSETS:-$(K8S_ASSETS)}" $(CARGO) test --no-fail-fast --features e2e --test e2e --test e2e_failover

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
