"""The sized warm-pair check: the probe must span >= 10 blocks, and warm needs both signals."""

from loadgen.engine.cache import prime_and_verify, probe_blind_reason, warm_verdict
from loadgen.records import StreamRecord

S = 1_000_000_000


def rec(ttft_s: float, status: str = "ok") -> StreamRecord:
    first = int(ttft_s * S)
    return StreamRecord(
        id="p", group="g", rep=0, status=status, error=None, api="completions", model="m",
        prompt_tokens=100, requested_prompt_tokens=100, completion_tokens=1, cached_tokens=None,
        chunks=1, events=2, bytes=10, token_source="usage_final", finish_reason="length",
        http_status=200, t_intended_ns=0, t_sent_ns=0, t_headers_ns=0, t_first_ns=first,
        t_last_ns=first, t_done_ns=first,
    )  # fmt: skip


def test_probe_smaller_than_ten_blocks_is_blind():
    # The seed's case: a 2k probe at B=1696 spans one block and reuses nothing.
    assert probe_blind_reason(2000, 1696) == (
        "probe of 2000 tokens spans 1 blocks of 1696 (< 10): too small to show reuse"
    )
    assert probe_blind_reason(16960, 1696) is None
    assert probe_blind_reason(50, None) is None


def test_warm_needs_fast_ttft_and_hits():
    assert warm_verdict(rec(2.0), rec(0.1), 4096.0) == (
        True,
        "warm TTFT 0.100s vs cold 2.000s; prefix-cache hits +4096 tokens",
    )
    assert warm_verdict(rec(2.0), rec(1.5), 4096.0)[0] is False
    # Fast but no hits: the cache did not do it (e.g. a cache-dead boot that got lucky).
    assert warm_verdict(rec(2.0), rec(0.1), 0.0) == (
        False,
        "warm TTFT 0.100s vs cold 2.000s; prefix-cache hits did not grow (cache-dead boot?)",
    )
    assert warm_verdict(rec(2.0), rec(0.1), None) == (
        True,
        "warm TTFT 0.100s vs cold 2.000s; server reports no prefix-hit counter (TTFT alone)",
    )
    assert warm_verdict(rec(2.0, "error"), rec(0.1), 10.0) == (False, "a priming stream failed")


async def test_prime_and_verify_sends_cold_then_probe_and_reads_hits_around_probe():
    sent: list[str] = []
    hits = iter([100.0, 900.0])

    async def send(phase: str) -> StreamRecord:
        sent.append(phase)
        return rec(2.0 if phase == "prime" else 0.2)

    async def read_hits() -> float | None:
        return next(hits)

    check = await prime_and_verify(
        group="whale", rep=0, prefix_key="k", probe_tokens=1600, block_size=16,
        block_size_source="sim", send=send, read_hits=read_hits,
    )  # fmt: skip
    assert sent == ["prime", "probe"]
    assert check.warm is True
    assert check.hits_delta == 800.0
    assert check.cold_ttft_s == 2.0 and check.warm_ttft_s == 0.2
