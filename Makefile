# groupwarden: one entry point for humans and CI. `make help` lists the targets.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml | sha1sum | cut -c1-12)
DEVSTACK_ENV := .devstack/env
# Runs a command with the devstack's environment (PATH with kubectl/helm/kafka tools, KUBECONFIG, ...)
# unless the caller already points KAFKA_BOOTSTRAP_SERVERS / KUBECONFIG at other systems.
WITH_ENV := source scripts/with-devstack-env.sh &&
PYTEST_FLAGS ?=
# The real-system tests mostly wait (retentions, rebalances, operator passes): they run on
# TEST_WORKERS pytest-xdist workers, each work unit a module or a declared serial group
# (tests/gwtest/isolation.py). TEST_WORKERS=0 runs everything in one process.
TEST_WORKERS ?= 4
PARALLEL := $(if $(filter 0,$(TEST_WORKERS)),,-n $(TEST_WORKERS) --dist loadgroup)

.PHONY: help
help: ## List the targets
	@grep -hE '^[a-zA-Z0-9_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN {FS = ":.*?## "}; {printf "  %-18s %s\n", $$1, $$2}'

# The runtime closure is installed at the versions of deploy/docker/constraints.txt (what the image
# ships and tests/integration/test_image_install.py checks): a release on PyPI never changes what
# `make test` tests. To move them: install without `-c`, test, run deploy/docker/lock_constraints.py.
$(STAMP): pyproject.toml deploy/docker/constraints.txt
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev,spark]' -c deploy/docker/constraints.txt
	@rm -f $(VENV)/.installed-* && touch $@

.PHONY: install
install: $(STAMP) ## Create .venv with the package (editable), the dev tools and the [spark] extra

.PHONY: devstack
devstack: ## Start Kafka (KRaft), etcd + kube-apiserver + controllers, and a node (kubelet, containerd, dockerd) on loopback; writes .devstack/env
	devstack/up.sh

.PHONY: devstack-down
devstack-down: ## Stop the devstack (keeps cached binaries; PURGE=1 also drops data)
	devstack/down.sh $(if $(PURGE),--purge,)

IMAGE ?= groupwarden:dev
.PHONY: image
image: devstack ## Build $(IMAGE) from the Dockerfile (devstack's Python base, host wheelhouse) and load it into the devstack node
	devstack/node.sh image '$(IMAGE)'

# The release: scripts/release.sh refuses a tree with changes and a VERSION other than
# operator/groupwarden/__init__.py's; RELEASE_FLAGS=--rehearsal builds from the tree as it is.
# Without DOCKER_HOST the image is built on the devstack's dockerd (offline), so it starts it.
VERSION ?=
RELEASE_FLAGS ?=
.PHONY: release
release: install $(if $(DOCKER_HOST),,devstack) ## VERSION=x.y.z: sdist, wheel, chart, image tarball, SBOM, SHA256SUMS into dist/x.y.z/ (docs/deploy.md, "Releasing")
	@test -n "$(VERSION)" || { echo "usage: make release VERSION=x.y.z (the version in operator/groupwarden/__init__.py)"; exit 2; }
	scripts/release.sh $(RELEASE_FLAGS) '$(VERSION)'

