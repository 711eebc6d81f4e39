"""The run as a Chrome trace-event file (the JSON format ui.perfetto.dev and chrome://tracing open).

One process per pool and one thread (track) per GPU group — a rollout engine, a training rank, or both when
colocated — holding that group's spans as complete ("X") events named by label; Perfetto colours slices by name, so
each label keeps one colour, and `cname` gives chrome://tracing the report's colour family. An "RL loop" process
carries one slice per RL step with the verl stages the training ranks went through nested inside it.
Times are microseconds (the format's unit), rounded to whole nanoseconds so that touching spans still touch.
"""
from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

from rlsim.events import EventLog, Span
from rlsim.metrics.facts import RunFacts
from rlsim.metrics.groups import gpu_groups, group_spans
from rlsim.metrics.labels import CATEGORY_OF
from rlsim.report.colors import LABEL_CNAMES


def _ns(seconds: float) -> int:
    return round(seconds * 1e9)


def _complete(name: str, cat: str, start_ns: int, end_ns: int, pid: int, tid: int, args: dict,
              cname: str | None = None) -> dict:
    event = {"name": name, "cat": cat, "ph": "X", "ts": start_ns / 1000, "dur": (end_ns - start_ns) / 1000,
             "pid": pid, "tid": tid, "args": args}
    if cname is not None:
        event["cname"] = cname
    return event


def _metadata(name: str, pid: int, tid: int, value: object) -> dict:
    key = "sort_index" if name.endswith("sort_index") else "name"
    return {"name": name, "ph": "M", "pid": pid, "tid": tid, "args": {key: value}}


def trace_events(log: EventLog, facts: RunFacts) -> dict:
    """The trace as a JSON-ready dict: {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}."""
    return {"traceEvents": list(_events(log, facts)), "displayTimeUnit": "ms", "otherData": _other_data(log, facts)}


def _other_data(log: EventLog, facts: RunFacts) -> dict:
    return {"scenario": facts.scenario, "gpus": log.gpus, "simulated_s": log.wall_s}


def _events(log: EventLog, facts: RunFacts) -> Iterator[dict]:
    """The trace's events in file order, made one at a time (a long run's trace never sits in memory whole)."""
    loop_pid = 1
    yield from (_metadata("process_name", loop_pid, 0, "RL loop"), _metadata("process_sort_index", loop_pid, 0, 0),
                _metadata("thread_name", loop_pid, 1, "steps and verl stages"))
    pool_pid = {pool.name: 2 + i for i, pool in enumerate(facts.pools)}
    for i, pool in enumerate(facts.pools):
        pid = pool_pid[pool.name]
        yield from (_metadata("process_name", pid, 0, f"pool {pool.name}: {pool.gpus} × {pool.gpu}"),
                    _metadata("process_sort_index", pid, 0, 1 + i))
    groups = gpu_groups(log, facts)
    spans_of = group_spans(log, groups)
    for tid, (group, spans) in enumerate(zip(groups, spans_of, strict=True), start=1):
        pid = pool_pid[group.pool]
        yield from (_metadata("thread_name", pid, tid, group.name),
                    _metadata("thread_sort_index", pid, tid, group.first_gpu))
        for span in spans:
            start, end = _ns(span.start), _ns(span.end)
            if end > start:
                yield _complete(span.label, CATEGORY_OF[span.label], start, end, pid, tid,
                                {"stage": span.stage, "step": span.step, "version": span.version,
                                 "unit": span.unit, "gpus": group.gpu_count}, LABEL_CNAMES[span.label])
    trainer_group = next((i for i, group in enumerate(groups) if any(u.startswith("dp") for u in group.units)), None)
    trainer = spans_of[trainer_group] if trainer_group is not None else []
    for step in log.steps:
        start, end = _ns(step.start), _ns(step.end)
        yield _complete(f"step {step.step}", "step", start, end, loop_pid, 1,
                        {"stages_s": {k: v for k, v in step.stages.items() if v}, "samples": step.samples,
                         "tokens": step.tokens})
        for stage, a, b in _stage_runs(trainer, start, end):
            yield _complete(stage, "stage", a, b, loop_pid, 1, {"step": step.step})


def _stage_runs(spans: list[Span], start_ns: int, end_ns: int) -> list[tuple[str, int, int]]:
    """The training rank's spans within [start_ns, end_ns), merged into runs of one stage (an unlabelled idle stretch
    is named by its label)."""
    runs: list[tuple[str, int, int]] = []
    for span in spans:
        a, b = max(_ns(span.start), start_ns), min(_ns(span.end), end_ns)
        if b <= a:
            continue
        stage = span.stage or span.label
        if runs and runs[-1][0] == stage and runs[-1][2] == a:
            runs[-1] = (stage, runs[-1][1], b)
        else:
            runs.append((stage, a, b))
    return runs


def write_trace(log: EventLog, facts: RunFacts, path: Path) -> None:
    """The same bytes as json.dumps(trace_events(...), separators=(",", ":")), written an event at a time."""
    dumps = json.JSONEncoder(separators=(",", ":")).encode
    with open(path, "w", encoding="utf-8") as out:
        out.write('{"traceEvents":[')
        for i, event in enumerate(_events(log, facts)):
            out.write("," + dumps(event) if i else dumps(event))
        out.write('],"displayTimeUnit":"ms","otherData":' + dumps(_other_data(log, facts)) + "}\n")
