"""run.json through its one type (loadgen/run_manifest.py): exact values both ways, the keys a
kind of run leaves out, older files that lack newer keys, and a wrong field dropped by name."""

from __future__ import annotations

import dataclasses

import orjson
import pytest

from loadgen.clock import ClockName
from loadgen.codec import CodecError, from_json, to_json
from loadgen.run_manifest import (
    ArmInfo,
    BackendPart,
    CacheCheck,
    FidelityRun,
    Precision,
    ProfileRef,
    ReplicaTargets,
    RunManifest,
    ServerLogInfo,
    SoakEndInfo,
    TargetInfo,
    TargetPart,
    TelemetryInfo,
    UntilPrecise,
    VirtualEnd,
    read_run_manifest,
    write_manifest,
)

TARGET = TargetPart(
    TargetInfo("http://127.0.0.1:8000", "vllm", ("--max-num-seqs", 4), "vllm.log"),
    {"max_num_seqs": 4, "sources": {"max_num_seqs": "flags"}, "source": "flags"},
    1.0,
    {"pid": 12, "argv": ["vllm", "serve"]},
)
WALL = BackendPart(
    ClockName.WALL,
    {"loop_lag_max_ms": 1.5, "workers": 1},
    {"cache_config_info": {"block_size": "16"}},
    run_start_perf_ns=123_456_789,
    telemetry=TelemetryInfo(None, ("no GPU telemetry",)),
)
# The keys main's replicas, server log, --metric-percentiles and --until-precise (a run's stop,
# a soak's targets) added.
NEW_KEYS = ("run_start_wall_ns", "utc_offset_s", "targets", "server_log", "metric_percentiles",
            "until_precise", "soak_precise")  # fmt: skip


CHECK = CacheCheck("g", 0, "k", 160, 16, "sim", 1.0, 0.1, 144.0, True, "r", "healthy",
                   "counters", None, True)  # fmt: skip


def arm_manifest() -> RunManifest:
    head = RunManifest(
        tool_version="0.1.0", scenario={"name": "s", "groups": {}}, seed=7, seed_source="user",
        started_wall="2026-01-01T00:00:00+00:00", host="h", python="3.11.7", slo=None,
        sim_profile=ProfileRef("p.yaml", "p", "ab12"),
    )  # fmt: skip
    return head.add(
        TARGET, WALL,
        arm=ArmInfo("default", {}, {"groups.g.n": 2}), interrupted=False, planned_streams=4,
        cache_checks=(CHECK,), model="m", token_counter="local",
        prompt_shapes={"g": "prose"}, soak_end=SoakEndInfo("duration", "10 s", 10.0, 10.0),
        finished_wall="2026-01-01T00:00:10+00:00",
    )  # fmt: skip


def test_an_arm_manifest_writes_exactly_these_keys_and_reads_back_equal() -> None:
    m = arm_manifest()
    data = to_json(m)
    assert data == {
        "tool_version": "0.1.0", "scenario": {"name": "s", "groups": {}}, "seed": 7,
        "seed_source": "user", "started_wall": "2026-01-01T00:00:00+00:00", "host": "h",
        "python": "3.11.7", "slo": None,
        "sim_profile": {"path": "p.yaml", "name": "p", "sha256": "ab12"}, "clock": "wall",
        "arm": {"name": "default", "flags": {}, "settings": {"groups.g.n": 2}},
        "interrupted": False, "planned_streams": 4,
        "cache_checks": [{
            "group": "g", "rep": 0, "prefix_key": "k", "probe_tokens": 160, "block_size": 16,
            "block_size_source": "sim", "cold_ttft_s": 1.0, "warm_ttft_s": 0.1,
            "hits_delta": 144.0, "warm": True, "reason": "r", "verdict": "healthy",
            "decided_by": "counters", "floor_ttft_s": None, "answers_match": True,
        }], "model": "m",
        "token_counter": "local", "prompt_shapes": {"g": "prose"},
        "target": {"url": "http://127.0.0.1:8000", "kind": "vllm",
                   "flags": ["--max-num-seqs", 4], "boot_log": "vllm.log"},
        "server": {"max_num_seqs": 4, "sources": {"max_num_seqs": "flags"}, "source": "flags"},
        "speed": 1.0, "launch": {"pid": 12, "argv": ["vllm", "serve"]},
        "client": {"loop_lag_max_ms": 1.5, "workers": 1},
        "server_info": {"cache_config_info": {"block_size": "16"}},
        "run_start_perf_ns": 123_456_789,
        "telemetry": {"source": None, "notes": ["no GPU telemetry"]},
        "soak_end": {"reason": "duration", "detail": "10 s", "at_s": 10.0, "duration_s": 10.0},
        "finished_wall": "2026-01-01T00:00:10+00:00",
    }  # fmt: skip
    assert from_json(RunManifest, orjson.loads(orjson.dumps(data))) == m


def test_a_virtual_arm_and_a_parent_leave_out_what_they_do_not_have() -> None:
    virtual = RunManifest(seed=1).add(
        TargetPart(TargetInfo("virtual://loadgen-sim", "sim", (), None), {}, 1.0, None),
        BackendPart(ClockName.VIRTUAL, {"in_loop": False}, {}, virtual=VirtualEnd(5, 3)),
    )
    data = to_json(virtual)
    assert data["clock"] == "virtual" and data["virtual"] == {"end_ns": 5, "engine_steps": 3}
    assert not {"run_start_perf_ns", "telemetry", "launch", "arms", "soak_end"} & set(data)
    runs = FidelityRun("ladder", 0.2, "real/r", None, ProfileRef("p.yaml", "p", "ab"))
    parent = to_json(RunManifest(seed=1, interrupted=True, fidelity=runs))
    # slo is written as null where none was given; every other absent part is left out.
    assert parent == {"seed": 1, "slo": None, "clock": "wall", "interrupted": True,
                      "fidelity": {"scenario": "ladder", "tolerance": 0.2, "real": "real/r",
                                   "virtual": None, "profile": {"path": "p.yaml", "name": "p",
                                                                "sha256": "ab"}}}  # fmt: skip
    assert from_json(RunManifest, parent).fidelity == runs


