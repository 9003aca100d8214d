#!/usr/bin/env bash
# Fuzzes the SSE parser and the provider adapters (fuzz target `sse_stream`) for a bounded time.
# Usage: scripts/fuzz.sh [SECONDS [LIBFUZZER-FLAG...]]   (default 60 seconds).
# Exits non-zero when the fuzzer finds a failing input, and prints where it saved it.
# cargo-fuzz needs nightly-only rustc flags; RUSTC_BOOTSTRAP=1 lets the stable toolchain take them.
set -euo pipefail
cd "$(dirname "$0")/.."

secs="${1:-60}"
shift $(($# > 0 ? 1 : 0))
case "$secs" in '' | *[!0-9]*) echo "usage: $0 [SECONDS]" >&2; exit 2 ;; esac
target=sse_stream
log() { printf '\n==> %s\n' "$*"; }

if ! cargo fuzz --version >/dev/null 2>&1; then
  log "installing cargo-fuzz"
  cargo install cargo-fuzz --locked
fi

# Seed: every fixture stream and a few error bodies as `data:` events. The three header bytes
# are the harness's controls (see fuzz/harness.rs): adapter, small cap, read-size seed.
corpus="fuzz/corpus/$target"
mkdir -p "$corpus"
seed() { # NAME ADAPTER FILE [as-data]
  local out="$corpus/seed-$1"
  { printf "\\x$2\\xff\\x07"
    if [ "${4:-}" = as-data ]; then sed 's/^/data: /' "$3"; printf '\n\n'; else cat "$3"; fi
  } >"$out"
}
kind_of() {
  case "$(basename "$1")" in anthropic-*) echo 01 ;; gemini-*) echo 02 ;; *) echo 00 ;; esac
}
for f in tests/fixtures/*.sse; do
  seed "$(basename "$f")" "$(kind_of "$f")" "$f"
done
for f in tests/fixtures/{openai-error-429-rate-limit,anthropic-error-529,gemini-error-429}.json; do
  seed "$(basename "$f").sse" "$(kind_of "$f")" "$f" as-data
done

# Fuzz builds are instrumented: keep them apart from the normal build. vigil has no unsafe code,
# so AddressSanitizer is off by default (faster build and runs); VIGIL_FUZZ_SANITIZER=address turns it on.
export CARGO_TARGET_DIR="${VIGIL_FUZZ_TARGET_DIR:-${CARGO_TARGET_DIR:-$HOME/.cache/vigil-target}/fuzz}"
export RUSTC_BOOTSTRAP=1
artifacts="fuzz/artifacts/$target"
mkdir -p "$artifacts"
before=$(find "$artifacts" -type f | sort)

log "fuzzing $target for ${secs}s"
status=0
dict="$PWD/fuzz/$target.dict"
(cd fuzz && cargo fuzz run --sanitizer "${VIGIL_FUZZ_SANITIZER:-none}" "$target" -- \
  -max_total_time="$secs" -dict="$dict" -max_len=8192 -print_final_stats=1 "$@") || status=$?

new=$(comm -13 <(printf '%s\n' "$before") <(find "$artifacts" -type f | sort) | sed '/^$/d')
if [ "$status" -ne 0 ] || [ -n "$new" ]; then
  echo "fuzz: $target found a failing input (exit $status)" >&2
  for a in $new; do echo "fuzz: artifact $a (replay: cd fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz run -s none $target ../$a)" >&2; done
  echo "fuzz: keep it as a regression: cp <artifact> fuzz/regressions/<what-it-breaks>" >&2
  exit 1
fi
echo "fuzz: $target ran ${secs}s without a crash"
