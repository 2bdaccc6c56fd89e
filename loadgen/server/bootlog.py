"""Server limits read from a boot log (vLLM v1 CPU and GPU builds, SGLang, llama.cpp's
llama-server, and the built-in simulator, which prints vLLM's wording) and from vLLM's
`vllm:cache_config_info` metric.

Each parser returns only the facts it found, keyed by the names of `ServerFacts`' fields:
block_size, num_gpu_blocks, kv_cache_tokens, max_num_batched_tokens, max_num_seqs, max_model_len.
When a fact is logged more than once (a log appended across restarts) the last line wins.
"""

from __future__ import annotations

import re

from loadgen.exposition import parse_exposition

_INT = r"(\d[\d,]*)"
_VLLM_ARGS = r"non-default args: \{.*"  # vLLM echoes the flags it did not default

# (fact, pattern): group 1 is the value; numbers may carry thousands separators.
_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (fact, re.compile(pattern))
    for fact, pattern in (
        # vLLM v1 (and the simulator). vLLM prints the chunked-prefill line only when the budget
        # was given on the command line.
        (
            "max_num_batched_tokens",
            rf"Chunked prefill is enabled with max_num_batched_tokens={_INT}",
        ),
        ("max_num_batched_tokens", rf"{_VLLM_ARGS}'max_num_batched_tokens': {_INT}"),
        # vllm/v1/core/kv_cache_utils.py update_kv_cache_capacity: "%s KV cache size: %s
        # tokens, Maximum concurrency for %s tokens per request: %.2fx", the device "GPU" for
        # CUDA and ROCm (_kv_cache_device_name), "GPU + host" with hisparse.
        ("kv_cache_tokens", rf"\b(?:GPU|CPU|XPU|TPU)(?: \+ host)? KV cache size: {_INT} tokens"),
        ("max_model_len", rf"Maximum concurrency for {_INT} tokens per request"),
        ("max_model_len", rf"Using max model len {_INT}"),
        ("block_size", rf"{_VLLM_ARGS}'block_size': {_INT}"),
        ("block_size", rf"Setting attention block size to {_INT} tokens"),
        ("max_num_seqs", rf"{_VLLM_ARGS}'max_num_seqs': {_INT}"),
        # vllm/engine/arg_utils.py (0.26) states a default boot's budget and seats only at
        # DEBUG ("Defaulting max_num_seqs to %d for %s usage context."); its engine-config line
        # ("Initializing a V1 LLM engine (v%s) with config: %s") names max_seq_len, no seats.
        ("max_num_seqs", rf"Defaulting max_num_seqs to {_INT} for"),
        ("max_num_batched_tokens", rf"Defaulting max_num_batched_tokens to {_INT} for"),
        ("max_model_len", rf"LLM engine \(v[^)]*\) with config: .*\bmax_seq_len={_INT}"),
        # SGLang: python/sglang/srt/managers/scheduler.py logs one line at start-up,
        # "max_total_num_tokens=%d, chunked_prefill_size=%d, max_prefill_tokens=%d,
        # max_running_requests=%d, context_len=%d, available_gpu_mem=%.2f GB".
        ("kv_cache_tokens", rf"\bmax_total_num_tokens={_INT}"),
        ("max_num_batched_tokens", rf"\bchunked_prefill_size={_INT}"),
        ("max_num_seqs", rf"\bmax_running_requests={_INT}"),
        ("max_model_len", rf"\bmax_total_num_tokens=\d+, .*\bcontext_len={_INT}"),
        ("block_size", rf"ServerArgs\(.*\bpage_size={_INT}"),
        # llama.cpp's llama-server. n_ctx_slot is capped at the model's training context; the pool
        # (n_ctx, all slots' cells) and n_batch are printed only at higher verbosity (-lv 4).
        ("max_num_seqs", rf"initializing, n_slots = {_INT}"),
        ("max_model_len", rf"initializing, n_slots = \d+, n_ctx_slot = {_INT}"),
        ("kv_cache_tokens", rf"llama_context: n_ctx\s+=\s*{_INT}"),
        ("max_num_batched_tokens", rf"llama_context: n_batch\s+=\s*{_INT}"),
    )
)


