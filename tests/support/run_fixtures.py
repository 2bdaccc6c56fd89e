"""Hand-built run directories for the analysis and report tests: exact times, exact tokens."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from loadgen.analysis.load_sweep import LOAD_ROW_FIELDS
from loadgen.codec import from_json
from loadgen.records import MetricsSample, RunDirectory, StreamError, StreamRecord
from loadgen.run_manifest import RunManifest, write_manifest

S = 1_000_000_000
MS = 1_000_000
METRIC_NAMES = {
    "running": "num_requests_running",
    "waiting": "num_requests_waiting",
    "kv": "kv_cache_usage_perc",
    "preempt": "num_preemptions_total",
    "gen": "generation_tokens_total",
    "prompt": "prompt_tokens_total",
    "hits": "prefix_cache_hits_total",
    "queries": "prefix_cache_queries_total",
    "drafts": "spec_decode_num_drafts_total",
    "draft_tokens": "spec_decode_num_draft_tokens_total",
    "accepted": "spec_decode_num_accepted_tokens_total",
    "step_sum": "iteration_tokens_total_sum",
    "step_count": "iteration_tokens_total_count",
}


def ns(seconds: float) -> int:
    return round(seconds * S)


def ticks(start: float, n: int, gap: float) -> list[float]:
    """n chunk arrival times (s): start, start + gap, ..."""
    return [start + i * gap for i in range(n)]


def stream(
    id: str,
    *,
    chunks: list[float],
    tokens: list[int] | None = None,
    sent: float = 0.0,
    intended: float | None = None,
    group: str = "g",
    rep: int = 0,
    prompt: int | None = 1000,
    cached: int | None = None,
    token_source: str = "usage_continuous",
    completion: int | None = None,
    done: float | None = None,
    phase: str = "measure",
    arm: str | None = None,
) -> StreamRecord:
    """An ok stream whose content chunks arrive at `chunks` (s) carrying `tokens` each."""
    chunk_ns = [ns(t) for t in chunks]
    if completion is None:
        completion = sum(tokens) if tokens is not None else len(chunks)
    return StreamRecord(
        id=id,
        group=group,
        rep=rep,
        status="ok",
        error=None,
        api="completions",
        model="m",
        prompt_tokens=prompt,
        requested_prompt_tokens=prompt,
        completion_tokens=completion,
        cached_tokens=cached,
        chunks=len(chunks),
        events=len(chunks) + 2,
        bytes=100 * len(chunks),
        token_source=token_source,
        finish_reason="length",
        http_status=200,
        t_intended_ns=ns(sent if intended is None else intended),
        t_sent_ns=ns(sent),
        t_headers_ns=ns(sent) + MS,
        t_first_ns=chunk_ns[0] if chunk_ns else None,
        t_last_ns=chunk_ns[-1] if chunk_ns else None,
        t_done_ns=ns(done) if done is not None else (chunk_ns[-1] + MS if chunk_ns else ns(sent)),
        chunk_ns=chunk_ns,
        chunk_tokens=tokens,
        max_tokens=completion,
        phase=phase,
        arm=arm,
    )


def failed(
    id: str, *, sent: float, done: float, cls: str = "http_503", group: str = "g", rep: int = 0
) -> StreamRecord:
    return StreamRecord(
        id=id,
        group=group,
        rep=rep,
        status="error",
        error=StreamError(cls, "Service Unavailable"),
        api="completions",
        model="m",
        prompt_tokens=None,
        requested_prompt_tokens=1000,
        completion_tokens=0,
        cached_tokens=None,
        chunks=0,
        events=0,
        bytes=0,
        token_source="usage_final",
        finish_reason=None,
        http_status=503,
        t_intended_ns=ns(sent),
        t_sent_ns=ns(sent),
        t_headers_ns=ns(done),
        t_first_ns=None,
        t_last_ns=None,
        t_done_ns=ns(done),
    )


def sample(t: float, **values: float) -> MetricsSample:
    """A metrics poll at t seconds; keyword names are METRIC_NAMES' short names."""
    return MetricsSample(t_ns=ns(t), values={METRIC_NAMES[k]: float(v) for k, v in values.items()})


def manifest(**overrides: Any) -> RunManifest:
    """A run's manifest as analysis reads it; `overrides` in run.json's JSON form (read through
    the codec strictly: a field the type does not take fails the test)."""
    base: dict[str, Any] = {
        "tool_version": "0.1.0",
        "scenario": {"name": "test", "groups": {}},
        "target": {"url": "http://127.0.0.1:1/v1", "kind": "sim"},
        "model": "m",
        "server": {
            "max_num_seqs": None,
            "max_num_batched_tokens": None,
            "block_size": 16,
            "num_gpu_blocks": None,
            "source": None,
        },
        "seed": 1,
        "started_wall": "2026-01-01T00:00:00Z",
        "interrupted": False,
        "client": {"loop_lag_max_ms": 1.0, "loop_lag_p99_ms": 0.5, "dispatch_late_max_ms": 1.0},
        "speed": 1.0,
        "token_counter": "tokenize",
        "prompt_shapes": {},
        "cache_checks": [],
        "arms": [],
    }
    base.update(overrides)
    return from_json(RunManifest, base)


def sweep_arm(**overrides: Any) -> dict[str, Any]:
    """A sweep parent's arm entry (analysis/sweep.py's arm_entry): no flags, settings or
    groups, no politeness row, energy or figures, unless overridden."""
    base: dict[str, Any] = {
        "flags": {},
        "settings": {},
        "row": None,
        "load_row": {**dict.fromkeys(LOAD_ROW_FIELDS), "requests_ok": 0, "requests_failed": 0},
        "interrupted": False,
        "wall_s": None,
        "energy": None,
        "groups": {},
    }
    base.update(overrides)
    return base


def write_run(
    path: Path,
    streams: list[StreamRecord],
    metrics: list[MetricsSample] | None = None,
    run: RunManifest | None = None,
) -> Path:
    """A run directory as the engine writes it: run.json, streams.jsonl, metrics.jsonl."""
    rd = RunDirectory(path)
    write_manifest(path, manifest() if run is None else run)
    for s in streams:
        rd.append_stream(s)
    for m in metrics or []:
        rd.append_metrics(m)
    rd.close()
    return path


def record(**kw) -> StreamRecord:
    base = dict(
        id="s0",
        group="g",
        rep=0,
        status="ok",
        error=None,
        api="completions",
        model="m",
        prompt_tokens=10,
        requested_prompt_tokens=10,
        completion_tokens=10,
        cached_tokens=None,
        chunks=4,
        events=6,
        bytes=100,
        token_source="usage_continuous",
        finish_reason="length",
        http_status=200,
        t_intended_ns=0,
        t_sent_ns=5 * MS,
        t_headers_ns=6 * MS,
        t_first_ns=105 * MS,
        t_last_ns=405 * MS,
        t_done_ns=406 * MS,
        chunk_ns=[105 * MS, 205 * MS, 305 * MS, 405 * MS],
        chunk_tokens=[1, 3, 3, 3],
    )
    base.update(kw)
    return StreamRecord(**base)
