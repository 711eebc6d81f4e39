"""The event log's columns (rlsim.events.tables) and what rides on them: tables that give back the records they were
made of; idle time labelled per group of GPUs exactly as the definition labels each GPU; the run folder's `--events`
choice; a trace written an event at a time byte for byte as the whole dict; memos that start afresh without changing
a price."""
from __future__ import annotations

import json
from types import SimpleNamespace
from unittest.mock import patch

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rlsim.report.event_files as event_files
import rlsim.sim.idle_labels as idle_labels
from rlsim.costs.memo import Memo
from rlsim.events import RUN_END, EngineSample, EventLog, SequenceRecord, Span
from rlsim.events.tables import LABEL_CODE, SampleColumns, SampleTable, SequenceTable, SpanTable
from rlsim.metrics import RunFacts, run_metrics
from rlsim.metrics.facts import PoolFacts
from rlsim.metrics.groups import gpu_groups, group_spans
from rlsim.report.figures import RunData
from rlsim.report.run_folder import write_run_folder
from rlsim.report.trace import trace_events, write_trace
from rlsim.sim.idle_labels import TIME_EPS
from rlsim.sim.recorder import Recorder
from rlsim.sim.run import simulate_log
from tests.sim_scenarios import bound

TIMES = st.integers(min_value=0, max_value=40).map(lambda t: t / 4)
GPUS = 6


def test_span_sample_and_sequence_tables_give_back_their_records():
    spans = (Span(0, 2, 0.0, 1.5, "decode", "gen", 3, 2, "engine0"), Span(4, 1, 0.25, 2.0, "tail", "", -1, -1),
             Span(1, 3, 1.0, 1.125, "train_backward", "update_actor", 7, 6, "dp1"))
    table = SpanTable.from_spans(spans)
    assert tuple(table) == spans and table == spans and len(table) == 3 and table[-1] == spans[-1]
    assert list(table.take(table.labelled("tail", "decode"))) == [spans[0], spans[1]]
    samples = (EngineSample("engine1", 0.5, 3, 1, 900, 2, 10, 8, 4000), EngineSample("judge0", 2.0, 1, 0, 5, 1, 1, 0, 0))
    assert tuple(SampleTable.from_samples(samples)) == samples
    assert SampleTable.from_samples(samples)[1] == samples[1]
    records = (SequenceRecord(4, 1, 0, 64, 300, False, 0.0, 12.5, 0, 1, 1, 2, "", 0.5, 2),
               SequenceRecord(9, 2, -1, 64, 0, True, 1.0, 0.0, 1, -1, -1, 0, RUN_END),
               SequenceRecord(2, 1, 3, 70, 8, False, 0.0, 3.0, 0, -1, -1, 0, "stale", 0.25, 0))
    table = SequenceTable.from_records(records)
    assert tuple(table) == records and table[1] == records[1]
    assert table.trained.tolist() == [True, False, False]
    assert table.dropped_by_a_policy.tolist() == [False, False, True]


@pytest.mark.parametrize("rows", [0, 1, 2, 130])
def test_samples_appended_by_code_read_back_as_appended_and_a_view_stays_as_taken(rows):
    """An engine appends its samples by the code of its name (`add`), beside other engines' appended by name, with
    counters past 32 bits: the table's columns hold them as appended, and it iterates them in time order; a view
    taken earlier still shows what was appended before it, whatever was appended after (the columns grow into new
    memory)."""
    samples = [EngineSample("engine0", 0.25 * i, i, 2 * i, 3 * i + (1 << 40), 4, 5 + i, 6, 7 * i) for i in range(rows)]
    other = EngineSample("engine1", 0.125, 1, 2, 3, 4, 5, 6, 7)
    columns = SampleColumns()
    columns.append(*other)
    engines, times, counters = columns.view()
    code = columns.code("engine0")
    for sample in samples:
        columns.add(code, *sample[1:])
    table = columns.table()
    appended = (other, *samples)
    assert [(table.engine_names[code], time, *row) for code, time, row in
            zip(table.engine.tolist(), table.time.tolist(), table.counters.tolist(), strict=True)] == list(appended)
    assert tuple(table) == tuple(sorted(appended, key=lambda sample: sample.time))
    assert len(columns) == rows + 1
    assert engines.tolist() == [columns.code("engine1")] and times.tolist() == [0.125]
    assert counters.tolist() == [list(other[2:])]


