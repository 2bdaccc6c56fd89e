"""`loadgen calibrate` end to end: on the virtual clock the fit recovers the sim's own profile
exactly (speculation included); over HTTP it refuses, in one line, a server it cannot drive or
size, and a plan beyond its request bound."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from loadgen.engine.calibrate import launched_without_drafts
from loadgen.run_manifest import TargetInfo
from loadgen.sim.profile_file import load_profile_file
from loadgen.sim.profiles import sim_profile

from support.cli import loadgen, rewrites_identically
from support.pacedserver import PacedConfig, ThreadedPacedServer

STEP_COSTS = ("fixed_s", "per_token_s", "decode_ctx_s", "prefill_ctx_s", "cached_token_s")


def _calibrate(tmp_path: Path, *args: str) -> tuple[Path, str]:
    out = tmp_path / "profile.yaml"
    proc = loadgen("calibrate", "--out", tmp_path, "--profile-out", out, *args, timeout_s=300)
    assert proc.returncode == 0, proc.stderr
    assert f"profile written to {out}" in proc.stdout
    return out, proc.stdout + proc.stderr


def test_virtual_calibration_recovers_the_sims_own_profile(tmp_path: Path) -> None:
    out, printed = _calibrate(
        tmp_path, "--clock", "virtual", "--set", "sim.max_model_len=131072",
        "--set", "sim.num_gpu_blocks=9000", "--set", "sim.max_num_seqs=8",
    )  # fmt: skip
    fitted = load_profile_file(out)
    known = sim_profile("default")
    for name in STEP_COSTS:
        assert getattr(fitted.step, name) == pytest.approx(getattr(known, name), rel=1e-3), name
    # The hand-set card prices decode tokens as prefill ones; the fit finds the same slope.
    assert fitted.step.decode_token_s == pytest.approx(known.per_token_s, rel=1e-3)
    assert fitted.request_overhead_s == pytest.approx(0, abs=1e-6)
    assert fitted.facts["max_num_seqs"] == 8
    assert fitted.facts["max_num_batched_tokens"] == 2048
    assert fitted.facts["num_speculative_tokens"] == 0
    assert fitted.fit["max_error"] < 1e-3
    # No HTTP path on the virtual clock: the sim's TTFT histogram is the client's timing.
    witness = fitted.fit["server_witness"]
    assert len(witness) == fitted.fit["measurements"]
    assert all(w["client_ttft_mean_s"] == pytest.approx(w["server_ttft_mean_s"], rel=1e-6)
               for w in witness), witness  # fmt: skip
    assert fitted.sources["server_counters"].startswith("server counters beside the fit")
    # Progress: one line per probe, the decode ladder up to the seats.
    assert "calibrate 1/" in printed and "decode-b8" in printed
    assert (tmp_path / "profile.yaml").is_file()
    [root] = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert (root / "calibration.png").stat().st_size > 0
    assert (root / "points" / "01-tiny" / "streams.jsonl").is_file()


def test_speculation_is_found_from_the_chunks(tmp_path: Path) -> None:
    out, _ = _calibrate(
        tmp_path, "--clock", "virtual", "--max-prompt", "8192",
        "--set", "sim.num_speculative_tokens=3", "--set", "sim.acceptance_rate=0.6",
    )  # fmt: skip
    fitted = load_profile_file(out)
    assert fitted.facts["num_speculative_tokens"] == 3
    assert fitted.facts["acceptance_rate"] == pytest.approx(0.6, abs=0.08)
    # Drafts priced as decode tokens: the decode costs still come back exact.
    known = sim_profile("default")
    assert fitted.step.decode_ctx_s == pytest.approx(known.decode_ctx_s, rel=1e-3)
    assert fitted.step.decode_token_s == pytest.approx(known.per_token_s, rel=1e-3)


def test_report_redraws_a_calibration_directory(tmp_path: Path) -> None:
    out, printed = _calibrate(tmp_path, "--clock", "virtual", "--max-prompt", "8192")
    [root] = [p for p in tmp_path.iterdir() if p.is_dir()]
    text = (root / "report.txt").read_text()
    assert text.startswith(f"profile {load_profile_file(out).name}: {root / 'profile.yaml'}")
    assert text in printed  # the report printed is the one written
    assert "The fit, point by point" in (root / "report.html").read_text()
    assert rewrites_identically(root, "report.txt", "report.html", "calibration.png")
    # Stopped before its fit, the directory is one line that says how to fit it.
    (root / "profile.yaml").unlink()
    proc = loadgen("report", root)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert proc.stderr == (
        f"Error: {root}: the calibration has no profile.yaml (it stopped before the fit); "
        f"`loadgen calibrate --refit {root}` fits the points it recorded\n"
    )


def _refusal(*args: str) -> str:
    proc = loadgen("calibrate", *args, timeout_s=120)
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("Error")]
    assert len(lines) == 1, proc.stderr
    return lines[0]


def test_calibrate_refuses_what_it_cannot_drive_in_one_line(tmp_path: Path) -> None:
    assert "needs a server" in _refusal("--out", str(tmp_path))
    # A --profile-out that cannot be written is said before a point runs, not after them all.
    (tmp_path / "afile").write_text("")
    line = _refusal("--clock", "virtual", "--out", str(tmp_path / "runs"), "--profile-out",
                    str(tmp_path / "afile" / "x.yaml"))  # fmt: skip
    assert line.startswith(f"Error: --profile-out's folder {tmp_path / 'afile'}: cannot create")
    assert not (tmp_path / "runs").exists()
    failing = PacedConfig(ttft_s=0.001, gap_s=0.001, faults=dict.fromkeys(range(16), "http_500"))
    with ThreadedPacedServer(failing) as srv:
        line = _refusal("--base-url", srv.url, "--out", str(tmp_path / "a"),
                        "--server-facts", "max_num_seqs=2,max_num_batched_tokens=512,"
                        "block_size=16,max_model_len=2048")  # fmt: skip
    assert "cannot calibrate" in line and "first request failed" in line
    with ThreadedPacedServer(PacedConfig(ttft_s=0.001, gap_s=0.001)) as srv:
        line = _refusal("--base-url", srv.url, "--out", str(tmp_path / "b"))
        assert "max_num_batched_tokens, max_num_seqs, max_model_len" in line
        assert "--server-facts max_num_batched_tokens=N" in line
        line = _refusal("--base-url", srv.url, "--out", str(tmp_path / "c"), "--max-requests",
                        "5", "--server-facts", "max_num_seqs=2,max_num_batched_tokens=512,"
                        "block_size=16,max_model_len=2048")  # fmt: skip
        assert "--max-requests 5" in line


def test_a_launched_server_without_a_speculative_flag_drafts_nothing() -> None:
    # Under load vLLM's CPU build coalesced enough two-token chunks that the chunks read as
    # k = 1; the launch says no drafts, and outranks them.
    plain = TargetInfo("http://127.0.0.1:8000", "vllm", ("--max-num-seqs=4",), "boot/server.log")
    said = launched_without_drafts(plain)
    assert said is not None and (said.tokens, said.acceptance) == (0, None)
    assert said.source == "launched vllm without a --speculative flag"
    # Where the launch asks for drafts, or loadgen did not launch it, or the kind has no such
    # flag, the counters or the chunks decide.
    drafting = dataclasses.replace(plain, flags=("--speculative-config", '{"method": "ngram"}'))
    external = dataclasses.replace(plain, boot_log=None)
    llama = dataclasses.replace(plain, kind="llamacpp")
    for target in (drafting, external, llama, "http://127.0.0.1:8000", None):
        assert launched_without_drafts(target) is None, target
