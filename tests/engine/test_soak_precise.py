"""`loadgen soak --until-precise`: on the virtual clock each window closes at exactly the n the
order-statistic interval predicts (computed here from scipy's binomial, not by the code under
test), a margin too tight for the window's length ends it at its length and says `not
reached`, a soak without the option has no trace of it, and a bad spec is run's one-line
error."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from click.testing import CliRunner
from scipy.stats import binom

from loadgen.cli import main
from loadgen.records import StreamRecord, read_streams

# Queues (4 streams on 2 seats) behind random speculative decodes: TTFTs that vary from
# request to request, so a window's n is not just the first n an interval exists at.
SCENARIO = """
name: soak_mix
api: completions
seed: 5
arrival: together
groups:
  - {name: a, count: 3, prompt: {tokens: 150, shape: prose, cache: salted}, max_tokens: 40}
  - {name: b, count: 2, prompt: {tokens: 700, shape: prose, cache: salted}, max_tokens: 90}
  - {name: c, count: 2, prompt: {tokens: 1600, shape: prose, cache: salted}, max_tokens: 20}
  - {name: d, count: 1, prompt: {tokens: 3000, shape: prose, cache: salted}, max_tokens: 150}
soak:
  duration: 4m
  window: 3m
  concurrency: 4
sim:
  profile: rtx4090-long
  max_num_seqs: 2
  num_speculative_tokens: 3
  acceptance_rate: 0.6
  max_model_len: 8192
"""
NS = 1_000_000_000


def soak(tmp_path: Path, *extra: str) -> tuple[Path, Any]:
    """A fixed-seed soak of SCENARIO on the virtual clock; its directory, report and soak.json."""
    path = tmp_path / "soak_mix.yaml"
    path.write_text(SCENARIO)
    out = tmp_path / "runs"
    res = CliRunner().invoke(main, ["soak", str(path), "--seed", "3", "--no-progress",
                                    "--out", str(out), *extra])  # fmt: skip
    assert res.exit_code == 0, res.output
    (run,) = out.iterdir()
    return run, orjson.loads((run / "soak.json").read_bytes())


def ranks(n: int, p: float) -> tuple[int, int] | None:
    """The 95% interval's 1-based ranks: the largest r with F(r-1) <= 2.5%, the smallest s
    with F(s-1) >= 97.5% (F: the Binomial(n, p) CDF)."""
    cdf = binom.cdf(np.arange(n + 1), n, p)
    lows = [r for r in range(1, n + 1) if cdf[r - 1] <= 0.025]
    highs = [s for s in range(1, n + 1) if cdf[s - 1] >= 0.975]
    return (lows[-1], highs[0]) if lows and highs else None


def margin(values: list[float], p: float) -> float | None:
    """The interval's larger distance from the linear-interpolated percentile, relative."""
    xs = sorted(values)
    r = ranks(len(xs), p)
    if r is None:
        return None
    est = float(np.percentile(xs, p * 100))
    return max(est - xs[r[0] - 1], xs[r[1] - 1] - est) / est


def ttft(r: StreamRecord) -> float:
    assert r.t_first_ns is not None and r.t_sent_ns is not None
    return (r.t_first_ns - r.t_sent_ns) / NS


def expected_windows(recs: list[StreamRecord], p: float, goal: float) -> list[int]:
    """Each window's n: from where the last one closed, the first n whose TTFTs pin the
    p-quantile within `goal`; the rest (never precise) is the window the soak's end cuts."""
    sizes, start = [], 0
    while start < len(recs):
        values = [ttft(r) for r in recs[start:]]
        n = next((n for n in range(1, len(values) + 1)
                  if (m := margin(values[:n], p)) is not None and m <= goal),
                 len(values))  # fmt: skip
        sizes.append(n)
        start += n
    return sizes


