"""Sets up what `make test-real` needs, making only what is missing (where: server/installs.py):

1. the vLLM venv (tools/setup_vllm.sh), and meanwhile llama-server (tools/build_llama_server.sh),
   which is CPU-bound while the venv install mostly waits on downloads;
2. the tiny model, in the vLLM venv (tools/build_tiny_model.py);
3. its GGUF for llama-server (tools/convert_tiny_gguf.py).

Each step's log goes to $LOADGEN_CACHE/setup-logs/; a failure prints the log's tail.
Prints how long each step took.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from loadgen.server import installs

TOOLS = Path(__file__).resolve().parent
LOG_TAIL_LINES = 40


def log_path(step: str) -> Path:
    logs = installs.cache_dir() / "setup-logs"
    logs.mkdir(parents=True, exist_ok=True)
    return logs / f"{step}.log"


def start(step: str, argv: list[str]) -> subprocess.Popen[bytes]:
    with open(log_path(step), "wb") as log:
        return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log)


def finish(step: str, proc: subprocess.Popen[bytes], t0: float) -> None:
    code = proc.wait()
    took = time.monotonic() - t0
    if code != 0:
        tail = log_path(step).read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
        sys.exit(
            f"setup-real: {step} failed (exit {code}); {log_path(step)} ends:\n" + "\n".join(tail)
        )
    print(f"setup-real: {step} ready ({took:.1f} s)", flush=True)


def run(step: str, argv: list[str]) -> None:
    t0 = time.monotonic()
    finish(step, start(step, argv), t0)


def main() -> None:
    t0 = time.monotonic()
    python = str(installs.vllm_venv() / "bin" / "python")
    llama = start(
        "llama-server",
        [
            "bash",
            str(TOOLS / "build_llama_server.sh"),
            str(installs.llama_cpp_dir()),
            installs.LLAMA_CPP_PYTHON_VERSION,
        ],
    )
    try:
        run(
            "vllm-venv",
            [
                "bash",
                str(TOOLS / "setup_vllm.sh"),
                str(installs.vllm_venv()),
                installs.VLLM_VERSION,
            ],
        )
        run(
            "tiny-model",
            [python, str(TOOLS / "build_tiny_model.py"), str(installs.tiny_model_dir())],
        )
    finally:
        finish("llama-server", llama, t0)
    run(
        "tiny-gguf",
        [
            python,
            str(TOOLS / "convert_tiny_gguf.py"),
            str(installs.llama_cpp_dir() / "src"),
            str(installs.tiny_model_dir()),
            str(installs.tiny_gguf()),
        ],
    )
    print(f"setup-real: all ready in {time.monotonic() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    main()
