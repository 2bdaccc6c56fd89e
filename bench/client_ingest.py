"""How many SSE events per second loadgen's client takes in, next to a bare read loop.

Against firehose (a C server streaming vLLM-format SSE with no delay; built into build/ from
../shared/tools/firehose) or, without it, tests/support/pacedserver.py in zero-delay mode (said
in one line). Server and client are pinned to different CPUs when there are two. Each client runs a
closed loop of 2000-token streams at C=1, 64 and 256, in alternating order per round; the best
round of each is printed, with the ratio client / bare loop. The client runs twice: with its
own HTTP reader for the stream (rawhttp, the default) and with aiohttp's, so the table shows
what the reader buys. The bare loop is aiohttp + orjson with no timestamps, no usage
accounting and no watchdog: the ceiling the client's bookkeeping was measured against. Every
client must take in as many events as the bare loop did (else exit 1). floor_rate, raw uvloop
protocols with no HTTP library at all, is bench/ceiling.py's reference for CPU a request.

    .venv/bin/python bench/client_ingest.py [--smoke] [--tokens 2000] [--rounds 2]
        [--c1-requests 40] [--c64-requests 256] [--c256-requests 512]
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import orjson
import uvloop

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from harness import Ratio, parser, ratio, report  # noqa: E402  (bench/ is on sys.path)

from loadgen.client.loops import run_closed_loop, stream_at  # noqa: E402
from loadgen.client.openai import READ_BUFSIZE, OpenAIClient  # noqa: E402
from loadgen.clock import WallClock  # noqa: E402
from loadgen.request import StreamRequest  # noqa: E402

# ../shared beside a checkout, or two levels up from a worktree under /work/wt/.
_SHARED = next((p for p in (REPO.parent, REPO.parent.parent) if (p / "shared").is_dir()), REPO)
FIREHOSE_SRC = Path(os.environ.get("FIREHOSE_SRC", _SHARED / "shared/tools/firehose"))
FIREHOSE_BIN = REPO / "build" / "firehose"
SERVER_CPU, CLIENT_CPU = 0, 1
PLAN = {1: 40, 64: 256, 256: 512}  # C -> streams per measurement
SMOKE_PLAN, SMOKE_TOKENS = {1: 4, 64: 64, 256: 256}, 50
# The floor loop's whole run at the most: a server that stops answering ends it, not a hang.
FLOOR_LIMIT_S = 300


def firehose_binary() -> Path | None:
    """build/firehose, (re)built by its Makefile when its source is newer; None, said in one
    line, when there is neither a source to build nor a binary built before."""
    cmd = ["make", "-C", str(FIREHOSE_SRC), f"OUT={FIREHOSE_BIN.parent}"]
    try:
        subprocess.run(cmd, check=True, capture_output=True, timeout=120)
    except (OSError, subprocess.SubprocessError) as exc:
        if FIREHOSE_BIN.exists():
            return FIREHOSE_BIN
        print(f"firehose unavailable: cannot build it from {FIREHOSE_SRC} ({exc})")
        return None
    return FIREHOSE_BIN


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pinned_to(cpu: int):
    if (os.cpu_count() or 1) < 2:
        return None
    return lambda: os.sched_setaffinity(0, {cpu})


def start_server(port: int) -> tuple[subprocess.Popen, str]:
    binary = firehose_binary()
    if binary:
        cmd = [str(binary), "--port", str(port), "--ttft-ms", "0", "--itl-ms", "0"]
        cmd += ["--exit-after", "600", "--quiet"]
        name = "firehose"
    else:
        cmd = [sys.executable, str(REPO / "tests/support/pacedserver.py"), "--port", str(port)]
        cmd += ["--ttft-ms", "0", "--itl-ms", "0"]
        name = "pacedserver (zero delay)"
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, preexec_fn=pinned_to(SERVER_CPU))
    try:
        wait_listening(port)
    except SystemExit:
        proc.kill()
        raise
    return proc, name


def wait_listening(port: int) -> None:
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"nothing started listening on port {port}")


def requests(n: int, tokens: int) -> list[StreamRequest]:
    return [StreamRequest(id=f"b{i}", model="m", prompt="hi", max_tokens=tokens) for i in range(n)]


async def client_rate(url: str, c: int, n: int, tokens: int, raw: bool = True) -> Rate:
    events = 0

    def count(rec) -> None:
        nonlocal events
        if rec.status != "ok":
            raise SystemExit(f"stream failed: {rec.error}")
        events += rec.events

    async with OpenAIClient(url, concurrency=c, raw_stream=raw) as client:
        await client.warm(c)
        t0 = time.perf_counter_ns()
        client.run_start_ns = t0
        send = stream_at(client)
        await run_closed_loop(requests(n, tokens), send, count, WallClock(t0), concurrency=c)
        return Rate(events, time.perf_counter_ns() - t0)


async def bare_stream(session: aiohttp.ClientSession, url: str, body: bytes) -> int:
    events, tail = 0, b""
    async with session.post(url, data=body, headers={"Content-Type": "application/json"}) as r:
        async for chunk in r.content.iter_any():
            lines = (tail + chunk).split(b"\n")
            tail = lines.pop()
            for line in lines:
                if line.startswith(b"data: ") and line != b"data: [DONE]":
                    orjson.loads(line[6:])
                    events += 1
    return events


def reference_body(tokens: int) -> bytes:
    """The one request both reference loops post: a `tokens`-token stream with its usage."""
    return orjson.dumps(
        {
            "model": "m",
            "prompt": "hi",
            "max_tokens": tokens,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    )


async def bare_rate(url: str, c: int, n: int, tokens: int) -> Rate:
    body = reference_body(tokens)
    pending = iter(range(n))
    events = 0
    connector = aiohttp.TCPConnector(limit=c)
    async with aiohttp.ClientSession(connector=connector, read_bufsize=READ_BUFSIZE) as session:

        async def warm_one() -> None:
            async with session.get(url + "/v1/models") as resp:
                await resp.read()

        await asyncio.gather(*(warm_one() for _ in range(c)))

        async def worker() -> None:
            nonlocal events
            for _ in pending:
                got = await bare_stream(session, url + "/v1/completions", body)
                events += got  # not `events += await ...`: that reads `events` before awaiting

        t0 = time.perf_counter_ns()
        await asyncio.gather(*(worker() for _ in range(c)))
        return Rate(events, time.perf_counter_ns() - t0)


class _FloorConn(asyncio.Protocol):
    """One keep-alive connection of floor_rate: posts, stamps each read, takes the chunked
    answer whole (firehose ends it with the 0 chunk and sends nothing more until the next
    post), json-parses its every event, and posts again while requests are left. `counts`,
    shared by the loop's connections: [requests left to post, answers left to take]."""

    def __init__(self, request: bytes, counts: list[int], done: asyncio.Future) -> None:
        self.request, self.counts, self.done = request, counts, done
        self.buf = bytearray()
        self.events = self.last_ns = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            why = f": {exc}" if exc else ""
            self.done.set_exception(ConnectionError(f"the server closed a connection{why}"))

    def post(self) -> None:
        if self.counts[0]:
            self.counts[0] -= 1
            self.transport.write(self.request)  # type: ignore[attr-defined]

    def data_received(self, data: bytes) -> None:
        self.last_ns = time.perf_counter_ns()
        self.buf += data
        if not self.buf.endswith(b"\r\n0\r\n\r\n"):
            return
        for line in self.buf.split(b"\n"):
            if line.startswith(b"data: {"):
                orjson.loads(line[6:])
                self.events += 1
        self.buf.clear()
        self.counts[1] -= 1
        if self.counts[1] == 0:
            self.done.set_result(None)
        self.post()


