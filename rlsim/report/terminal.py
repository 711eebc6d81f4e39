"""Tables for the terminal, drawn by rich: columns sized to their content and, on a terminal narrower than the table,
wrapped inside their cells at spaces instead of the terminal breaking lines mid-word. Written to a file or a pipe, a
table keeps its natural width (logs and `grep` see one row per line)."""
from __future__ import annotations

import io
import shutil
import sys
from collections.abc import Collection, Iterable, Sequence

from rich import box
from rich.console import Console
from rich.table import Table

# Wider than any table rlsim draws: a table written to a file or a pipe is never wrapped.
UNWRAPPED = 1000


def output_width() -> int:
    """The terminal's width when stdout is one, else UNWRAPPED."""
    return shutil.get_terminal_size().columns if sys.stdout.isatty() else UNWRAPPED


def text_table(headers: Sequence[str], rows: Iterable[Sequence[object]], *, left: Collection[int] = (0,),
               width: int | None = None) -> str:
    """`headers` over `rows` (cells already formatted as text); the columns numbered in `left` are left-aligned
    (names), the others right-aligned (numbers). Plain text: no colour, no box but the rule under the header."""
    table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, header_style="", expand=False)
    for index, header in enumerate(headers):
        table.add_column(header, justify="left" if index in left else "right", overflow="fold")
    for row in rows:
        table.add_row(*(str(cell) for cell in row))
    buffer = io.StringIO()
    # force_jupyter=False: in a notebook rich would display the table itself instead of writing it to the buffer.
    Console(file=buffer, width=width or output_width(), color_system=None, highlight=False, soft_wrap=False,
            force_jupyter=False, force_terminal=False,
            emoji=False, markup=False).print(table)
    return "\n".join(line.rstrip() for line in buffer.getvalue().splitlines() if line.strip())
