"""`rlsim run`'s run folder: metrics.json, the event tables, the Perfetto trace and the HTML report, checked against
the event log and each other."""
from __future__ import annotations

import csv
import dataclasses
import gzip
import json
import re
from collections import defaultdict
from html.parser import HTMLParser
from pathlib import Path

import pytest
from plotly.offline import get_plotlyjs

from rlsim.cli import main
from rlsim.config import load_scenario
from rlsim.config.bound import bind
from rlsim.events import LABELS, STAGES, Span
from rlsim.metrics import RunFacts, engine_series, gpu_label_seconds, run_metrics
from rlsim.metrics.groups import gpu_groups, group_spans
from rlsim.report.colors import LABEL_CNAMES, LABEL_COLORS
from rlsim.report.event_files import ENGINE_SAMPLE_COLUMNS, SEQUENCE_COLUMNS, SPAN_COLUMNS
from rlsim.report.figures import RunData, binned_segments, engine_load_figure, select_rows
from rlsim.report.html import run_report_html
from rlsim.sim.run import simulate_log
from tests.sim_scenarios import bound, scenario_yaml

RUNS = {
    "colocated": dict(steps=3),
    "disaggregated-async": dict(mode="disaggregated", rollout_gpus=6, training_gpus=2, schedule="async", staleness=1,
                                steps=3, partial="interrupt"),
    "hybrid": dict(mode="hybrid", rollout_gpus=8, training_gpus=4, schedule="one_step_off", steps=3),
}
CHROME_TRACE_METADATA = {"process_name", "thread_name", "process_sort_index", "thread_sort_index"}


