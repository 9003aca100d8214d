#!/usr/bin/env bash
# The long chaos run: builds the release binary and runs the seeded chaos test
# (tests/it/chaos.rs) against it. Usage: scripts/chaos.sh [seed] [seconds] (default: a random
# seed, 600 s). The seed is printed first; the same seed replays the same schedule of faults.
# Needs a PostgreSQL as the test suite does (VIGIL_TEST_DATABASE_URL, default the one on
# 127.0.0.1:5432 with trust auth); the disk-full fault needs permission to mount a tmpfs.
set -euo pipefail
cd "$(dirname "$0")/.."

seed="${1:-${VIGIL_CHAOS_SEED:-}}"
seconds="${2:-${VIGIL_CHAOS_SECONDS:-600}}"
cargo build --release --bin vigil
target_dir="${CARGO_TARGET_DIR:-target}"
export VIGIL_CHAOS_BIN="$(cd "$target_dir/release" && pwd)/vigil"
export VIGIL_CHAOS_SECONDS="$seconds"
if [ -n "$seed" ]; then
  export VIGIL_CHAOS_SEED="$seed"
fi
exec cargo test --test it chaos:: -- --nocapture --test-threads=1
