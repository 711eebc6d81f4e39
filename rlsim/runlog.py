"""Readers of a training run's per-step metrics: what `rlsim replay` and `rlsim fit` compare the simulation with.

Three forms, all with verl's metric names (`response_length/mean`, `timing_s/gen`, `perf/throughput`, …):

console   verl's console logger, one line per step: `step:N - key:value - key:value ...`, possibly behind Ray's
          `(TaskRunner pid=123)` prefix and ANSI colours, among any other output (which is skipped)
CSV       a metrics table exported from an experiment tracker: a header row, one row per step, the step in a column
          named `step`, `_step`, `Step` or `training/global_step`; an empty cell is a metric not logged that step
JSON      the same table as a list of per-step objects, an object of per-key lists, or JSON lines (one object a line)

Parsing only: what a step's metrics mean is the replay's business. A malformed file raises ScenarioError naming the
file, the line and the key.
"""
from __future__ import annotations

import csv
import json
import math
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from rlsim.errors import Problem, ScenarioError
from rlsim.yamlsource import read_text_file

STEP_KEYS = ("step", "_step", "Step", "training/global_step")  # the step's column, in order of preference

# Ray prefixes each worker's output with `(ActorName pid=123)` (and, on a terminal, colours it); verl's console
# logger then writes `step:N - key:value - ...` (verl/utils/logger/aggregate_logger.py, concat_dict_to_str).
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_STEP_LINE = re.compile(r"^\s*(?:\([^()]*\)\s*)?step:(\d+)\s+-\s+(.*?)\s*$")
# A console log with printed responses runs to hundreds of MB over a long run; past this it is not a log.
MAX_LOG_BYTES = 2**30
_WINDOW = re.compile(r"(\d*)(-?)(\d*)")
_FORMATS = "verl console lines (step:N - key:value - ...), a CSV table, or JSON (a list, per-key lists or JSON lines)"


@dataclass(frozen=True)
class LoggedStep:
    """One step's metrics as logged, and where: the line of its console line or CSV row (None for JSON lists)."""

    step: int
    metrics: Mapping[str, float]
    line: int | None = None


@dataclass(frozen=True)
class RunLog:
    """A run's logged steps in step order (a step logged twice has its metrics merged, later values winning)."""

    file: str
    steps: tuple[LoggedStep, ...]

    def step_numbers(self) -> list[int]:
        return [s.step for s in self.steps]

    def window(self, first: int | None, last: int | None) -> RunLog:
        """The logged steps numbered first..last (either end open), for a replay or fit of part of a long run."""
        kept = tuple(s for s in self.steps if (first is None or s.step >= first) and (last is None or s.step <= last))
        if not kept:
            logged = f"{self.steps[0].step}-{self.steps[-1].step}"
            raise ScenarioError(Problem(f"no logged step in {first if first is not None else ''}-"
                                        f"{last if last is not None else ''}", file="--steps", valid=f"within {logged}"))
        return RunLog(self.file, kept)


def parse_step_window(text: str) -> tuple[int | None, int | None]:
    """`--steps` text: "2-52", "150-" or "-40" (logged step numbers, both ends included), or one step "7"."""
    match = _WINDOW.fullmatch(text.strip())
    if match is None:
        raise ScenarioError(Problem(f"not a step range: {text!r}", file="--steps",
                                    valid="FIRST-LAST, FIRST-, -LAST or one step number, e.g. 2-52"))
    first, dash, last = match.groups()
    if not dash:
        return int(first), int(first)
    lo, hi = (int(first) if first else None), (int(last) if last else None)
    if lo is not None and hi is not None and lo > hi:
        raise ScenarioError(Problem(f"the range {text!r} runs backwards", file="--steps", valid=f"{hi}-{lo}"))
    return lo, hi


def read_run_log(path: str | Path) -> RunLog:
    """The per-step metrics of a verl console log, or of a CSV or JSON metrics table."""
    path = Path(path)
    file = str(path)
    text = read_text_file(path, "a run log", max_bytes=MAX_LOG_BYTES)
    suffix = path.suffix.lower()
    if suffix == ".csv":
        merged = _merge(_csv_steps(text, file))
    elif suffix in (".json", ".jsonl"):
        merged = _merge(_json_steps(text, file))
    else:
        merged = _merge(_console_steps(text, file))
        if not merged and text.lstrip().startswith(("[", "{")):  # a JSON table saved under another name
            merged = _merge(_json_steps(text, file))
    if not merged:
        raise ScenarioError(Problem("no per-step metrics found", file=file, valid=_FORMATS))
    return RunLog(file, tuple(merged))


def _merge(steps: Iterable[LoggedStep]) -> list[LoggedStep]:
    """A step logged more than once (verl logs step 0's validation alone; a resumed run repeats steps) is one step."""
    by_step: dict[int, LoggedStep] = {}
    for s in steps:
        earlier = by_step.get(s.step)
        by_step[s.step] = s if earlier is None else LoggedStep(s.step, {**earlier.metrics, **s.metrics}, earlier.line)
    return [by_step[n] for n in sorted(by_step)]