@pytest.fixture(scope="module", params=sorted(RUNS))
def run_folder(request, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp(request.param)
    scenario_file = folder / "scenario.yaml"
    scenario_file.write_text(scenario_yaml(**RUNS[request.param]))
    assert main(["run", str(scenario_file), "--out", str(folder / "run")]) == 0
    return folder / "run"


def reload(run_folder: Path):
    """The event log and facts of a run folder, simulated again from its resolved scenario (same seed, same log)."""
    b = bind(load_scenario(run_folder / "resolved.yaml"))
    return simulate_log(b).log, RunFacts.from_bound(b)


def read_csv_gz(path: Path) -> list[dict[str, str]]:
    with gzip.open(path, "rt") as f:
        return list(csv.DictReader(f))


# ------------------------------------------------------------------------------------------- files


def test_run_folder_holds_every_output(run_folder):
    names = {p.name for p in run_folder.iterdir()}
    assert names == {"resolved.yaml", "metrics.json", "timing.json", "spans.csv.gz", "sequences.csv.gz",
                     "steps.csv.gz", "engine_samples.csv.gz", "trace.json", "report.html"}


def test_metrics_json_is_the_run_metrics_of_the_log(run_folder):
    log, facts = reload(run_folder)
    on_disk = json.loads((run_folder / "metrics.json").read_text())
    assert on_disk == json.loads(json.dumps(run_metrics(log, facts)))
    for key in ("step_time_s", "stages_s", "throughput", "gpu_seconds_by_label", "staleness", "simulator"):
        assert key in on_disk  # the event engine's contract


def test_event_tables_hold_the_log_exactly(run_folder):
    log, _ = reload(run_folder)
    spans = read_csv_gz(run_folder / "spans.csv.gz")
    assert list(spans[0]) == list(SPAN_COLUMNS)
    assert len(spans) == len(log.spans)
    for row, span in zip(spans, log.spans, strict=True):
        assert (int(row["first_gpu"]), int(row["gpu_count"]), float(row["start"]), float(row["end"]), row["label"],
                row["stage"], int(row["step"]), int(row["version"]), row["unit"]) == (
            span.first_gpu, span.gpu_count, span.start, span.end, span.label, span.stage, span.step, span.version,
            span.unit)
    sequences = read_csv_gz(run_folder / "sequences.csv.gz")
    assert list(sequences[0]) == list(SEQUENCE_COLUMNS) and len(sequences) == len(log.sequences)
    assert [float(r["finished"]) for r in sequences] == [r.finished for r in log.sequences]
    steps = read_csv_gz(run_folder / "steps.csv.gz")
    assert [float(r["end"]) for r in steps] == [s.end for s in log.steps]
    assert [float(r["gen"]) for r in steps] == [s.stages["gen"] for s in log.steps]
    samples = read_csv_gz(run_folder / "engine_samples.csv.gz")
    assert list(samples[0]) == list(ENGINE_SAMPLE_COLUMNS) and len(samples) == len(log.engine_samples)
    assert [(r["engine"], float(r["time"]), int(r["kv_tokens"]), int(r["decode_kv_read_tokens"])) for r in samples] == [
        (s.engine, s.time, s.kv_tokens, s.decode_kv_read_tokens) for s in log.engine_samples]


def test_event_tables_are_byte_identical_for_the_same_scenario(tmp_path):
    scenario_file = tmp_path / "s.yaml"
    scenario_file.write_text(scenario_yaml(steps=2))
    for out in ("a", "b"):
        assert main(["run", str(scenario_file), "--out", str(tmp_path / out), "--json"]) == 0
    for name in ("metrics.json", "spans.csv.gz", "sequences.csv.gz", "steps.csv.gz", "engine_samples.csv.gz",
                 "trace.json"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes(), name


# ------------------------------------------------------------------------------------------- Perfetto trace


def test_trace_follows_the_chrome_trace_event_format(run_folder):
    log, facts = reload(run_folder)
    trace = json.loads((run_folder / "trace.json").read_text())
    assert set(trace) == {"traceEvents", "displayTimeUnit", "otherData"} and trace["displayTimeUnit"] == "ms"
    named_threads, named_processes = set(), set()
    slices = defaultdict(list)
    for event in trace["traceEvents"]:
        assert isinstance(event["name"], str) and isinstance(event["pid"], int) and isinstance(event["tid"], int)
        assert event["ph"] in ("X", "M")
        if event["ph"] == "M":
            assert set(event) == {"name", "ph", "pid", "tid", "args"} and event["name"] in CHROME_TRACE_METADATA
            key = "sort_index" if event["name"].endswith("sort_index") else "name"
            assert set(event["args"]) == {key}
            assert isinstance(event["args"][key], int if key == "sort_index" else str)
            if event["name"] == "thread_name":
                named_threads.add((event["pid"], event["tid"]))
            if event["name"] == "process_name":
                named_processes.add(event["pid"])
            continue
        assert set(event) - {"cname"} == {"name", "cat", "ph", "ts", "dur", "pid", "tid", "args"}
        assert isinstance(event["ts"], (int, float)) and isinstance(event["dur"], (int, float))
        assert event["ts"] >= 0 and event["dur"] > 0 and isinstance(event["args"], dict)
        # Microseconds with at most nanosecond digits: whole numbers of nanoseconds.
        start_ns, dur_ns = round(event["ts"] * 1000), round(event["dur"] * 1000)
        assert abs(event["ts"] * 1000 - start_ns) < 1e-3 and abs(event["dur"] * 1000 - dur_ns) < 1e-3
        slices[event["pid"], event["tid"]].append((start_ns, start_ns + dur_ns, event))
    for (pid, tid), events in slices.items():
        assert (pid, tid) in named_threads and pid in named_processes
        # Proper nesting: a slice that starts inside another ends inside it too.
        open_ends: list[int] = []
        for start, end, _ in sorted(events, key=lambda e: (e[0], -e[1])):
            while open_ends and open_ends[-1] <= start:
                open_ends.pop()
            assert not open_ends or end <= open_ends[-1]
            open_ends.append(end)
    # Units: the last slice ends at the simulated wall time, in microseconds.
    assert max(e[1] for events in slices.values() for e in events) == round(log.wall_s * 1e9)


def test_trace_has_one_track_per_gpu_group_covering_the_run(run_folder):
    log, facts = reload(run_folder)
    trace = json.loads((run_folder / "trace.json").read_text())
    groups = gpu_groups(log, facts)
    gpu_tracks = defaultdict(list)
    names = {}
    for event in trace["traceEvents"]:
        if event["ph"] == "M" and event["name"] == "thread_name" and event["pid"] >= 2:
            names[event["pid"], event["tid"]] = event["args"]["name"]
        if event["ph"] == "X" and event["cat"] not in ("step", "stage"):
            gpu_tracks[event["pid"], event["tid"]].append(event)
            assert event["name"] in LABELS and event["cname"] == LABEL_CNAMES[event["name"]]
    assert sorted(names.values()) == sorted(g.name for g in groups)
    seconds = defaultdict(float)
    for events in gpu_tracks.values():
        # Every GPU-second of the group is on its track, with no overlap.
        ordered = sorted(events, key=lambda e: e["ts"])
        assert sum(e["dur"] for e in ordered) == pytest.approx(log.wall_s * 1e6, rel=1e-9)
        assert all(round((a["ts"] + a["dur"]) * 1000) <= round(b["ts"] * 1000) for a, b in zip(ordered, ordered[1:],
                                                                                              strict=False))
        for e in events:
            seconds[e["name"]] += e["dur"] / 1e6 * e["args"]["gpus"]
    per_gpu = gpu_label_seconds(log)
    for label in LABELS:
        assert seconds[label] == pytest.approx(sum(g.get(label, 0.0) for g in per_gpu), abs=1e-6)


def test_trace_nests_verl_stages_inside_rl_steps(run_folder):
    log, _ = reload(run_folder)
    trace = json.loads((run_folder / "trace.json").read_text())
    steps = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["cat"] == "step"]
    stages = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["cat"] == "stage"]
    assert [e["name"] for e in steps] == [f"step {s.step}" for s in log.steps]
    for step in steps:
        inside = [e for e in stages if e["args"]["step"] == int(step["name"].split()[1])]
        assert inside and all(step["ts"] <= e["ts"] and e["ts"] + e["dur"] <= step["ts"] + step["dur"] + 1e-6
                              for e in inside)
        assert {e["name"] for e in inside} <= set(STAGES) | set(LABELS)


