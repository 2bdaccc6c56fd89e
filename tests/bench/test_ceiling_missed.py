"""bench/ceiling.py: a point counts a stream as missed when firehose's log shows its first token
read later than its tolerance and the run did not flag it, and says by how much the read delay
went past the bound the run charged it; and what its CPU columns read: the traffic's alone,
the parent judged by its busiest thread."""

from __future__ import annotations

import dataclasses
import math
import os
import subprocess
import sys
import threading
import time

import pytest

from loadgen.records import StreamRecord

from support.run_fixtures import stream

MS = 1_000_000
ZERO = 7 * 10**12  # the run's zero on firehose's clock


def _read(number: int, first_ms: float, bound_ms: float, late_ms: float = 0.0) -> StreamRecord:
    """Stream `number`, sent at 0 (`late_ms` after it was meant to go), its first token
    stamped at `first_ms` with the bound `bound_ms` charged to that stamp."""
    rec = stream(f"r{number}", chunks=[first_ms / 1e3, first_ms / 1e3 + 0.001],
                 intended=-late_ms / 1e3)  # fmt: skip
    return dataclasses.replace(rec, response_id=f"cmpl-{number:020x}",
                               loop_lag_ttft_ns=int(bound_ms * MS))  # fmt: skip


def test_a_late_read_the_bound_did_not_cover_is_missed_and_measured(ceiling, monkeypatch) -> None:
    # Firehose read each request at 0.1 ms and wrote its first token at 2 ms. Stream 1 was
    # stamped at 5 ms (3 ms late), sent 0.8 ms late with 0.5 ms charged to its read: its error
    # bound 0.8 ms, so missed, 2.2 ms past it. Stream 2, as late, was charged 3.2 ms and so
    # flagged; streams 3 and 4 were stamped 0.2 and 0.3 ms after the write.
    recs = [_read(1, 5.0, 0.5, 0.8), _read(2, 5.0, 3.2), _read(3, 2.2, 0.1), _read(4, 2.3, 0.1)]
    truth = {n: (ZERO + MS // 10, ZERO + 2 * MS) for n in (1, 2, 3, 4)}
    p = ceiling.point(recs, [truth], ZERO, 1, 16, 4, (0.1, 0.9, 0.9, 0.9, 1.0), 1.0, False)
    assert p.missed == pytest.approx(1 / 4)
    assert p.flagged == pytest.approx(1 / 4)
    # A run that said its host was crowded flagged every stream: none missed.
    crowded = ceiling.point(recs, [truth], ZERO, 1, 16, 4, (0.1, 0.9, 0.9, 0.9, 1.0), 1.0, True)
    assert (crowded.flagged, crowded.missed, crowded.missed_over_ms) == (1.0, 0.0, None)
    assert p.missed_over_ms == pytest.approx(2.2)
    # Its server, firehose's stamp of its first token and the 3 ms from there to loadgen's.
    (miss,) = p.missed_streams
    assert (miss.replica, miss.stamp_ns, miss.delay_ns) == (0, ZERO + 2 * MS, 3 * MS)
    assert crowded.missed_streams == ()
    # Beside it, the host as the run counted it, against where its crowded flag starts; how
    # long its server waited for a core around it; the host around it and over the traffic.
    witnessed = dataclasses.replace(miss, busy=0.93, server_wait_ms=1.5)
    p = dataclasses.replace(p, run_host_cpu=1.62, run_server_wait=0.31, busy_windows=0.25,
                            missed_streams=(witnessed,))  # fmt: skip
    monkeypatch.setattr(ceiling, "CORES", 2)
    assert (
        "C=4: 25.00% missed, their read delay past the bound charged by up to 2.200 ms;"
        " the run counted the host 1.62 cores busy (its crowded flag from 1.70) and its"
        " server's wait for a core 31% of it, and >= 85% busy in 25% of the traffic's 100 ms"
        " windows; each missed stream (past its bound, its server's wait for a core around"
        " it by the bench's reads and by the run's, the host around it): 2.20 / 1.50 / nan ms"
        " / 93%"
    ) in ceiling.ceiling_table([p], 1)
    # 0.9 cores of client CPU over the span (7.8 ms: stream 1 meant to go at -0.8 ms, the
    # last end at 7 ms) for 4 requests: 0.9 * 7.8 ms / 4 = 1,755 us a request.
    assert p.span_s == pytest.approx(7.8e-3)
    assert p.client_us_per_req == pytest.approx(1755)
    assert "   1755 " in ceiling.row(p)


def test_a_point_with_no_late_read_misses_none_and_says_nothing_of_it(ceiling) -> None:
    recs = [_read(3, 2.2, 0.1), _read(4, 2.9, 0.1)]
    truth = {n: (ZERO + MS // 10, ZERO + 2 * MS) for n in (3, 4)}
    p = ceiling.point(recs, [truth], ZERO, 1, 16, 2, (0.1, 0.9, 0.9, 0.9, 1.0), 1.0, False)
    assert (p.missed, p.missed_over_ms, p.flagged) == (0, None, 0)
    assert "missed, their read delay" not in ceiling.ceiling_table([p], 1)


def _samples(ceiling, every_ms: int, n: int) -> list:
    """n samples `every_ms` apart: each 10 ms tick of the client a busy core's (the command's
    main thread, tid 1), its server idle, the host two cores busy; then, after them, a minute
    of analysis at one core."""
    ticks = [i * every_ms // 10 for i in range(n)]
    out = [ceiling.Sample(i * every_ms * MS, (0,), t, t, 2 * i * every_ms / 1e3, {1: t})
           for i, t in enumerate(ticks)]  # fmt: skip
    last = out[-1]
    out.append(ceiling.Sample(last.ns + 60_000 * MS, (0,), last.client + 6000, last.parent + 6000,
                              last.host_s + 60.0, {1: last.parent + 6000}))  # fmt: skip
    return out


def test_a_traffic_too_short_for_the_cpu_counters_is_short_not_a_bound(ceiling) -> None:
    # 10 samples inside the traffic: its own cores. 3 (a 50 ms point): no figure, and none
    # from the command's whole wall, whose analysis read as a `parent` bound.
    long = _samples(ceiling, 20, 10)
    cpu, tid = ceiling.window_cpu(long, 0, long[-2].ns)
    assert cpu == pytest.approx((0.0, 1.0, 1.0, 1.0, 2.0)) and tid == 1
    assert ceiling.bound_by(*cpu, 2) != "short"
    short = _samples(ceiling, 20, 3)
    cpu, tid = ceiling.window_cpu(short, 0, short[-2].ns)
    assert all(math.isnan(x) for x in cpu) and tid is None
    assert ceiling.bound_by(*cpu, 2) == "short"


def test_the_hosts_busy_share_is_read_around_a_moment_and_over_windows(
    ceiling, monkeypatch
) -> None:
    monkeypatch.setattr(ceiling, "CORES", 4)
    # Samples 20 ms apart over 0.4 s: the host 2 of 4 cores busy, but 4 of 4 from 0.2 s on.
    samples = []
    host_s = 0.0
    for i in range(21):
        samples.append(ceiling.Sample(i * 20 * MS, (0,), 0, 0, host_s, {}))
        host_s += (4 if i >= 10 else 2) * 0.02
    assert ceiling.busy_share(samples, 0, 100 * MS) == pytest.approx(0.5)
    assert ceiling.busy_share(samples, 250 * MS, 350 * MS) == pytest.approx(1.0)
    # A moment straddling the change reads between the two; one sample alone reads nothing.
    assert ceiling.busy_share(samples, 150 * MS, 250 * MS) == pytest.approx(0.75)
    assert math.isnan(ceiling.busy_share(samples, 5 * MS, 15 * MS))
    # Four 100 ms windows, the last two at a full host: half at or past the crowded flag's 85%.
    assert ceiling.busy_window_share(samples, 0, 400 * MS) == pytest.approx(0.5)
    assert ceiling.busy_window_share(samples, 0, 200 * MS) == 0.0
    # A span shorter than a window holds none.
    assert math.isnan(ceiling.busy_window_share(samples, 0, 99 * MS))


def _waits(ceiling, every_ms: int, until_ms: int, wait_at) -> object:
    """Two servers' waits for a core read every `every_ms` up to `until_ms`; `wait_at(t)`:
    their counts (ns) at t ms."""
    ts = range(0, until_ms + 1, every_ms)
    return ceiling.Waits([t * MS for t in ts], [wait_at(t) for t in ts])


def test_a_servers_wait_is_read_between_the_reads_around_a_span(ceiling) -> None:
    # Server 1 waits 2 ms between 40 and 60 ms, server 0 never. A span of 45-48 ms sits
    # between the reads at 40 and 60 ms: server 1 waited 2 ms there, server 0 none.
    waits = _waits(ceiling, 20, 100, lambda t: (0, 0 if t < 60 else 2 * MS))
    assert waits.around_ms(1, 45 * MS, 48 * MS) == pytest.approx(2.0)
    assert waits.around_ms(0, 45 * MS, 48 * MS) == 0.0
    # A span on a read's own instant is bracketed by that read: 60-80 ms holds none of it.
    assert waits.around_ms(1, 60 * MS, 80 * MS) == 0.0
    # Begun before the first read, or ended after the last: the reads say nothing.
    assert math.isnan(waits.around_ms(1, -MS, 48 * MS))
    assert math.isnan(waits.around_ms(1, 45 * MS, 101 * MS))


def test_a_points_server_wait_is_the_most_any_server_waited_over_its_traffic(ceiling) -> None:
    # Over 0.2 s server 0 waits a quarter of the time, server 1 half of it.
    waits = _waits(ceiling, 20, 200, lambda t: (t * MS // 4, t * MS // 2))
    assert waits.share(0, 200 * MS) == pytest.approx(0.5)
    # Read once inside the span: no figure.
    assert math.isnan(waits.share(5 * MS, 25 * MS))


def test_the_wait_rule_fires_where_a_streams_server_waited_its_tolerance(ceiling) -> None:
    # Read every 2 ms: server 0 waits 1.5 ms between 40 and 42 ms and not again. A stream
    # sent at 39 ms with its first token at 41 (its tolerance the 1 ms floor) outlasted it;
    # one over 43-45 ms did not, nor one over 10-50 ms (5% of a 40 ms TTFT: 2 ms), nor one
    # of server 1, which never waited.
    waits = _waits(ceiling, 2, 100, lambda t: (0 if t < 42 else 3 * MS // 2, 0))

    def sent(at_ms: float, ttft_ms: float = 2.0, replica: int = 0) -> StreamRecord:
        rec = stream("r", sent=at_ms / 1e3, chunks=[(at_ms + ttft_ms) / 1e3])
        return dataclasses.replace(rec, replica=replica)

    assert waits.rule(sent(39), 0)
    assert not waits.rule(sent(43), 0)
    assert not waits.rule(sent(10, ttft_ms=40), 0)
    assert not waits.rule(sent(39, replica=1), 0)
    # The run's zero puts the record's run-clock stamps on the reads' clock.
    assert waits.rule(sent(29), 10 * MS)
    # Outside the reads: no judgement, no flag.
    assert not waits.rule(sent(99), 0)


def test_a_point_counts_what_the_wait_rule_flags_and_which_missed_it_catches(ceiling) -> None:
    # As in the first test, stream 1 is missed (firehose wrote at 2 ms, loadgen read at 5);
    # stream 3 came in time. Server 0 waited 1 ms between the reads at 0 and 4 ms and 2 ms
    # between 4 and 8: stream 1 (sent at 0, read at 5 ms, tolerance 1 ms) outlasted 3 ms of
    # it, so the rule catches it; streams 3 and 4 (0-2.2, 0-2.3 ms) 1 ms, their tolerance:
    # flagged too.
    recs = [_read(1, 5.0, 0.5, 0.8), _read(3, 2.2, 0.1), _read(4, 2.3, 0.1)]
    truth = {n: (ZERO + MS // 10, ZERO + 2 * MS) for n in (1, 3, 4)}
    waits = ceiling.Waits([ZERO + t * MS for t in (0, 4, 8)], [(0,), (MS,), (3 * MS,)])
    p = ceiling.point(recs, [truth], ZERO, 1, 16, 4, (0.1, 0.9, 0.9, 0.9, 1.0), 1.0, False,
                      waits)  # fmt: skip
    (miss,) = p.missed_streams
    # Its own wait is read around firehose's write to loadgen's read (2-5 ms: 0-8 ms).
    assert (miss.rule, miss.server_wait_ms) == (True, pytest.approx(3.0))
    assert p.rule_flags == pytest.approx(1.0)
    # The traffic (-0.8 to 6 ms) holds the reads at 0 and 4 ms: 1 ms of its server's 4.
    assert p.server_wait == pytest.approx(1 / 4)
    assert "the bench's wait rule caught 1 of 1" in ceiling.ceiling_table([p], 1)
    # The run's own reads had its server waiting 3 ms around stream 1 (past its 1 ms
    # tolerance): the run flagged it, so it is not missed, nor counted by the bench's rule.
    judged = ceiling.point(recs, [truth], ZERO, 1, 16, 4, (0.1, 0.9, 0.9, 0.9, 1.0), 1.0, False,
                           waits, {"r1": 3 * MS})  # fmt: skip
    assert (judged.missed, judged.missed_streams) == (0.0, ())
    assert judged.flagged == pytest.approx(1 / 3)
    assert judged.rule_flags == pytest.approx(2 / 3)
    # A wait of 0.3 ms is past its tolerance on top of its own 0.8 ms bound (the two add):
    # flagged. One of 0.1 ms is not: missed, 3 - 0.9 ms past its bound, the run's read beside.
    added = ceiling.point(recs, [truth], ZERO, 1, 16, 4, (0.1, 0.9, 0.9, 0.9, 1.0), 1.0, False,
                          waits, {"r1": 3 * MS // 10})  # fmt: skip
    assert (added.missed, added.flagged) == (0.0, pytest.approx(1 / 3))
    short = ceiling.point(recs, [truth], ZERO, 1, 16, 4, (0.1, 0.9, 0.9, 0.9, 1.0), 1.0, False,
                          waits, {"r1": MS // 10})  # fmt: skip
    (miss,) = short.missed_streams
    assert (miss.over_ms, miss.run_wait_ms) == (pytest.approx(2.1), pytest.approx(0.1))
    # Without the reads: no rule judged, no wait read.
    bare = ceiling.point(recs, [truth], ZERO, 1, 16, 4, (0.1, 0.9, 0.9, 0.9, 1.0), 1.0, False)
    assert math.isnan(bare.rule_flags) and math.isnan(bare.missed_streams[0].server_wait_ms)
    assert not bare.missed_streams[0].rule


def test_waits_are_read_while_the_block_runs_and_at_its_ends(ceiling) -> None:
    # A child of one thread (this process's threads come and go, and a gone thread's wait
    # leaves the count): the kernel's count of its wait never goes down.
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with ceiling.reading_waits([child.pid]) as waits:
            deadline = time.monotonic() + 30
            while len(waits.ns) < 4 and time.monotonic() < deadline:
                time.sleep(0.001)
    finally:
        child.kill()
        child.wait()
    count = len(waits.ns)
    assert count >= 5 and len(waits.waits) == count
    assert waits.ns == sorted(waits.ns)
    assert all(b[0] >= a[0] for a, b in zip(waits.waits, waits.waits[1:], strict=False))
    time.sleep(0.01)
    assert len(waits.ns) == count  # no read after the block


def _driver(ceiling, shares: dict[int, float], born: int | None = None) -> list:
    """A second of 11 samples of a command whose threads (tid -> cores) keep their shares;
    thread `born` appears halfway, at its share from then. Servers idle, the host 3 cores."""
    out = []
    for i in range(11):
        t_s = i / 10
        threads = {tid: round(share * t_s * 100) for tid, share in shares.items() if tid != born}
        if born is not None and i >= 5:
            threads[born] = round(shares[born] * (t_s - 0.5) * 100)
        total = sum(threads.values())
        out.append(ceiling.Sample(i * 100 * MS, (0,), total, total, 3 * t_s, threads))
    return out


def test_the_parent_is_the_bound_by_its_busiest_thread_not_its_process(
    ceiling, monkeypatch
) -> None:
    monkeypatch.setattr(ceiling, "CORES", 16)
    # A Ray driver: 2 cores over its threads, none near one; then one thread near a core.
    spread = _driver(ceiling, {100: 0.6, 101: 0.7, 102: 0.7})
    cpu, tid = ceiling.window_cpu(spread, 0, spread[-1].ns)
    assert cpu == pytest.approx((0.0, 2.0, 2.0, 0.7, 3.0)) and tid in (101, 102)
    assert ceiling.bound_by(*cpu, 8) == "-"
    busy = _driver(ceiling, {100: 0.9, 101: 0.5, 102: 0.5})
    cpu, tid = ceiling.window_cpu(busy, 0, busy[-1].ns)
    assert (cpu[3], tid) == (pytest.approx(0.9), 100)
    assert ceiling.bound_by(*cpu, 8) == "parent"
    # One worker: its one process is the client, a `loadgen` bound, never a `parent`.
    assert ceiling.bound_by(*cpu, 1) == "loadgen"


def test_a_thread_born_inside_the_traffic_counts_from_its_birth(ceiling) -> None:
    # Thread 7 appears halfway at a full core: 0.5 s of a 1 s window, half a core; it is
    # still the busiest against threads at 0.4 and 0.3.
    samples = _driver(ceiling, {5: 0.4, 6: 0.3, 7: 1.0}, born=7)
    cpu, tid = ceiling.window_cpu(samples, 0, samples[-1].ns)
    assert (cpu[3], tid) == (pytest.approx(0.5), 7)


def test_a_threads_ticks_are_its_own_not_its_process(ceiling) -> None:
    # A thread spins 0.3 s of its own CPU (thread_time: a busy host only stretches the
    # wall), then waits: its ticks are its own, and the main thread's hold none of them.
    spun, stop = threading.Event(), threading.Event()

    def spin() -> None:
        while time.thread_time() < 0.3:
            pass
        spun.set()
        stop.wait(60)

    before = ceiling.thread_ticks(os.getpid())
    spinner = threading.Thread(target=spin)
    spinner.start()
    try:
        assert spun.wait(60)
        after = ceiling.thread_ticks(os.getpid())
    finally:
        stop.set()
        spinner.join()
    tick_s = ceiling.TICK_S
    assert before.keys() < after.keys() and spinner.native_id in after
    assert 0.3 - 2 * tick_s <= after[spinner.native_id] * tick_s <= 0.3 + 0.1
    assert (after[os.getpid()] - before[os.getpid()]) * tick_s < 0.3 - 2 * tick_s
