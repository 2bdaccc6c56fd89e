"""Schema of a group's `prompt.dataset` block (prompts read from a file). Same conventions as
schema.py: every error noted with its file:line, None returned for a bad block; a dataset
that cannot be used is one error at the field it is about, naming the dataset's file and line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from loadgen.scenario.checks import TEXT, Checker, Rule, choice, integer, join, show
from loadgen.scenario.datasets import DATASET_SUFFIXES, DatasetError, load_dataset
from loadgen.scenario.marked_yaml import MarkedMap
from loadgen.scenario.model import (
    DATASET_FORMATS,
    DATASET_OUTPUTS,
    DATASET_TOO_LONG,
    DATASET_TURNS,
    DatasetConfig,
)

LIMITS = ("min_input_tokens", "max_input_tokens", "min_output_tokens", "max_output_tokens")
DATASET_KEYS = (
    "path",
    "format",
    "text_field",
    "output_field",
    "output",
    *LIMITS,
    "too_long",
    "turns",
)
MAYBE_TOKENS = integer(1, nullable=True)
OPTIONAL_NAME = Rule(
    "a column name or null", lambda v: v is None or isinstance(v, str), nullable=True
)


def dataset(c: Checker, prompt: MarkedMap, path: str, base_dir: Path) -> DatasetConfig | None:
    """The prompt's dataset block, its rows read and filtered; None when it is wrong."""
    m = c.mapping(prompt, "dataset", path)
    dpath = join(path, "dataset")
    c.keys(m, dpath, DATASET_KEYS)
    name = c.field(m, "path", dpath, TEXT)
    fmt = c.field(m, "format", dpath, choice(DATASET_FORMATS))
    text_field = c.field(m, "text_field", dpath, TEXT, "prompt")
    output_field = c.field(m, "output_field", dpath, OPTIONAL_NAME, None)
    output = c.field(
        m, "output", dpath, choice(DATASET_OUTPUTS), _default_output(fmt, output_field)
    )
    limits = {k: c.field(m, k, dpath, MAYBE_TOKENS, None) for k in LIMITS}
    too_long = c.field(m, "too_long", dpath, choice(DATASET_TOO_LONG), "skip")
    turns = c.field(m, "turns", dpath, choice(DATASET_TURNS), "first")
    _check_fields(c, m, dpath, fmt, output, output_field, turns)
    for low, high in (LIMITS[:2], LIMITS[2:]):
        if None not in (limits[low], limits[high]) and limits[low] > limits[high]:
            c.at_value(m, high, dpath, f"got {limits[high]} (expected >= {low}, {limits[low]})")
    if output == "fixed":
        for key in LIMITS[2:]:
            if key in m:
                c.at_key(m, key, dpath, "only applies to output: dataset (expected it removed)")
    if c.errors or None in (name, fmt, text_field, output, too_long, turns):
        return None
    outside = c.outside(name, base_dir)
    if outside:
        c.at_value(m, "path", dpath, outside)
        return None
    config = DatasetConfig(
        Path(name), fmt, text_field, output_field, output, **limits, too_long=too_long, turns=turns
    )
    try:
        return load_dataset(config, base_dir)
    except DatasetError as exc:
        set_limits = [k for k in LIMITS if limits[k] is not None]
        key = set_limits[0] if "fall outside" in str(exc) and set_limits else "path"
        c.at_value(m, key, dpath, str(exc))
        return None


def _default_output(fmt: Any, output_field: Any) -> str:
    """Output lengths come from the dataset where it has them: ShareGPT's answers, or a
    named column."""
    return "dataset" if fmt == "sharegpt" or output_field else "fixed"


def sizes_output(group: MarkedMap) -> bool:
    """The group's dataset gives each row's output length, so max_tokens may be left out."""
    prompt = group.get("prompt")
    d = prompt.get("dataset") if isinstance(prompt, MarkedMap) else None
    if not isinstance(d, MarkedMap):
        return False
    return d.get("output", _default_output(d.get("format"), d.get("output_field"))) == "dataset"


def _check_fields(
    c: Checker,
    m: MarkedMap,
    dpath: str,
    fmt: str | None,
    output: str | None,
    output_field: str | None,
    turns: str | None,
) -> None:
    """The keys that only some formats take."""
    if fmt == "sharegpt":
        for key in ("text_field", "output_field"):
            if key in m:
                why = "only applies to jsonl, csv and hf (ShareGPT rows are conversations)"
                c.at_key(m, key, dpath, f"{why} (expected it removed)")
    elif output == "dataset" and output_field is None and fmt is not None:
        why = f"got dataset but a {fmt} dataset gives output lengths only through output_field"
        c.at_value(m, "output", dpath, f"{why} (expected output_field: COLUMN, or fixed)")
    if turns == "all" and fmt not in (None, "sharegpt"):
        why = f"got all for a {fmt} dataset, whose rows are single prompts"
        c.at_value(m, "turns", dpath, f"{why} (expected first, or format sharegpt)")


def refused_file(name: str) -> str | None:
    """Why `shape: {file: name}` is refused, or None: a dataset file is not running text (its
    JSON syntax would be sent as prompts)."""
    suffix = Path(name).suffix.lower()
    if suffix not in DATASET_SUFFIXES:
        return None
    return (
        f"got {show(name)}, a {suffix[1:]} file: its syntax would be sent as prompt text "
        "(expected prompt: {dataset: {path: " + name + ", format: ...}} to read its rows)"
    )
