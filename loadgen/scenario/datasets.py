"""Datasets as a prompt source: rows of real text read from a file, instead of prompts built to
a size.

Formats:
- `sharegpt`: a JSON array (or JSON lines) of `{"conversations": [{"from", "value"}, ...]}`;
  `from` is human/user or gpt/assistant (system turns are skipped). A row is its (human, gpt)
  exchanges: the first human turn is the prompt, its gpt answer's tokens the output length
  (vllm bench serve's reading), every human turn a session's user turns under `turns: all`.
  A human turn with no answer after it ends the exchanges; a row without one is refused.
- `jsonl`: one JSON object per line, the prompt in `text_field`, an optional output length
  (tokens) in `output_field`.
- `csv`: a header row, then the same two columns.
- `hf`: a local Hugging Face `datasets` export: `to_json` (JSON lines, or a JSON array),
  `to_csv` or `to_parquet` (read with pyarrow, the optional `parquet` extra, so the 55 MB wheel
  is not everyone's), by the file's suffix; columns as for jsonl.

Lengths are counted on loadgen's own tokenizer (the sim's) when the file is read: the filters
and the output lengths read those counts, as vllm bench serve reads its tokenizer's. What the
server counts is measured at run time (prompts.py counts each row on the target's /tokenize).
Every error is one line naming the file, the line (a parquet file's row) and the field.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from loadgen.scenario.model import DatasetConfig, DatasetRow, Group, Scenario
from loadgen.sim.tokenizer import SimTokenizer

_USER_ROLES = ("human", "user")
_ANSWER_ROLES = ("gpt", "assistant", "chatgpt", "bard", "model")
_SKIPPED_ROLES = ("system",)
# Files a `shape: {file: ...}` must not take: they are datasets, not running text.
DATASET_SUFFIXES = (".json", ".jsonl", ".csv", ".parquet")
_JSON_WS = " \t\r\n"


class DatasetError(ValueError):
    """A dataset that cannot be used; the message names the file, the line and the field."""


def load_dataset_rows(config: DatasetConfig, base_dir: Path) -> tuple[DatasetRow, ...]:
    """The rows of `config`'s file (relative to `base_dir`) that pass its length filters."""
    return load_dataset(config, base_dir).rows


def load_dataset(config: DatasetConfig, base_dir: Path) -> DatasetConfig:
    """`config` with its path resolved, its filtered rows and how many the file held and the
    filters dropped. DatasetError when the file is unusable or no row passes."""
    path = (base_dir / config.path).resolve()
    if not path.is_file():
        raise DatasetError(
            f"{path}: no such file (expected a dataset file, relative to the scenario)"
        )
    rows = read_rows(replace(config, path=path))
    kept = tuple(r for r in rows if _within_limits(r, config))
    if rows and not kept:
        raise DatasetError(
            f"{path}: all {len(rows)} rows fall outside {_limits(config)} "
            "(expected limits that keep some rows)"
        )
    if not rows:
        raise DatasetError(f"{path}: no rows (expected at least one prompt)")
    return replace(config, path=path, rows=kept, read=len(rows), filtered=len(rows) - len(kept))


def read_rows(config: DatasetConfig) -> list[DatasetRow]:
    """Every row of the file at `config.path`, counted on loadgen's tokenizer."""
    tok = SimTokenizer()
    out = []
    for line, obj in _records(config):
        where = f"{config.path}:{line}"
        if config.format == "sharegpt":
            turns, answers = _exchanges(obj, where)
            counts = tuple(tok.count(a) for a in answers)
            out_tokens = counts[0] if config.output == "dataset" else None
            out.append(DatasetRow(turns[0], out_tokens, turns, counts, tok.count(turns[0]), line))
        else:
            text = _text(obj, config.text_field, where)
            wanted = config.output == "dataset"
            out_tokens = _output(obj, config.output_field, where) if wanted else None
            out.append(DatasetRow(text, out_tokens, (text,), (), tok.count(text), line))
    return out


