"""The whole pipeline under mutated input (issue 35): a shipped scenario, shrunk to one small step, has its fields
replaced by numeric extremes, deleted, renamed or scaled, and goes through load, check, estimate, one simulated step,
metrics, the strict metrics.json and (for some) the HTML report. The only outcomes allowed are success, ScenarioError
and InfeasibleError — no other exception, no case past its time or memory cap, metrics always strict JSON.

CI runs RLSIM_FUZZ_CASES cases (default 2,000, spread over two tests); set it higher for a longer search."""
from __future__ import annotations

import json
import os
import resource
import signal
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlsim.cli import main
from rlsim.config import parse_scenario
from rlsim.config.bound import bind
from rlsim.errors import InfeasibleError, ScenarioError
from rlsim.estimate.step import estimate_step
from rlsim.metrics import RunFacts, run_metrics
from rlsim.report.figures import RunData
from rlsim.report.html import run_report_html
from rlsim.report.run_folder import metrics_json
from rlsim.sim.run import simulate_log
from tests.test_config_fuzz import parent_and_key, paths

CASES = int(os.environ.get("RLSIM_FUZZ_CASES", "2000"))
# Per case: loading and one step of a small scenario take well under a second; past this a case is a hang.
CASE_SECONDS = 30
ROOT = Path(__file__).parents[1]
# Every shipped scenario; those that replay a trace name it relative to their folder, so the mutants are read as if
# written there.
BASES = sorted(ROOT.glob("scenarios/*.yaml"))
EXTREMES = st.sampled_from([0, -1, 1e-9, 1e9, 1e300, -1e300, float("inf"), float("-inf"), float("nan"), 10**12,
                            2**63, -(2**63), 0.5, 1, 2, True, None, "", "x", [], {}])


def _small(path: Path) -> dict:
    """The scenario as one small step (and a size limit that refuses what a mutation makes large), still valid."""
    data = yaml.safe_load(path.read_text())
    algorithm = data.setdefault("algorithm", {})
    mini_batches = algorithm.get("mini_batches", 1)
    algorithm["prompts_per_step"] = min(algorithm.get("prompts_per_step", 8), 4 * mini_batches)
    horizon = data.get("run", {}).get("horizon")
    # A long run's sections (failures, checkpoint, evaluation) stand only with its horizon, so that stays.
    data["run"] = {"steps": 1, "warmup_steps": 0, "max_rollouts": 20_000, **({"horizon": horizon} if horizon else {})}
    return data


SMALL = {path.name: _small(path) for path in BASES}


@st.composite
def mutant(draw) -> tuple[str, bool]:
    data = json.loads(json.dumps(SMALL[draw(st.sampled_from(sorted(SMALL)))]))
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        candidates = [p for p in paths(data) if p and p[0] != "run"]
        if not candidates:
            break
        path = draw(st.sampled_from(candidates))
        parent, key = parent_and_key(data, path)
        # Extremes mostly fail at load; plausible changes (a number halved, doubled, a thousand times) reach the
        # simulator, where the crashes were.
        operation = draw(st.sampled_from(["extreme", "extreme", "delete", "scale", "scale", "scale"]))
        if operation == "extreme":
            parent[key] = draw(EXTREMES)
        elif operation == "delete":
            del parent[key]
        elif isinstance(parent[key], (int, float)) and not isinstance(parent[key], bool):
            factor = draw(st.sampled_from([0, -1, 1e-9, 0.5, 2, 3, 10, 1000, 1e12]))
            value = parent[key] * factor
            parent[key] = round(value) if isinstance(parent[key], int) and abs(value) < 2**62 else value
    report = draw(st.integers(min_value=0, max_value=9)) == 0
    return yaml.safe_dump(data, sort_keys=False), report


class _Hang(Exception):
    pass


def _alarm(signum, frame):
    raise _Hang


def _pipeline(text: str, report: bool) -> None:
    try:
        scenario = parse_scenario(text, file="mutant.yaml", base_dir=ROOT / "scenarios")
        bound = bind(scenario)
        estimate_step(bound)
        log = simulate_log(bound).log
    except (ScenarioError, InfeasibleError):
        return
    facts = RunFacts.from_bound(bound)
    metrics = run_metrics(log, facts)
    json.loads(metrics_json(metrics), parse_constant=lambda name: pytest.fail(f"metrics.json holds {name}"))
    if report:
        run_report_html(RunData(log, facts, metrics), scenario)


