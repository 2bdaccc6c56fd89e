#!/usr/bin/env bash
# Builds, once per version, llama.cpp's llama-server from the llama.cpp tree bundled in the
# llama-cpp-python sdist (PyPI is the only source reachable here). Cached outside the clone
# (~/.cache/loadgen/llama.cpp-<version>) so a fresh CI clone reuses it.
# The binary lands in DIR/bin/llama-server and the sdist's llama.cpp tree (convert_hf_to_gguf.py,
# gguf-py) in DIR/src.
#   tools/build_llama_server.sh DIR LLAMA_CPP_PYTHON_VERSION     (tools/setup_real.py passes both)
set -euo pipefail

DIR="$1"
LLAMA_CPP_PYTHON_VERSION="$2"
# GGML_NATIVE builds for this processor: a cache carried to another one is rebuilt.
CPU="$(grep -m1 '^model name' /proc/cpuinfo; grep -m1 '^flags' /proc/cpuinfo)"

if [[ -x "$DIR/bin/llama-server" && "$(cat "$DIR/cpu" 2>/dev/null)" == "$CPU" ]]; then
    exit 0
fi

mkdir -p "$(dirname "$DIR")"
rm -rf "$DIR"
WORK="$(mktemp -d "$(dirname "$DIR")/llama-build.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

python3 -m pip download --quiet --no-deps --no-binary :all: -d "$WORK" \
    "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" >&2
tar -xzf "$WORK"/llama_cpp_python-*.tar.gz -C "$WORK"
SRC="$(echo "$WORK"/llama_cpp_python-*/vendor/llama.cpp)"

# Ninja from PyPI when the machine has none (Debian's ninja-build is not on a new machine).
if ! command -v ninja >/dev/null; then
    python3 -m pip install --quiet --target "$WORK/ninja" ninja >&2
    export PATH="$WORK/ninja/bin:$PATH"
fi
# The prebuilt-UI option defaults ON and would download; the machine has no such network.
nice -n 19 cmake -S "$SRC" -B "$WORK/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DGGML_NATIVE=ON -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF -DLLAMA_BUILD_UI=OFF \
    -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DBUILD_SHARED_LIBS=OFF >&2
# Two jobs at lowest priority: the machine has 2 cores shared with everything else.
nice -n 19 cmake --build "$WORK/build" --target llama-server -j2 >&2

mkdir -p "$WORK/out/bin"
cp "$WORK/build/bin/llama-server" "$WORK/out/bin/"
mv "$SRC" "$WORK/out/src"
"$WORK/out/bin/llama-server" --version >&2
echo "$CPU" > "$WORK/out/cpu"
mv "$WORK/out" "$DIR"  # last step, so a half-built cache never looks complete
