"""Builds the tiny random-weight Llama model that the real-server tests serve (nothing downloaded).

Runs in the vLLM venv (it needs torch, transformers and tokenizers, which the project's own venv
does not carry). The result is cached outside the clone, so a fresh CI clone reuses it:

    python tools/build_tiny_model.py [OUT_DIR]     # default ~/.cache/loadgen/tiny-llama

The weights are random (text is garbage) but fixed: torch's seed is fixed and the tokenizer is
trained on a sorted list of local files (the Python stdlib's top-level sources and
/usr/share/common-licenses). A directory holding the current RECIPE stamp is reused as is.
"""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
import tempfile
from pathlib import Path

# Bump when anything below changes what is built, so cached copies are rebuilt.
RECIPE = "tiny-llama v1: llama 4x256, 4 heads, 2 kv heads, vocab 4096, bpe on stdlib+licenses"
STAMP_NAME = "LOADGEN_RECIPE"
VOCAB_SIZE = 4096
SEED = 0
EOS = "<|endoftext|>"
SPECIAL_TOKENS = [EOS, "<|im_start|>", "<|im_end|>"]
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def default_out_dir() -> Path:
    cache = Path(os.environ.get("LOADGEN_CACHE", Path.home() / ".cache" / "loadgen"))
    return cache / "tiny-llama"


def training_files() -> list[str]:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(stdlib.glob("*.py")) + sorted(Path("/usr/share/common-licenses").glob("*"))
    return [str(p) for p in files if p.is_file()]


def build_tokenizer(out: Path) -> int:
    """Trains the byte-level BPE tokenizer, saves it as a fast tokenizer; returns its size."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train(training_files(), trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=EOS,
        bos_token=EOS,
        unk_token=EOS,
        pad_token=EOS,
        model_max_length=8192,
    )
    fast.chat_template = CHATML_TEMPLATE
    fast.save_pretrained(out)
    return tok.get_vocab_size()


def build_model(out: Path, eos_id: int) -> int:
    """Saves a random-weight bf16 LlamaForCausalLM; returns its parameter count."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(SEED)
    config = LlamaConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=8192,
        bos_token_id=eos_id,
        eos_token_id=eos_id,
        pad_token_id=eos_id,
        tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.config.dtype = torch.bfloat16
    model.save_pretrained(out, safe_serialization=True)
    return sum(p.numel() for p in model.parameters())


def is_built(out: Path) -> bool:
    stamp = out / STAMP_NAME
    return stamp.is_file() and stamp.read_text() == RECIPE


def build(out: Path) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tiny-llama.", dir=out.parent))
    try:
        vocab = build_tokenizer(tmp)
        if vocab != VOCAB_SIZE:
            raise SystemExit(f"tokenizer has {vocab} tokens, wanted {VOCAB_SIZE}")
        eos_id = SPECIAL_TOKENS.index(EOS)  # special tokens take the first ids, in order
        params = build_model(tmp, eos_id)
        (tmp / STAMP_NAME).write_text(RECIPE)
        shutil.rmtree(out, ignore_errors=True)
        tmp.rename(out)  # last step, so a half-built directory never looks complete
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"built {out}: {params:,} parameters, vocab {vocab}", file=sys.stderr)


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else default_out_dir()
    if not is_built(out):
        build(out)
    print(out)


if __name__ == "__main__":
    main()
