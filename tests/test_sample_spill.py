"""Engine samples spilled to disk as the run goes on (rlsim.events.sample_spill): the spilled table holds the same
samples in the same order as the table kept in memory, the metrics and every file of the run folder come out the same
byte for byte, and nothing is left on disk, whether the run ends or is interrupted. Both rest on each engine recording
its samples in time order: a table kept in memory holds them as recorded, and gives the metrics and files of the same
samples sorted by time."""
from __future__ import annotations

import dataclasses
import pickle
import tempfile
from contextlib import contextmanager
from pathlib import Path
from unittest.mock import patch

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import rlsim
import rlsim.sim.recorder as recorder_module
from rlsim.config.bound import bind
from rlsim.events import EngineSample, EventLog
from rlsim.events.sample_spill import SampleSpill, SpilledSamples
from rlsim.events.tables import SampleColumns
from rlsim.metrics import RunFacts, run_metrics
from rlsim.metrics.engines import engine_tracks
from rlsim.report.figures import RunData
from rlsim.report.run_folder import metrics_json, write_run_folder
from rlsim.sim.run import simulate_log
from tests.sim_scenarios import bound

ROOT = Path(__file__).parents[1]
ENGINES = ("engine1", "engine0", "judge0", "engine2")
# A sample: which engine, when (on a coarse grid, so that simultaneous samples occur), its counters, and whether the
# recorder spills right after it.
SAMPLE = st.tuples(st.sampled_from(ENGINES), st.integers(0, 12).map(lambda t: t / 4),
                   st.lists(st.integers(0, 10**6), min_size=7, max_size=7), st.booleans())


def record(samples: list[tuple]) -> tuple[SampleColumns, SampleColumns, SampleSpill]:
    """The samples appended to a table kept in memory and to one spilled wherever the flag says."""
    kept, spilled, spill = SampleColumns(), SampleColumns(), SampleSpill()
    for engine, time, counters, spill_after in samples:
        kept.append(engine, time, *counters)
        spilled.append(engine, time, *counters)
        if spill_after:
            spill.spill(spilled)
    spill.spill(spilled)
    return kept, spilled, spill


def log_of(samples) -> EventLog:
    return EventLog(spans=(), sequences=(), steps=(), gpus=1, wall_s=3.0, events=0, engine_samples=samples)


@settings(max_examples=150, deadline=None)
@given(st.lists(SAMPLE, max_size=40))
def test_spilled_samples_are_the_kept_ones_in_the_same_order(samples):
    kept, spilled, spill = record(samples)
    in_memory = kept.table().in_time_order()
    on_disk = SpilledSamples(spill, tuple(spilled.engines.names))
    assert len(on_disk) == len(in_memory) == len(samples)
    assert list(on_disk) == list(in_memory) and on_disk == in_memory and in_memory == on_disk
    if samples:
        assert on_disk[-1] == in_memory[-1] and on_disk[0] == in_memory[0]
    for prefix in ("engine", "judge"):
        for a, b in zip(engine_tracks(log_of(in_memory), prefix), engine_tracks(log_of(on_disk), prefix), strict=True):
            assert a.engine == b.engine
            assert all(np.array_equal(getattr(a, name), getattr(b, name)) for name in a.__dataclass_fields__)


def test_a_chunk_older_than_the_previous_one_is_merged_in_time_order():
    # An engine books a preemption chain's samples when the chain ends: the second chunk starts before the first ends.
    _, spilled, spill = record([("engine0", 1.0, [1] * 7, False), ("engine0", 3.0, [2] * 7, True),
                                ("engine1", 2.0, [3] * 7, False), ("engine1", 3.0, [4] * 7, True)])
    on_disk = SpilledSamples(spill, tuple(spilled.engines.names))
    assert [(s.engine, s.time, s.running) for s in on_disk] == [
        ("engine0", 1.0, 1), ("engine1", 2.0, 3), ("engine0", 3.0, 2), ("engine1", 3.0, 4)]
    assert on_disk == (EngineSample("engine0", 1.0, *[1] * 7), EngineSample("engine1", 2.0, *[3] * 7),
                       EngineSample("engine0", 3.0, *[2] * 7), EngineSample("engine1", 3.0, *[4] * 7))


@contextmanager
def spilling_every_step():
    with patch.object(recorder_module, "SAMPLES_KEPT_IN_MEMORY", 1), patch.object(recorder_module, "SAMPLES_PER_CHUNK", 1):
        yield


