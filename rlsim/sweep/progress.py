"""A progress bar with throughput and ETA on a terminal; a line every tenth of the way otherwise (logs, CI)."""
from __future__ import annotations

import time
from typing import TextIO

WIDTH = 30


class Progress:
    def __init__(self, total: int, stream: TextIO | None, label: str = "points"):
        self.total, self.stream, self.label = total, stream, label
        self.done = 0
        self.counts: dict[str, int] = {}
        self.started = time.monotonic()
        self._last_tenth = -1
        self._terminal = bool(stream is not None and getattr(stream, "isatty", lambda: False)())

    def advance(self, status: str) -> None:
        self.done += 1
        self.counts[status] = self.counts.get(status, 0) + 1
        if self.stream is None:
            return
        tenth = self.done * 10 // max(1, self.total)
        if self._terminal:
            self.stream.write("\r" + self.line())
        elif tenth != self._last_tenth or self.done == self.total:
            self.stream.write(self.line() + "\n")
        self._last_tenth = tenth
        self.stream.flush()

    def finish(self) -> None:
        if self.stream is not None and self._terminal:
            self.stream.write("\n")
            self.stream.flush()

    def line(self) -> str:
        elapsed = time.monotonic() - self.started
        rate = self.done / elapsed if elapsed > 0 else 0.0
        filled = WIDTH * self.done // max(1, self.total)
        eta = (self.total - self.done) / rate if rate > 0 else float("nan")
        statuses = ", ".join(f"{n} {s}" for s, n in sorted(self.counts.items()))
        return (f"[{'#' * filled}{'.' * (WIDTH - filled)}] {self.done}/{self.total} {self.label} ({statuses}) "
                f"{rate:.2f}/s, elapsed {_clock(elapsed)}, ETA {_clock(eta)}")


def _clock(seconds: float) -> str:
    if seconds != seconds:  # NaN: no rate yet
        return "--:--"
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes:02d}:{secs:02d}"
