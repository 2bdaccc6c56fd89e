"""The host's busy cores and loadgen's own over the timed traffic (client/hostload.py), and the
run-wide flag they raise with a local server (analysis/selferror.py's busy_host): it fires
when the host was busy past HOST_BUSY_LIMIT mostly by loadgen, and stays quiet otherwise."""

from __future__ import annotations

import dataclasses
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from loadgen.analysis.selferror import HOST_BUSY_LIMIT, Crowding, busy_host, host_crowding
from loadgen.analysis.summary import analyze_run
from loadgen.client import hostload
from loadgen.client.hostload import TICK_S, HostLoad
from loadgen.report.banners import crowding_text
from loadgen.report.cmd import write_report

from support.run_fixtures import manifest, stream, write_run

# A 16-core host measured on the H100 kind: 15 workers beside 4 firehose processes, then 12.
SATURATED = {"span_s": 0.53, "host_busy_cores": 15.36, "client_cores": 14.58, "cores": 16}
SLACK = {"span_s": 0.5, "host_busy_cores": 12.88, "client_cores": 12.23, "cores": 16}


def test_the_host_and_the_clients_busy_cores_are_summed_over_every_timed_stretch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = iter([10.0, 10.5, 20.0, 20.25])
    host = iter([100.0, 107.0, 200.0, 203.0])
    # Process 2 is gone by the end of the first stretch: its ticks are lost, never negative.
    ticks = {(1, 0): 0, (2, 0): 50, (1, 1): 300, (2, 1): 0, (1, 2): 300, (1, 3): 400}
    reads: dict[int, int] = {}

    def read_ticks(pid: int) -> int:
        n = reads.get(pid, 0)
        reads[pid] = n + 1
        return ticks[pid, n]

    monkeypatch.setattr(hostload.time, "perf_counter", lambda: next(clock))
    monkeypatch.setattr(hostload, "host_busy_s", lambda: next(host))
    monkeypatch.setattr(hostload, "live_ticks", read_ticks)
    monkeypatch.setattr(hostload.os, "cpu_count", lambda: 16)
    pids = [[1, 2], [1]]
    load = HostLoad(lambda: pids.pop(0))
    assert load.summary() == {}  # nothing timed yet
    for _ in range(2):
        with load.measuring():
            pass
    # 0.75 s timed; the host 10 s busy; loadgen (300 + 100) ticks.
    assert load.summary() == {
        "span_s": 0.75, "host_busy_cores": round(10 / 0.75, 2),
        "client_cores": round(400 * TICK_S / 0.75, 2), "cores": 16,
    }  # fmt: skip


def test_no_proc_means_nothing_measured(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hostload, "host_busy_s", lambda: None)
    load = HostLoad(lambda: [])
    with load.measuring():
        pass
    assert load.summary() == {}


def test_this_process_own_cpu_is_read_from_the_kernel() -> None:
    load = HostLoad(lambda: [hostload.os.getpid()])
    with load.measuring():
        sum(i * i for i in range(2_000_000))  # CPU this process spends, whatever the machine
    got = load.summary()
    assert got["span_s"] > 0 and got["cores"] >= 1
    # The kernel counts in ticks: each core's count may be a tick off at either end.
    slack = 2 * TICK_S / got["span_s"]
    assert 0 <= got["client_cores"] <= 1 + slack  # one thread spun
    assert 0 <= got["host_busy_cores"] <= got["cores"] * (1 + slack)


def test_a_busy_host_flags_only_a_local_server_that_loadgen_crowded() -> None:
    url = "127.0.0.1"  # the target's host, as host_crowding parses it from its URL
    assert busy_host(url, 15, SATURATED) == Crowding("127.0.0.1", 15, 16, 15.36, 14.58)
    assert busy_host("::1", 15, SATURATED) is not None
    assert busy_host(url, 12, SLACK) is None  # 80% busy: cores to spare
    assert busy_host("10.0.0.5", 15, SATURATED) is None  # the server is elsewhere
    assert busy_host(url, 15, {}) is None  # nothing measured
    # A server that keeps the cores busy by itself (vLLM's CPU build) is its own latency.
    server_busy = SATURATED | {"client_cores": 3.0}
    assert busy_host(url, 1, server_busy) is None
    # The limit itself: at it, flagged; a tick below, not.
    at = SATURATED | {"host_busy_cores": HOST_BUSY_LIMIT * 16}
    assert busy_host(url, 15, at) is not None
    assert busy_host(url, 15, at | {"host_busy_cores": HOST_BUSY_LIMIT * 16 - 0.01}) is None


