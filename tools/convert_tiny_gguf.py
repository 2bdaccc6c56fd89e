"""Converts the tiny HF model to GGUF with llama.cpp's own convert_hf_to_gguf.py.

Runs in the vLLM venv (torch, transformers, numpy, sentencepiece); gguf comes from the llama.cpp
tree's gguf-py. The converter knows tokenizers by a hash of how they split a test string and
refuses ours; it is a plain GPT-2 byte-level BPE (same regex), so it is told "gpt-2".

    python tools/convert_tiny_gguf.py LLAMA_CPP_SRC MODEL_DIR OUT.gguf

Nothing is done when OUT.gguf exists and is newer than the model's weights.
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path


def is_fresh(out: Path, model_dir: Path) -> bool:
    weights = model_dir / "model.safetensors"
    return out.is_file() and out.stat().st_mtime >= weights.stat().st_mtime


def convert(src: Path, model_dir: Path, out: Path) -> None:
    sys.path[:0] = [str(src), str(src / "gguf-py")]
    import conversion.base  # the llama.cpp tree's own package

    conversion.base.TextModel.get_vocab_base_pre = lambda self, tokenizer: "gpt-2"
    tmp = out.with_name(out.name + ".tmp")
    script = src / "convert_hf_to_gguf.py"
    sys.argv = [str(script), str(model_dir), "--outfile", str(tmp), "--outtype", "bf16"]
    runpy.run_path(str(script), run_name="__main__")
    tmp.replace(out)  # last step, so a half-written file never looks complete


def main() -> None:
    src, model_dir, out = (Path(a) for a in sys.argv[1:4])
    if not is_fresh(out, model_dir):
        out.parent.mkdir(parents=True, exist_ok=True)
        convert(src, model_dir, out)
    print(out)


if __name__ == "__main__":
    main()
