"""Dataset prompts per group: where a group's rows came from (run.json's resolved scenario:
the rows its file held, those the length filters dropped and those the target's window
skipped) and, over its measured ok streams, the prompt tokens asked (each row counted alone on
the run's counter: the server's /tokenize where it has one), sent (the text loadgen sent, salt
tag included, on the same counter) and counted by the server (usage). Server minus asked is
the salt tags: 0 for shared rows. A session turn resends the conversation, so it asks no row's
count; its server count is still summed."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from loadgen.codec import from_json
from loadgen.records import StreamRecord
from loadgen.run_manifest import RunManifest


@dataclass(frozen=True, slots=True)
class DatasetPrompts:
    group: str
    path: str
    format: str
    cache: str
    rows_read: int
    rows_filtered: int
    rows_skipped: int
    streams: int
    # Over the streams that asked a row's count (None: none did, as in a session replay).
    asked_tokens: int | None
    # loadgen's count of the prompts it sent, salt tags included (None: a record predates it).
    sent_tokens: int | None
    # Usage's prompt_tokens over every ok stream (None: a stream's usage is missing).
    server_tokens: int | None
    json_derived: ClassVar[tuple[str, ...]] = ("salt_tokens",)

    @property
    def salt_tokens(self) -> int | None:
        """What the server counted beyond the rows asked: the salt tags (and any template a
        chat counter left out), or None where not every stream asked."""
        if self.asked_tokens is None or self.server_tokens is None:
            return None
        return self.server_tokens - self.asked_tokens


def dataset_prompts(records: list[StreamRecord], manifest: RunManifest) -> list[DatasetPrompts]:
    """One row per group whose prompts came from a dataset (the resolved scenario's
    `prompt.dataset`, with the rows read, filtered and skipped); [] when none did."""
    groups = (manifest.scenario or {}).get("groups") or []
    out = []
    for g in groups:
        d = (g.get("prompt") or {}).get("dataset")
        if not d:
            continue
        ok = [r for r in records if r.group == g["name"] and r.status == "ok"]
        asked = [r.requested_prompt_tokens for r in ok]
        sent = [r.prompt_tokens_sent for r in ok]
        server = [r.prompt_tokens for r in ok]
        out.append(DatasetPrompts(
            g["name"], str(d["path"]), d["format"], g["prompt"].get("cache", "salted"),
            d.get("read", 0), d.get("filtered", 0), d.get("skipped", 0), len(ok),
            _total(ok, asked), _total(ok, sent), _total(ok, server),
        ))  # fmt: skip
    return out


def _total(ok: list[StreamRecord], counts: list[int | None]) -> int | None:
    """The counts' sum over the ok streams; None without streams or where one is unknown."""
    if not ok or None in counts:
        return None
    return sum(c or 0 for c in counts)


def read_datasets(summary: Mapping[str, Any]) -> list[DatasetPrompts]:
    return from_json(list[DatasetPrompts], summary.get("datasets") or [])
