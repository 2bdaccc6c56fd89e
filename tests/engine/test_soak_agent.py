"""soak_agent on the sim's virtual clock: an hour of multi-turn conversations (contexts sweeping
10k -> 80k, back to back) is reported whole, and the context sweep is not mistaken for drift."""

from __future__ import annotations

import itertools
from pathlib import Path

import orjson
from click.testing import CliRunner

from loadgen.cli import main
from loadgen.records import read_streams


def soak(tmp_path: Path, *extra: str) -> Path:
    args = ["soak", "soak_agent", "--out", str(tmp_path), "--no-progress", *extra]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    (run,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    return run


def test_an_hour_of_agent_sessions_without_drift_is_not_called_drift(tmp_path: Path) -> None:
    run = soak(tmp_path)
    records = read_streams(run)
    # Conversations back to back: every one starts at turn 0, and contexts reach 70k+.
    turns = [r.turn for r in records]
    assert turns.count(0) >= 10 and max(turns) == 14
    assert max(r.prompt_tokens for r in records) > 70_000
    # Each turn resends the whole answer before it: prompt grows by exactly the answer's
    # tokens + the new 4.5k user message (+ the same few template tokens every time).
    first = [r for r in records if r.session == records[0].session]
    growth = {b.prompt_tokens - a.prompt_tokens - a.completion_tokens
              for a, b in itertools.pairwise(first)}  # fmt: skip
    assert len(growth) == 1 and 4500 <= growth.pop() < 4550
    s = orjson.loads((run / "soak.json").read_bytes())
    assert s["duration_s"] == 3600
    v = s["verdict"]
    # Every third holds the same turns: nothing changed, neither the engine nor the traffic.
    assert v["verdict"] == "no drift"
    assert v["adjusted"]["ci_lo"] > -0.025 and v["adjusted"]["ci_hi"] < 0.025
    text = (run / "report.txt").read_text()
    # The conversation under way at the hour finished its turns: the report says how far past.
    end_s = orjson.loads((run / "run.json").read_bytes())["soak_end"]["at_s"]
    assert end_s > 3600 * 1.01
    assert (f"note: the soak stopped at {end_s:.0f} s on the server's clock, "
            f"{end_s / 3600 - 1:.0%} past its 3600 s duration") in text  # fmt: skip
    assert "at fixed context" in text and "Soak windows (thirds)" in text
    # The context-bin table shows the same rate in each bin in every third: no drift inside.
    assert "Decode tok/s by context bin" in text and "70-90K" in text
    for row in ("5-30K", "70-90K"):
        rates = [b["decode_tok_s_mean"] for w in s["windows"] for b in w["context_bins"]
                 if b["bin"] == row]  # fmt: skip
        assert len(rates) == 3 and max(rates) / min(rates) < 1.03
    assert (run / "rate.png").read_bytes().startswith(b"\x89PNG")


def test_a_leak_under_agent_sessions_is_drift(tmp_path: Path) -> None:
    run = soak(tmp_path, "--duration", "20m", "--fault", "drift=30")
    v = orjson.loads((run / "soak.json").read_bytes())["verdict"]
    assert v["verdict"] == "drift"
    # 20 min at 30 %/h: step time x1.1 by the end, the rate x ~0.91 at fixed context.
    assert -0.13 < v["adjusted"]["effect"] < -0.07
