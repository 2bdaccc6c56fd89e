#!/usr/bin/env bash
# The politeness sweep on a GPU box through the named kind (`--server vllm`, not a command
# template): 2 arms (budget 2048 / 512) x 2 boots, interleaved, each boot's sized warm-pair
# probe in the sweep's manifest, then one standalone `probe-cache --server vllm` boot.
#   tools/gpu_run.sh OUT_DIR [MODEL_DIR] [SERVED_NAME]
# Assumes (the H200 kit, /work/shared/tools/gpu): vLLM under PYTHONPATH=/tmp/site for the
# box's python3, loadgen importable by that python3 (or LOADGEN="..." to say how to run it).
set -euo pipefail
out=${1:?usage: tools/gpu_run.sh OUT_DIR [MODEL_DIR] [SERVED_NAME]}
model=${2:-/root/model}
name=${3:-llama8b-rand}
mkdir -p "$out"
export PYTHONPATH=${PYTHONPATH:-/tmp/site} VLLM_USE_FLASHINFER_SAMPLER=0
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 PYTHONUNBUFFERED=1
read -r -a loadgen <<< "${LOADGEN:-python3 -m loadgen}"
# The flags that worked on the H200 (politeness_h200.yaml); max_num_batched_tokens is swept.
server=(--server vllm --server-python "$(command -v python3)" --model-path "$model"
        --model "$name" --boot-timeout 900
        --server-arg=--max-model-len=131072 --server-arg=--block-size=16
        --server-arg=--enable-prefix-caching --server-arg=--gpu-memory-utilization=0.85
        --server-arg=--enforce-eager --server-arg=--max-num-seqs=4)

"${loadgen[@]}" servers | tee "$out/servers.txt"
"${loadgen[@]}" run politeness "${server[@]}" --out "$out/runs" --no-progress \
    --set 'sweep.max_num_batched_tokens=[2048,512]' --set sweep.boots_per_arm=2 \
    2>&1 | tee "$out/politeness.txt" || echo "run exit ${PIPESTATUS[0]}" | tee -a "$out/politeness.txt"
# Each boot's facts (block size, KV tokens, max concurrency, attention backend) and its probe.
python3 - "$out/runs" > "$out/boots.txt" <<'PY'
import json, pathlib, sys
for run in sorted(pathlib.Path(sys.argv[1]).glob("*/run.json")):
    manifest = json.loads(run.read_text())
    for boot in manifest.get("boots", []):
        a = boot["attempts"][-1]
        print(boot["order"], boot["flags"], f"boot {a.get('boot_s', 0):.0f} s",
              json.dumps(a.get("facts")), json.dumps(a.get("probe")))
PY
cat "$out/boots.txt"
"${loadgen[@]}" probe-cache "${server[@]}" 2>&1 | tee "$out/probe_cache.txt" || true
