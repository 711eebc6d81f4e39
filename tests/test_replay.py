"""`rlsim replay`: the run-log readers, the per-step lengths rebuilt from logged statistics, and a log written from a
known rlsim run with drifting lengths replayed back to its own stage times."""
from __future__ import annotations

import json
from collections import defaultdict

import numpy as np
import pytest
import yaml

from rlsim.cli import main
from rlsim.config import parse_scenario
from rlsim.config.bound import bind
from rlsim.errors import ScenarioError
from rlsim.events import EventLog
from rlsim.replay.compare import replay
from rlsim.runlog import read_run_log
from rlsim.sim.run import simulate_log
from rlsim.workload.logged_lengths import cut_mean, prompt_lognormal, response_lognormal
from tests.sim_scenarios import scenario_yaml

CAP = 1024
# Responses that grow over training, a lognormal per step held until the next: what replay must recover per step.
DRIFT = ("{kind: drift, interpolation: step, points: ["
         "{step: 0, model: {kind: lognormal, median_tokens: 150, sigma: 0.7}}, "
         "{step: 1, model: {kind: lognormal, median_tokens: 260, sigma: 0.8}}, "
         "{step: 2, model: {kind: lognormal, median_tokens: 380, sigma: 0.9}}, "
         "{step: 3, model: {kind: lognormal, median_tokens: 500, sigma: 0.8}}]}")


def drift_scenario(**fields) -> str:
    settings = {"gpus": 2, "prompts": 64, "samples": 8, "steps": 4, "max_response": CAP, "response": DRIFT,
                "prompt": "{kind: lognormal, median_tokens: 120, sigma: 0.4}"} | fields
    return scenario_yaml(**settings)


def known_run(text: str) -> EventLog:
    return simulate_log(bind(parse_scenario(text))).log


def verl_metrics(log: EventLog) -> dict[int, dict[str, float]]:
    """What verl would log for each step of `log`, numbered from 1: length statistics of the trained batch and the
    stage timers (its gen timer wraps the weight sync in a colocated run)."""
    responses, prompts = defaultdict(list), defaultdict(dict)
    for s in log.sequences:
        responses[s.step_trained].append(s.response_tokens)
        prompts[s.step_trained][s.group] = s.prompt_tokens
    rows = {}
    for record in log.steps:
        lengths = np.array(responses[record.step])
        prompt = np.array(list(prompts[record.step].values()))
        stages = record.stages
        rows[record.step + 1] = {
            "response_length/mean": lengths.mean(), "response_length/max": lengths.max(),
            "response_length/min": lengths.min(), "response_length/clip_ratio": (lengths >= CAP).mean(),
            "prompt_length/mean": prompt.mean(), "prompt_length/max": prompt.max(),
            "timing_s/gen": stages["gen"] + stages["weight_sync"], "timing_s/reward": stages["reward"],
            "timing_s/old_log_prob": stages["old_log_prob"], "timing_s/adv": stages["adv"],
            "timing_s/update_actor": stages["update_actor"], "timing_s/step": record.seconds,
            "actor/pg_loss": 0.01}
    return rows


def console_lines(rows: dict[int, dict[str, float]]) -> str:
    """verl's console logger behind Ray's coloured prefix, among other output."""
    out = ["(TaskRunner pid=7) {'actor_rollout_ref': {'rollout': {'n': 8}}}", "Training Progress:   0%|  | 0/4"]
    for step, metrics in rows.items():
        items = " - ".join(f"{key}:{value:.6f}" for key, value in metrics.items())
        out += [f"\x1b[36m(TaskRunner pid=7)\x1b[0m step:{step} - {items}",
                "(TaskRunner pid=7) [response] Let's think step by step: 2 + 2 = 4"]
    return "\n".join(out) + "\n"


@pytest.fixture(scope="module")
def drifting_run():
    text = drift_scenario()
    return text, verl_metrics(known_run(text))


def test_replay_recovers_a_known_runs_stage_times_within_1_percent(drifting_run, tmp_path):
    text, rows = drifting_run
    scenario = tmp_path / "s.yaml"
    scenario.write_text(text)
    log = tmp_path / "run.log"
    log.write_text(console_lines(rows))
    result = replay(scenario, read_run_log(log))
    assert result.steps == (1, 2, 3, 4) and result.missing == ()
    timers = {t.timer: t for t in result.timers}
    assert set(timers) == {"gen", "reward", "old_log_prob", "adv", "update_actor", "step"}
    assert timers["gen"].stages == ("gen", "weight_sync")
    for t in result.timers:
        errors = [abs(e) for e in t.errors_pct() if e is not None]
        assert max(errors) < 1.0, (t.timer, t.errors_pct())
    # The drift shows: later steps generate and train longer responses.
    assert timers["update_actor"].simulated[-1] > 1.5 * timers["update_actor"].simulated[0]