def test_a_crowded_host_carries_its_servers_wait_for_a_core_as_its_witness() -> None:
    url = "127.0.0.1"
    crowded = busy_host(url, 15, SATURATED | {"server_wait": 0.33})
    assert crowded == Crowding("127.0.0.1", 15, 16, 15.36, 14.58, 0.33)
    # The busy share judges: a host below its limit is not crowded, whatever the server's
    # wait (its average did not tell late runs from timely ones), nor one of a server that
    # keeps the cores busy by itself.
    assert busy_host(url, 12, SLACK | {"server_wait": 0.33}) is None
    assert busy_host(url, 1, SATURATED | {"server_wait": 0.33, "client_cores": 3.0}) is None


def test_the_banner_says_how_busy_the_host_was_and_what_to_do() -> None:
    crowded = busy_host("127.0.0.1", 15, SATURATED)
    assert crowded is not None
    assert crowding_text(crowded) == (
        "this host's 16 cores were 96% busy while streams were timed (14.6 cores loadgen's own) "
        "beside the server at 127.0.0.1: its sends and the kernel's deliveries waited for a "
        "core, inside TTFTs where no client stamp sees it (run fewer workers than 15, or the "
        "server elsewhere)"
    )
    waited = busy_host("127.0.0.1", 15, SATURATED | {"server_wait": 0.33})
    assert waited is not None
    assert crowding_text(waited).startswith(
        "this host's 16 cores were 96% busy while streams were timed (14.6 cores loadgen's own) "
        "beside the server at 127.0.0.1, the server waiting for a core 33% of that time by the "
        "kernel's count: its sends"
    )
    one = dataclasses.replace(crowded, workers=1)
    assert crowding_text(one).endswith("where no client stamp sees it (the server elsewhere)")


@pytest.mark.parametrize(("host_cpu", "flagged"), [(SATURATED, True), (SLACK, False)])
def test_a_runs_report_opens_with_the_busy_host_only_when_it_was(
    tmp_path: Path, host_cpu: dict[str, float], flagged: bool
) -> None:
    client = {"loop_lag_max_ms": 1.0, "loop_lag_p99_ms": 0.5, "dispatch_late_max_ms": 1.0,
              "workers": 15, "host_cpu": host_cpu}  # fmt: skip
    run = write_run(tmp_path / "run", [stream("s", chunks=[0.1, 0.2])], run=manifest(client=client))
    limits = analyze_run(run).summary["run"]["client_limits"]
    write_report(run)
    first = (run / "report.txt").read_text().splitlines()[0]
    if flagged:
        assert limits["crowding"]["busy_cores"] == 15.36
        assert first.startswith("!! CLIENT LIMITED: this host's 16 cores were 96% busy")
    else:
        assert limits["crowding"] is None
        assert "CLIENT LIMITED" not in first


def test_the_run_judges_a_crowded_host_once_measured_else_by_count() -> None:
    url = "http://127.0.0.1:8000"
    # Measured busy first: its figures are the banner's.
    assert host_crowding(url, 15, SATURATED) == busy_host("127.0.0.1", 15, SATURATED)
    # Two workers on two cores beside a local server: crowded by count, however busy the
    # traffic found the host (the server reads each request when a worker lets go of a core).
    two = {"span_s": 0.5, "host_busy_cores": 1.2, "client_cores": 1.1, "cores": 2}
    assert host_crowding(url, 2, two) == Crowding("127.0.0.1", 2, 2)
    assert host_crowding(url, 1, two) is None  # a core left for the server
    assert host_crowding("http://10.0.0.5:8000", 2, two) is None  # the server elsewhere
    assert host_crowding(url, 12, SLACK) is None
    assert host_crowding(url, 64, {}) is None  # the run recorded nothing of its host


