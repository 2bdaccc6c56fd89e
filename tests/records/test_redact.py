"""Secrets kept out of the run directory and the terminal (issue 20): unit checks both ways,
then a run with a planted token and URL password grepped for in every file and on stdout."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from loadgen.records import read_streams
from loadgen.redact import REDACTED, is_secret_name, redact, redact_argv, redact_env, redact_url

from support.cli import assert_one_line_error, loadgen
from support.pacedserver import PacedConfig, ThreadedPacedServer
from support.server_process import run_until, sim_process


@pytest.mark.parametrize(
    "name",
    ["HF_TOKEN", "hf_token", "OPENAI_API_KEY", "--api-key", "AWS_SECRET_ACCESS_KEY", "Hf_Api_Token",
     "DB_PASSWORD", "MY_PASSWD", "PROXY_AUTH", "GOOGLE_APPLICATION_CREDENTIALS", "--token"],
)  # fmt: skip
def test_a_secret_looking_name_is_a_secret(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize(
    "name",
    ["max_num_batched_tokens", "--max-num-batched-tokens", "KEYBOARD", "XDG_SESSION_TYPE",
     "VLLM_ATTENTION_BACKEND", "AUTHOR", "TOKENIZERS_PARALLELISM", "--max-tokens", "MONKEY",
     "token_source", "output_token_source", "prompt_token_source", "token_counter"],
)  # fmt: skip
def test_a_name_that_only_contains_a_secret_word_is_not(name: str) -> None:
    assert not is_secret_name(name)


def test_a_summarys_token_sources_survive_redaction() -> None:
    summary = {"groups": {"a": {"token_source": "usage", "HF_TOKEN": "hf_x"}}}
    assert redact(summary) == {"groups": {"a": {"token_source": "usage", "HF_TOKEN": REDACTED}}}


def test_a_urls_password_and_credential_params_are_masked() -> None:
    url = "http://alice:pw@127.0.0.1:8000/v1?sig=abc&model=m&api_key=k"
    assert (
        redact_url(url) == f"http://alice:{REDACTED}@127.0.0.1:8000/v1?sig=***&model=m&api_key=***"
    )
    assert redact_url("http://tok@127.0.0.1:8000") == f"http://tok:{REDACTED}@127.0.0.1:8000"


def test_a_url_without_credentials_is_unchanged() -> None:
    for url in ("http://127.0.0.1:8000/v1", "http://h:1/x?model=m&max_tokens=5", "not a url"):
        assert redact_url(url) == url


def test_env_and_argv_lose_only_the_secret_values() -> None:
    env = {"HF_TOKEN": "hf_x", "VLLM_USE_V1": "1", "TOKENIZERS_PARALLELISM": "false"}
    assert redact_env(env) == {"HF_TOKEN": REDACTED, "VLLM_USE_V1": "1",
                               "TOKENIZERS_PARALLELISM": "false"}  # fmt: skip
    argv = ["vllm", "--api-key", "sk-1", "--token=t", "--max-num-batched-tokens", "2048"]
    assert redact_argv(argv) == ["vllm", "--api-key", REDACTED, f"--token={REDACTED}",
                                 "--max-num-batched-tokens", "2048"]  # fmt: skip


def test_a_nested_manifest_is_redacted_throughout() -> None:
    env = {"HF_TOKEN": "t", "OMP_NUM_THREADS": "2"}
    manifest = {"target": {"url": "http://u:pw@h:1"}, "argv": ["s", "--api-key", "k"],
                "environment": {"read_back": env}, "n": 3}  # fmt: skip
    assert redact(manifest) == {
        "target": {"url": f"http://u:{REDACTED}@h:1"}, "argv": ["s", "--api-key", REDACTED],
        "environment": {"read_back": {**env, "HF_TOKEN": REDACTED}}, "n": 3,
    }  # fmt: skip


def _leaks(run_dir: Path, out: str, secrets: tuple[str, ...]) -> list[str]:
    found = [f"{p}: {s}" for p in run_dir.rglob("*") if p.is_file() for s in secrets
             if s.encode() in p.read_bytes()]  # fmt: skip
    return found + [f"output: {s}" for s in secrets if s in out]


def test_a_run_writes_and_prints_no_planted_secret(tmp_path: Path) -> None:
    secrets = ("hf_PLANTED_7c1", "PW_PLANTED_93a")
    with ThreadedPacedServer(PacedConfig(ttft_s=0.0, gap_s=0.0)) as srv:
        url = srv.url.replace("http://", f"http://alice:{secrets[1]}@")
        proc = loadgen("run", "smoke", "--base-url", url, "--out", tmp_path, "--no-progress",
                       env={"HF_TOKEN": secrets[0]})  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (run_dir,) = tmp_path.iterdir()
    assert _leaks(run_dir, proc.stdout + proc.stderr, secrets) == []
    assert f"alice:{REDACTED}@127.0.0.1" in (run_dir / "run.json").read_text()  # masked, not lost


def test_a_launched_servers_token_is_read_back_masked(tmp_path: Path) -> None:
    secret = "hf_PLANTED_5d2"
    proc = loadgen("run", "smoke", "--server", "sim", "--out", tmp_path, "--no-progress",
                   env={"HF_TOKEN": secret})  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    (run_dir,) = tmp_path.iterdir()
    assert _leaks(run_dir, proc.stdout + proc.stderr, (secret,)) == []
    assert f'"HF_TOKEN": "{REDACTED}"' in (run_dir / "run.json").read_text()


def test_a_server_that_cannot_be_reached_is_named_without_its_password(tmp_path: Path) -> None:
    with socket.socket() as s:  # bound, not listening: connecting is refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        for args in (("run", "smoke", "--no-progress", "--out", tmp_path),
                     ("request", "--count", "2"), ("probe-cache",)):  # fmt: skip
            proc = loadgen(*args, "--base-url", f"http://alice:PW_PLANTED_51e@127.0.0.1:{port}")
            line = assert_one_line_error(proc)
            assert "PW_PLANTED_51e" not in proc.stdout + proc.stderr
            assert f"cannot connect to http://alice:{REDACTED}@127.0.0.1:{port}" in line


def test_a_run_whose_server_dies_writes_and_prints_no_password(tmp_path: Path) -> None:
    """The dropped streams' errors name the server, in streams.jsonl, the reports and the
    failure line: every file of the run directory and the output are grepped."""
    secret = "PW_PLANTED_0d4"
    # The slow profile keeps the run going past the kill: smoke's 41 streams at speed 20 ended
    # in 24 ms, before a busy box's poll of the records could kill the server mid-run.
    with sim_process(tmp_path / "sim.log", "--speed", "20", "--profile", "rtx4090-long") as (
        sim,
        url,
    ):
        url = url.replace("http://", f"http://alice:{secret}@")
        args = ["run", "soak_steady", "--set", "groups.steady.count=16", "--set",
                "repetitions=3", "--base-url", url]  # fmt: skip
        rc, output = run_until(8, args, tmp_path / "out", kill=sim)
    (run_dir,) = (tmp_path / "out").iterdir()
    errors = [r.error.message for r in read_streams(run_dir) if r.error is not None]
    assert rc != 0 and errors, output  # the kill left streams that name the server
    assert _leaks(run_dir, output, (secret,)) == []


def test_what_holds_no_secret_is_returned_as_it_is_and_the_rest_copied() -> None:
    clean = {"streams": [{"id": "a", "ttft_s": 0.1, "argv": ["--port", "8000"]}], "n": (1, 2)}
    assert redact(clean) is clean
    leaky = {
        "streams": clean["streams"],
        "run": {"argv": ["--api-key", "sk-1"], "url": "http://u:pw@h/v1", "n": 3},
    }
    masked = redact(leaky)
    assert masked["streams"] is clean["streams"]  # shared, not copied
    assert masked["run"] == {"argv": ["--api-key", "***"], "url": "http://u:***@h/v1", "n": 3}
    assert leaky["run"]["argv"] == ["--api-key", "sk-1"]  # the input is never changed
