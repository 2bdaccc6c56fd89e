"""The server's log lines written during an arm, kept in its run directory as server.log: a
launched server's log or an external one's (--server-log) is read from the byte where it stood
when the arm began, so analysis reads only this arm's lines, offline, from the directory."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from loadgen.records import SERVER_LOG
from loadgen.run_manifest import ServerLogInfo


@dataclass(frozen=True, slots=True)
class ServerLogTail:
    """A log file and where it ended when the arm began."""

    path: Path
    from_byte: int

    @classmethod
    def start(cls, path: Path | None) -> ServerLogTail | None:
        """The tail of `path` from now on (None: no log, or one that cannot be read)."""
        if path is None:
            return None
        try:
            return cls(path, path.stat().st_size)
        except OSError:
            return None

    def keep(self, run_dir: Path) -> ServerLogInfo:
        """Copies what was written since the start into run_dir/server.log; run.json's entry."""
        try:
            with open(self.path, "rb") as log:
                log.seek(self.from_byte)
                written = log.read()
        except OSError as exc:
            error = f"{type(exc).__name__}: {exc}"
            return ServerLogInfo(None, str(self.path), self.from_byte, error=error)
        (run_dir / SERVER_LOG).write_bytes(written)
        return ServerLogInfo(SERVER_LOG, str(self.path), self.from_byte, bytes=len(written))
