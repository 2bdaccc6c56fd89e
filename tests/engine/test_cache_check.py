"""The one cache rule: a probe under 10 blocks cannot show a dead cache; the hit counter
decides where the server has one, the TTFT ratio (far enough above the floor, from a prime
that was itself cold) otherwise; a greedy repeat must answer as the cold send did."""

import dataclasses

from loadgen.engine.cache import (
    Judgement,
    prime_and_verify,
    probe_blind_reason,
    reusable_tokens,
    warm_verdict,
)
from loadgen.records import StreamRecord

S = 1_000_000_000


def rec(ttft_s: float, status: str = "ok", answer: str | None = None) -> StreamRecord:
    first = int(ttft_s * S)
    return StreamRecord(
        id="p", group="g", rep=0, status=status, error=None, api="completions", model="m",
        prompt_tokens=100, requested_prompt_tokens=100, completion_tokens=1, cached_tokens=None,
        chunks=1, events=2, bytes=10, token_source="usage_final", finish_reason="length",
        http_status=200, t_intended_ns=0, t_sent_ns=0, t_headers_ns=0, t_first_ns=first,
        t_last_ns=first, t_done_ns=first, answer=answer,
    )  # fmt: skip


def judge(cold: float, warm: float, hits: float | None, floor: float | None = None) -> Judgement:
    return warm_verdict(rec(cold), rec(warm), hits, probe_tokens=2048, block_size=16, floor_s=floor)


def test_probe_smaller_than_ten_blocks_is_blind():
    # The seed's case: a 2k probe at B=1696 spans one block and reuses nothing.
    assert probe_blind_reason(2000, 1696) == (
        "probe of 2000 tokens spans 1 blocks of 1696 (< 10): too small to show reuse"
    )
    assert probe_blind_reason(16960, 1696) is None
    assert probe_blind_reason(50, None) is None


def test_reusable_tokens_are_all_blocks_but_the_last():
    assert reusable_tokens(2048, 16) == 2032
    assert reusable_tokens(16960, 1696) == 15264
    assert reusable_tokens(2048, None) == 1


def test_counters_decide_healthy_even_when_ttft_is_noise():
    # The H200 boot: every probe token a hit, warm TTFT slower than cold (0.126 vs 0.094 s).
    assert judge(0.094, 0.126, 2048.0) == Judgement(
        True, "healthy", "counters",
        "decided by counters: prefix-cache hits +2048 tokens (>= 2032 reusable); "
        "TTFT: warm TTFT 0.126s vs cold 0.094s (not under half), disagrees",
    )  # fmt: skip


def test_counters_decide_dead_and_the_verdict_names_both_witnesses():
    # Fast but too few hits: the cache did not do it (a cache-dead boot that got lucky).
    assert judge(2.0, 0.1, 16.0) == Judgement(
        False, "dead", "counters",
        "decided by counters: prefix-cache hits +16 tokens (< 2032 reusable); "
        "TTFT: warm TTFT 0.100s vs cold 2.000s (under half), disagrees",
    )  # fmt: skip
    assert judge(2.0, 1.9, 0.0).reason == (
        "decided by counters: prefix-cache hits +0 tokens (< 2032 reusable); "
        "TTFT: warm TTFT 1.900s vs cold 2.000s (not under half)"
    )


def test_counters_and_a_floor_too_close_for_the_ratio():
    got = judge(0.079, 0.055, 8160.0, floor=0.054)
    assert (got.warm, got.decided_by) == (True, "counters")
    assert got.reason.endswith("(not telling: cold is 1.5x the 54.0 ms floor, < 20x)")


def test_without_counters_the_ttft_ratio_decides_both_ways():
    assert judge(2.0, 0.1, None, floor=0.05) == Judgement(
        True, "healthy", "ttft",
        "decided by TTFT (server reports no prefix-hit counter): "
        "warm TTFT 0.100s vs cold 2.000s (under half)",
    )  # fmt: skip
    dead = judge(2.0, 1.5, None, floor=0.05)
    assert (dead.warm, dead.verdict, dead.decided_by) == (False, "dead", "ttft")
    assert judge(2.0, 1.5, None).verdict == "dead"  # a primed group: no floor measured


def test_without_counters_a_ratio_near_the_floor_cannot_tell():
    got = judge(0.5, 0.1, None, floor=0.05)
    assert (got.warm, got.verdict, got.decided_by) == (False, "inconclusive", "none")
    assert "not telling: cold is 10.0x the 50.0 ms floor" in got.reason


def test_a_failed_stream_is_dead():
    got = warm_verdict(rec(2.0, "error"), rec(0.1), 4096.0, probe_tokens=2048, block_size=16)
    assert got == Judgement(False, "dead", "failed", "a priming stream failed")


async def verify(
    answers: dict[str, str | None], hits: list[float], probe_tokens: int = 1600
) -> tuple[list[str], object]:
    sent: list[str] = []
    counts = iter(hits)

    async def send(phase: str) -> StreamRecord:
        sent.append(phase)
        return rec(2.0 if phase == "prime" else 0.2, answer=answers.get(phase))

    async def read_hits() -> float | None:
        return next(counts)

    check = await prime_and_verify(
        group="whale", rep=0, prefix_key="k", probe_tokens=probe_tokens, block_size=16,
        block_size_source="sim", send=send, read_hits=read_hits,
    )  # fmt: skip
    return sent, check


async def test_prime_and_verify_sends_cold_probe_repeat_and_reads_hits_around_probe():
    sent, check = await verify({"prime": "a b c", "repeat": "a b c"}, [100.0, 1700.0])
    assert sent == ["prime", "probe", "repeat"]
    assert dataclasses.astuple(check)[6:] == (
        2.0, 0.2, 1600.0, True, check.reason, "healthy", "counters", None, True
    )  # fmt: skip
    assert check.reason.endswith("; warm answer = cold (5 chars, greedy)")


