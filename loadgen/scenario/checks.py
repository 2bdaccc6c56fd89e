"""Field checks that collect every error (never stop at the first) as `location: path: message`.

Messages follow one pattern: `got <value> (expected <what>)`, `missing (expected <what>)`,
`unknown key (expected one of: ...; did you mean '...'?)`.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from loadgen.scenario.marked_yaml import MarkedList, MarkedMap

# What a scenario key nests: a mapping or a list.
C = TypeVar("C", MarkedMap, MarkedList)

REQUIRED = object()
_NAME_RE = re.compile(r"^[A-Za-z0-9_-]+$")


@dataclass(frozen=True, slots=True)
class Rule:
    """What a value must be: `expect` is the words after "expected"."""

    expect: str
    accepts: Callable[[Any], bool]
    choices: tuple[str, ...] = ()
    convert: Callable[[Any], Any] = lambda v: v
    nullable: bool = False


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def integer(
    minimum: int | None = None, maximum: int | None = None, *, nullable: bool = False
) -> Rule:
    """An integer in [minimum, maximum]; a maximum comes from scenario/limits.py's table."""
    parts = [
        f"{op} {bound}" for bound, op in ((minimum, ">="), (maximum, "<=")) if bound is not None
    ]
    expect = " ".join(["an integer", " and ".join(parts)]).rstrip()
    return Rule(
        expect + (" or null" if nullable else ""),
        lambda v: (
            _is_int(v) and (minimum is None or v >= minimum) and (maximum is None or v <= maximum)
        ),
        nullable=nullable,
    )


def number(
    *,
    gt: float | None = None,
    ge: float | None = None,
    le: float | None = None,
    nullable: bool = False,
) -> Rule:
    bounds = [(gt, ">"), (ge, ">="), (le, "<=")]
    parts = [f"{op} {bound:g}" for bound, op in bounds if bound is not None]
    expect = " ".join(["a number", " and ".join(parts)]).rstrip()
    return Rule(
        expect + (" or null" if nullable else ""),
        lambda v: (
            _is_number(v)
            and (gt is None or v > gt)
            and (ge is None or v >= ge)
            and (le is None or v <= le)
        ),
        convert=float,
        nullable=nullable,
    )


def choice(options: Sequence[str]) -> Rule:
    return Rule("one of: " + ", ".join(options), lambda v: v in options, tuple(options))


BOOL = Rule("true or false", lambda v: isinstance(v, bool))
TEXT = Rule("a string", lambda v: isinstance(v, str))
NAME = Rule(
    "a name of letters, digits, '_' or '-'",
    lambda v: isinstance(v, str) and bool(_NAME_RE.match(v)),
)


def show(value: Any) -> str:
    """A value as the user wrote it, for "got ..." messages."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return repr(value)
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return str(value)


def did_you_mean(word: Any, options: Sequence[str]) -> str:
    close = difflib.get_close_matches(str(word), list(options), n=1, cutoff=0.6)
    return f"; did you mean '{close[0]}'?" if close else ""


def join(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)


class Checker:
    """Collects errors; each is (location, line) so they can be printed in file order."""

    def __init__(self, *, allow_files_outside: bool = False) -> None:
        self.errors: list[tuple[str, str]] = []
        # Whether a prompt file may live outside the scenario's folder: its text is sent to
        # the server, so a shared scenario must not reach any readable local file by default.
        self.allow_files_outside = allow_files_outside

    def outside(self, name: str, base_dir: Path) -> str | None:
        """Why the file `name` (relative to the scenario's folder) may not be read, or None:
        text read from it is sent to the server."""
        file = (base_dir / name).resolve()
        if self.allow_files_outside or file.is_relative_to(base_dir.resolve()):
            return None
        why = f"got {show(name)}: {file} is outside the scenario's folder {base_dir.resolve()}"
        return f"{why} (expected a file inside that folder, or pass --allow-files-outside)"

    def add(self, loc: str, path: str, message: str) -> None:
        self.errors.append((loc, f"{loc}: {path}: {message}"))

    def at_value(self, m: MarkedMap, key: str, path: str, message: str) -> None:
        """An error about the value of m[key]."""
        self.add(m.value_locs[key], join(path, key), message)

    def at_key(self, m: MarkedMap, key: str, path: str, message: str) -> None:
        """An error about the presence of `key` in m."""
        self.add(m.key_locs[key], join(path, key), message)

    def keys(self, m: MarkedMap, path: str, allowed: Sequence[str]) -> None:
        """Reports every key of `m` not in `allowed`."""
        for key in m:
            if key not in allowed:
                expect = "one of: " + ", ".join(allowed) if allowed else "no keys here"
                hint = did_you_mean(key, allowed)
                self.add(m.key_locs[key], join(path, key), f"unknown key (expected {expect}{hint})")

    def bad(self, loc: str, path: str, value: Any, rule: Rule) -> None:
        hint = did_you_mean(value, rule.choices) if rule.choices and isinstance(value, str) else ""
        self.add(loc, path, f"got {show(value)} (expected {rule.expect}{hint})")

    def field(self, m: MarkedMap, key: str, path: str, rule: Rule, default: Any = REQUIRED) -> Any:
        """m[key] checked against `rule`; the default when absent; None after an error."""
        full = join(path, key)
        if key not in m:
            if default is REQUIRED:
                self.add(m.loc, full, f"missing (expected {rule.expect})")
                return None
            return default
        value = m[key]
        if value is None and rule.nullable:
            return None
        if not rule.accepts(value):
            self.bad(m.value_locs[key], full, value, rule)
            return None
        return rule.convert(value)

    def mapping(self, m: MarkedMap, key: str, path: str, *, required: bool = False) -> MarkedMap:
        """m[key] as a mapping (an empty one when absent or null; errors noted)."""
        return self._container(m, key, path, MarkedMap, "a mapping", required)

    def sequence(self, m: MarkedMap, key: str, path: str, *, required: bool = False) -> MarkedList:
        """m[key] as a list (an empty one when absent or null; errors noted)."""
        return self._container(m, key, path, MarkedList, "a list", required)

    def _container(
        self, m: MarkedMap, key: str, path: str, kind: type[C], what: str, required: bool
    ) -> C:
        value = m.get(key)
        if value is None:
            if required:
                self.add(m.loc, join(path, key), f"missing (expected {what})")
            return kind(m.value_locs.get(key, m.loc))
        if not isinstance(value, kind):
            self.add(m.value_locs[key], join(path, key), f"got {show(value)} (expected {what})")
            return kind(m.value_locs[key])
        return value

    def sorted_lines(self) -> list[str]:
        """Error lines in file order (by line), overrides last, duplicates dropped."""
        seen: dict[str, tuple[int, int, int]] = {}
        for i, (loc, line) in enumerate(self.errors):
            tail = loc.rpartition(":")[2]
            from_file = tail.isdigit() and not loc.startswith("--set ")
            key = (0, int(tail), i) if from_file else (1, 0, i)
            seen.setdefault(line, key)
        return sorted(seen, key=seen.__getitem__)