def in_window(group: Group, window: int, target: str) -> Group:
    """The group with its dataset rows that cannot fit `window` (prompt + output, a whole
    conversation under `turns: all`) dropped and counted in `skipped` (`too_long: skip`);
    DatasetError naming the first such row under `too_long: refuse`."""
    d = group.prompt.dataset
    if d is None:
        return group
    kept = []
    for row in d.rows:
        need = row_context(row, d, group.max_tokens)
        if need <= window:
            kept.append(row)
        elif d.too_long == "refuse":
            raise DatasetError(
                f"{d.path}:{row.line}: {_text_field(d)}: {need} tokens (prompt and output) "
                f"exceed {target}'s max_model_len {window} (expected too_long: skip to skip "
                "such rows, or a max_input_tokens filter)"
            )
    if not kept:
        raise DatasetError(
            f"{d.path}: all {len(d.rows)} rows exceed {target}'s max_model_len {window} "
            "(expected a larger window or shorter rows)"
        )
    fitted = replace(d, rows=tuple(kept), skipped=d.skipped + len(d.rows) - len(kept))
    return replace(group, prompt=replace(group.prompt, dataset=fitted))


def scenario_in_window(s: Scenario, window: int, target: str) -> Scenario:
    """`s` (and each sweep arm's scenario) with every dataset group fitted to `window`."""
    if not any(g.prompt.dataset for g in s.groups):
        return s
    groups = tuple(in_window(g, window, target) for g in s.groups)
    sweep = s.sweep
    if sweep is not None:
        arms = tuple(
            replace(a, scenario=scenario_in_window(a.scenario, window, target)) for a in sweep.arms
        )
        sweep = replace(sweep, arms=arms)
    return replace(s, groups=groups, sweep=sweep)


def row_context(row: DatasetRow, d: DatasetConfig, max_tokens: int | None) -> int:
    """Tokens the row occupies at its longest: its prompt and output, or under `turns: all`
    the whole conversation (every user turn and every answer) at its last turn."""
    if d.turns == "all":
        answers = row.answers if d.output == "dataset" else (max_tokens or 0,) * len(row.turns)
        tok = SimTokenizer()
        return sum(tok.count(t) for t in row.turns) + sum(answers)
    return row.input_tokens + (row.output_tokens or max_tokens or 0)


def _text_field(d: DatasetConfig) -> str:
    return "conversations" if d.format == "sharegpt" else d.text_field


def _within_limits(row: DatasetRow, d: DatasetConfig) -> bool:
    n, out = row.input_tokens, row.output_tokens
    if d.min_input_tokens is not None and n < d.min_input_tokens:
        return False
    if d.max_input_tokens is not None and n > d.max_input_tokens:
        return False
    if out is None:
        return True
    if d.min_output_tokens is not None and out < d.min_output_tokens:
        return False
    return d.max_output_tokens is None or out <= d.max_output_tokens


def _limits(d: DatasetConfig) -> str:
    names = ("min_input_tokens", "max_input_tokens", "min_output_tokens", "max_output_tokens")
    return ", ".join(f"{n} {getattr(d, n)}" for n in names if getattr(d, n) is not None)


def _records(d: DatasetConfig) -> Iterator[tuple[int, Any]]:
    """(line, record) of every row, by the file's suffix."""
    suffix = d.path.suffix.lower()
    if suffix == ".csv":
        return _csv_records(d.path)
    if suffix == ".parquet":
        return _parquet_records(d.path)
    text = _read_text(d.path)
    if text.lstrip(_JSON_WS).startswith("["):
        return _array_records(d.path, text)
    return _line_records(d.path, text)


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(
            f"{path}: cannot read ({exc.__class__.__name__}: {exc}) (expected a UTF-8 text file)"
        ) from None


def _line_records(path: Path, text: str) -> Iterator[tuple[int, Any]]:
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            yield number, json.loads(line)
        except json.JSONDecodeError as exc:
            raise DatasetError(
                f"{path}:{number}: malformed JSON: {exc.msg} at column "
                f"{exc.colno} (expected one JSON object per line)"
            ) from None


