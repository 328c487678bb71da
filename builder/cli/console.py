"""The command line's two consoles (results on stdout, errors and progress on stderr) and table printing."""

from __future__ import annotations

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

console = Console(stderr=True, highlight=False)
out = Console(highlight=False, soft_wrap=True)


def print_table(table: Table) -> None:
    """A terminal gets the table at its width; a pipe or CI log gets it whole (rich would squeeze it into 80)."""
    if out.is_terminal:
        out.print(table)
        return
    width = Measurement.get(out, out.options.update_width(10_000), table).maximum
    Console(file=out.file, width=width, highlight=False).print(table)
