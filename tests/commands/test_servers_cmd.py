"""`loadgen servers` and `--server ... --model NAME`: what is installed, how it would start."""

from __future__ import annotations

import click
import pytest

from loadgen.commands.options import server_spec
from loadgen.server import installs
from loadgen.server.installed import Installed, _python_kind, render

from support.cli import loadgen
from support.installs import fake_python


def test_an_installed_vllm_shows_its_build_and_argv(tmp_path):
    python = fake_python(tmp_path, {"vllm": "0.26.0"}, "12.8", None)
    item = _python_kind("vllm", lambda: installs.find_vllm(python=python))
    assert (item.version, item.build) == ("0.26.0", "cuda (torch 2.9.0)")
    assert item.where == f"vllm under {python}, from --server-python"
    assert item.argv[0] == str(python) and item.argv[3:6] == (
        "serve",
        "MODEL",
        "--served-model-name",
    )
    assert "--enforce-eager" not in item.argv  # a GPU build runs with vLLM's own defaults


def test_a_missing_install_says_so():
    def missing():
        raise installs.InstallNotFound("no sglang install found")

    assert _python_kind("sglang", missing) == Installed(
        "sglang", None, None, "no sglang install found"
    )


def test_render():
    found = [
        Installed("vllm", "0.26.0", "cuda", "vllm under /p", ("/p", "-c", "x", "serve", "MODEL")),
        Installed("sglang", None, None, "no sglang install found"),
    ]
    assert render(found).splitlines() == [
        "vllm: 0.26.0, cuda; vllm under /p",
        "  starts as: /p -c x serve MODEL",
        "sglang: not installed: no sglang install found",
        "sim: built in (loadgen sim)",
    ]


def test_the_command_lists_every_kind():
    done = loadgen("servers", timeout_s=60)
    assert done.returncode == 0, done.stderr
    kinds = [line.split(":", 1)[0] for line in done.stdout.splitlines() if line[:1] != " "]
    assert kinds == ["vllm", "sglang", "llama.cpp", "sim"]


def test_model_is_served_by_name_or_names_the_served_path(tmp_path):
    by_name = server_spec("vllm", (), None, model="org/llama")
    assert (by_name.model_name, by_name.model_path, by_name.served_name) == (
        "org/llama",
        None,
        None,
    )
    by_path = server_spec("vllm", (), tmp_path, model="llama8b-rand")
    assert (by_path.model_name, by_path.model_path, by_path.served_name) == (
        None, tmp_path, "llama8b-rand"
    )  # fmt: skip
    assert server_spec(None, (), None, model="m") is None  # --model alone names the client's
    with pytest.raises(click.UsageError, match="need --server KIND"):
        server_spec(None, (), None, python=tmp_path)


def test_the_served_name_follows_the_model():
    from loadgen.server.boot import served_name
    from loadgen.server.spec import ServerSpec

    assert served_name(ServerSpec("vllm", model_name="org/llama")) == "org/llama"
    assert served_name(ServerSpec("vllm", model_path=installs.cache_dir() / "m")) == "m"
    assert served_name(ServerSpec("vllm", served_name="x", model_name="org/llama")) == "x"
