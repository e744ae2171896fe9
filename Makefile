# Entry points. `make demo` and `make test` are the two commands the README starts with.
SHELL := /bin/bash
.DEFAULT_GOAL := help
ENV := e2e/env

.PHONY: help demo test unit e2e env-up env-down generate validate-bundles prereqs bench-components bench-meta bench-upgrade bench-manifests bench-profiles chaos fuzz images images-lock push test-images

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

demo: ## bring up the local cluster + NATS, install the CRDs and a sample KfDef
	hack/demo.sh

test: ## install prerequisites, run unit tests, start the environment, run e2e tests, tear down
	hack/test.sh

unit: ## unit tests only (no cluster; builds the cached kustomize the manifests tests run)
	$(ENV)/build.sh kustomize
	cargo test --workspace

e2e: env-up ## end-to-end tests against a running environment (kept running)
	cargo build --workspace --bins
	cargo build -p kubeflow-e2e --features e2e --bins
	source e2e/env/versions.sh && source $$ENV_FILE && cargo test -p kubeflow-e2e --features e2e

env-up: prereqs ## build (once) and start etcd, kube-apiserver, controller-manager, scheduler, kwok, nats-server
	$(ENV)/up.sh

env-down: ## stop the environment and delete its state (binaries stay cached)
	$(ENV)/down.sh

generate: ## regenerate what is generated from code: crds/generated, deploy/, bundle/
	cargo run -q -p kubeflow-crds --bin crdgen
	cargo run -q -p kubeflow-deploy --bin deploygen
	cargo run -q -p kubeflow-bundle --bin bundlegen

validate-bundles: ## operator-sdk bundle validate on every bundle, opm validate on the catalog
	hack/validate-bundles.sh

bench-components: env-up ## heal latency, no-op writes and RSS of the five component operators
	cargo build --release --workspace --bins
	source e2e/env/versions.sh && source $$ENV_FILE && KFOP_BIN_DIR=$$PWD/target/release \
	  cargo run -q --release -p kubeflow-e2e --features e2e --bin bench-components

prereqs: ## install/check openssl, curl, Go and Rust
	hack/prereqs.sh

bench-meta: env-up ## cold KfDef converge vs kubectl apply, NATS hop latency, steady-state writes
	cargo build --release --workspace --bins
	source e2e/env/versions.sh && source $$ENV_FILE && KFOP_BIN_DIR=$$PWD/target/release \
	  cargo run -q --release -p kubeflow-e2e --features e2e --bin bench-meta

bench-upgrade: env-up ## KfUpgrade duration vs raw kubectl apply, zero-availability moments
	cargo build --release --workspace --bins
	source e2e/env/versions.sh && source $$ENV_FILE && KFOP_BIN_DIR=$$PWD/target/release \
	  cargo run -q --release -p kubeflow-e2e --features e2e --bin bench-upgrade

chaos: env-up ## faults (operator SIGKILL, NATS and kube-apiserver restarts, 409 bursts) during edits: TRIALS (100), SEED
	cargo build --workspace --bins
	cargo build -p kubeflow-e2e --features e2e --bin chaos
	source e2e/env/versions.sh && source $$ENV_FILE && KFOP_BIN_DIR=$$PWD/target/debug \
	  target/debug/chaos --trials $${TRIALS:-100} $${SEED:+--seed $$SEED}

bench-manifests: env-up ## generic component: a KfDef of 40 generic applications converged vs render + kubectl apply, operator RSS
	cargo build --release --workspace --bins
	source e2e/env/versions.sh && source $$ENV_FILE && KFOP_BIN_DIR=$$PWD/target/release \
	  cargo run -q --release -p kubeflow-e2e --features e2e --bin bench-manifests

bench-profiles: env-up ## 1,000 and 5,000 Profiles with quotas: time to Ready, API writes per Profile, steady-state writes, RSS vs kubectl apply
	cargo build --release --workspace --bins
	source e2e/env/versions.sh && source $$ENV_FILE && KFOP_BIN_DIR=$$PWD/target/release \
	  cargo run -q --release -p kubeflow-e2e --features e2e --bin bench-profiles

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
