"""loadgen/codec.py: a frozen dataclass to JSON and back from its annotations alone."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Literal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loadgen.codec import CodecError, from_json, json_field, reader, to_json


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclass(frozen=True, slots=True)
class Leaf:
    n: int
    x: float | None


@dataclass(frozen=True, slots=True)
class Tree:
    name: str
    kind: Literal["a", "b"]
    colour: Colour
    leaf: Leaf
    leaves: tuple[Leaf, ...]
    pair: tuple[int, str]
    by_name: Mapping[str, Leaf]
    tags: list[str]
    maybe: Leaf | None
    number: int | float
    raw: Any
    cls: str = json_field(key="class", legacy=("klass",))
    note: str | None = json_field(omit="none", default=None)
    count: int = json_field(omit="default", default=0)
    flags: tuple[str, ...] = ()
    extra: list[int] = field(default_factory=list)


TREE = Tree(
    name="t",
    kind="b",
    colour=Colour.BLUE,
    leaf=Leaf(1, 2.5),
    leaves=(Leaf(2, None), Leaf(3, 0.5)),
    pair=(4, "four"),
    by_name={"w": Leaf(5, 1.0)},
    tags=["x", "y"],
    maybe=None,
    number=7,
    raw={"free": [1, "form"]},
    cls="http_429",
)
TREE_JSON = {
    "name": "t",
    "kind": "b",
    "colour": "blue",
    "leaf": {"n": 1, "x": 2.5},
    "leaves": [{"n": 2, "x": None}, {"n": 3, "x": 0.5}],
    "pair": [4, "four"],
    "by_name": {"w": {"n": 5, "x": 1.0}},
    "tags": ["x", "y"],
    "maybe": None,
    "number": 7,
    "raw": {"free": [1, "form"]},
    "class": "http_429",
    "flags": [],
    "extra": [],
}


def test_writes_fields_in_order_with_their_json_keys_and_omissions() -> None:
    out = to_json(TREE)
    assert out == TREE_JSON
    assert list(out) == list(TREE_JSON)  # field order: files not written with sorted keys


def test_writes_omitted_fields_once_they_are_set() -> None:
    out = to_json(_with(note="n", count=3))
    assert out == {**TREE_JSON, "note": "n", "count": 3}


def _with(**changes: Any) -> Tree:
    return replace(TREE, **changes)


def test_reads_back_the_same_value_with_types_restored() -> None:
    back = from_json(Tree, TREE_JSON)
    assert back == TREE
    assert type(back.leaves) is tuple and type(back.pair) is tuple and type(back.tags) is list
    assert back.colour is Colour.BLUE


def test_reads_a_legacy_key_and_fills_defaults_and_optional_fields() -> None:
    old = {k: v for k, v in TREE_JSON.items() if k not in ("class", "maybe", "flags", "extra")}
    back = from_json(Tree, {**old, "klass": "reset", "unknown_newer_field": 1})
    assert back == _with(cls="reset")
    assert back.extra == [] and back.extra is not from_json(Tree, {**old, "class": "c"}).extra


def test_a_float_field_takes_an_integer_and_an_int_field_refuses_a_float() -> None:
    assert from_json(Leaf, {"n": 1, "x": 2}) == Leaf(1, 2.0)
    assert type(from_json(Leaf, {"n": 1, "x": 2}).x) is float
    with pytest.raises(CodecError, match=r"^n: expected int, got float$"):
        from_json(Leaf, {"n": 1.0, "x": 2})


@dataclass(frozen=True, slots=True)
class Loose:
    raw: Any
    ns: list[int]


def test_containers_of_scalars_are_written_as_copies_and_others_walked() -> None:
    inner = {"a": 1, "b": None}
    raw = {"flat": [1, 2.5, "x", True], "deep": [inner, (3, Colour.RED)], "plain": inner}
    ns = [5, 6]
    out = to_json(Loose(raw, ns))
    assert out == {"raw": {"flat": [1, 2.5, "x", True], "deep": [{"a": 1, "b": None}, [3, "red"]],
                           "plain": {"a": 1, "b": None}}, "ns": [5, 6]}  # fmt: skip
    assert out["ns"] is not ns and out["raw"]["plain"] is not inner
    assert out["raw"]["flat"] is not raw["flat"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"leaf": {"n": "1", "x": None}}, r"^leaf\.n: expected int, got str$"),
        (
            {"leaves": [{"n": 1, "x": None}, {"n": True, "x": None}]},
            r"^leaves\.\[1\]\.n: expected int, got bool$",
        ),
        ({"by_name": {"w": {"x": 1.0}}}, r"^by_name\.w: n is missing$"),
        ({"kind": "c"}, r"^kind: expected one of 'a', 'b', got 'c'$"),
        ({"colour": "green"}, r"^colour: expected a Colour, got 'green'$"),
        ({"pair": [4]}, r"^pair: expected a list of 2, got \[4\]$"),
        ({"number": "7"}, r"^number: expected int \| float, got str$"),
        ({"tags": "x"}, r"^tags: expected list, got str$"),
        ({"name": None}, r"^name: expected str, got NoneType$"),
    ],
)
def test_a_value_that_does_not_fit_is_named_by_its_path(
    change: dict[str, Any], message: str
) -> None:
    with pytest.raises(CodecError, match=message):
        from_json(Tree, {**TREE_JSON, **change})


@dataclass(frozen=True, slots=True)
class Series:
    ns: list[int]
    rates: tuple[float, ...]
    flags: frozenset[bool] = frozenset()


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"ns": [1, 2, True, 4], "rates": []}, r"^ns\.\[2\]: expected int, got bool$"),
        ({"ns": [1, 2.0], "rates": []}, r"^ns\.\[1\]: expected int, got float$"),
        ({"ns": [], "rates": [0.5, "1"]}, r"^rates\.\[1\]: expected float, got str$"),
        ({"ns": [], "rates": [], "flags": [True, 0]}, r"^flags\.\[1\]: expected bool, got int$"),
    ],
)
def test_a_list_of_scalars_taken_whole_still_names_the_item_that_does_not_fit(
    row: dict[str, Any], message: str
) -> None:
    with pytest.raises(CodecError, match=message):
        from_json(Series, row)


def test_a_list_of_scalars_comes_back_as_its_own_copy_with_ints_made_floats() -> None:
    ns = [3, 1, 2]
    got = from_json(Series, {"ns": ns, "rates": [1, 0.5], "flags": [True, True]})
    assert got == Series([3, 1, 2], (1.0, 0.5), frozenset({True}))
    assert got.ns is not ns
    assert [type(r) for r in got.rates] == [float, float]


def test_a_required_key_that_is_missing_is_an_error() -> None:
    with pytest.raises(CodecError, match=r"^name is missing$"):
        from_json(Tree, {k: v for k, v in TREE_JSON.items() if k != "name"})


@dataclass(frozen=True, slots=True)
class Slo:
    metric: str
    share: float
    json_derived: ClassVar[tuple[str, ...]] = ("name",)

    @property
    def name(self) -> str:
        return f"{self.metric}_p{self.share * 100:g}"


def test_a_derived_property_is_written_after_the_fields_and_never_read() -> None:
    assert list(to_json(Slo("ttft", 0.9)).items()) == [
        ("metric", "ttft"),
        ("share", 0.9),
        ("name", "ttft_p90"),
    ]
    assert from_json(Slo, {"metric": "ttft", "share": 0.9, "name": "stale"}) == Slo("ttft", 0.9)


def test_a_literal_refuses_true_for_one() -> None:
    @dataclass(frozen=True)
    class One:
        v: Literal[1]

    assert from_json(One, {"v": 1}) == One(1)
    with pytest.raises(CodecError):
        from_json(One, {"v": True})


leaves = st.builds(Leaf, st.integers(), st.none() | st.floats(allow_nan=False))
names = st.text(max_size=5)
trees = st.builds(
    Tree,
    name=names,
    kind=st.sampled_from(["a", "b"]),
    colour=st.sampled_from(Colour),
    leaf=leaves,
    leaves=st.lists(leaves, max_size=3).map(tuple),
    pair=st.tuples(st.integers(), names),
    by_name=st.dictionaries(names, leaves, max_size=3),
    tags=st.lists(names, max_size=3),
    maybe=st.none() | leaves,
    number=st.integers() | st.floats(allow_nan=False),
    raw=st.none() | st.integers() | names,
    cls=names,
    note=st.none() | names,
    count=st.integers(),
    flags=st.lists(names, max_size=3).map(tuple),
    extra=st.lists(st.integers(), max_size=3),
)


@given(trees)
def test_every_value_comes_back_equal(tree: Tree) -> None:
    assert from_json(Tree, to_json(tree)) == tree


@dataclass(frozen=True, slots=True)
class Row:
    """A stream row's shape: plain fields, optional ones, free-form evidence, a keyword one."""

    id: str
    rep: int
    ok: bool
    ttft_s: float | None
    evidence: Mapping[str, Any]
    note: str | None = None
    share: float = 0
    extra: dict[str, Any] = field(default_factory=dict, kw_only=True)


