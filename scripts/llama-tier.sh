#!/usr/bin/env bash
# Builds the optional real-inference-server test tier: a venv with llama-cpp-python[server] and
# gguf, cached outside the clone so CI and later runs reuse it. Compiling llama.cpp takes minutes
# the first time; on failure the tier's test skips and says why (see tests/it/prompt_cache.rs).
set -uo pipefail
venv="${VIGIL_LLAMA_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/vigil-llama-venv}"
if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c 'import llama_cpp.server, gguf, numpy' 2>/dev/null; then
  echo "llama tier: cached venv at $venv"
  exit 0
fi
echo "llama tier: building $venv (llama-cpp-python compiles llama.cpp; this is done once)"
rm -rf "$venv"
python3 -m venv "$venv" || { echo "llama tier: python3 -m venv failed (install python3-venv)"; exit 1; }
"$venv/bin/python" -m pip install -q --upgrade pip >/dev/null
# A CPU-only build with no native-arch tuning, so the cached venv runs on any x86-64 runner; the
# multimodal library (mtmd, formerly llava) is left out: the tier serves text only, and the
# package loads it only for a multimodal chat format, so the compile is shorter. -O1 instead of
# the release build's -O3: the tier serves a model of a few kilobytes (tests/it/support/tiny_gguf.py),
# where inference speed is irrelevant and the compile is most of a cold CI run's tail.
export CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF -DGGML_BLAS=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=OFF -DMTMD_BUILD=OFF -DLLAVA_BUILD=OFF -DCMAKE_C_FLAGS_RELEASE=-O1 -DCMAKE_CXX_FLAGS_RELEASE=-O1}"
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-2}"
# Bounded, so a slow machine costs the test run at most this much; pip keeps the built wheel in
# its cache only once a build completes.
limit="${VIGIL_LLAMA_BUILD_SECONDS:-1500}"
if ! timeout "$limit" "$venv/bin/python" -m pip install -q 'llama-cpp-python[server]' gguf numpy; then
  echo "llama tier: pip install llama-cpp-python[server] failed or took over ${limit}s (it compiles llama.cpp with a C++ compiler and cmake)"
  rm -rf "$venv"
  exit 1
fi
echo "llama tier: ready at $venv"
