#!/usr/bin/env bash
# `make fuzz`: runs every cargo-fuzz target in fuzz/ for FUZZ_SECONDS (default 60) each, on the
# nightly toolchain, starting from the seed corpus in fuzz/seeds (examples and test fixtures; the
# growing corpus stays in fuzz/corpus, untracked). Prints executions per target; a crash stops the
# run with the input saved under fuzz/artifacts/<target>/ — turn it into a regression test.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${FUZZ_SECONDS:-60}
log() { printf '[fuzz] %s\n' "$*" >&2; }

if ! cargo +nightly --version >/dev/null 2>&1; then
  log "ERROR: the nightly toolchain is needed (rustup toolchain install nightly)"; exit 1
fi
command -v cargo-fuzz >/dev/null || { log "installing cargo-fuzz from crates.io"; cargo install --locked cargo-fuzz@0.13.2; }

for target in $(cd fuzz && cargo +nightly fuzz list); do
  mkdir -p "fuzz/corpus/$target"
  cp -n "fuzz/seeds/$target"/* "fuzz/corpus/$target/" 2>/dev/null || true
  log "$target: ${seconds} s"
  out=$(mktemp)
  if ! (cd fuzz && cargo +nightly fuzz run "$target" "corpus/$target" -- -max_total_time="$seconds" -print_final_stats=1) >"$out" 2>&1; then
    tail -40 "$out"; log "$target: CRASH (input under fuzz/artifacts/$target/)"; exit 1
  fi
  execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$out" | awk '{print $2}')
  printf '%-18s %10s executions in %s s, 0 crashes\n' "$target" "${execs:-?}" "$seconds"
  rm -f "$out"
done