@pytest.fixture(scope="module")
def kept_and_spilled():
    """One async run with its samples kept in memory, and again spilling them at every RL step."""
    b = bound(steps=4, schedule="async", staleness=1, prompts=16, samples=8, max_response=4096, mode="disaggregated",
              rollout_gpus=4, training_gpus=4)
    kept = simulate_log(b).log
    with spilling_every_step():
        spilled = simulate_log(b).log
    return b, kept, spilled


def test_a_spilled_run_has_the_same_samples_metrics_and_files(kept_and_spilled, tmp_path):
    b, kept, spilled = kept_and_spilled
    assert isinstance(spilled.engine_samples, SpilledSamples) and not isinstance(kept.engine_samples, SpilledSamples)
    assert len(spilled.engine_samples.spill.chunks) > 1
    assert spilled.engine_samples == kept.engine_samples
    facts = RunFacts.from_bound(b)
    folders = []
    for name, log in (("kept", kept), ("spilled", spilled)):
        data = RunData(log, facts, run_metrics(log, facts))
        write_run_folder(tmp_path / name, b.scenario, data, 1.0, "full")
        folders.append(tmp_path / name)
    assert metrics_json(run_metrics(kept, facts)) == metrics_json(run_metrics(spilled, facts))
    names = sorted(path.name for path in folders[0].iterdir() if path.name != "timing.json")
    assert "engine_samples.csv.gz" in names and "report.html" in names
    for name in names:
        assert (folders[0] / name).read_bytes() == (folders[1] / name).read_bytes(), name


def test_a_runs_samples_kept_as_recorded_give_the_metrics_and_files_of_the_time_ordered_table(tmp_path):
    """A run's samples are frozen as recorded, not sorted: each engine's are in time order, and the metrics and the
    run folder come out as from the same samples sorted by time (what the log held before). Eight engines of the
    production step, whose preemption chains and prefill runs are booked after other engines' samples."""
    scenario = rlsim.load_scenario(ROOT / "scenarios" / "deepcoder-14b-grpo-64xh100.yaml", {
        "cluster.pools[0].nodes": 1, "placement.rollout.gpus": 8, "algorithm.prompts_per_step": 64})
    b = bind(scenario)
    log = simulate_log(b).log
    table = log.engine_samples
    ordered = table.in_time_order()
    assert ordered is not table, "some sample was recorded after a later one of another engine's"
    assert list(table) == list(ordered) and table == ordered
    for code in range(len(table.engine_names)):
        assert (np.diff(table.time[table.engine == code]) >= 0).all()
    facts = RunFacts.from_bound(b)
    folders = []
    for name, frozen in (("as_recorded", log), ("ordered", dataclasses.replace(log, engine_samples=ordered))):
        write_run_folder(tmp_path / name, b.scenario, RunData(frozen, facts, run_metrics(frozen, facts)), 1.0, "full")
        folders.append(tmp_path / name)
    names = sorted(path.name for path in folders[0].iterdir() if path.name != "timing.json")
    assert "metrics.json" in names and "engine_samples.csv.gz" in names
    for name in names:
        assert (folders[0] / name).read_bytes() == (folders[1] / name).read_bytes(), name


def test_spilled_samples_refuse_to_be_pickled(kept_and_spilled):
    _, _, spilled = kept_and_spilled
    with pytest.raises(TypeError, match="Result.save"):
        pickle.dumps(spilled)


def test_a_spilling_run_leaves_nothing_on_disk_while_it_runs_or_once_interrupted(tmp_path):
    def interrupt(step):
        assert list(tmp_path.iterdir()) == []  # the spilled samples have no name on disk
        if step.step == 2:
            raise KeyboardInterrupt

    with patch.object(tempfile, "tempdir", str(tmp_path)), spilling_every_step():
        assert len(simulate_log(bound(steps=2), on_step=interrupt).log.engine_samples.spill.chunks) > 1
        with pytest.raises(KeyboardInterrupt):
            simulate_log(bound(steps=4), on_step=interrupt)
    assert list(tmp_path.iterdir()) == []


def test_a_spilled_run_folder_interrupted_while_written_leaves_no_half_written_folder(kept_and_spilled, tmp_path):
    b, _, spilled = kept_and_spilled
    facts = RunFacts.from_bound(b)
    data = RunData(spilled, facts, run_metrics(spilled, facts))
    with patch("rlsim.report.run_folder.write_trace", side_effect=KeyboardInterrupt), \
            pytest.raises(KeyboardInterrupt):
        write_run_folder(tmp_path / "run", b.scenario, data, 1.0, "full")
    assert list(tmp_path.iterdir()) == []
    # The samples are still there to write the folder again.
    write_run_folder(tmp_path / "run", b.scenario, data, 1.0, "full")
    assert (tmp_path / "run" / "engine_samples.csv.gz").exists()
