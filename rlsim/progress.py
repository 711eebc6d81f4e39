"""Progress of long work — a run's steps, a plan's simulations, validation cases, sweep points: a live bar with the
count done and an ETA on a terminal or in Jupyter (rich), and on anything else (a log file, CI) a plain line every tenth
of the way, so logs stay readable."""
from __future__ import annotations

import time
from types import TracebackType
from typing import TextIO

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.progress import Progress as RichProgress


class Progress:
    """`with Progress(total, "points", stream) as bar: bar.advance("ok")`; a None stream shows nothing. Each advance
    may name the outcome of the item (ok, failed…); the counts by outcome are shown beside the bar."""

    def __init__(self, total: int, label: str, stream: TextIO | None):
        self.total, self.label, self.stream = total, label, stream
        self.done = 0
        self.counts: dict[str, int] = {}
        self._started = time.monotonic()
        self._last_tenth = -1
        self._live: RichProgress | None = None
        if stream is not None:
            console = Console(file=stream)
            if console.is_terminal or console.is_jupyter:
                self._live = RichProgress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                          TextColumn("{task.fields[outcomes]}"), TimeElapsedColumn(),
                                          TextColumn("ETA"), TimeRemainingColumn(), console=console, transient=False)
                self._task = self._live.add_task(label, total=total, outcomes="")

    def __enter__(self) -> Progress:
        if self._live is not None:
            self._live.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        if self._live is not None:
            self._live.stop()

    def advance(self, outcome: str = "") -> None:
        self.done += 1
        if outcome:
            self.counts[outcome] = self.counts.get(outcome, 0) + 1
        if self._live is not None:
            self._live.update(self._task, advance=1, outcomes=self._outcomes())
        elif self.stream is not None:
            tenth = self.done * 10 // max(1, self.total)
            if tenth != self._last_tenth or self.done == self.total:
                self.stream.write(self.line() + "\n")
                self.stream.flush()
            self._last_tenth = tenth

    def line(self) -> str:
        """The plain-text form: done of total, outcomes, elapsed and ETA."""
        elapsed = time.monotonic() - self._started
        rate = self.done / elapsed if elapsed > 0 else 0.0
        eta = (self.total - self.done) / rate if rate > 0 else float("nan")
        outcomes = f" ({self._outcomes()})" if self.counts else ""
        return (f"{self.done}/{self.total} {self.label}{outcomes}, elapsed {_clock(elapsed)}, "
                f"ETA {_clock(eta)}")

    def _outcomes(self) -> str:
        return ", ".join(f"{n} {s}" for s, n in sorted(self.counts.items()))


def _clock(seconds: float) -> str:
    if seconds != seconds:  # NaN: no rate yet
        return "--:--"
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes:02d}:{secs:02d}"
