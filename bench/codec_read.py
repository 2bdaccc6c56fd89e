"""The codec's made readers against a hand-written constructor call: seconds to read N rows of
metrics.jsonl (`MetricsSample`, read by every report through `records.read_metrics_sample`),
each decoded dict turned into the dataclass, against the same dicts turned into it by a
hand-written call (the floor a reader of that type can reach). Ratio above 1: the made reader's
per-field work; a per-field loop once measured 6-9x here, the straight-line reader ~1.5x.

    .venv/bin/python bench/codec_read.py [--smoke] [--rows 20000] [--repeat 7]
"""

from __future__ import annotations

import timeit
from collections.abc import Callable

import orjson
from harness import parser, ratio, report

from loadgen.codec import to_json
from loadgen.records import MetricsSample, read_metrics_sample


def rows(n: int) -> list[dict]:
    """`n` scrapes as metrics.jsonl holds them (decoded), with a replica on every other."""
    samples = [
        MetricsSample(i * 250_000_000, {"num_requests_running": i % 9, "gen": 1.5 * i},
                      None if i % 7 else "timeout", i % 2 or None)
        for i in range(n)
    ]  # fmt: skip
    return [orjson.loads(orjson.dumps(to_json(s))) for s in samples]


def by_hand(data: list[dict]) -> list[MetricsSample]:
    return [MetricsSample(d["t_ns"], d.get("values", {}), d.get("error"), d.get("replica"))
            for d in data]  # fmt: skip


def main() -> None:
    ap = parser(__doc__)
    ap.add_argument("--rows", type=int, default=20_000)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()
    if args.smoke:
        args.rows, args.repeat = 2_000, 3
    data = rows(args.rows)
    made = [read_metrics_sample(d) for d in data]
    if made != by_hand(data):
        raise SystemExit("codec_read: the made reader and the hand call read different rows")

    def best(f: Callable[[], object]) -> float:
        return min(timeit.repeat(f, number=1, repeat=args.repeat))

    made_s = best(lambda: [read_metrics_sample(d) for d in data])
    hand_s = best(lambda: by_hand(data))
    print(f"{args.rows:,} rows: made reader {made_s * 1e3:.1f} ms, by hand {hand_s * 1e3:.1f} ms")
    compared = f"s to read {args.rows:,} MetricsSample rows, made reader / by hand"
    report([ratio(compared, made_s * 1e3, hand_s * 1e3, "ms", ".1f")], args.ratios)


if __name__ == "__main__":
    main()
