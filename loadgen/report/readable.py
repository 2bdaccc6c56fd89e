"""The one-line error of a command that reads run directories (report, compare, export): a run
directory analysis cannot read is never a traceback."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import click

from loadgen.analysis.inputs import NotARunDirectory
from loadgen.messages import one_line


@contextmanager
def readable(*run_dirs: Path) -> Iterator[None]:
    """One line, never a traceback, for a run directory analysis cannot read. Records and
    run.json's top-level fields are checked where they are read (records.py, inputs.py); a
    value nested deeper that is of the wrong shape (run.json's `cache_checks: [5]`) ends here."""
    try:
        yield
    except NotARunDirectory as e:
        raise click.ClickException(str(e)) from None
    except (AttributeError, TypeError, KeyError, IndexError, ValueError) as e:
        where = " / ".join(map(str, run_dirs))
        raise click.ClickException(
            f"{where}: a field of run.json has an unexpected shape ({type(e).__name__}: "
            f"{one_line(e, 120)}); restore run.json from a copy or delete the field"
        ) from None