def _number(text: str, file: str, line: int | None, key: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ScenarioError(Problem(f"{text!r} is not a number", path=key, file=file, line=line,
                                    valid="a number (verl logs every metric as one)")) from None


def _step_number(value: object, file: str, line: int | None, key: str) -> int:
    number = value if isinstance(value, (int, float)) and not isinstance(value, bool) else None
    if isinstance(value, str):
        number = _number(value, file, line, key)
    if number is None or not math.isfinite(number) or number != int(number) or number < 0:
        raise ScenarioError(Problem(f"{value!r} is not a step number", path=key, file=file, line=line,
                                    valid="a whole number ≥ 0"))
    return int(number)


# ------------------------------------------------------------------------------------------------ console


def _console_steps(text: str, file: str) -> Iterator[LoggedStep]:
    for number, raw in enumerate(text.splitlines(), start=1):
        match = _STEP_LINE.match(_ANSI.sub("", raw))
        if match is None:
            continue
        metrics: dict[str, float] = {}
        for item in match.group(2).split(" - "):
            key, sep, value = item.rpartition(":")
            if not sep or not key.strip():
                raise ScenarioError(Problem(f"expected key:value, got {item!r}", file=file, line=number,
                                            valid="step:N - key:value - key:value ..."))
            metrics[key.strip()] = _number(value.strip(), file, number, key.strip())
        yield LoggedStep(int(match.group(1)), metrics, number)


# ------------------------------------------------------------------------------------------------ CSV


def _csv_steps(text: str, file: str) -> Iterator[LoggedStep]:
    rows = csv.reader(text.splitlines())
    header = next(rows, None)
    if not header:
        raise ScenarioError(Problem("the CSV file is empty", file=file, valid="a header row, then one row per step"))
    header = [h.strip() for h in header]
    step_key = next((k for k in STEP_KEYS if k in header), None)
    if step_key is None:
        raise ScenarioError(Problem("no step column", file=file, line=1, valid=", ".join(STEP_KEYS)))
    for number, row in enumerate(rows, start=2):
        if not any(cell.strip() for cell in row):
            continue
        if len(row) != len(header):
            raise ScenarioError(Problem(f"{len(row)} cells in a table of {len(header)} columns (a truncated file?)",
                                        file=file, line=number, valid="one cell per header column"))
        cells = {k: v.strip() for k, v in zip(header, row, strict=True)}
        step = _step_number(cells[step_key], file, number, step_key)
        metrics = {k: _number(v, file, number, k) for k, v in cells.items() if v and k not in STEP_KEYS}
        yield LoggedStep(step, metrics, number)


# ------------------------------------------------------------------------------------------------ JSON


def _json_steps(text: str, file: str) -> Iterator[LoggedStep]:
    try:
        document = json.loads(text)
    except json.JSONDecodeError as whole:
        if not text.lstrip().startswith("{") or "\n" not in text.strip():
            raise _json_problem(whole, file) from None
        yield from _json_lines(text, file)
        return
    if isinstance(document, list):
        for index, record in enumerate(document):
            yield _record(record, file, None, f"[{index}]")
    elif isinstance(document, dict) and document and all(isinstance(v, list) for v in document.values()):
        yield from _columns(document, file)
    elif isinstance(document, dict):
        yield _record(document, file, 1, "")
    else:
        raise ScenarioError(Problem("expected a list of per-step objects or an object of per-key lists", file=file,
                                    valid=_FORMATS))


def _json_lines(text: str, file: str) -> Iterator[LoggedStep]:
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise ScenarioError(Problem(f"not JSON: {exc.msg} (a truncated file?)", file=file, line=number,
                                        valid="one JSON object a line")) from None
        yield _record(record, file, number, "")


def _json_problem(exc: json.JSONDecodeError, file: str) -> ScenarioError:
    return ScenarioError(Problem(f"not JSON: {exc.msg} at column {exc.colno} (a truncated file?)", file=file,
                                 line=exc.lineno, valid=_FORMATS))


def _record(record: object, file: str, line: int | None, where: str) -> LoggedStep:
    if not isinstance(record, dict):
        raise ScenarioError(Problem("expected an object of metrics", path=where, file=file, line=line))
    step_key = next((k for k in STEP_KEYS if k in record), None)
    if step_key is None:
        raise ScenarioError(Problem("no step number", path=where, file=file, line=line, valid=", ".join(STEP_KEYS)))
    metrics = {k: _json_number(v, file, line, f"{where}.{k}" if where else k)
               for k, v in record.items() if k not in STEP_KEYS and v is not None}
    return LoggedStep(_step_number(record[step_key], file, line, step_key), metrics, line)


def _json_number(value: object, file: str, line: int | None, key: str) -> float:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, str):
        return _number(value, file, line, key)
    raise ScenarioError(Problem(f"{value!r} is not a number", path=key, file=file, line=line))


def _columns(document: dict[str, list], file: str) -> Iterator[LoggedStep]:
    lengths = {len(v) for v in document.values()}
    if len(lengths) > 1:
        raise ScenarioError(Problem(f"per-key lists of different lengths {sorted(lengths)}", file=file,
                                    valid="one value per step in every list (null where not logged)"))
    step_key = next((k for k in STEP_KEYS if k in document), None)
    if step_key is None:
        raise ScenarioError(Problem("no step list", file=file, valid=", ".join(STEP_KEYS)))
    for index in range(lengths.pop()):
        yield _record({k: v[index] for k, v in document.items()}, file, None, f"[{index}]")