async def test_a_warm_answer_that_differs_is_a_correctness_failure_not_dead():
    sent, check = await verify(
        {"prime": "a b c", "repeat": "a b d", "control": "a b c"}, [100.0, 1700.0]
    )
    assert sent == ["prime", "probe", "repeat", "control"]
    assert (check.warm, check.verdict, check.answers_match) == (True, "mismatch", False)
    assert "CACHE CORRECTNESS FAILURE: warm answer 'a b d' != cold 'a b c'" in check.reason
    assert check.reason.endswith("; a cold control answered as the cold did")


async def test_answers_that_differ_without_the_cache_too_do_not_convict_it():
    # The H200's random-weight model: greedy answers forked whether or not the cache served.
    _, check = await verify(
        {"prime": "a b c", "repeat": "a b d", "control": "a b e"}, [100.0, 1700.0]
    )
    assert (check.warm, check.verdict, check.answers_match) == (True, "healthy", None)
    assert "answers not judged: greedy decoding does not reproduce here" in check.reason
    assert "CACHE CORRECTNESS FAILURE" not in check.reason


async def test_a_probe_too_small_to_tell_is_unproven_unless_the_counters_saw_the_hit():
    # 96 tokens of 16: 6 blocks. It read DEAD (and the rep was dropped) whatever the server
    # counted; 65,536 hits of a 72,536-token probe at B=8192 were called "never hit".
    _, check = await verify({"prime": "a", "repeat": "a"}, [100.0, 100.0], probe_tokens=96)
    assert (check.verdict, check.decided_by, check.warm) == ("inconclusive", "blind", False)
    assert check.reason.startswith("probe of 96 tokens spans 6 blocks of 16 (< 10): too small")
    _, check = await verify({"prime": "a", "repeat": "a"}, [100.0, 180.0], probe_tokens=96)
    assert (check.verdict, check.decided_by, check.warm) == ("healthy", "counters", True)


def test_a_prime_served_from_the_cache_is_no_cold_reference():
    # Primed once per group, rep 1's prime hit the cache: "warm 0.384s vs cold 0.384s (not
    # under half), disagrees" was read on every rep after the first.
    cold = dataclasses.replace(rec(0.384), cached_tokens=2032)
    got = warm_verdict(cold, rec(0.384), 2032.0, probe_tokens=2048, block_size=16)
    assert got.verdict == "healthy" and "disagrees" not in got.reason
    assert got.reason.endswith("TTFT: no cold reference (the prime itself hit 2032 cached tokens)")
    # A cold prime is one: the witness speaks.
    got = warm_verdict(rec(0.384), rec(0.384), 2032.0, probe_tokens=2048, block_size=16)
    assert got.reason.endswith("warm TTFT 0.384s vs cold 0.384s (not under half), disagrees")


async def test_a_dead_cache_sends_no_repeat():
    sent, check = await verify({"prime": "a", "repeat": "b"}, [100.0, 100.0])
    assert sent == ["prime", "probe"]
    assert (check.verdict, check.answers_match) == ("dead", None)


def _cached_run(tmp_path, *faults: str, code: int = 0) -> tuple[dict, str]:
    """whale_c4_cached on the virtual clock (its whale's prefix primed and checked first):
    run.json and report.txt; the run exits `code`."""
    import orjson

    from support.cli import loadgen

    out = tmp_path / "runs"
    sets = [f"--set=sim.faults=[{f}]" for f in faults]
    proc = loadgen("run", "whale_c4_cached", "--clock", "virtual", "--seed", "7", "--out", out,
                   "--no-progress", *sets)  # fmt: skip
    assert proc.returncode == code, proc.stderr
    if code:
        assert proc.stderr.splitlines()[-1] == (
            "Error: no stream was measured: 1 rep(s) not measured, their primed prefix never "
            "hit (!! CACHE DEAD)"
        )
    (run_dir,) = out.iterdir()
    return orjson.loads((run_dir / "run.json").read_bytes()), (run_dir / "report.txt").read_text()


def test_a_rep_whose_cache_never_hit_is_reported_and_not_measured(tmp_path):
    # It was measured and reported as a cached whale: 6.6 s TTFT, cold, and not a word.
    # Its exit was 0: a CI gate on the code passed a run that measured nothing.
    manifest, report = _cached_run(tmp_path, "cache_dead", code=4)
    (check,) = manifest["cache_checks"]
    assert (check["group"], check["rep"], check["verdict"]) == ("whale", 0, "dead")
    assert manifest["planned_streams"] == 0
    assert "records: 0 measured of 0 planned" in report and "!! MISSING" not in report
    dead = [line for line in report.splitlines() if line.startswith("!! CACHE DEAD")]
    assert dead == [
        "!! CACHE DEAD: group whale rep 0: its primed prefix never hit the cache (decided by "
        "counters: prefix-cache hits +0 tokens (< 72512 reusable); TTFT: warm TTFT 6.490s vs "
        "cold 6.490s (not under half)): the rep was not measured; restart the server and run "
        "again (a dead boot stays dead)"
    ]


def test_a_warm_rep_is_measured_with_its_check_said_quietly(tmp_path):
    manifest, report = _cached_run(tmp_path)
    (check,) = manifest["cache_checks"]
    assert check["verdict"] == "healthy" and manifest["planned_streams"] == 4
    assert "records: 4 measured of 4 planned" in report
    assert "cache check: group whale rep 0: warm (decided by counters" in report
    assert "!! CACHE" not in report
