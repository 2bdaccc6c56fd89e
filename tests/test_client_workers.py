"""`loadgen request --workers N`: the same streams split across processes, merged records."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from click.testing import CliRunner
from pacedserver import PacedConfig, ThreadedPacedServer

from loadgen.cli import main
from loadgen.client.workers import _share, split
from loadgen.records import read_streams


def test_split_deals_requests_and_concurrency_evenly() -> None:
    assert split(list(range(7)), 3) == [[0, 3, 6], [1, 4], [2, 5]]
    assert split([0], 2) == [[0]]
    assert [_share(5, 2, i) for i in range(2)] == [3, 2]
    assert [_share(1, 2, i) for i in range(2)] == [1, 1]


def probe(url: str, out: Path, workers: int) -> list:
    res = CliRunner().invoke(
        main,
        ["request", "--base-url", url, "-n", "12", "-c", "4", "--max-tokens", "6",
         "--prompt-tokens", "4", "--workers", str(workers), "--out", str(out)],
    )  # fmt: skip
    assert res.exit_code in (0, 3), res.output  # 3: the busy test machine limited the client
    return read_streams(out)


def test_two_workers_give_the_same_records_as_one(tmp_path: Path) -> None:
    with ThreadedPacedServer(PacedConfig(ttft_s=0.02, gap_s=0.005)) as srv:
        one = probe(srv.url, tmp_path / "w1", 1)
        two = probe(srv.url, tmp_path / "w2", 2)
        served = Counter(s.request_id for s in srv.served)
    assert (
        sorted(r.id for r in one) == sorted(r.id for r in two) == [f"r{i:04d}" for i in range(12)]
    )
    for recs in (one, two):
        assert {(r.status, r.completion_tokens, r.chunks, r.token_source) for r in recs} == {
            ("ok", 6, 6, "usage_continuous")
        }
    assert all(n == 2 for n in served.values())  # every stream sent once per run, none twice
    assert all(r.loop_lag_ttft_ns is not None for r in two)  # workers measure themselves too
