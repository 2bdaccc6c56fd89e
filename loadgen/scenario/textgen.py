"""Endless deterministic text in a given shape: English-like prose, Python-like code, or a
user's file. Each generator yields chunks (a sentence, a function, a pass over the file); every
chunk after the first starts with its own separator, so joining them is the text.

random.Random is used for its documented cross-version stability of seeded sequences.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator

from loadgen.scenario.vocab import (
    ADJECTIVES,
    ADVERBS,
    CONJUNCTIONS,
    DETERMINERS,
    NOUNS,
    PREPOSITIONS,
    PRONOUNS,
    VERBS_BASE,
    VERBS_PAST,
)


def text_chunks(shape: str, seed: int, file_text: str | None = None) -> Iterator[str]:
    """Endless text of `shape` ("prose", "code" or "file", which needs `file_text`)."""
    if shape == "prose":
        return _prose(random.Random(seed))
    if shape == "code":
        return _code(random.Random(seed))
    if shape == "file" and file_text:
        return _file(file_text, seed)
    raise ValueError(f"unknown prompt shape {shape!r} (or no text for shape 'file')")


def _prose(r: random.Random) -> Iterator[str]:
    """Paragraphs of 3 to 7 sentences, yielded a sentence at a time: a 16-token prompt takes
    one or two sentences, not the whole paragraph (the text is the same either way)."""
    opening = ""
    while True:
        for i in range(r.randint(3, 7)):
            yield (" " if i else opening) + _sentence(r)
        opening = "\n\n"


def _np(r: random.Random) -> str:
    """A noun phrase: determiner, sometimes an adjective, a noun."""
    if r.random() < 0.5:
        return f"{r.choice(DETERMINERS)} {r.choice(ADJECTIVES)} {r.choice(NOUNS)}"
    return f"{r.choice(DETERMINERS)} {r.choice(NOUNS)}"


def _sentence(r: random.Random) -> str:
    v, v2, p, c = (r.choice(w) for w in (VERBS_PAST, VERBS_PAST, PREPOSITIONS, CONJUNCTIONS))
    adv, pron = r.choice(ADVERBS), r.choice(PRONOUNS)
    form = r.randrange(6)
    if form == 0:
        s = f"{_np(r)} {v} {_np(r)} {p} {_np(r)}."
    elif form == 1:
        s = f"{adv}, {_np(r)} {v} {_np(r)}."
    elif form == 2:
        s = f"{_np(r)} {p} {_np(r)} {v} {_np(r)} {adv}, {c} {_np(r)} {v2} {_np(r)}."
    elif form == 3:
        s = f"{pron} {v} {_np(r)} {c} {_np(r)} {v2} {p} {_np(r)}."
    elif form == 4:
        s = f"{_np(r)} {adv} {v} {_np(r)}; {pron} {v2} {_np(r)}."
    else:
        s = f"when {_np(r)} {v} {_np(r)}, {_np(r)} {v2} {p} {_np(r)}."
    return s[0].upper() + s[1:]


def _code(r: random.Random) -> Iterator[str]:
    yield _definition(r)
    while True:
        yield "\n\n\n" + _definition(r)


def _definition(r: random.Random) -> str:
    if r.random() < 0.4:
        return _class(r)
    return _function(r, "", self_arg=False)


def _snake(r: random.Random) -> str:
    return r.choice(NOUNS) if r.random() < 0.5 else f"{r.choice(ADJECTIVES)}_{r.choice(NOUNS)}"


def _class(r: random.Random) -> str:
    name = r.choice(ADJECTIVES).title() + r.choice(NOUNS).title()
    fields = [_snake(r) for _ in range(r.randint(2, 4))]
    doc = f'    """{_sentence(r)}"""'
    init = [f"    def __init__(self, {', '.join(fields)}):"]
    init += [f"        self.{f} = {f}" for f in fields]
    methods = [_function(r, "    ", self_arg=True) for _ in range(r.randint(2, 4))]
    return "\n\n".join([f"class {name}:\n{doc}", "\n".join(init), *methods])


def _function(r: random.Random, indent: str, *, self_arg: bool) -> str:
    args = [_snake(r) for _ in range(r.randint(1, 3))]
    params = ", ".join((["self"] if self_arg else []) + args)
    name = f"{r.choice(VERBS_BASE)}_{r.choice(NOUNS)}"
    head = f"{indent}def {name}({params}):"
    body = _block(r, indent + "    ", list(args), depth=0)
    result = r.choice(args)
    ret = f'{indent}    return {{"{r.choice(NOUNS)}": {result}, "count": len({result})}}'
    return "\n".join([head, *body, ret])


def _block(r: random.Random, indent: str, names: list[str], depth: int) -> list[str]:
    lines: list[str] = []
    for _ in range(r.randint(2, 5)):
        make = r.choice(_STATEMENTS if depth < 2 else _SIMPLE)
        lines.extend(make(r, indent, names, depth))
    return lines


def _expr(r: random.Random, names: list[str]) -> str:
    n, form = r.choice(names), r.randrange(7)
    if form == 0:
        return n
    if form == 1:
        return str(r.randint(0, 512))
    if form == 2:
        return f"{n} * {r.randint(2, 64)}"
    if form == 3:
        return f"len({n})"
    if form == 4:
        return f"{n}.{r.choice(NOUNS)}"
    if form == 5:
        return f"{r.choice(VERBS_BASE)}_{r.choice(NOUNS)}({n})"
    return f'"{r.choice(NOUNS)}"'


def _assign(r: random.Random, indent: str, names: list[str], depth: int) -> list[str]:
    target = _snake(r)
    line = f"{indent}{target} = {_expr(r, names)}"
    names.append(target)
    return [line]


def _update(r: random.Random, indent: str, names: list[str], depth: int) -> list[str]:
    return [f"{indent}{r.choice(names)} += {_expr(r, names)}"]


def _call(r: random.Random, indent: str, names: list[str], depth: int) -> list[str]:
    return [
        f"{indent}{r.choice(names)}.{r.choice(VERBS_BASE)}({_expr(r, names)}, {_expr(r, names)})"
    ]


def _mapping(r: random.Random, indent: str, names: list[str], depth: int) -> list[str]:
    keys = [r.choice(NOUNS) for _ in range(r.randint(2, 4))]
    items = ", ".join(f'"{k}": {_expr(r, names)}' for k in keys)
    target = _snake(r)
    names.append(target)
    return [f"{indent}{target} = {{{items}}}"]


def _comprehension(r: random.Random, indent: str, names: list[str], depth: int) -> list[str]:
    item, source, attr = r.choice(NOUNS), r.choice(names), r.choice(NOUNS)
    target = _snake(r)
    names.append(target)
    return [f"{indent}{target} = [{item}.{attr} for {item} in {source} if {item}.{attr}]"]


def _comment(r: random.Random, indent: str, names: list[str], depth: int) -> list[str]:
    return [f"{indent}# {_sentence(r)}"]


def _loop(r: random.Random, indent: str, names: list[str], depth: int) -> list[str]:
    item = r.choice(NOUNS)
    head = f"{indent}for {item} in {r.choice(names)}:"
    return [head, *_block(r, indent + "    ", [*names, item], depth + 1)]


def _branch(r: random.Random, indent: str, names: list[str], depth: int) -> list[str]:
    cond = f"{r.choice(names)}.{r.choice(NOUNS)} > {r.randint(0, 100)}"
    lines = [f"{indent}if {cond}:", *_block(r, indent + "    ", list(names), depth + 1)]
    if r.random() < 0.5:
        lines += [f"{indent}else:", *_block(r, indent + "    ", list(names), depth + 1)]
    return lines


Statement = Callable[[random.Random, str, list[str], int], list[str]]
_SIMPLE: tuple[Statement, ...] = (_assign, _update, _call, _mapping, _comprehension, _comment)
_STATEMENTS: tuple[Statement, ...] = (*_SIMPLE, _loop, _branch)


def _file(text: str, seed: int) -> Iterator[str]:
    """The file from a seeded line onwards, then the whole file again and again."""
    lines = text.strip("\n").split("\n")
    start = seed % len(lines)
    yield "\n".join(lines[start:])
    whole = "\n".join(lines)
    while True:
        yield "\n\n" + whole