ROW_JSON = {"id": "s/0", "rep": 2, "ok": True, "ttft_s": 0.5, "evidence": {"cap": 8}}


def test_a_row_reads_through_its_straight_line_reader_with_defaults_as_declared() -> None:
    back = from_json(Row, {**ROW_JSON, "extra": {"k": 1}})
    assert back == Row("s/0", 2, True, 0.5, {"cap": 8}, extra={"k": 1})
    assert back.share == 0 and type(back.share) is int  # a default is taken as it is
    assert type(from_json(Row, {**ROW_JSON, "share": 1}).share) is float


def test_free_form_values_are_kept_as_parsed_only_where_the_field_is_read_only() -> None:
    data = {**ROW_JSON, "extra": {"k": 1}}
    back = from_json(Row, data)
    assert back.evidence is data["evidence"]
    assert back.extra == data["extra"] and back.extra is not data["extra"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"rep": 2.0}, r"^rep: expected int, got float$"),
        ({"ok": 1}, r"^ok: expected bool, got int$"),
        ({"ttft_s": "0.5"}, r"^ttft_s: expected float, got str$"),
        ({"note": 3}, r"^note: expected str, got int$"),
        ({"share": None}, r"^share: expected float, got NoneType$"),
        ({"evidence": []}, r"^evidence: expected object, got list$"),
        ({"extra": {"k": 1}, "id": None}, r"^id: expected str, got NoneType$"),
    ],
)
def test_the_straight_line_reader_refuses_what_the_checking_reader_names(
    change: dict[str, Any], message: str
) -> None:
    with pytest.raises(CodecError, match=message):
        from_json(Row, {**ROW_JSON, **change})