# Facts that are not limits (a name, a ratio, a device), from the same logs: (fact, pattern).
_NOTES: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (fact, re.compile(pattern, re.MULTILINE))
    for fact, pattern in (
        ("max_concurrency", r"Maximum concurrency for [\d,]+ tokens per request: ([\d.]+)x"),
        ("kv_cache_device", r"\b(GPU|CPU|XPU|TPU)(?: \+ host)? KV cache size: "),
        # vllm/platforms/cuda.py: "Using %s attention backend out of potential backends: %s."
        # (auto-selected), "Using %s backend." with the AttentionBackendEnum member (chosen).
        ("attention_backend", r"Using (\w+) attention backend out of potential backends"),
        ("attention_backend", r"Using AttentionBackendEnum\.(\w+) backend\."),
        # SGLang's server_args log the resolved `attention_backend='fa3'`.
        ("attention_backend", r"\battention_backend='(\w+)'"),
        # llama.cpp src/llama-model.cpp: "%s: offloaded %d/%d layers to GPU".
        ("gpu_layers", r"offloaded (\d+/\d+) layers to GPU"),
        # ggml/src/ggml-cuda/ggml-cuda.cu: "%s: found %d " GGML_CUDA_NAME " devices" and
        # "  Device %d: %s, compute capability %d.%d, VMM: %s, VRAM: %zu MiB".
        ("gpu_devices", r"ggml_cuda_init: found (\d+) \w+ devices"),
        ("gpu_device", r"^\s*Device 0: ([^,\n]+), compute capability"),
        # src/llama-context.cpp: "%s: flash_attn            = %s" (auto | enabled | disabled).
        ("flash_attn", r"llama_context: flash_attn\s+=\s*(\w+)"),
    )
)


def parse_boot_notes(text: str) -> dict[str, str | int | float]:
    """Descriptive facts a boot log states (attention backend, max concurrency, offloaded
    layers, GPU device); the last line wins."""
    found: dict[str, tuple[int, str]] = {}
    for fact, pattern in _NOTES:
        for match in pattern.finditer(text):
            if fact not in found or match.start() >= found[fact][0]:
                found[fact] = (match.start(), match.group(1))
    return {fact: _typed(value) for fact, (_, value) in found.items()}


def _typed(value: str) -> str | int | float:
    if value.isdigit():
        return int(value)
    if re.fullmatch(r"\d+\.\d*", value):
        return float(value)
    return value


def _as_int(text: str) -> int:
    return int(text.replace(",", ""))


def parse_boot_log(text: str) -> dict[str, int]:
    """The facts a boot log states, by fact name; a later line overrides an earlier one."""
    found: dict[str, tuple[int, int]] = {}  # fact -> (offset in text, value)
    for fact, pattern in _PATTERNS:
        for match in pattern.finditer(text):
            if fact not in found or match.start() >= found[fact][0]:
                found[fact] = (match.start(), _as_int(match.group(1)))
    return {fact: value for fact, (_, value) in found.items()}


def parse_cache_config_info(metrics_text: str) -> dict[str, int]:
    """Block size, block count and pool tokens from vLLM's `vllm:cache_config_info` labels."""
    return cache_config_facts(parse_exposition(metrics_text).info.get("cache_config_info", {}))


def cache_config_facts(labels: dict[str, str]) -> dict[str, int]:
    """The numeric facts among cache_config_info's labels, by fact name."""
    facts: dict[str, int] = {}
    for fact, label in (
        ("block_size", "block_size"),
        ("num_gpu_blocks", "num_gpu_blocks"),
        ("kv_cache_tokens", "kv_cache_size_tokens"),
    ):
        value = labels.get(label, "")
        if value.isdigit():
            facts[fact] = int(value)
    return facts
