"""An incremental Server-Sent Events parser, fed arbitrary byte slices as they arrive.

Follows the WHATWG event-stream rules that matter for LLM streams: CRLF, LF and CR line ends
(also split across reads), `data:` lines joined with "\\n", `:` comments (keep-alives),
`event:`/`id:`/`retry:` fields, and an event dispatched at each blank line. `data: [DONE]` is
returned like any other event; the caller gives it its meaning.

It never raises on input: a line whose field is not an SSE field (garbage, a torn frame) and an
event larger than `max_event_bytes` become recorded parse errors and parsing goes on. Data is
kept as bytes (orjson takes bytes and validates UTF-8 itself), so the hot path decodes nothing.

Memory: a partial event is buffered only up to `max_event_bytes`; past that it is dropped and
the rest of it skipped up to its blank line without being kept, so a hostile 50 MB line costs
at most max_event_bytes plus one read (and one transient copy of that when an event completes).
"""

from __future__ import annotations

DONE = b"[DONE]"
MESSAGE = "message"
# (data, event name): a plain tuple, the cheapest object to make once per event.
SSEEvent = tuple[bytes, str]

_FIELDS = (b"event", b"id", b"retry")
# Twice the longest legitimate event seen in tests (a 4 MiB single-token line): LLM events are a
# few hundred bytes, so anything near this is hostile or broken.
DEFAULT_MAX_EVENT_BYTES = 8 << 20


class SSEParser:
    """Feed bytes with `feed`; it returns the events completed by them, in order.

    `parse_errors` counts malformed lines and oversized events (`oversized` the latter alone);
    `first_error` describes the first. `pending` is True while a partial event is buffered (a
    stream that ends then was cut).
    Between calls no event is half-parsed except as buffered bytes, so the fast path holds.
    """

    __slots__ = ("_buf", "_cr", "_data", "_event", "_skip", "_skip_nl", "first_error", "last_id",
                 "max_event_bytes", "oversized", "parse_errors")  # fmt: skip

    def __init__(self, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> None:
        self._buf = bytearray()
        self._cr = False  # the last slice ended in CR: a LF opening the next one is its pair
        self._skip = False  # inside an oversized event: discard up to its blank line
        self._skip_nl = False  # ... and the last skipped slice ended in LF
        self.oversized = 0
        self._data: list[bytes] = []
        self._event = MESSAGE
        self.max_event_bytes = max_event_bytes
        self.parse_errors = 0
        self.first_error: str | None = None
        self.last_id: str | None = None

    @property
    def pending(self) -> bool:
        return bool(self._buf)

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        if not chunk:
            return []
        if self._cr and chunk[0] == 10:
            chunk = chunk[1:]
            if not chunk:
                return []
        if b"\r" in chunk:
            self._cr = chunk.endswith(b"\r")
            chunk = chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        else:
            self._cr = False
        if self._skip:
            chunk = self._skip_oversized(chunk)
            if not chunk:
                return []
        buf = self._buf
        if buf:
            # A blank line may straddle the old tail and the new slice.
            if chunk.find(b"\n\n") < 0 and not (buf[-1] == 10 and chunk[0] == 10):
                # A trailing LF may be the first half of the blank line: not event bytes.
                if len(buf) + len(chunk) - (chunk[-1] == 10) > self.max_event_bytes:
                    self._oversize(chunk)
                else:
                    buf += chunk
                return []
            buf += chunk
            text = bytes(buf)
            buf.clear()
        else:
            text = chunk
        blocks = text.split(b"\n\n")
        tail = blocks.pop()
        if len(tail) - tail.endswith(b"\n") > self.max_event_bytes:
            self._oversize(tail)
        elif tail:
            buf += tail
        n = len(blocks)
        if len(text) - len(tail) > self.max_event_bytes:
            blocks = self._drop_oversized(blocks)
            n = len(blocks)
            if not n:
                return []
        # Fast path: every block is one `data: ...` line, the shape of nearly every LLM read.
        # Counted in C: n blocks hold exactly 2n newlines and n-1 `\n\ndata: ` joints.
        whole = len(text) - len(tail)
        if (
            text.startswith(b"data: ")
            and text.count(b"\n", 0, whole) == 2 * n
            and text.count(b"\n\ndata: ", 0, whole) == n - 1
        ):
            return [(block[6:], MESSAGE) for block in blocks]
        out: list[SSEEvent] = []
        for block in blocks:
            # Fast path: one `data: ...` line, the shape of nearly every LLM event.
            if block.startswith(b"data: ") and b"\n" not in block:
                out.append((block[6:], MESSAGE))
            else:
                self._parse_lines(block.split(b"\n"), out)
                self._dispatch(out)
        return out

    def _oversize(self, partial: bytes) -> None:
        """Drops the event being buffered and skips the rest of it as it arrives."""
        self._buf.clear()
        self._data = []
        self._event = MESSAGE
        self._skip = True
        self._skip_nl = partial.endswith(b"\n")
        self.oversized += 1
        self._error(f"event larger than {self.max_event_bytes} bytes; dropped")

    def _skip_oversized(self, chunk: bytes) -> bytes:
        """What follows the end of the skipped event in `chunk` (empty while it goes on)."""
        if self._skip_nl and chunk[0] == 10:
            end = 1
        else:
            at = chunk.find(b"\n\n")
            if at < 0:
                self._skip_nl = chunk.endswith(b"\n")
                return b""
            end = at + 2
        self._skip = False
        return chunk[end:]

    def _drop_oversized(self, blocks: list[bytes]) -> list[bytes]:
        kept = [b for b in blocks if len(b) <= self.max_event_bytes]
        for _ in range(len(blocks) - len(kept)):
            self.oversized += 1
            self._error(f"event larger than {self.max_event_bytes} bytes; dropped")
        return kept

    def _dispatch(self, out: list[SSEEvent]) -> None:
        # Per the spec an event with no data lines is not dispatched (comments, bare `event:`).
        if self._data:
            data = self._data[0] if len(self._data) == 1 else b"\n".join(self._data)
            self._data = []
            out.append((data, self._event))
        self._event = MESSAGE

    def _parse_lines(self, lines: list[bytes], out: list[SSEEvent]) -> None:
        for line in lines:
            if not line:
                self._dispatch(out)
                continue
            colon = line.find(b":")
            if colon == 0:
                continue  # a comment: keep-alive
            if colon < 0:
                name, value = line, b""
            else:
                name = line[:colon]
                value = (
                    line[colon + 2 :] if line[colon + 1 : colon + 2] == b" " else line[colon + 1 :]
                )
            if name == b"data":
                self._data.append(value)
            elif name == b"event":
                self._event = value.decode("utf-8", "replace") or MESSAGE
            elif name == b"id":
                if b"\0" not in value:
                    self.last_id = value.decode("utf-8", "replace")
            elif name not in _FIELDS:
                self._error(f"not an SSE line: {line[:80]!r}")

    def _error(self, message: str) -> None:
        self.parse_errors += 1
        if self.first_error is None:
            self.first_error = message