def test_a_reports_banner_is_the_requests_for_a_run_crowded_by_count(tmp_path: Path) -> None:
    # `loadgen request` judged the workers' count when it printed, alone: `loadgen report` of
    # the same run directory said nothing of it.
    client = {"loop_lag_max_ms": 1.0, "loop_lag_p99_ms": 0.5, "dispatch_late_max_ms": 1.0,
              "workers": 2, "host_cpu": {"span_s": 0.5, "host_busy_cores": 1.2,
                                         "client_cores": 1.1, "cores": 2}}  # fmt: skip
    run = write_run(tmp_path / "run", [stream("s", chunks=[0.1, 0.2])], run=manifest(client=client))
    write_report(run)
    first = (run / "report.txt").read_text().splitlines()[0]
    assert first.startswith(
        "!! CLIENT LIMITED: 2 client processes and the server at 127.0.0.1 share this host's "
        "2 cores"
    )


def test_a_processs_wait_for_a_core_is_the_kernels_count_over_its_threads() -> None:
    # Ours, as the kernel keeps it for each thread (the second field; the first, CPU time, is
    # far past it), between two reads of our own; a process gone reads 0.
    def waited() -> int:
        stats = Path("/proc/self/task").glob("*/schedstat")
        return sum(int(stat.read_text().split()[1]) for stat in stats)

    first = waited()
    ours = hostload.run_delay_ns(os.getpid())
    assert first <= ours <= waited()
    assert hostload.run_delay_ns(2**22 + 1) == 0


def test_a_local_servers_processes_are_found_by_its_listening_port() -> None:
    # A child process listening on a loopback port (the server), found by that port; this
    # process's own listener (the wall-clock sim serves from inside loadgen) never is.
    script = (
        "import socket, sys, time\n"
        "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
        "print(s.getsockname()[1], flush=True); time.sleep(60)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    own = socket.socket()
    try:
        assert child.stdout is not None
        port = int(child.stdout.readline())
        own.bind(("127.0.0.1", 0))
        own.listen()
        own_port = own.getsockname()[1]
        assert hostload.listening_pids({port}) == {port: [child.pid]}
        assert hostload.local_servers([("127.0.0.1", port)]) == [[child.pid]]
        assert hostload.local_servers([("localhost", port), (None, None)]) == [[child.pid], []]
        assert os.getpid() in hostload.listening_pids({own_port})[own_port]
        assert hostload.local_servers([("127.0.0.1", own_port)]) == [[]]
        # Each target's own, from one look at /proc for them all.
        both = [("127.0.0.1", port), ("127.0.0.1", own_port)]
        assert hostload.local_servers(both) == [[child.pid], []]
        # A server elsewhere is not this host's, whatever its port.
        assert hostload.local_servers([("10.0.0.5", port)]) == [[]]
    finally:
        own.close()
        child.kill()
        child.wait()


def test_the_servers_wait_is_the_most_any_server_process_waited_over_the_span(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = iter([10.0, 10.5, 20.0, 20.5])
    host = iter([100.0, 107.0, 200.0, 207.0])
    # Server 7 waits 0.1 s in each stretch, server 8 0.3 s in the first; a count that went
    # down (a thread gone) reads 0, never negative.
    waits = {7: iter([0, 100_000_000, 100_000_000, 200_000_000]),
             8: iter([0, 300_000_000, 300_000_000, 200_000_000])}  # fmt: skip
    monkeypatch.setattr(hostload.time, "perf_counter", lambda: next(clock))
    monkeypatch.setattr(hostload, "host_busy_s", lambda: next(host))
    monkeypatch.setattr(hostload, "live_ticks", lambda pid: 0)
    monkeypatch.setattr(hostload, "run_delay_ns", lambda pid: next(waits[pid]))
    load = HostLoad(lambda: [1], [7, 8])
    for _ in range(2):
        with load.measuring():
            pass
    # Over 1 s timed: server 7 waited 0.2 s, server 8 0.3 s: the most is 0.3.
    assert load.summary()["server_wait"] == 0.3
    # With no server on this host, no figure.
    monkeypatch.setattr(hostload.time, "perf_counter", iter([0.0, 1.0]).__next__)
    monkeypatch.setattr(hostload, "host_busy_s", iter([0.0, 1.0]).__next__)
    alone = HostLoad(lambda: [1])
    with alone.measuring():
        pass
    assert "server_wait" not in alone.summary()