def test_replay_uses_the_steps_a_log_has_and_says_which_are_missing(drifting_run, tmp_path, capsys):
    text, rows = drifting_run
    scenario = tmp_path / "s.yaml"
    scenario.write_text(text)
    log = tmp_path / "run.log"
    log.write_text(console_lines({k: v for k, v in rows.items() if k != 2}))
    html = tmp_path / "replay.html"
    assert main(["replay", str(log), "--scenario", str(scenario), "--html", str(html)]) == 0
    out = capsys.readouterr().out
    assert "missing from the log: steps 2" in out and "update_actor" in out
    page = html.read_text()
    assert "<script" in page and "Missing from the log: steps 2" in page
    assert main(["replay", str(log), "--scenario", str(scenario), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["steps"] == [1, 3, 4] and report["missing_steps"] == [2]


def test_a_step_that_validated_is_compared_without_it(drifting_run, tmp_path):
    text, rows = drifting_run
    scenario = tmp_path / "s.yaml"
    scenario.write_text(text)
    rows = {k: dict(v) for k, v in rows.items()}
    rows[4]["timing_s/testing"] = 30.0
    rows[4]["timing_s/step"] += 30.0
    log = tmp_path / "run.log"
    log.write_text(console_lines(rows))
    result = replay(scenario, read_run_log(log))
    step = next(t for t in result.timers if t.timer == "step")
    assert result.side_steps == (4,) and abs(step.errors_pct()[-1]) < 1.0


# ------------------------------------------------------------------------------------------------ lengths


@pytest.mark.parametrize(("mean", "clip"), [(200.0, 0.01), (600.0, 0.2), (150.0, None)])
def test_a_rebuilt_response_model_has_the_logged_mean_and_clipped_share(mean, clip):
    model = response_lognormal(mean, CAP, 512, clip_ratio=clip, longest=900.0)
    assert float(cut_mean(model.median_tokens, model.sigma, CAP)) == pytest.approx(mean, rel=1e-6)
    from scipy import stats

    dist = stats.lognorm(s=model.sigma, scale=model.median_tokens)
    if clip is not None:
        assert dist.sf(CAP) == pytest.approx(clip, rel=1e-6)
    else:  # the longest is the 512/513 quantile
        assert dist.ppf(512 / 513) == pytest.approx(900.0, rel=1e-6)


def test_a_rebuilt_prompt_model_has_the_logged_mean_and_longest():
    model = prompt_lognormal(93.6, 214.1, 1024, 512)
    assert float(cut_mean(model.median_tokens, model.sigma, 512)) == pytest.approx(93.6, rel=1e-6)
    # The V10 PPO scenario's hand fit of the same figures (median 90.4, σ 0.264) used the expected longest instead.
    assert model.median_tokens == pytest.approx(90.4, rel=0.01) and model.sigma == pytest.approx(0.264, rel=0.1)


# ------------------------------------------------------------------------------------------------ readers

TABLE = [{"step": 1, "response_length/mean": 200.0, "timing_s/gen": 10.5},
         {"step": 2, "response_length/mean": 210.0, "timing_s/gen": 11.0, "timing_s/testing": 3.0}]


def test_csv_tables_read_with_blank_cells_as_not_logged(tmp_path):
    path = tmp_path / "metrics.csv"
    path.write_text("_step,response_length/mean,timing_s/gen,timing_s/testing\n1,200,10.5,\n2,210,11,3\n")
    log = read_run_log(path)
    assert [s.step for s in log.steps] == [1, 2]
    assert dict(log.steps[0].metrics) == {"response_length/mean": 200.0, "timing_s/gen": 10.5}
    assert log.steps[1].metrics["timing_s/testing"] == 3.0 and log.steps[1].line == 3


@pytest.mark.parametrize("form", ["records", "columns", "lines"])
def test_json_tables_read_in_each_form(tmp_path, form):
    path = tmp_path / ("metrics.jsonl" if form == "lines" else "metrics.json")
    if form == "records":
        path.write_text(json.dumps(TABLE))
    elif form == "columns":
        keys = sorted({k for row in TABLE for k in row})
        path.write_text(json.dumps({k: [row.get(k) for row in TABLE] for k in keys}))
    else:
        path.write_text("\n".join(json.dumps(row) for row in TABLE) + "\n")
    log = read_run_log(path)
    assert [s.step for s in log.steps] == [1, 2]
    assert log.steps[1].metrics == {"response_length/mean": 210.0, "timing_s/gen": 11.0, "timing_s/testing": 3.0}


@pytest.mark.parametrize(("name", "text", "line", "key", "says"), [
    ("run.log", "starting\nno metrics here\n", None, "", "no per-step metrics found"),
    ("run.log", "x\n(TaskRunner pid=1) step:3 - timing_s/gen:12.5 - response_length/mean:abc\n", 2,
     "response_length/mean", "'abc' is not a number"),
    ("m.csv", "step,timing_s/gen,response_length/mean\n1,10,200\n2,11\n", 3, "", "a truncated file?"),
    ("m.csv", "step,timing_s/gen\n1,fast\n", 2, "timing_s/gen", "'fast' is not a number"),
    ("m.json", '[{"step": 1, "timing_s/gen": 10.0}, {"step": 2, "timing_s/ge', 1, "", "a truncated file?"),
    ("m.jsonl", '{"step": 1, "timing_s/gen": 10.0}\n{"step": 2, "timing', 2, "", "a truncated file?"),
    ("m.json", '[{"timing_s/gen": 10.0}]', None, "[0]", "no step number"),
    ("m.json", '{"step": [1, 2], "timing_s/gen": [10.0]}', None, "", "lists of different lengths"),
])
def test_malformed_logs_name_the_file_line_and_key(tmp_path, name, text, line, key, says):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ScenarioError) as caught:
        read_run_log(path)
    problem = caught.value.first
    assert problem.file == str(path) and problem.line == line and problem.path == key and says in problem.message


def test_a_log_without_usable_steps_is_bad_input_without_a_traceback(tmp_path, capsys):
    log = tmp_path / "run.log"
    log.write_text("step:0 - val-core/gsm8k/acc:0.5\n")
    scenario = tmp_path / "s.yaml"
    scenario.write_text(drift_scenario())
    assert main(["replay", str(log), "--scenario", str(scenario)]) == 2
    err = capsys.readouterr().err
    assert f"{log}: no step logs both response_length/mean" in err and "Traceback" not in err


def test_a_window_of_steps_is_replayed_and_its_steady_lengths_written(drifting_run, tmp_path, capsys):
    """--steps keeps the logged steps numbered FIRST to LAST (a part of a long run); --lengths-out writes one steady
    length model of them, their average logged statistics, to paste under workload: for what-ifs."""
    text, rows = drifting_run
    scenario = tmp_path / "s.yaml"
    scenario.write_text(text)
    log = tmp_path / "run.log"
    log.write_text(console_lines(rows))
    lengths = tmp_path / "lengths.yaml"
    assert main(["replay", str(log), "--scenario", str(scenario), "--steps", "3-", "--json",
                 "--lengths-out", str(lengths)]) == 0
    assert json.loads(capsys.readouterr().out)["steps"] == [3, 4]
    model = yaml.safe_load(lengths.read_text())["response_tokens"]
    window_mean = (rows[3]["response_length/mean"] + rows[4]["response_length/mean"]) / 2
    assert cut_mean(model["median_tokens"], model["sigma"], CAP) == pytest.approx(window_mean, rel=0.01)
    pasted = parse_scenario(scenario_yaml(gpus=2, response=json.dumps(model), max_response=CAP))
    assert pasted.workload.response_tokens.kind == "lognormal"


@pytest.mark.parametrize(("window", "says"), [("9-12", "no logged step"), ("5-2", "runs backwards"),
                                              ("two", "not a step range")])
def test_a_bad_step_window_is_bad_input(drifting_run, tmp_path, capsys, window, says):
    text, rows = drifting_run
    scenario = tmp_path / "s.yaml"
    scenario.write_text(text)
    log = tmp_path / "run.log"
    log.write_text(console_lines(rows))
    assert main(["replay", str(log), "--scenario", str(scenario), "--steps", window]) == 2
    err = capsys.readouterr().err
    assert "--steps" in err and says in err and "Traceback" not in err