def test_the_made_reader_reads_rows_as_the_constructor_does() -> None:
    """Its speed against the hand call is bench/codec_read.py's ratio, not a test's."""
    rows = [{**ROW_JSON, "rep": i, "evidence": {"i": i}} for i in range(200)]
    read = reader(Row)
    assert [read(d) for d in rows] == [
        Row(d["id"], d["rep"], d["ok"], d["ttft_s"], d["evidence"]) for d in rows
    ]


@dataclass(frozen=True, slots=True)
class FitLike:
    """A row whose columns beyond its own are open-ended, with a field kept in memory only."""

    probe: str
    error: float
    scratch: list[int] = json_field(default_factory=list, omit="always")
    basis: Mapping[str, Any] = json_field(rest=True, default_factory=dict)


def test_a_rest_field_is_written_flat_and_gathers_the_undeclared_keys() -> None:
    row = FitLike("p", 0.5, [1], {"prompt_tokens": 1024, "cached": True})
    flat = {"probe": "p", "error": 0.5, "prompt_tokens": 1024, "cached": True}
    assert to_json(row) == flat
    assert from_json(FitLike, flat) == replace(row, scratch=[])
    assert from_json(FitLike, {"probe": "p", "error": 1}).basis == {}
    with pytest.raises(CodecError, match=r"^error: expected float, got str$"):
        from_json(FitLike, {"probe": "p", "error": "x", "other": 1})


@dataclass(frozen=True, slots=True)
class Counts:
    """Columns declared by a block of their own, written flat among its owner's keys."""

    ok: int = 0
    late: float | None = None


@dataclass(frozen=True, slots=True)
class Flat:
    name: str
    counts: Counts = json_field(rest=True, default=Counts())


@dataclass(frozen=True, slots=True)
class Tallies:
    name: str
    by_key: Mapping[str, int] = json_field(rest=True, default_factory=dict)


def test_a_rest_field_reads_its_keys_by_its_annotation() -> None:
    row = Flat("a", Counts(2, 0.5))
    assert to_json(row) == {"name": "a", "ok": 2, "late": 0.5}
    assert from_json(Flat, {"name": "a", "ok": 2, "late": 0.5, "other": [1]}) == row
    assert from_json(Flat, {"name": "a"}) == Flat("a")
    with pytest.raises(CodecError, match=r"^ok: expected int, got str$"):
        from_json(Flat, {"name": "a", "ok": "2"})
    assert from_json(Tallies, {"name": "a", "x": 1, "y": 2}).by_key == {"x": 1, "y": 2}
    with pytest.raises(CodecError, match=r"^y: expected int, got float$"):
        from_json(Tallies, {"name": "a", "x": 1, "y": 2.5})


@dataclass(frozen=True, slots=True)
class Owner:
    name: str
    leaf: Leaf = json_field(default=Leaf(0, None), null_is_default=True)
    n: int = json_field(default=1, null_is_default=True)


@dataclass(frozen=True, slots=True)
class NullIsNone:
    x: int | None = json_field(default=1, null_is_default=True)


def test_a_null_reads_as_the_default_where_the_field_says_so() -> None:
    assert from_json(Owner, {"name": "a", "leaf": None, "n": None}) == Owner("a")
    assert from_json(Owner, {"name": "a", "leaf": {"n": 2, "x": None}, "n": 3}) == Owner(
        "a", Leaf(2, None), 3
    )
    with pytest.raises(CodecError, match=r"^name: expected str, got NoneType$"):
        from_json(Owner, {"name": None})
    with pytest.raises(TypeError, match="needs a default"):
        json_field(null_is_default=True)
    with pytest.raises(TypeError, match="where null is a value"):
        from_json(NullIsNone, {})


def test_a_field_kept_in_memory_is_never_written_and_reads_where_a_file_has_it() -> None:
    assert "scratch" not in to_json(FitLike("p", 0.5, [1, 2]))
    assert from_json(FitLike, {"probe": "p", "error": 0.5, "scratch": [3]}).scratch == [3]
    with pytest.raises(TypeError, match="needs a default"):
        json_field(omit="default")
