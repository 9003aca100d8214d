#!/usr/bin/env bash
# Fuzzes what the probe parses off the network for a bounded time, with corpora seeded from
# tests/fixtures: `sse_stream` (SSE framing and the provider adapters), `h1_response` (the
# probe's HTTP/1.1 response framing) and `error_response` (error headers and bodies, and the
# JSON the balance poller and price fetch read).
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...] [LIBFUZZER-FLAG...]
#   SECONDS (default 60) is the total, split evenly between the targets; without TARGET every
#   target runs (or those in VIGIL_FUZZ_TARGETS="a b"). Flags starting with - go to libFuzzer.
# Exits non-zero when the fuzzer finds a failing input in any target, and prints where it saved it.
# cargo-fuzz needs nightly-only rustc flags; RUSTC_BOOTSTRAP=1 lets the stable toolchain take them.
set -euo pipefail
cd "$(dirname "$0")/.."

all_targets=$(for f in fuzz/fuzz_targets/*.rs; do basename "$f" .rs; done | tr '\n' ' ')
all_targets=${all_targets% }
usage() { echo "usage: $0 [SECONDS] [TARGET...] [LIBFUZZER-FLAG...]   (targets: $all_targets)" >&2; exit 2; }
log() { printf '\n==> %s\n' "$*"; }

secs=60
case "${1:-}" in '' | *[!0-9]*) ;; *) secs=$1; shift ;; esac
targets=()
flags=()
for arg in "$@"; do
  if [ -f "fuzz/fuzz_targets/$arg.rs" ]; then targets+=("$arg")
  elif [ "${arg#-}" != "$arg" ]; then flags+=("$arg")
  else usage; fi
done
if [ ${#targets[@]} -eq 0 ]; then
  read -ra targets <<<"${VIGIL_FUZZ_TARGETS:-$all_targets}"
  for t in "${targets[@]}"; do [ -f "fuzz/fuzz_targets/$t.rs" ] || usage; done
fi

if ! cargo fuzz --version >/dev/null 2>&1; then
  log "installing cargo-fuzz"
  cargo install cargo-fuzz --locked --debug
fi

# Seeds for `sse_stream`: every fixture stream and a few error bodies as `data:` events. The
# three header bytes are the harness's controls (see fuzz/harness.rs): adapter, small cap, read-size seed.
seed_sse_stream() { # CORPUS
  local corpus=$1 f
  seed() { # NAME ADAPTER FILE [as-data]
    { printf "\\x$2\\xff\\x07"
      if [ "${4:-}" = as-data ]; then sed 's/^/data: /' "$3"; printf '\n\n'; else cat "$3"; fi
    } >"$corpus/seed-$1"
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
}

# FILE as a chunked body in chunks of SIZE bytes (binary-safe: each byte goes through `\xHH`).
chunked() { # SIZE FILE
  local esc i n
  esc=$(od -An -v -tx1 "$2" | tr -d ' \n' | sed 's/../\\x&/g')
  for ((i = 0; i < ${#esc}; i += 4 * $1)); do
    n=$(((${#esc} - i) / 4))
    [ "$n" -le "$1" ] || n=$1
    printf '%x\r\n' "$n"
    printf '%b\r\n' "${esc:i:4*n}"
  done
  printf '0\r\n\r\n'
}

# Seeds for `h1_response`: each fixture head (tests/fixtures/*.headers.txt, CRLF, its own
# framing headers dropped) with its stream as a Content-Length, chunked (at three chunk sizes)
# and close-delimited body; the JSON error bodies behind 4xx/5xx heads; the streams again for
# the harness's own chunked framing; a few interim, empty and oversized heads. The four control
# bytes (see fuzz/h1_harness.rs): read-size seed, flags, and two arguments (pad / chunking).
seed_h1_response() { # CORPUS
  local corpus=$1 f base body head status n
  body=$(mktemp)
  # Bodies are cut so that even the 7-byte chunked seeds fit the fuzzer's 8 KB input limit.
  cap() { head -c 4096 "$1" >"$body"; }
  seed() { { printf "$2"; cat; } >"$corpus/seed-$1"; } # NAME CONTROL-BYTES, response on stdin
  for f in tests/fixtures/*.headers.txt; do
    base=$(basename "$f" .headers.txt)
    if [ -f "tests/fixtures/$base.sse" ]; then cap "tests/fixtures/$base.sse"; else cap "$(ls tests/fixtures/"$base"*.sse | head -n 1)"; fi
    head=$(tr -d '\r' <"$f" | grep -iv '^\(transfer-encoding\|content-length\):' | sed 's/$/\r/')
    { printf '%s\n' "$head"; printf 'Content-Length: %d\r\n\r\n' "$(wc -c <"$body")"; cat "$body"; } | seed "$base-length" '\x07\x00\x00\x00'
    for n in 7 100 1000; do
      { printf '%s\n' "$head"; printf 'Transfer-Encoding: chunked\r\n\r\n'; chunked "$n" "$body"; } | seed "$base-chunked-$n" '\x07\x00\x00\x00'
    done
    { printf '%s\n' "$head"; printf '\r\n'; cat "$body"; } | seed "$base-close" '\x00\x00\x00\x00'
  done
  for f in tests/fixtures/{openai,anthropic,gemini,groq}-error-*.json tests/fixtures/openrouter-[45]*.json; do
    status=$(basename "$f" | grep -o '[45][0-9][0-9]' | head -n 1)
    head=$(printf 'HTTP/1.1 %s Error\r\nContent-Type: application/json\r' "$status")
    { printf '%s\n' "$head"; printf 'Content-Length: %d\r\n\r\n' "$(wc -c <"$f")"; cat "$f"; } | seed "$(basename "$f")-length" '\x07\x00\x00\x00'
    { printf '%s\n' "$head"; printf 'Transfer-Encoding: chunked\r\n\r\n'; chunked 64 "$f"; } | seed "$(basename "$f")-chunked" '\x07\x00\x00\x00'
  done
  # Flag bit 0: the harness frames the payload as chunks itself and checks the body it reads.
  for f in tests/fixtures/{openai-chat-stream,anthropic-messages-stream,gemini-stream}.sse; do
    cap "$f"
    seed "$(basename "$f")-framed" '\x07\x01\x0b\x35' <"$body"
    seed "$(basename "$f")-framed-styled" '\x00\x01\x63\xda' <"$body"
  done
  printf 'HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok' |
    seed interim '\x07\x00\x00\x00'
  printf 'HTTP/1.1 204 No Content\r\n\r\n' | seed no-content '\x07\x00\x00\x00'
  printf 'HTTP/1.1 304 Not Modified\r\nETag: "x"\r\n\r\n' | seed not-modified '\x07\x00\x00\x00'
  printf 'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;name=value\r\nhello\r\n0\r\nX-Trailer: 1\r\n\r\n' |
    seed trailers '\x07\x00\x00\x00'
  # Pads of 62 KB and 64.5 KB (byte 2 × 512) in the head, just under and over its 64 KB limit;
  # and 3.5 KB pads both in the head and in a chunk extension (byte 1 >> 1 = 5: after `5;`),
  # just under the buffer's growth past 4 KB and the 4 KB chunk-size line limit.
  printf 'HTTP/1.1 200 OK\r\nX: y\r\nTransfer-Encoding: chunked\r\n\r\n5;e=1\r\nhello\r\n0\r\n\r\n' | seed pad-under '\x07\x00\x7c\x01'
  printf 'HTTP/1.1 200 OK\r\nX: y\r\nContent-Length: 5\r\n\r\nhello' | seed pad-over '\x07\x00\x81\x01'
  printf 'HTTP/1.1 200 OK\r\nX: y\r\nTransfer-Encoding: chunked\r\n\r\n5;e=1\r\nhello\r\n0\r\n\r\n' | seed pad-head-and-chunk-line '\x07\x0a\x07\x00'
  rm -f "$body"
}

# Seeds for `error_response`: every fixture error body behind a few header sets (see
# fuzz/error_harness.rs: byte 0 picks the status, header lines up to a blank line, then the body).
seed_error_response() { # CORPUS
  local corpus=$1 f i=0
  for f in tests/fixtures/*-error-*.json tests/fixtures/openrouter-[45]*.json; do
    [ -f "$f" ] || continue
    { printf '\x07retry-after: 20\nx-request-id: req-1\n\n'; cat "$f"; } >"$corpus/seed-$(basename "$f")"
    { printf "\\x$(printf %02x $((i % 12)))retry-after-ms: 1500\\n\\n"; cat "$f"; } >"$corpus/seed-ms-$(basename "$f")"
    i=$((i + 1))
  done
  printf '\x07retry-after: Wed, 21 Oct 2015 07:28:00 GMT\n\n{"error":{"message":"later"}}' >"$corpus/seed-date"
  printf '\x01\n\n{"error":{"message":"Incorrect API key provided: sk-test-fuzz-secret-01234"}}' >"$corpus/seed-echoed-key"
  printf '\x0b\n\n{"data":{"total_credits":12.5,"total_usage":2.25,"limit_remaining":3}}' >"$corpus/seed-credits"
  printf '\x0b\n\n{"data":{"endpoints":[{"provider_name":"A","pricing":{"prompt":"0.0000005","completion":"0.000001"}}]}}' >"$corpus/seed-prices"
}

# Fuzz builds are instrumented: keep them apart from the normal build. vigil has no unsafe code,
# so AddressSanitizer is off by default (faster build and runs); VIGIL_FUZZ_SANITIZER=address turns it on.
export CARGO_TARGET_DIR="${VIGIL_FUZZ_TARGET_DIR:-${CARGO_TARGET_DIR:-$HOME/.cache/vigil-target}/fuzz}"
export RUSTC_BOOTSTRAP=1
# VIGIL_FUZZ_BUILD=dev builds the targets unoptimised (fast to build, fewer runs a second; the
# test command's 30 s smoke run uses it); the default is cargo-fuzz's optimised build.
build_mode=()
case "${VIGIL_FUZZ_BUILD:-release}" in
  dev) build_mode=(--dev) ;;
  release) ;;
  *) echo "VIGIL_FUZZ_BUILD must be dev or release" >&2; exit 2 ;;
esac

# VIGIL_FUZZ_BUILD_ONLY=1 builds every target and stops (the test command builds beside its suite
# and fuzzes later, once nothing else runs).
if [ "${VIGIL_FUZZ_BUILD_ONLY:-0}" = 1 ]; then
  (cd fuzz && cargo fuzz build "${build_mode[@]}" --sanitizer "${VIGIL_FUZZ_SANITIZER:-none}")
  echo "fuzz: targets built"
  exit 0
fi

failed=()
ran=()
left=$secs
for i in "${!targets[@]}"; do
  target=${targets[$i]}
  # An even share of the time; the last target gets what rounding left over.
  share=$((secs / ${#targets[@]}))
  [ "$i" -lt $((${#targets[@]} - 1)) ] || share=$left
  [ "$share" -ge 1 ] || share=1
  left=$((left - share))

  corpus="fuzz/corpus/$target"
  mkdir -p "$corpus"
  "seed_$target" "$corpus"
  artifacts="fuzz/artifacts/$target"
  mkdir -p "$artifacts"
  before=$(find "$artifacts" -type f | sort)

  log "fuzzing $target for ${share}s"
  status=0
  dict="$PWD/fuzz/$target.dict"
  # -timeout: one input running 10 s is a hang; libFuzzer's default would wait 20 minutes.
  (cd fuzz && cargo fuzz run "${build_mode[@]}" --sanitizer "${VIGIL_FUZZ_SANITIZER:-none}" "$target" -- \
    -max_total_time="$share" -dict="$dict" -max_len=8192 -timeout=10 -print_final_stats=1 ${flags[@]+"${flags[@]}"}) ||
    status=$?

  new=$(comm -13 <(printf '%s\n' "$before") <(find "$artifacts" -type f | sort) | sed '/^$/d')
  if [ "$status" -ne 0 ] || [ -n "$new" ]; then
    echo "fuzz: $target found a failing input (exit $status)" >&2
    for a in $new; do echo "fuzz: artifact $a (replay: cd fuzz && RUSTC_BOOTSTRAP=1 cargo fuzz run -s none $target ../$a)" >&2; done
    echo "fuzz: keep it as a regression: cp <artifact> fuzz/regressions/$target/<what-it-breaks>" >&2
    failed+=("$target")
  else
    ran+=("$target ${share}s")
  fi
done

if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz: failing inputs found by: ${failed[*]}" >&2
  exit 1
fi
summary=$(printf '%s, ' "${ran[@]}")
echo "fuzz: ran ${summary%, } without a crash"
