#!/usr/bin/env bash
# Installs or checks what building and testing needs: openssl, curl, the image tools (Debian
# packages: jq, skopeo, umoci, crun, file, binutils, libc6-dev, ca-certificates) and promtool
# (Debian package prometheus), Go >= 1.24
# (older go commands fetch the toolchain go.mod asks for from the Go module proxy) and Rust >= 1.89.
set -euo pipefail
log() { printf '[prereqs] %s\n' "$*" >&2; }

missing=()
for tool in openssl curl; do command -v "$tool" >/dev/null || missing+=("$tool"); done
# The operator images (hack/images.sh, hack/test-images.sh): jq writes the OCI layout, skopeo reads
# and pushes it, umoci unpacks it into a runtime bundle, crun runs it; file checks the binaries
# are static, which needs glibc's static archives (libc6-dev); strip (binutils) takes the symbols
# out of the shipped binaries; the images carry the Mozilla certificates of ca-certificates.
for tool in jq skopeo umoci crun file; do command -v "$tool" >/dev/null || missing+=("$tool"); done
command -v strip >/dev/null && command -v strings >/dev/null || missing+=(binutils)
[[ -f /usr/lib/x86_64-linux-gnu/libc.a ]] || missing+=(libc6-dev)
[[ -f /etc/ssl/certs/ca-certificates.crt ]] || missing+=(ca-certificates)
if ((${#missing[@]})); then
  log "installing Debian packages: ${missing[*]}"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# promtool checks and unit-tests the alerting rules of deploy/monitoring: Debian's prometheus
# package, without the exporters it recommends.
if ! command -v promtool >/dev/null; then
  log "installing Debian package prometheus (promtool)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null
fi

if ! command -v go >/dev/null; then
  log "installing Go from Debian packages (the toolchain e2e/env/kube/go.mod needs is then fetched from the Go module proxy)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq golang-go >/dev/null
fi
go_minor=$(go env GOVERSION | sed -E 's/^go1\.([0-9]+).*/\1/')
if ((go_minor < 21)); then
  log "ERROR: $(go env GOVERSION) is too old to fetch newer toolchains; install Go >= 1.24"; exit 1
fi

if ! command -v cargo >/dev/null; then
  log "ERROR: cargo not found; install Rust >= 1.89 with rustup"; exit 1
fi
rust_minor=$(rustc --version | sed -E 's/^rustc 1\.([0-9]+).*/\1/')
if ((rust_minor < 89)); then
  log "ERROR: $(rustc --version) is older than the workspace's rust-version 1.89; run 'rustup update'"; exit 1
fi
log "ok: $(go env GOVERSION), $(rustc --version | cut -d' ' -f1-2), $(openssl version | cut -d' ' -f1-2)"
