#!/usr/bin/env bash
# The one build. `make test`, the benchmarks and the operator images all use the binaries this
# builds: one profile (`dev`), one target, one set of flags and features, so nothing is compiled
# twice and the images hold exactly the binaries the end-to-end tests ran (stripped).
#
#   hack/cargo.sh build           libraries, binaries and every test of the workspace, the e2e
#                                 tests and tools (feature kubeflow-e2e/e2e) included
#   hack/cargo.sh build-bins [--bin NAME]...
#                                 only the libraries and binaries of the same build, or only the
#                                 named binaries (what the images hold; hack/images.sh builds them
#                                 a second time to compare). The package selection and features stay
#                                 those of the full build, so each binary is the same either way.
#   hack/cargo.sh test [ARGS]     cargo test of the same build (ARGS as for cargo test)
#   hack/cargo.sh bin-dir         the directory of the built binaries
#
# The flags: static binaries (glibc's static archives, `+crt-static`; --target keeps the flag off
# build scripts and proc macros), and the checkout, cargo home and target directory remapped so
# the binaries carry no path of the machine that built them (hack/images.sh). Any other cargo
# command with other flags or another package selection builds a second time.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TRIPLE=x86_64-unknown-linux-gnu
PROFILE=dev
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
BIN_DIR=$TARGET_DIR/$TRIPLE/debug

# Incremental caches are no input rustc promises to ignore, and a one-off build gains nothing.
export CARGO_INCREMENTAL=0
# The cc crate (ring's C code) reads these: one value everywhere, or a machine's own C flags or
# build time would go into the binaries (and a change of them rebuilds most of the workspace).
export SOURCE_DATE_EPOCH=0
unset CC CXX CFLAGS CXXFLAGS CPPFLAGS LDFLAGS AR ARFLAGS CRATE_CC_NO_DEFAULTS
while read -r name; do unset "$name"; done < <(compgen -e | grep -E '^(CC|CXX|CFLAGS|CXXFLAGS|AR|ARFLAGS|HOST_CC|TARGET_CC|TARGET_CFLAGS)_' || true)
# When several remaps match, rustc applies the last: the target directory may lie in the checkout.
# No GNU build id: the linker hashes the whole output into it, symbols and line tables included,
# which the images strip; it made two otherwise identical shipped binaries differ in 20 bytes.
# Smaller binaries, less of them resident: relative relocations packed (RELR: the loader reads
# 30 KB instead of 3.6 MB of `.rela.dyn` at start) and identical functions folded (about 7 % of an
# unoptimised operator's code; Rust promises no distinct function addresses).
export RUSTFLAGS="-C target-feature=+crt-static -C link-arg=-Wl,--build-id=none -C link-arg=-Wl,-z,pack-relative-relocs -C link-arg=-Wl,--icf=all --remap-path-prefix=${CARGO_HOME:-$HOME/.cargo}=/cargo --remap-path-prefix=$ROOT=/src --remap-path-prefix=$TARGET_DIR=/target"
# One selection for every command: the package set and features decide how each dependency is
# compiled, so `build` and `test` must ask for the same ones.
ONE_BUILD=(--locked --profile "$PROFILE" --target "$TRIPLE" --workspace --features kubeflow-e2e/e2e)

cd "$ROOT"
case ${1:-} in
  build) shift && exec cargo build "${ONE_BUILD[@]}" --lib --bins --tests "$@" ;;
  build-bins)
    shift
    # With named binaries, only those (and what they link) are built.
    [[ " $* " == *" --bin "* || " $* " == *" --bin="* ]] || set -- --bins "$@"
    exec cargo build "${ONE_BUILD[@]}" "$@" ;;
  test) shift && exec cargo test "${ONE_BUILD[@]}" "$@" ;;
  bin-dir) echo "$BIN_DIR" ;;
  *) echo "usage: hack/cargo.sh build|build-bins|test [cargo args]|bin-dir" >&2; exit 2 ;;
esac