async def floor_rate(url: str, c: int, n: int, tokens: int) -> tuple[Rate, float]:
    """A floor under any client's cost: C keep-alive connections in a closed loop of raw
    uvloop protocols (no HTTP library, no tasks, no records), each answer's events
    json-parsed, counted as bare_rate counts them. What a client timing streams must do at
    the least; the rest of a client's CPU a request is its own bookkeeping. With the rate,
    the process's CPU seconds over the requests (their connections made before)."""
    host, port = url.removeprefix("http://").split(":")
    body = reference_body(tokens)
    head = f"POST /v1/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json"
    request = f"{head}\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body
    loop = asyncio.get_running_loop()
    counts, done = [n, n], loop.create_future()
    conns = []
    for _ in range(min(c, n)):
        _, conn = await loop.create_connection(
            lambda: _FloorConn(request, counts, done), host, int(port)
        )
        conns.append(conn)
    t0, cpu0 = time.perf_counter_ns(), time.process_time()
    for conn in conns:
        conn.post()
    try:
        await asyncio.wait_for(done, FLOOR_LIMIT_S)
    except (TimeoutError, ConnectionError) as exc:
        why = str(exc) or f"no end of the answers in {FLOOR_LIMIT_S} s"  # a timeout's str is ""
        raise SystemExit(f"floor loop: {why}") from None
    cpu_s = time.process_time() - cpu0
    for conn in conns:
        conn.transport.close()
    span_ns = max(conn.last_ns for conn in conns) - t0
    return Rate(sum(conn.events for conn in conns), span_ns), cpu_s


