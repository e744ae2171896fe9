# Entry points. `make demo` and `make test` are the two commands the README starts with.
SHELL := /bin/bash
.DEFAULT_GOAL := help
ENV := e2e/env

.PHONY: help demo test unit e2e env-up env-down crds prereqs

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

demo: ## bring up the local cluster + NATS, install the CRDs and a sample KfDef
	hack/demo.sh

test: ## install prerequisites, run unit tests, start the environment, run e2e tests, tear down
	hack/test.sh

unit: ## unit tests only (no cluster)
	cargo test --workspace

e2e: env-up ## end-to-end tests against a running environment (kept running)
	cargo build --workspace --bins
	source e2e/env/versions.sh && source $$ENV_FILE && cargo test -p kubeflow-e2e --features e2e

env-up: prereqs ## build (once) and start etcd, kube-apiserver, controller-manager, scheduler, kwok, nats-server
	$(ENV)/up.sh

env-down: ## stop the environment and delete its state (binaries stay cached)
	$(ENV)/down.sh

crds: ## regenerate the CRD YAML under crds/generated
	cargo run -p kubeflow-crds --bin crdgen

prereqs: ## install/check openssl, curl, Go and Rust
	hack/prereqs.sh
