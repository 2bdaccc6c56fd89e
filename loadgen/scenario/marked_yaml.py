"""YAML with locations: every mapping key and value, every list item, knows where it came from.

A location is `file:line` for text from a file and `--set path=value` for an override, so a
validation error can name it. Overrides edit the parsed tree before validation.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import yaml

from loadgen.scenario.limits import MAX_YAML_NODES


class ScenarioError(Exception):
    """Every problem found in a scenario, one `location: field.path: message` line each."""

    def __init__(self, errors: list[str]) -> None:
        super().__init__("\n".join(errors))
        self.errors = list(errors)


class MarkedMap(dict):
    """A mapping with the location of itself, of each key and of each value."""

    def __init__(self, loc: str) -> None:
        super().__init__()
        self.loc = loc
        self.key_locs: dict[Any, str] = {}
        self.value_locs: dict[Any, str] = {}

    def put(self, key: Any, value: Any, key_loc: str, value_loc: str) -> None:
        self[key] = value
        self.key_locs[key] = key_loc
        self.value_locs[key] = value_loc


class MarkedList(list):
    def __init__(self, loc: str, items: Iterable[Any] = (), item_locs: Iterable[str] = ()) -> None:
        super().__init__(items)
        self.loc = loc
        self.item_locs = list(item_locs)


class _MarkedLoader(yaml.SafeLoader):
    filename = "<string>"
    # Set per parse by parse_marked, which reports them all at once.
    duplicates: list[str]

    def loc(self, node: yaml.Node) -> str:
        return f"{self.filename}:{node.start_mark.line + 1}"


def _construct_map(loader: _MarkedLoader, node: yaml.MappingNode) -> MarkedMap:
    loader.flatten_mapping(node)
    out = MarkedMap(loader.loc(node))
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if not isinstance(key, str | int | float | bool) and key is not None:
            raise yaml.constructor.ConstructorError(
                None, None, "a mapping key must be a plain value", key_node.start_mark
            )
        if key in out:
            loader.duplicates.append(f"{loader.loc(key_node)}: yaml: duplicate key '{key}'")
        value = loader.construct_object(value_node, deep=True)
        out.put(key, value, loader.loc(key_node), loader.loc(value_node))
    return out


def _construct_list(loader: _MarkedLoader, node: yaml.SequenceNode) -> MarkedList:
    items = [loader.construct_object(child, deep=True) for child in node.value]
    return MarkedList(loader.loc(node), items, [loader.loc(child) for child in node.value])


_MarkedLoader.add_constructor("tag:yaml.org,2002:map", _construct_map)
_MarkedLoader.add_constructor("tag:yaml.org,2002:seq", _construct_list)


def parse_marked(text: str, filename: str) -> Any:
    """Parse YAML text into MarkedMap/MarkedList/scalars; bad YAML raises ScenarioError."""
    loader = _MarkedLoader(text)
    loader.filename = filename
    loader.duplicates = []
    try:
        node = loader.get_single_node()
        _check_expansion(node, filename)
        data = None if node is None else loader.construct_document(node)
    except RecursionError:
        raise ScenarioError([f"{filename}:1: yaml: nested too deeply"]) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else 1
        raise ScenarioError([f"{filename}:{line}: yaml: {exc.problem or exc}"]) from None
    except yaml.YAMLError as exc:
        raise ScenarioError([f"{filename}:1: yaml: {exc}"]) from None
    finally:
        loader.dispose()
    if loader.duplicates:
        raise ScenarioError(loader.duplicates)
    return data


def _check_expansion(root: yaml.Node | None, filename: str) -> None:
    """Refuses a document whose aliases expand past MAX_YAML_NODES values (a "billion laughs"
    file is a few lines that expand to 10^9): anything that walks the loaded tree (overrides,
    JSON dumps of the resolved scenario) would expand it in memory."""
    sizes: dict[int, int] = {}

    def size(node: yaml.Node) -> int:
        known = sizes.get(id(node))
        if known is not None:
            return known
        children: list[yaml.Node] = []
        if isinstance(node, yaml.SequenceNode):
            children = node.value
        elif isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        total = 1 + sum(size(child) for child in children)
        sizes[id(node)] = total
        if total > MAX_YAML_NODES:
            line = node.start_mark.line + 1
            raise ScenarioError(
                [f"{filename}:{line}: yaml: aliases expand to more than {MAX_YAML_NODES} values "
                 "here (expected a scenario without alias bombs)"]
            )  # fmt: skip
        return total

    if root is not None:
        size(root)


def _safe_load_bounded(text: str, where: str) -> Any:
    """yaml.safe_load, refusing alias bombs like a scenario file (mark_all would expand one)."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        _check_expansion(node, where)
        return None if node is None else loader.construct_document(node)
    finally:
        loader.dispose()


def mark_all(value: Any, loc: str) -> Any:
    """Plain YAML values (from an override) as marked ones, every location `loc`."""
    if isinstance(value, dict):
        out = MarkedMap(loc)
        for key, item in value.items():
            out.put(key, mark_all(item, loc), loc, loc)
        return out
    if isinstance(value, list):
        return MarkedList(loc, [mark_all(v, loc) for v in value], [loc] * len(value))
    return value


def parse_override(text: str) -> tuple[str, Any, str]:
    """`key.path=value` as (path, marked value, location); the value is parsed as YAML."""
    loc = f"--set {text}"
    path, sep, raw = text.partition("=")
    if not sep or not path.strip():
        raise ValueError(f"{loc}: expected key.path=value")
    try:
        value = _safe_load_bounded(raw, loc) if raw.strip() else ""
    except yaml.YAMLError as exc:
        raise ValueError(f"{loc}: yaml: {getattr(exc, 'problem', None) or exc}") from None
    except ScenarioError as exc:
        raise ValueError(str(exc)) from None
    return path.strip(), mark_all(value, loc), loc


def apply_override(root: MarkedMap, path: str, value: Any, loc: str) -> str | None:
    """Set `path` (dot-separated; a list item by index or, for groups, by name) in `root`.

    Missing mappings along the way are created (a key absent from the file may still be valid:
    validation judges the result). Returns an error line when the path cannot be followed.
    """
    parts = path.split(".")
    node: Any = root
    for depth, part in enumerate(parts):
        last = depth == len(parts) - 1
        where = ".".join(parts[:depth]) or "the scenario"
        if isinstance(node, MarkedList):
            index = _list_index(node, part)
            if index is None:
                names = ", ".join(_item_names(node)) or "none"
                expect = f"expected an index or a name: {names}"
                return f"{loc}: {path}: {where} has no item '{part}' ({expect})"
            if last:
                node[index] = value
                node.item_locs[index] = loc
                return None
            node = node[index]
        elif isinstance(node, MarkedMap):
            if last:
                node.put(part, value, loc, loc)
                return None
            if part not in node or node[part] is None:
                node.put(part, MarkedMap(loc), loc, loc)
            node = node[part]
        else:
            return f"{loc}: {path}: {where} is not a mapping (expected a path into the scenario)"
    return None


def _list_index(items: MarkedList, part: str) -> int | None:
    if part.isdigit():
        return int(part) if int(part) < len(items) else None
    for i, item in enumerate(items):
        if isinstance(item, MarkedMap) and item.get("name") == part:
            return i
    return None


def _item_names(items: MarkedList) -> list[str]:
    return [str(i.get("name")) for i in items if isinstance(i, MarkedMap) and "name" in i]
