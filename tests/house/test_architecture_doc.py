"""README's Architecture section names real places: every loadgen/ (and tests/) path it gives
exists, and every name written as "path's `name`" (or "path's `a`, `b` and `c`") is defined at
the top of that module, so a rename or a move that leaves the map behind fails here."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from support.paths import REPO

PATH = re.compile(r"\b(?:loadgen|tests)/[\w./]*")
# "loadgen/x.py's `a`", "...'s `a` and `b`", "...'s `a`, `b` and `c`" (lines may break between)
NAMED = re.compile(r"(loadgen/[\w/]+\.py)'s\s+(`[\w.]+`(?:(?:,\s+|\s+and\s+|,\s+and\s+)`[\w.]+`)*)")


def architecture(text: str) -> str:
    start = text.index("\n## Architecture\n")
    return text[start : text.index("\n## ", start + 1)]


SECTION = architecture((REPO / "README.md").read_text(encoding="utf-8"))


def paths(section: str) -> list[str]:
    return sorted({m.rstrip(".,") for m in PATH.findall(section)})


def named(section: str) -> list[tuple[str, str]]:
    return sorted({(path, name) for path, names in NAMED.findall(section)
                   for name in re.findall(r"`([\w.]+)`", names)})  # fmt: skip


def defined(module: Path, name: str) -> bool:
    """`name` (or `Class.attr`) is a top-level function, class or assignment of `module`."""
    head, _, attr = name.partition(".")
    for node in ast.parse(module.read_text(encoding="utf-8")).body:
        if _defines(node, head):
            return not attr or any(_defines(n, attr) for n in getattr(node, "body", []))
    return False


def _defines(node: ast.stmt, name: str) -> bool:
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
        return node.name == name
    if isinstance(node, ast.AnnAssign):
        return isinstance(node.target, ast.Name) and node.target.id == name
    if isinstance(node, ast.Assign):
        return any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
    return False


def test_the_section_names_paths_and_names_to_check() -> None:
    # The section is the map: it must name the stages' files, not drift into prose alone.
    assert len(paths(SECTION)) >= 30 and len(named(SECTION)) >= 30
    for place in ("loadgen/commands/options.py", "loadgen/codec.py", "loadgen/run_manifest.py"):
        assert place in SECTION


@pytest.mark.parametrize("path", paths(SECTION))
def test_every_path_the_section_names_exists(path: str) -> None:
    assert (REPO / path).exists(), f"README Architecture names {path}, which does not exist"


@pytest.mark.parametrize(("path", "name"), named(SECTION), ids=lambda x: str(x))
def test_every_name_the_section_places_is_defined_there(path: str, name: str) -> None:
    assert defined(REPO / path, name), f"README Architecture: {path} defines no `{name}`"


def test_the_checks_catch_a_stale_map() -> None:
    stale = (
        "## Architecture\nloadgen/engine/arm.py's `drive_arm` and `drive_arms`; "
        "loadgen/engine/probes.py\n## Next\n"
    )
    section = architecture("intro\n" + stale)
    assert "loadgen/engine/probes.py" in paths(section)
    assert not (REPO / "loadgen/engine/probes.py").exists()
    found = named(section)
    assert found == [
        ("loadgen/engine/arm.py", "drive_arm"),
        ("loadgen/engine/arm.py", "drive_arms"),
    ]
    assert [defined(REPO / p, n) for p, n in found] == [True, False]
    assert defined(REPO / "loadgen/server/profile.py", "Profile.deterministic")
    assert not defined(REPO / "loadgen/server/profile.py", "Profile.no_such_trait")