def test_each_window_closes_at_the_n_the_interval_predicts(tmp_path: Path) -> None:
    run, summary = soak(tmp_path, "--until-precise", "ttft_p50=10%", "--set", "sim.speed=20")
    recs = [r for r in read_streams(run) if r.phase == "measure"]  # in the order written
    assert all(r.status == "ok" for r in recs)
    sizes = expected_windows(recs, 0.5, 0.10)
    windows = summary["windows"]
    got = [w["precision"] for w in windows]
    assert [g["measured"] for g in got] == sizes
    assert len(set(sizes[:-1])) > 1 and min(sizes[:-1]) > 36  # not just the first interval
    assert [g["targets"][0]["n"] for g in got] == sizes
    # Every window but the last closed because it was precise, at the stream that made it so;
    # the soak's end cut the last before it was.
    assert all(g["reached"] and g["cut_by"] is None for g in got[:-1])
    assert not got[-1]["reached"] and got[-1]["cut_by"] == "soak end"
    assert all(g["targets"][0]["margin"] <= 0.10 for g in got[:-1])
    ends = np.cumsum(sizes)
    speed = summary["speed"]
    for w, end in zip(windows[:-1], ends, strict=False):
        done = recs[end - 1].t_done_ns
        assert done is not None
        assert w["to_s"] == pytest.approx(done / NS * speed, rel=1e-8)  # JSON keeps 9 digits
    assert [w["from_s"] for w in windows[1:]] == [w["to_s"] for w in windows[:-1]]  # tiled
    assert summary["precise"] == {"targets": ["ttft_p50=10%"], "limit_s": 180.0}
    # The window's p50 and its precision's estimate are one number on one clock (the server's:
    # the precision read 0.02679 beside a TTFT p50 of 0.536 at speed 20).
    for w, g in zip(windows, got, strict=True):
        assert g["targets"][0]["estimate"] == pytest.approx(w["ttft_s_median"], rel=1e-9)
    text = (run / "report.txt").read_text()
    assert "Window precision (--until-precise)" in text
    assert f"{len(sizes) - 1} of {len(sizes)} windows precise" in text
    assert "!! NOT PRECISE: not reached in " + windows[-1]["label"] + " (soak end)\n" in text
    assert text.count("not reached (window length)") == 0
    # run.json keeps the targets: `loadgen report` cuts the same windows from the directory.
    assert CliRunner().invoke(main, ["report", str(run)]).exit_code == 0
    assert orjson.loads((run / "soak.json").read_bytes()) == summary


def test_a_margin_too_tight_ends_each_window_at_its_length_and_says_not_reached(
    tmp_path: Path,
) -> None:
    run, summary = soak(tmp_path, "--until-precise", "ttft_p90=1%", "--window", "1m")
    recs = [r for r in read_streams(run) if r.phase == "measure"]
    windows = summary["windows"]
    assert [round(w["duration_s"], 6) for w in windows[:-1]] == [60.0] * 4
    assert [round(w["from_s"], 6) for w in windows] == [0.0, 60.0, 120.0, 180.0, 240.0]
    got = [w["precision"] for w in windows]
    assert [g["cut_by"] for g in got] == ["window length"] * 4 + ["soak end"]
    assert not any(g["reached"] for g in got)
    assert sum(g["measured"] for g in got) == len(recs)
    # Checked by hand: no window's own streams (those that ended in it) ever pinned the p90
    # within 1%, at any n.
    ends = [w["to_s"] for w in windows[:-1]]
    held: list[list[float]] = [[] for _ in windows]
    for r in recs:
        assert r.t_done_ns is not None
        held[int(np.searchsorted(ends, r.t_done_ns / NS * summary["speed"], "right"))].append(
            ttft(r)
        )
    assert [g["measured"] for g in got] == [len(h) for h in held]
    for values in held:
        assert all((m := margin(values[:n], 0.9)) is None or m > 0.01
                   for n in range(1, len(values) + 1))  # fmt: skip
    text = (run / "report.txt").read_text()
    assert text.count("not reached (window length)") == 4
    assert "0 of 5 windows precise" in text and "!! NOT PRECISE: not reached in w1 (window" in text


def test_a_soak_without_it_has_no_trace_of_it(tmp_path: Path) -> None:
    run, summary = soak(tmp_path)
    assert "precise" not in summary
    assert not any("precision" in w for w in summary["windows"])
    assert [w["label"] for w in summary["windows"]] == ["0-3 min", "3-4.02 min"]
    assert "soak_precise" not in orjson.loads((run / "run.json").read_bytes())
    text = (run / "report.txt").read_text()
    assert "precise" not in text.lower() and "Window precision" not in text


def test_a_bad_spec_is_runs_one_line_error() -> None:
    said = []
    for command in (["run", "smoke"], ["soak", "soak_steady"]):
        res = CliRunner().invoke(main, [*command, "--clock", "virtual",
                                        "--until-precise", "ttft_p90=abc"])  # fmt: skip
        assert res.exit_code == 2
        said.append(res.output.splitlines()[-1])
    assert said[0] == said[1]
    assert said[0] == ("Error: Invalid value for '--until-precise': --until-precise "
                       "'ttft_p90=abc': 'abc' is not a margin (5% or 0.05)")  # fmt: skip
