"""Trace rows as the file gives them: a row that cannot be replayed is refused at its line (never
a traceback), and a row that asks for no output is skipped, counted and said."""

from pathlib import Path

import pytest

from loadgen.analysis.reuse import RowsSkipped
from loadgen.report.trace_lines import skipped_lines
from loadgen.scenario.traces import TraceError, read_trace

AZURE = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
ROW0 = '{"timestamp": 0, "input_length": 600, "output_length": 5}\n'


def read(tmp_path: Path, name: str, text: str, fmt: str) -> tuple:
    path = tmp_path / name
    path.write_text(text)
    return read_trace(path, fmt, None, 1.0)


@pytest.mark.parametrize(
    ("name", "fmt", "text", "error"),
    [
        # csv's DictReader pads a short row with None, which int() raised as a TypeError.
        ("t.csv", "azure", AZURE + "2023-11-16 18:17:03.97,4808,10\n2023-11-16 18:17:04.03,300\n",
         "t.csv:3: row has fewer fields than the header (expected TIMESTAMP, ContextTokens, "
         "GeneratedTokens)"),
        ("t.jsonl", "mooncake", ROW0 + '{"timestamp": Infinity, "input_length": 6, '
         '"output_length": 5}\n', "t.jsonl:2: bad mooncake row (ValueError: timestamp must be a "
         "finite number, got inf"),
        ("t.csv", "burstgpt", "Timestamp,Request tokens,Response tokens\ninf,5,5\n",
         "t.csv:2: bad burstgpt row (cannot convert float infinity to integer)"),
        ("t.csv", "azure", AZURE + "2023-11-16 18:17:03.97,4808,-7\n",
         "t.csv:2: negative output length (expected a token count >= 0)"),
        ("t.jsonl", "mooncake", '{"timestamp": 0, "input_length": "600", "output_length": 5}\n',
         "t.jsonl:1: bad mooncake row (ValueError: input_length must be an integer, got 600;"),
        ("t.jsonl", "mooncake", '{"timestamp": 0, "input_length": 600, "output_length": true}\n',
         "t.jsonl:1: bad mooncake row (ValueError: output_length must be an integer, got True;"),
    ],
)  # fmt: skip
def test_a_row_that_cannot_be_replayed_is_refused_at_its_line(
    tmp_path: Path, name: str, fmt: str, text: str, error: str
) -> None:
    with pytest.raises(TraceError) as info:
        read(tmp_path, name, text, fmt)
    assert str(info.value).startswith(f"{tmp_path / error}")


def test_a_fractional_mooncake_timestamp_is_rounded_not_truncated(tmp_path: Path) -> None:
    text = ROW0 + '{"timestamp": 1.9996, "input_length": 600, "output_length": 5}\n'
    rows, skipped = read(tmp_path, "t.jsonl", text, "mooncake")
    assert [r.offset_ns for r in rows] == [0, 1_999_600] and skipped == 0


def test_rows_with_no_output_are_skipped_counted_and_keep_the_traces_start(
    tmp_path: Path,
) -> None:
    # The skipped first row still marks when the trace began: the kept row arrives 0.5 s in.
    text = AZURE + "2023-11-16 18:17:03.5,300,0\n2023-11-16 18:17:04.0,4808,10\n"
    rows, skipped = read(tmp_path, "t.csv", text, "azure")
    assert [(r.offset_ns, r.output_tokens) for r in rows] == [(500_000_000, 10)]
    assert skipped == 1
    assert skipped_lines(RowsSkipped(rows=1, of=2)) == [
        "note: 1 of 2 trace rows ask for no output tokens and were not sent (a failed request "
        "in BurstGPT); arrivals still count from the trace's first row"
    ]
    assert skipped_lines(None) == []