# ------------------------------------------------------------------------------------------- HTML report


class DataCells(HTMLParser):
    """Collects the data-key/data-value cells of the report's summary tables."""

    def __init__(self):
        super().__init__()
        self.cells: list[tuple[str, str]] = []

    def handle_starttag(self, tag, attrs):
        attributes = dict(attrs)
        if "data-key" in attributes:
            self.cells.append((attributes["data-key"], attributes["data-value"]))


def pointer(metrics: dict, key: str):
    value = metrics
    for part in key.strip("/").split("/"):
        value = value[part]
    return value


def test_html_report_totals_equal_metrics_json(run_folder):
    metrics = json.loads((run_folder / "metrics.json").read_text())
    parser = DataCells()
    parser.feed((run_folder / "report.html").read_text())
    keys = {key for key, _ in parser.cells}
    for key, value in parser.cells:
        assert json.loads(value) == pointer(metrics, key), key
    for label, seconds in metrics["gpu_seconds_by_label"].items():
        assert (f"/gpu_seconds_by_label/{label}" in keys) == (seconds > 0)
    assert "/step_time_s/mean" in keys and "/cost/usd_per_1000_steps" in keys and "/mfu/overall" in keys


def test_html_report_is_self_contained_with_plotly_js_once(run_folder):
    text = (run_folder / "report.html").read_text()
    assert text.count(get_plotlyjs()) == 1
    assert not re.search(r"<(script|link|img)[^>]+(src|href)=\"(https?:)?//", text)  # nothing fetched from a network
    for name in ("timeline", "gpu_time", "steps", "lengths", "engines", "staleness"):
        assert f'id="fig-{name}"' in text


def test_every_label_has_a_colour_in_the_report_and_the_trace():
    assert set(LABEL_COLORS) == set(LABELS) == set(LABEL_CNAMES)