def test_spans_recorded_by_code_are_the_spans_recorded_by_name():
    """An engine's telemetry records its busy spans by code (`Recorder.coded_busy`, its stage and unit coded by
    `span_codes` at its first span): between spans recorded by name they give the same log as `busy` would, names
    coded in the same order, and an empty span records nothing either way."""
    spans = [(0, 2, 0.0, 1.5, "decode", "gen", 3, 2, "engine0"), (4, 1, 0.25, 2.0, "barrier", "update_actor", 1, 0, "dp0"),
             (0, 2, 1.5, 1.5, "prefill", "gen", 3, 2, "engine0"), (2, 1, 1.0, 1.125, "prefill", "gen", 3, 2, "engine1")]
    by_name, by_code = Recorder(8), Recorder(8)
    for first, count, start, end, label, stage, step, version, unit in spans:
        by_name.busy(first, count, start, end, label, stage, unit=unit, step=step, version=version)
        if unit.startswith("engine"):
            stage_code, unit_code = by_code.span_codes(stage, unit)
            by_code.coded_busy(first, count, start, end, LABEL_CODE[label], stage_code, step, version, unit_code)
        else:
            by_code.busy(first, count, start, end, label, stage, unit=unit, step=step, version=version)
    named, coded = by_name.freeze(2.0, 0).spans, by_code.freeze(2.0, 0).spans
    assert list(coded) == list(named) and sum(span.label != "unassigned" for span in named) == 3
    assert coded.stage_names == named.stage_names and coded.unit_names == named.unit_names


def idle_by_definition(busy: list[Span], contexts: list[Span], wall_s: float, gpu: int) -> list[tuple]:
    """One GPU's idle pieces as the taxonomy defines them: its gaps between busy spans (those that start in the run,
    clipped to it), cut at
    every context boundary, each piece labelled by the latest-recorded context covering it."""
    mine = sorted((s.start, min(s.end, wall_s)) for s in busy
                  if s.first_gpu <= gpu < s.first_gpu + s.gpu_count and s.start < wall_s)
    covering = [c for c in contexts if c.first_gpu <= gpu < c.first_gpu + c.gpu_count]
    gaps, cursor = [], 0.0
    for start, end in mine:
        if start > cursor + TIME_EPS:
            gaps.append((cursor, start))
        cursor = max(cursor, end)
    if wall_s > cursor + TIME_EPS:
        gaps.append((cursor, wall_s))
    pieces = []
    for a, b in gaps:
        edges = sorted({a, b} | {t for c in covering for t in (c.start, c.end) if a < t < b})
        for lo, hi in zip(edges, edges[1:], strict=False):
            owner = [c for c in covering if c.start <= (lo + hi) / 2 < c.end]
            pieces.append((lo, hi, owner[-1].label if owner else "unassigned"))
    return pieces


def without_double_booking(spans: list[Span]) -> list[Span]:
    """The spans kept in order unless one overlaps a kept one on a shared GPU (the simulator never double-books)."""
    kept: list[Span] = []
    for s in spans:
        if all(s.end <= k.start or k.end <= s.start or s.first_gpu + s.gpu_count <= k.first_gpu
               or k.first_gpu + k.gpu_count <= s.first_gpu for k in kept):
            kept.append(s)
    return kept


def record(busy: list[Span], contexts: list[Span]) -> Recorder:
    recorder = Recorder(GPUS)
    for s in busy:
        recorder.busy(s.first_gpu, s.gpu_count, s.start, s.end, s.label, s.stage)
    for c in contexts:
        recorder.context(c.first_gpu, c.gpu_count, c.start, c.end, c.label)
    return recorder


def spans_strategy(labels: list[str]):
    return st.builds(lambda first, count, a, b, label: Span(first, min(count, GPUS - first), min(a, b), max(a, b),
                                                             label, "", 0, 0),
                     st.integers(0, GPUS - 1), st.integers(1, GPUS), TIMES, TIMES, st.sampled_from(labels))


@settings(max_examples=200, deadline=None)
@given(st.lists(spans_strategy(["decode", "train_forward"]), max_size=12),
       st.lists(spans_strategy(["tail", "starved", "staleness_block"]), max_size=6),
       st.integers(min_value=1, max_value=44).map(lambda t: t / 4))