def _array_records(path: Path, text: str) -> Iterator[tuple[int, Any]]:
    """The elements of a JSON array, each with the line it starts on: decoded one at a time,
    so a malformed one is reported where it is."""
    decoder = json.JSONDecoder()
    at = text.index("[") + 1
    line, counted = 1, 0
    while True:
        at = _skip_ws(text, at)
        if text.startswith("]", at):
            return
        try:
            obj, end = decoder.raw_decode(text, at)
        except json.JSONDecodeError as exc:
            raise DatasetError(
                f"{path}:{exc.lineno}: malformed JSON: {exc.msg} at column "
                f"{exc.colno} (expected a JSON array of rows)"
            ) from None
        line += text.count("\n", counted, at)
        counted = at
        yield line, obj
        at = _skip_ws(text, end)
        if text.startswith(",", at):
            at += 1
        elif not text.startswith("]", at):
            lineno = text.count("\n", 0, at) + 1
            raise DatasetError(
                f"{path}:{lineno}: malformed JSON: expected ',' or ']' after a "
                "row (expected a JSON array of rows)"
            )


def _skip_ws(text: str, at: int) -> int:
    while at < len(text) and text[at] in _JSON_WS:
        at += 1
    return at


def _csv_records(path: Path) -> Iterator[tuple[int, Any]]:
    with path.open(encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        start = 2
        for row in reader:
            yield start, row
            start = reader.line_num + 1


def _parquet_records(path: Path) -> Iterator[tuple[int, Any]]:
    """A parquet file's rows, numbered from 1 (a parquet file has no lines)."""
    try:
        import pyarrow.parquet as pq  # type: ignore[import-untyped, import-not-found, unused-ignore]
    except ImportError:
        raise DatasetError(
            f"{path}: reading parquet needs pyarrow, which is not installed "
            "(expected `pip install 'loadgen[parquet]'`, or the dataset exported with "
            "to_json)"
        ) from None
    try:
        table = pq.read_table(path)
    except (OSError, ValueError) as e:  # pyarrow's ArrowInvalid is a ValueError
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise DatasetError(f"{path}: not a readable parquet file ({first})") from None
    yield from enumerate(table.to_pylist(), 1)


def _exchanges(obj: Any, where: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """A ShareGPT row's (human turns, their gpt answers), one answer per turn."""
    if not isinstance(obj, dict) or "conversations" not in obj:
        raise DatasetError(
            f"{where}: conversations: missing (expected a row "
            '{"conversations": [{"from": "human", "value": ...}, ...]})'
        )
    turns = obj["conversations"]
    if not isinstance(turns, list) or not turns:
        got = "empty" if turns == [] else f"got {type(turns).__name__}"
        raise DatasetError(
            f"{where}: conversations: {got} (expected a list of human and gpt turns)"
        )
    users: list[str] = []
    answers: list[str] = []
    for k, turn in enumerate(turns):
        role, value = _turn(turn, f"{where}: conversations[{k}]")
        if role in _SKIPPED_ROLES:
            continue
        if role in _USER_ROLES:
            if len(users) > len(answers):
                break  # a human turn left unanswered: the exchanges end before it
            users.append(value)
        elif users and len(answers) < len(users):
            answers.append(value)
    if not answers:
        raise DatasetError(
            f"{where}: conversations: no human turn with a gpt answer after it "
            "(expected at least one exchange)"
        )
    return tuple(users[: len(answers)]), tuple(answers)


def _turn(turn: Any, where: str) -> tuple[str, str]:
    if not isinstance(turn, dict):
        raise DatasetError(
            f'{where}: got {type(turn).__name__} (expected {{"from": ..., "value": ...}})'
        )
    role = turn.get("from")
    roles = (*_USER_ROLES, *_ANSWER_ROLES, *_SKIPPED_ROLES)
    if role not in roles:
        raise DatasetError(f"{where}.from: got {role!r} (expected one of: {', '.join(roles)})")
    value = turn.get("value")
    if not isinstance(value, str):
        raise DatasetError(
            f"{where}.value: {'missing' if value is None else 'not a string'} "
            "(expected the turn's text)"
        )
    return role, value


def _text(obj: Any, field: str, where: str) -> str:
    value = obj.get(field) if isinstance(obj, dict) else None
    if not isinstance(value, str) or not value.strip():
        got = "missing" if value is None else f"got {_shown(value)}"
        raise DatasetError(
            f"{where}: {field}: {got} (expected the prompt's text; text_field names the column)"
        )
    return value


def _output(obj: dict[str, Any], field: str | None, where: str) -> int | None:
    if field is None:
        return None
    value = obj.get(field)
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        got = "missing" if value is None else f"got {_shown(value)}"
        raise DatasetError(f"{where}: {field}: {got} (expected an output length in tokens, >= 1)")
    return value


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."