def test_run_prints_the_headline_and_json_prints_metrics(tmp_path, capsys):
    scenario_file = tmp_path / "s.yaml"
    scenario_file.write_text(scenario_yaml(steps=2))
    assert main(["run", str(scenario_file), "--out", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert "mean step time" in out and f"{metrics['step_time_s']['mean']:,.2f} s" in out
    assert "MFU, whole cluster" in out and "GPU-time: " in out and "report.html" in out
    assert main(["run", str(scenario_file), "--out", str(tmp_path / "run2"), "--json"]) == 0
    assert capsys.readouterr().out == (tmp_path / "run2" / "metrics.json").read_text()


# ------------------------------------------------------------------------------------------- downsampling


def test_binned_segments_keep_the_label_that_fills_most_of_each_bin():
    spans = [Span(0, 1, 0.0, 2.5, "decode", "gen", 0, 0), Span(0, 1, 2.5, 2.7, "prefill", "gen", 0, 0),
             Span(0, 1, 2.7, 10.0, "tail", "gen", 0, 0)]
    assert binned_segments(spans, 10.0, 10) == [(0.0, 3.0, "decode"), (3.0, 10.0, "tail")]


def test_timeline_keeps_each_roles_extremes_when_it_must_choose_rows():
    b = bound(gpus=64, nodes=8, prompts=16, samples=4, mode="disaggregated", rollout_gpus=56, training_gpus=8, steps=1)
    log = simulate_log(b).log
    facts = RunFacts.from_bound(b)
    groups = gpu_groups(log, facts)
    spans = group_spans(log, groups)
    rows = select_rows(groups, spans, 12)
    assert len(rows) <= 12 and rows == sorted(rows)
    chosen = [groups[i] for i in rows]
    assert any(u.startswith("dp") for g in chosen for u in g.units)
    engines = [i for i, g in enumerate(groups) if g.units and not any(u.startswith("dp") for u in g.units)]
    busy = {i: sum(s.seconds for s in spans[i] if s.label == "decode") for i in engines}
    assert max(engines, key=busy.get) in rows and min(engines, key=busy.get) in rows


def test_html_report_shows_n_a_for_a_cluster_without_prices():
    b = bound(steps=1)
    log = simulate_log(b).log
    facts = RunFacts.from_bound(b)
    unpriced = dataclasses.replace(facts, pools=tuple(dataclasses.replace(p, price_usd_per_gpu_hour=None)
                                                      for p in facts.pools))
    page = run_report_html(RunData(log, unpriced, run_metrics(log, unpriced)), b.scenario)
    assert 'data-key="/cost/usd_per_1000_steps" data-value="null">n/a<' in page


def test_engine_figure_draws_each_engines_sampled_series():
    b = bound(steps=2)
    log = simulate_log(b).log
    facts = RunFacts.from_bound(b)
    fig = engine_load_figure(RunData(log, facts, run_metrics(log, facts)))
    series = engine_series(log, facts)
    lines = {(trace.name, trace.yaxis): trace for trace in fig.data}
    assert len(fig.data) == 3 * facts.engines  # a line per engine in each of the three panels
    for e, name in enumerate(series.engines):
        assert list(lines[name, "y"].y) == pytest.approx(series.kv_fraction[e].tolist())
        assert list(lines[name, "y2"].y) == pytest.approx(series.running[e].tolist())
        assert list(lines[name, "y3"].y) == pytest.approx(series.waiting[e].tolist())
    assert 0 < max(max(trace.y) for trace in fig.data if trace.yaxis == "y") <= 1.0


def test_judge_and_reward_model_gpus_are_named_and_drawn_as_reward_rows():
    b = bound(gpus=8, rollout_gpus=6, steps=1, placement="reward_model: {gpus: 2}",
              workload="reward: {kind: llm_judge, model: Qwen2.5-0.5B, verdict_tokens: {kind: fixed, tokens: 32}}")
    log = simulate_log(b).log
    groups = gpu_groups(log, RunFacts.from_bound(b))
    assert [g.name for g in groups if g.first_gpu >= 6] == ["GPU 6 · judge0", "GPU 7 · judge1"]
    spans = group_spans(log, groups)
    rows = select_rows(groups, spans, 4)  # one row at least for each role, the judges' included
    assert any(groups[i].units[0].startswith("judge") for i in rows)
