"""`loadgen request` says what `loadgen report` says of the same records: one judgement of
loadgen's own timing error (the banner), and TTFO beside TTFT for streams that reasoned."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from loadgen.cli import main

from support.pacedserver import PacedConfig, ThreadedPacedServer


def banner(output: str) -> str | None:
    return next((line for line in output.splitlines() if line.startswith("!!")), None)


def request_then_report(out: Path, cfg: PacedConfig, count: int, seats: int) -> tuple[str, str]:
    """`loadgen request` into `out`, then `loadgen report` on it: request's output, report.txt."""
    with ThreadedPacedServer(cfg) as srv:
        res = CliRunner().invoke(
            main,
            ["request", "--base-url", srv.url, "-n", str(count), "-c", str(seats),
             "--max-tokens", "10", "--prompt-tokens", "4", "--out", str(out)],
        )  # fmt: skip
    assert res.exit_code == 0, res.output
    rep = CliRunner().invoke(main, ["report", str(out)])
    assert rep.exit_code == 0, rep.output
    return res.output, (out / "report.txt").read_text()


def test_request_and_report_give_one_client_banner(tmp_path: Path) -> None:
    # The server's thread holds the GIL 20 ms after each first token of a 300 ms TTFT: some
    # streams' error passes their 15 ms tolerance and some of those keep an `admitted` verdict
    # that outweighs it. request counted all of them as client-limited ("7 of 8 streams timed
    # with loadgen's own error above tolerance") where report said 2, and 5 "kept their server
    # verdict (not counted as client_limited)".
    cfg = PacedConfig(ttft_s=0.3, gap_s=0.002, hold_gil_s=0.02)
    said, report = request_then_report(tmp_path / "run", cfg, 8, 8)
    shown = banner(said)
    assert shown is not None and shown.startswith("!! CLIENT LIMITED: ")
    assert shown == banner(report)


def test_a_quiet_request_and_its_report_have_no_banner(tmp_path: Path) -> None:
    # TTFT 1 s, a 50 ms tolerance: the server's thread shares the client's GIL, and at a load
    # of 8 on 2 cores the send side (now judged: the write and the server's read) took 15-20 ms
    # at TTFT 0.3 s, a real stall the loop's ticks never saw.
    cfg = PacedConfig(ttft_s=1.0, gap_s=0.002)
    said, report = request_then_report(tmp_path / "run", cfg, 2, 1)
    assert banner(said) is None and banner(report) is None


def test_request_prints_ttfo_for_streams_that_reasoned_and_not_otherwise(tmp_path: Path) -> None:
    from loadgen.server.launcher import launch_sync
    from loadgen.server.sim import SimProfile

    for reasoning, shown in ((3, True), (0, False)):
        flags = ["--reasoning-tokens", str(reasoning)]
        with launch_sync(SimProfile(), flags=flags, log_dir=tmp_path / f"sim{reasoning}",
                         served_name="m") as sim:  # fmt: skip
            res = CliRunner().invoke(
                main,
                ["request", "--base-url", sim.url, "--api", "chat", "-n", "2", "-c", "2",
                 "--max-tokens", "8", "--prompt-tokens", "32"],
            )  # fmt: skip
        assert res.exit_code == 0, res.output
        assert ("Reasoning (TTFO and decode rates, reasoning vs output)" in res.output) is shown
        assert ("TTFO s min/med/max" in res.output) is shown


def test_request_refuses_a_prompt_past_the_servers_window_before_sending(tmp_path: Path) -> None:
    # As a planned run, request checks its group against /v1/models' max_model_len as `run`
    # does: it used to send the stream and report an HTTP 400 as a failed stream.
    from loadgen.server.launcher import launch_sync
    from loadgen.server.sim import SimProfile

    with launch_sync(SimProfile(), log_dir=tmp_path / "sim", served_name="m") as sim:
        args = ["request", "--base-url", sim.url, "--max-tokens", "4"]
        past = CliRunner().invoke(main, [*args, "--prompt-tokens", "9000"])
        within = CliRunner().invoke(main, [*args, "--prompt-tokens", "32"])
    assert past.exit_code == 1, past.output
    last = past.output.strip().splitlines()[-1]
    assert "prompt 9000 + max_tokens 4 = 9004 tokens exceeds" in last and "8192" in last
    assert "Streams" not in past.output and "Benchmark" not in past.output  # nothing was sent
    assert within.exit_code == 0, within.output
