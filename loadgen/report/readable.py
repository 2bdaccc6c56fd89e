"""What the commands that print a run directory's report share: the one-line error for a run
directory analysis cannot read (report, compare, export: never a traceback), and the flag that
puts a sweep's per-arm tables on the terminal (run, report)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import click

from loadgen.analysis.inputs import NotARunDirectory
from loadgen.messages import one_line

# A 4-arm sweep printed 422 lines and its load table scrolled away: by default a sweep's
# terminal shows the across-arm tables only, each arm's tables stay in report.txt.
ARM_TABLES_OPTION = click.option(
    "--arm-tables",
    is_flag=True,
    help="A sweep: print every arm's own tables too (report.txt always holds them).",
)


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