def test_idle_pieces_of_every_gpu_are_the_definitions(busy, contexts, wall_s):
    """Freezing sweeps each group of GPUs with identical timelines once and merges neighbours; expanded back to
    single GPUs, the idle pieces are the definition's, and every GPU's labels sum to the wall time. Sweeping the
    groups a few at a time gives the same log."""
    busy = without_double_booking(busy)
    recorder = record(busy, contexts)
    log = recorder.freeze(wall_s, events=0)
    with patch.object(idle_labels, "GROUPS_PER_PASS", 2):  # a few GPU groups a pass: passes merged at the end
        assert tuple(record(busy, contexts).freeze(wall_s, events=0).spans) == tuple(log.spans)
    kept_busy = [s for s in busy if s.end > s.start]
    kept_contexts = [c for c in contexts if c.end > c.start]
    for gpu in range(GPUS):
        mine = [s for s in log.spans if s.first_gpu <= gpu < s.first_gpu + s.gpu_count]
        idle = sorted((s.start, s.end, s.label) for s in mine if s.label in ("tail", "starved", "staleness_block",
                                                                               "unassigned"))
        assert idle == sorted(idle_by_definition(kept_busy, kept_contexts, wall_s, gpu))
        assert sum(s.seconds for s in mine) == pytest.approx(wall_s)


@settings(max_examples=150, deadline=None)
@given(st.lists(spans_strategy(["decode", "tail", "weight_sync"]), max_size=14))
def test_each_gpu_groups_spans_are_the_ones_covering_it_in_time_order(spans):
    log = EventLog(spans=tuple(spans), sequences=(), steps=(), gpus=GPUS, wall_s=10.0, events=0)
    pools = (PoolFacts("a", "h100-sxm", 0, 2, 1.0, 1.0, None), PoolFacts("b", "h100-sxm", 2, GPUS - 2, 1.0, 1.0, None))
    groups = gpu_groups(log, SimpleNamespace(pools=pools, pool_of_gpu=lambda gpu: pools[gpu >= 2]))
    per_group = group_spans(log, groups)
    assert len(per_group) == len(groups)
    for group, mine in zip(groups, per_group, strict=True):
        covering = sorted((i for i, s in enumerate(spans) if s.first_gpu <= group.first_gpu < s.first_gpu + s.gpu_count),
                          key=lambda i: (spans[i].start, spans[i].end, i))
        assert mine == [spans[i] for i in covering]


@pytest.fixture(scope="module")
def run_data():
    b = bound(steps=2)
    log = simulate_log(b).log
    facts = RunFacts.from_bound(b)
    return b.scenario, RunData(log, facts, run_metrics(log, facts))


@pytest.mark.parametrize(("events", "files"), [
    ("full", {"spans.csv.gz", "sequences.csv.gz", "steps.csv.gz", "engine_samples.csv.gz", "trace.json"}),
    ("steps", {"steps.csv.gz"}), ("none", set())])
def test_events_choose_the_tables_a_run_folder_holds(run_data, tmp_path, events, files):
    scenario, data = run_data
    written = write_run_folder(tmp_path / "run", scenario, data, 1.0, events)
    names = {path.name for path in written}
    assert names == files | {"resolved.yaml", "metrics.json", "timing.json", "report.html"}
    assert {path.name for path in (tmp_path / "run").iterdir()} == names


def test_auto_writes_the_full_tables_only_up_to_its_span_limit(run_data, tmp_path, monkeypatch):
    scenario, data = run_data
    assert "spans.csv.gz" in {p.name for p in write_run_folder(tmp_path / "small", scenario, data, 1.0)}
    monkeypatch.setattr(event_files, "AUTO_FULL_MAX_SPANS", len(data.log.spans) - 1)
    names = {p.name for p in write_run_folder(tmp_path / "large", scenario, data, 1.0)}
    assert "steps.csv.gz" in names and "spans.csv.gz" not in names and "trace.json" not in names


def test_the_streamed_trace_is_the_whole_dict_byte_for_byte(run_data, tmp_path):
    _, data = run_data
    write_trace(data.log, data.facts, tmp_path / "trace.json")
    whole = json.dumps(trace_events(data.log, data.facts), separators=(",", ":")) + "\n"
    assert (tmp_path / "trace.json").read_text() == whole


def test_a_memo_past_its_limit_starts_afresh_and_prices_the_same():
    priced = []

    def price(key: int) -> float:
        priced.append(key)
        return key / 3

    bounded, unbounded = Memo(price, limit=4), Memo(lambda key: key / 3)
    keys = [1, 2, 3, 1, 4, 5, 6, 1, 2, 9, 9]
    assert [bounded[k] for k in keys] == [unbounded[k] for k in keys]
    assert len(bounded) <= 4 and len(unbounded) == 7
    assert priced.count(1) == 2  # forgotten once the memo started afresh, then priced again