# Per case, the heap may grow by at most this much: a case that would need more fails with MemoryError, which is
# not an allowed outcome (a small step needs a few hundred MB at most).
CASE_MEMORY_BYTES = 3 * 2**30


def _run_case(text: str, report: bool) -> None:
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(CASE_SECONDS)
    limits = resource.getrlimit(resource.RLIMIT_DATA)
    in_use = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # peak so far, a bound on the heap in use
    cap = in_use + CASE_MEMORY_BYTES
    if limits[1] == resource.RLIM_INFINITY or cap < limits[1]:
        resource.setrlimit(resource.RLIMIT_DATA, (cap, limits[1]))
    try:
        _pipeline(text, report)
    except _Hang:
        pytest.fail(f"a case ran past {CASE_SECONDS} s:\n{text}")
    except MemoryError:
        pytest.fail(f"a case needed more than {CASE_MEMORY_BYTES / 2**30:g} GiB:\n{text}")
    finally:
        resource.setrlimit(resource.RLIMIT_DATA, limits)
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@settings(max_examples=CASES // 2, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(mutant())
def test_the_pipeline_succeeds_or_refuses_mutated_scenarios(case):
    _run_case(*case)


@settings(max_examples=CASES // 2, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.sampled_from(sorted(SMALL)), st.sampled_from(["--set"]), st.text(max_size=40))
def test_every_cli_argument_value_is_taken_or_refused(base, flag, value):
    """Any text after --set PATH= for a scenario's fields: exit 0 or 2, never a traceback (checked through `check`,
    which loads and resolves without simulating)."""
    data = SMALL[base]
    field = sorted(".".join(str(part) for part in p) for p in paths(data) if p and all(isinstance(x, str) for x in p))
    path = field[len(value) % len(field)]
    scenario = ROOT / "scenarios" / base
    code = main(["check", str(scenario), flag, f"{path}={value}", "--set", "run.steps=1", "--set", "run.warmup_steps=0",
                 "--set", "run.max_rollouts=20000"])
    assert code in (0, 2, 3)


PROFILE = yaml.safe_load((ROOT / "hardware_profiles" / "h100-sxm.yaml").read_text())
PROFILE_NUMBERS = [p for p in paths(PROFILE) if p and isinstance(parent_and_key(PROFILE, p)[0][p[-1]], (int, float))
                   and not isinstance(parent_and_key(PROFILE, p)[0][p[-1]], bool)]


@settings(max_examples=max(1, CASES // 10), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(PROFILE_NUMBERS), EXTREMES), min_size=1, max_size=3))
def test_a_users_hardware_profile_with_extreme_numbers_is_taken_or_refused(tmp_path_factory, changes):
    """A user's own GPU profile (`cluster.profile_dirs`) with `peak_tflops`, `memory_gib`, link rates and latencies
    set to extremes: the quickstart's one step runs or the profile is refused — never a crash deep in the loop."""
    profile = json.loads(json.dumps(PROFILE))
    profile["name"], profile["aliases"] = "fuzzed-gpu", []
    for path, value in changes:
        parent, key = parent_and_key(profile, path)
        parent[key] = value
    folder = tmp_path_factory.mktemp("profiles")
    (folder / "fuzzed-gpu.yaml").write_text(yaml.safe_dump(profile, sort_keys=False))
    scenario = yaml.safe_load((ROOT / "scenarios" / "quickstart.yaml").read_text())
    scenario["cluster"]["pools"][0]["gpu"] = "fuzzed-gpu"
    scenario["cluster"]["profile_dirs"] = [str(folder)]
    scenario["run"] = {"steps": 1, "warmup_steps": 0}
    _run_case(yaml.safe_dump(scenario, sort_keys=False), report=False)


SWEEPS = {p.name: yaml.safe_load(p.read_text()) for p in sorted((ROOT / "scenarios" / "sweeps").glob("*.yaml"))}


@settings(max_examples=max(1, CASES // 10), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture])
@given(st.sampled_from(sorted(SWEEPS)), st.data())
def test_a_mutated_sweep_file_expands_or_is_refused(tmp_path_factory, name, data):
    """A shipped sweep with values, expressions and axes replaced by extremes: it expands into points or is refused
    with a ScenarioError (nothing is simulated; expansion is where the hangs and crashes were)."""
    from rlsim.sweep import expand, load_sweep

    sweep = json.loads(json.dumps(SWEEPS[name]))
    candidates = [p for p in paths(sweep) if p and p[0] not in ("base", "name", "description")]
    for _ in range(data.draw(st.integers(min_value=1, max_value=3))):
        path = data.draw(st.sampled_from(candidates))
        parent, key = parent_and_key(sweep, path)
        parent[key] = data.draw(st.one_of(EXTREMES, st.sampled_from(["9**9**9", "'a' * 10**10", "1/0",
                                                                      "x.y + 1", "__import__('os')"])))
        candidates = [p for p in paths(sweep) if p and p[0] not in ("base", "name", "description")]
    if isinstance(SWEEPS[name].get("base"), str):  # named relative to the sweep's folder: point at it from anywhere
        sweep["base"] = str((ROOT / "scenarios" / "sweeps" / SWEEPS[name]["base"]).resolve())
    text = yaml.safe_dump(sweep, sort_keys=False)
    file = tmp_path_factory.mktemp("sweep") / name
    file.write_text(text)
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(CASE_SECONDS)
    try:
        expand(load_sweep(file))
    except ScenarioError:
        pass
    except _Hang:
        pytest.fail(f"a sweep took past {CASE_SECONDS} s to expand:\n{text}")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@settings(max_examples=max(1, CASES // 10), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.sampled_from(["input", "output", "output[0]"]), EXTREMES), min_size=1, max_size=2))
def test_a_replay_trace_with_extreme_records_is_taken_or_refused(tmp_path_factory, changes):
    """A packed-length trace whose records carry extremes (negative, zero, huge, NaN, text): the replaying scenario's
    step runs or the trace is refused at its line."""
    records = [{"input": 120 + i, "output": [200 + 10 * i, 300, 150, 90]} for i in range(8)]
    for field, value in changes:
        if field == "output[0]":
            if isinstance(records[3]["output"], list) and records[3]["output"]:
                records[3]["output"][0] = value
        else:
            records[3][field] = value
    folder = tmp_path_factory.mktemp("trace")
    (folder / "packed_lengths_step_0.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n")
    scenario = yaml.safe_load((ROOT / "scenarios" / "quickstart.yaml").read_text())
    scenario["workload"] = {"replay": {"path": str(folder)}, "reward": {"kind": "rule"}}
    scenario["algorithm"]["prompts_per_step"] = 4
    scenario["run"] = {"steps": 1, "warmup_steps": 0}
    _run_case(yaml.safe_dump(scenario, sort_keys=False), report=False)


RAW = {"schema": "rlsim-calibration-raw/1", "origin": "measured", "mode": "full", "device": {"type": "synthetic"},
       "measurements": [
           *({"kernel": "gemm", "dtype": "bf16", "m": m, "n": 4096, "k": 4096, "median_s": 2e-5 * m / 64}
             for m in (64, 256, 1024, 4096)),
           *({"kernel": "hbm_copy", "bytes": float(b), "median_s": b / 3e12 + 5e-6} for b in (2**20, 2**26, 2**30)),
           *({"kernel": "all_reduce", "ranks": 8, "nodes": 1, "bytes": float(b), "median_s": b / 4e11 + 1e-5}
             for b in (2**12, 2**20, 2**28))]}


@settings(max_examples=max(1, CASES // 10), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture])
@given(st.data())
def test_a_calibration_file_with_extreme_values_is_fitted_or_refused(tmp_path_factory, data):
    """A microbenchmark's raw file with sizes and times replaced by extremes: `rlsim calibrate fit` writes a profile
    or exits 2 naming the file — never a traceback."""
    raw = json.loads(json.dumps(RAW))
    candidates = [p for p in paths(raw) if p]
    for _ in range(data.draw(st.integers(min_value=1, max_value=3))):
        path = data.draw(st.sampled_from(candidates))
        parent, key = parent_and_key(raw, path)
        parent[key] = data.draw(EXTREMES)
        candidates = [p for p in paths(raw) if p]
    folder = tmp_path_factory.mktemp("calibration")
    (folder / "raw.json").write_text(json.dumps(raw))
    code = main(["calibrate", "fit", str(folder / "raw.json"), "--base", "h100-sxm", "--out",
                 str(folder / "fitted.yaml")])
    assert code in (0, 2)
