# Entry points. `make demo` and `make test` are the two commands the README starts with.
SHELL := /bin/bash
.DEFAULT_GOAL := help
ENV := e2e/env
# The one build (hack/cargo.sh): the binaries make test, the benchmarks and the images use.
ONE_BUILD := hack/cargo.sh build
BIN_DIR := $(shell hack/cargo.sh bin-dir)
# Runs a command against the running environment with the one build's operators.
WITH_ENV := source e2e/env/versions.sh && source $$ENV_FILE && KFOP_BIN_DIR=$(BIN_DIR)

.PHONY: help demo test unit e2e env-up env-down generate validate-bundles prereqs bench-components bench-meta bench-fleet bench-placement bench-upgrade bench-manifests bench-profiles chaos fuzz images images-lock push test-images

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

demo: ## bring up the local cluster + NATS, install the CRDs and a sample KfDef
	hack/demo.sh

test: ## install prerequisites, run unit tests, start the environment, run e2e tests, tear down
	hack/test.sh

unit: ## unit tests only (no cluster; builds the cached kustomize the manifests tests run)
	$(ENV)/build.sh kustomize
	cargo test --workspace

e2e: env-up ## unit and end-to-end tests of the one build against a running environment (kept running)
	$(ONE_BUILD)
	$(WITH_ENV) hack/cargo.sh test

env-up: prereqs ## build (once) and start etcd, kube-apiserver, controller-manager, scheduler, kwok, nats-server
	$(ENV)/up.sh

env-down: ## stop the environment and delete its state (binaries stay cached)
	$(ENV)/down.sh

generate: ## regenerate what is generated from code: crds/generated, deploy/, bundle/
	$(ONE_BUILD)
	$(BIN_DIR)/crdgen
	$(BIN_DIR)/deploygen
	$(BIN_DIR)/bundlegen

validate-bundles: ## operator-sdk bundle validate on every bundle, opm validate on the catalog
	hack/validate-bundles.sh

bench-components: env-up ## heal latency, no-op writes and RSS of the five component operators
	$(ONE_BUILD)
	$(WITH_ENV) $(BIN_DIR)/bench-components

prereqs: ## install/check openssl, curl, Go and Rust
	hack/prereqs.sh

bench-meta: env-up ## cold KfDef converge vs kubectl apply, NATS hop latency, steady-state writes
	$(ONE_BUILD)
	$(WITH_ENV) $(BIN_DIR)/bench-meta

bench-fleet: env-up ## a hub and 1, 4, 8 spoke buses: desired-state fan-out, reports back, traffic at rest
	$(ONE_BUILD)
	$(WITH_ENV) $(BIN_DIR)/bench-fleet

bench-placement: env-up ## a KfDef placed on 1, 2, 3 spoke control planes: converge and version change vs one cluster
	$(ONE_BUILD)
	$(WITH_ENV) $(BIN_DIR)/bench-placement

bench-upgrade: env-up ## KfUpgrade duration vs raw kubectl apply, zero-availability moments
	$(ONE_BUILD)
	$(WITH_ENV) $(BIN_DIR)/bench-upgrade

chaos: env-up ## faults (operator SIGKILL, NATS and kube-apiserver restarts, 409 bursts) during edits: TRIALS (100), SEED
	$(ONE_BUILD)
	$(WITH_ENV) $(BIN_DIR)/chaos --trials $${TRIALS:-100} $${SEED:+--seed $$SEED}

bench-manifests: env-up ## generic component: a KfDef of 40 generic applications converged vs render + kubectl apply, operator RSS
	$(ONE_BUILD)
	$(WITH_ENV) $(BIN_DIR)/bench-manifests

bench-profiles: env-up ## 1,000 and 5,000 Profiles with quotas: time to Ready, API writes per Profile, steady-state writes, RSS vs kubectl apply
	$(ONE_BUILD)
	$(WITH_ENV) $(BIN_DIR)/bench-profiles

fuzz: ## run each cargo-fuzz target for FUZZ_SECONDS (default 60) on nightly; not part of make test
	hack/fuzz.sh

images: prereqs ## build the operator images without a daemon: OCI archives in target/images (or $$CARGO_TARGET_DIR/images)
	hack/images.sh build

images-lock: prereqs ## build the images and record their digests in images/lock.json (then `make generate`)
	hack/images.sh lock

push: ## push the built images to REGISTRY (e.g. make push REGISTRY=ghcr.io/kubeflow-operator [PUSH_FLAGS=--dest-creds=u:p])
	@test -n "$(REGISTRY)" || { echo "usage: make push REGISTRY=<registry>/<namespace> [PUSH_FLAGS=<skopeo copy flags>]"; exit 2; }
	hack/images.sh push $(REGISTRY) $(PUSH_FLAGS)

test-images: env-up images ## run every image under crun against the local environment; digests as locked, reproducible
	source e2e/env/versions.sh && source $$ENV_FILE && hack/test-images.sh