def test_an_old_run_json_without_the_newer_keys_reads() -> None:
    # A wall run before the clock was always written, and an early `loadgen request` run whose
    # target was its bare URL; a fidelity profile that named no digest; a key loadgen no longer
    # writes.
    old = {"tool_version": "0.0.9", "seed": 3, "target": "http://127.0.0.1:8000/v1",
           "interrupted": False, "retired_key": {"x": 1}}  # fmt: skip
    m, dropped = read_run_manifest(old)
    assert (m.clock, m.target, m.seed, m.scenario, m.telemetry, dropped) == (
        ClockName.WALL, "http://127.0.0.1:8000/v1", 3, None, None, ()
    )  # fmt: skip
    target = {"url": "u", "kind": "external"}  # before flags and boot_log were written
    assert read_run_manifest({"target": target})[0].target == TargetInfo("u", "external")
    profile = {"scenario": "s", "tolerance": 0.2, "real": None, "virtual": None,
               "profile": {"path": "p.yaml", "name": "p"}}  # fmt: skip
    assert read_run_manifest({"fidelity": profile})[0].fidelity == FidelityRun(
        "s", 0.2, None, None, ProfileRef("p.yaml", "p")
    )


def test_a_wrong_field_is_dropped_by_name_and_a_clean_file_drops_none() -> None:
    clean = to_json(arm_manifest())
    assert read_run_manifest(clean) == (arm_manifest(), ())
    bad = clean | {"seed": "7", "arm": {"name": 1, "flags": {}, "settings": {}}}
    m, dropped = read_run_manifest(bad)
    assert (m.seed, m.arm, m.model) == (None, None, "m")
    assert dropped == ("arm (name: expected str, got int)", "seed (expected int, got str)")
    with pytest.raises(CodecError, match="expected object, got list"):
        read_run_manifest([1])


def test_the_file_is_sorted_indented_and_redacted(tmp_path) -> None:
    secret = RunManifest(seed=1).add(
        TargetPart(TargetInfo("http://u:pw@h:1", "external"), {}, 1.0, None)
    )
    write_manifest(tmp_path, secret)
    text = (tmp_path / "run.json").read_text()
    assert "pw" not in text and text.startswith('{\n  "clock": "wall",\n')
    assert list(orjson.loads(text)) == sorted(orjson.loads(text))


def test_replicas_a_kept_server_log_and_a_precise_stop_write_these_keys_and_read_back() -> None:
    targets = ReplicaTargets(("http://127.0.0.1:1", "http://127.0.0.1:2"), "prefix-hash", 4, 256)
    log = ServerLogInfo("server.log", "/var/log/vllm.log", 120, bytes=4096)
    wall = dataclasses.replace(WALL, run_start_wall_ns=1_796_369_853_584_183_040,
                               utc_offset_s=3600, targets=targets, server_log=log)  # fmt: skip
    precise = UntilPrecise(True, 41, 100, (Precision("ttft_p90", 0.05, 41, 0.2, 0.19, 0.21, 0.05),))
    m = arm_manifest().add(TARGET, wall, metric_percentiles=(50.0, 99.9), until_precise=precise,
                           soak_precise=("ttft_p90=0.05",))  # fmt: skip
    data = to_json(m)
    assert {k: data[k] for k in NEW_KEYS} == {
        "run_start_wall_ns": 1_796_369_853_584_183_040, "utc_offset_s": 3600,
        "targets": {"urls": ["http://127.0.0.1:1", "http://127.0.0.1:2"],
                    "route": "prefix-hash", "prefix_blocks": 4, "block_chars": 256},
        "server_log": {"file": "server.log", "source": "/var/log/vllm.log", "from_byte": 120,
                       "bytes": 4096},
        "metric_percentiles": [50.0, 99.9],
        "until_precise": {"reached": True, "measured": 41, "planned": 100, "targets": [
            {"target": "ttft_p90", "goal": 0.05, "n": 41, "estimate": 0.2, "low": 0.19,
             "high": 0.21, "margin": 0.05}]},
        "soak_precise": ["ttft_p90=0.05"],
    }  # fmt: skip
    assert read_run_manifest(orjson.loads(orjson.dumps(data))) == (m, ())
    # A log that could not be read says why and names no file; an arm without them has none.
    unread = ServerLogInfo(None, "/gone.log", 0, error="FileNotFoundError: gone")
    assert to_json(unread) == {"file": None, "source": "/gone.log", "from_byte": 0,
                               "error": "FileNotFoundError: gone"}  # fmt: skip
    assert not set(NEW_KEYS) & set(to_json(arm_manifest()))


def test_a_wrong_new_field_is_dropped_by_name() -> None:
    bad = to_json(arm_manifest()) | {"metric_percentiles": [50, "p99"], "targets": {"urls": 3}}
    m, dropped = read_run_manifest(bad)
    assert (m.metric_percentiles, m.targets, m.model) == (None, None, "m")
    assert [d.split(" ")[0] for d in dropped] == ["metric_percentiles", "targets"]
