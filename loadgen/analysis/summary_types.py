"""summary.json's groups as types: what a report reads of a group, read once from its JSON.

summary.py writes summary.json (the contract other tools read); a report is drawn from that file
alone, so it reads it back through these types: a group's statistics per registered metric
(analysis/registry.py), its verdict counts, what its chunks carried and its ladder cohort.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from loadgen.analysis.registry import GAP_METRICS, names_where


@dataclass(frozen=True, slots=True)
class Stats:
    """analysis/stats.py's `describe` of one metric over a group's streams (None: no values)."""

    n: int
    min: float | None
    median: float | None
    max: float | None
    mean: float | None
    p50: float | None
    p90: float | None
    p99: float | None

    @classmethod
    def from_json(cls, d: Mapping[str, Any] | None) -> Stats:
        d = d or {}
        return cls(d.get("n", 0), d.get("min"), d.get("median"), d.get("max"), d.get("mean"),
                   d.get("p50"), d.get("p90"), d.get("p99"))  # fmt: skip


@dataclass(frozen=True, slots=True)
class ChunkTally:
    """Content chunks whose token count the server gave, those with more than one, their tokens."""

    chunks: int
    multi: int
    tokens: int


@dataclass(frozen=True, slots=True)
class Cohort:
    """A group's ladder row: its cohorts (one per rep) summarised over reps."""

    n: int
    reps: int
    steady: int  # reps in which all n decoded at one instant
    per_stream_tok_s: float | None
    agg_tok_s: float | None
    agg_chunks_per_s: float | None
    agg_token_source: str
    kv_peak_perc: float | None
    duration_s: float | None
    preemptions: float | None

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Cohort:
        return cls(d["n"], d["reps"], d["steady"], d["per_stream_tok_s"], d["agg_tok_s"],
                   d["agg_chunks_per_s"], d["agg_token_source"], d["kv_peak_perc"],
                   d["duration_s"], d["preemptions"])  # fmt: skip


@dataclass(frozen=True, slots=True)
class GroupSummary:
    name: str
    n: int
    ok: int
    prompt_shape: str | None
    token_source: str
    stats: Mapping[str, Stats]  # registered metrics with group statistics, and the gaps
    verdicts: Mapping[str, int]
    chunk_tokens: ChunkTally
    cohort: Cohort | None

    def of(self, metric: str) -> Stats:
        """The group's statistics of a registered metric (KeyError names an unknown one)."""
        return self.stats[metric]

    @property
    def multi_token(self) -> bool:
        """Some stream's chunks carried other than one token each (chunks/s != tok/s)."""
        return carried_other_than_one(self.of("tokens_per_chunk"))

    @classmethod
    def from_json(cls, name: str, g: Mapping[str, Any]) -> GroupSummary:
        fields = (*names_where("group_stats"), *(m.name for m in GAP_METRICS))
        tally = g.get("chunk_tokens") or {}
        return cls(
            name=name,
            n=g["n"],
            ok=g["ok"],
            prompt_shape=g.get("prompt_shape"),
            token_source=g["token_source"],
            stats={f: Stats.from_json(g.get(f)) for f in fields},
            verdicts=dict(g.get("verdicts") or {}),
            chunk_tokens=ChunkTally(
                tally.get("chunks", 0), tally.get("multi", 0), tally.get("tokens", 0)
            ),
            cohort=Cohort.from_json(g["cohort"]) if g.get("cohort") else None,
        )


def carried_other_than_one(tokens_per_chunk: Stats) -> bool:
    """Whether some stream's chunks carried other than one token each, from the statistics of
    its tokens per chunk."""
    tpc = tokens_per_chunk
    if not tpc.n or tpc.min is None or tpc.max is None:
        return False
    return tpc.max > 1.0 + 1e-9 or tpc.min < 1.0 - 1e-9


def read_groups(summary: Mapping[str, Any]) -> list[GroupSummary]:
    """A run summary's groups, in name order."""
    return [GroupSummary.from_json(k, v) for k, v in sorted(summary.get("groups", {}).items())]


def any_multi_token(groups: Iterable[GroupSummary]) -> bool:
    return any(g.multi_token for g in groups)
