"""How loadgen says a thing it did not write itself (a server's error body, an exception): on one
line, bounded, whichever stage prints it."""

from __future__ import annotations


def one_line(x: object, limit: int = 300) -> str:
    """`x` as text with its whitespace runs collapsed to single spaces, at most `limit` long."""
    return " ".join(str(x).split())[:limit]