@dataclass(frozen=True)
class Rate:
    events: int
    ns: int

    @property
    def per_s(self) -> float:
        return self.events / (self.ns / 1e9)


RUNNERS = {
    "client": client_rate,
    "aiohttp": lambda *a: client_rate(*a, raw=False),
    "bare": bare_rate,
}


async def measure(
    url: str, tokens: int, plan: dict[int, int], rounds: int
) -> dict[int, dict[str, float]]:
    """The best events/s of each runner per C over `rounds`; exit 1 when a client took in
    other than the bare loop's count of events (it lost or invented some)."""
    best = {c: dict.fromkeys(RUNNERS, 0.0) for c in plan}
    for rnd in range(rounds):
        for c, n in plan.items():
            order = list(RUNNERS) if rnd % 2 == 0 else list(reversed(RUNNERS))
            got = {who: await RUNNERS[who](url, c, n, tokens) for who in order}
            if len({r.events for r in got.values()}) != 1:
                counts = ", ".join(f"{who} {r.events}" for who, r in got.items())
                raise SystemExit(f"C={c}: the readers took in different event counts: {counts}")
            for who, r in got.items():
                best[c][who] = max(best[c][who], r.per_s)
    return best


def print_ingest(best: dict[int, dict[str, float]]) -> None:
    print(f"{'C':>4} {'loadgen ev/s':>13} {'(aiohttp reader)':>17} {'bare loop ev/s':>15}"
          f" {'ratio':>6} {'(aiohttp)':>9}")  # fmt: skip
    for c, r in best.items():
        print(
            f"{c:>4} {r['client']:>13,.0f} {r['aiohttp']:>17,.0f} {r['bare']:>15,.0f}"
            f" {r['client'] / r['bare']:>6.2f} {r['aiohttp'] / r['bare']:>9.2f}"
        )


def ingest_ratios(best: dict[int, dict[str, float]]) -> list[Ratio]:
    return [
        ratio(f"{label} / bare read loop, ev/s, C={c}", r[who], r["bare"], "ev/s")
        for c, r in best.items()
        for who, label in (("client", "loadgen client"), ("aiohttp", "its aiohttp reader"))
    ]


def ingest(tokens: int, plan: dict[int, int], rounds: int = 2) -> dict[int, dict[str, float]]:
    """Best rates per C (see measure), with firehose on CPU 0 and this process on CPU 1 only
    while it measures: the CPU set is restored for whatever runs next."""
    port = free_port()
    proc, name = start_server(port)
    cpus = os.sched_getaffinity(0)
    try:
        if pin := pinned_to(CLIENT_CPU):
            pin()
        best = uvloop.run(measure(f"http://127.0.0.1:{port}", tokens, plan, rounds))
    finally:
        os.sched_setaffinity(0, cpus)
        proc.send_signal(signal.SIGINT)
        proc.wait(10)
    pinned = "server CPU 0, client CPU 1" if pinned_to(0) else "not pinned (one CPU)"
    print(f"SSE ingest, {tokens}-token streams from {name}, {pinned}, best of {rounds} rounds")
    return best


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--tokens", type=int, default=2000)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--c1-requests", type=int, default=PLAN[1])
    ap.add_argument("--c64-requests", type=int, default=PLAN[64])
    ap.add_argument("--c256-requests", type=int, default=PLAN[256])
    args = ap.parse_args()
    plan = {1: args.c1_requests, 64: args.c64_requests, 256: args.c256_requests}
    tokens, rounds = args.tokens, args.rounds
    if args.smoke:
        plan, tokens, rounds = SMOKE_PLAN, SMOKE_TOKENS, 1
    best = ingest(tokens, plan, rounds)
    print_ingest(best)
    report(ingest_ratios(best), args.ratios)


if __name__ == "__main__":
    main()