# Every shell script of the repository (the devstack, its library, scripts/, bench/, CI).
SHELL_SCRIPTS := $(wildcard devstack/*.sh devstack/lib/*.sh devstack/k8s/*.sh scripts/*.sh bench/*.sh) .ci/run

.PHONY: lint
lint: install ## ruff (lint + format check), mypy (strict, the whole package), import-linter contracts, shellcheck, promtool on the alert rules
	$(VENV)/bin/ruff check operator tests bench
	$(VENV)/bin/ruff format --check operator tests bench
	$(VENV)/bin/mypy
	cd operator && ../$(VENV)/bin/lint-imports --config ../pyproject.toml
	$(VENV)/bin/shellcheck $(SHELL_SCRIPTS)
	$(PY) -m groupwarden.alerts --check
	@# promtool from Debian's prometheus package (devstack/prometheus.sh fetches and caches it)
	promtool=$$(devstack/prometheus.sh promtool) && \
	  "$$promtool" check rules deploy/prometheus/groupwarden-alerts.yaml && \
	  "$$promtool" test rules deploy/prometheus/groupwarden-alerts.test.yaml

.PHONY: fmt
fmt: install ## Format and autofix
	$(VENV)/bin/ruff format operator tests bench
	$(VENV)/bin/ruff check --fix operator tests bench

.PHONY: crds
crds: install ## Regenerate crds/ and the chart's copy from the pydantic models
	$(VENV)/bin/groupwarden crd --write crds deploy/helm/groupwarden/crds

.PHONY: alerts
alerts: install ## Regenerate the alert rules (deploy/prometheus/ and the chart's PrometheusRule) and the chart's dashboard copy
	$(PY) -m groupwarden.alerts
	cp deploy/grafana/groupwarden.json deploy/helm/groupwarden/dashboards/groupwarden.json

.PHONY: test-unit
test-unit: install ## Pure tests only (seconds, no devstack)
	$(PY) -m pytest -m unit -q $(PYTEST_FLAGS)

.PHONY: test-integration
test-integration: install devstack ## Tests against the real Kafka broker
	$(WITH_ENV) $(PY) -m pytest -m integration -q $(PARALLEL) $(PYTEST_FLAGS)

.PHONY: test-e2e
test-e2e: install devstack ## Tests against the real API server + Kafka + the operator process
	$(WITH_ENV) $(PY) -m pytest -m e2e -q $(PARALLEL) $(PYTEST_FLAGS)

.PHONY: test
test: ## THE test command: install, devstack, lint, unit + integration + e2e
	@# The devstack starts while the venv installs and the linters run (they do not depend on each
	@# other); each part's output is printed when it is done.
	$(MAKE) --no-print-directory -j2 --output-sync=target devstack lint
	$(WITH_ENV) $(PY) -m pytest -q $(PARALLEL) $(PYTEST_FLAGS)

.PHONY: test-durations
test-durations: install devstack ## The whole suite, recording seconds per module in tests/durations.json (the parallel run's schedule)
	$(WITH_ENV) $(PY) -m pytest -q $(PARALLEL) --record-durations $(PYTEST_FLAGS)

COUNT ?= 5
.PHONY: test-repeat
test-repeat: install devstack ## MODULES="tests/..." COUNT=N: run the modules N times; every test that failed once is listed with its log
	@test -n "$(MODULES)" || { echo "usage: make test-repeat MODULES='tests/e2e/test_x.py ...' [COUNT=5]"; exit 2; }
	$(WITH_ENV) $(PY) -m pytest -q $(PARALLEL) --count $(COUNT) $(PYTEST_FLAGS) $(MODULES)

.PHONY: bench
bench: install devstack ## Benchmarks (numbers go to docs/benchmarks.md)
	$(WITH_ENV) bench/run.sh

.PHONY: demo
demo: install devstack ## The product end to end on the devstack
	$(WITH_ENV) scripts/demo.sh

.PHONY: clean
clean: ## Remove the venv and build artefacts (not the devstack cache)
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache

KIND_CLUSTER ?= groupwarden
KIND_IMAGE ?= groupwarden:kind
.PHONY: kind-e2e
kind-e2e: install ## Needs Docker + kind (not in our CI): kind cluster, image, helm install, then the e2e suite
	@command -v docker >/dev/null && command -v kind >/dev/null || { echo "kind-e2e needs docker and kind (docs/deploy.md)"; exit 1; }
	kind get clusters | grep -qx '$(KIND_CLUSTER)' || kind create cluster --name '$(KIND_CLUSTER)' --wait 120s
	docker build -t '$(KIND_IMAGE)' .
	kind load docker-image '$(KIND_IMAGE)' --name '$(KIND_CLUSTER)'
	kind get kubeconfig --name '$(KIND_CLUSTER)' > .kind-kubeconfig
	KUBECONFIG=.kind-kubeconfig kubectl create namespace groupwarden-smoke --dry-run=client -o yaml | KUBECONFIG=.kind-kubeconfig kubectl apply -f -
	KUBECONFIG=.kind-kubeconfig helm upgrade --install groupwarden deploy/helm/groupwarden --namespace groupwarden --create-namespace \
	  --set image.repository='$(firstword $(subst :, ,$(KIND_IMAGE)))' --set image.tag='$(lastword $(subst :, ,$(KIND_IMAGE)))' \
	  --set image.pullPolicy=Never --set replicaCount=2 --set 'watchNamespaces={groupwarden-smoke}' --wait --timeout 180s
	KUBECONFIG=.kind-kubeconfig kubectl -n groupwarden rollout status deploy/groupwarden --timeout 120s
	@test -n "$${KAFKA_BOOTSTRAP_SERVERS:-}" || { echo "set KAFKA_BOOTSTRAP_SERVERS to a Kafka reachable from this machine (docs/deploy.md)"; exit 1; }
	KUBECONFIG=.kind-kubeconfig $(PY) -m pytest -m e2e -q --ignore-glob='tests/e2e/test_node_*' $(PYTEST_FLAGS)
