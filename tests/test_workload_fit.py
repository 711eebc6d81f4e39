"""Fitted workload models against the traces they came from (traces/polytrace/fitted/*.yaml, written by
`rlsim workload fit`): lengths, groups, multi-turn trajectories through the simulator, and the sandbox reward."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import yaml
from scipy import stats

from rlsim.config import parse_scenario
from rlsim.config.bound import bind
from rlsim.config.schema import Algorithm
from rlsim.config.workload import Workload
from rlsim.fields import MAX_COUNT
from rlsim.sim.build import build
from rlsim.sim.loop import controller_for
from rlsim.traces import multiturn_groups, read_multiturn, read_packed, read_reward_timings
from rlsim.workload.batches import GroupSampler
from rlsim.workload.fitting import (
    Summary,
    fit_trace,
    intraclass_correlation,
    log_length_icc,
    response_cap,
)
from rlsim.workload.lengths import length_schedule

TRACES = Path(__file__).parents[1] / "traces" / "polytrace"
PACKED = ["verl_dapo_qwen2.5_32b", "verl_text_20260610", "rllm_deepcoder_14b_16k", "verl_video_qwen2.5_vl_7b"]


def fitted(name: str) -> Workload:
    text = (TRACES / "fitted" / f"{name}.yaml").read_text(encoding="utf-8")
    return Workload.model_validate(yaml.safe_load(text))


def recorded(name: str) -> tuple[list[int], list[tuple[int, ...]], int | None]:
    steps = read_packed(TRACES / name)
    groups = [g.response_tokens for step in steps for g in step]
    prompts = [g.prompt_tokens for step in steps for g in step]
    return prompts, groups, response_cap(np.concatenate(groups))


def assert_close(model: Summary, trace: Summary, what: str) -> None:
    for stat in ("mean", "p50", "p90", "p99"):
        assert getattr(model, stat) == pytest.approx(getattr(trace, stat), rel=0.05), f"{what} {stat}"
    assert model.truncated == pytest.approx(trace.truncated, abs=0.02), f"{what} truncated share"


@pytest.mark.parametrize("name", PACKED)
def test_fitted_response_lengths_reproduce_the_trace(name):
    _, groups, cap = recorded(name)
    trace = np.concatenate(groups)
    limit = cap if cap is not None else 1 << 40
    model = length_schedule(fitted(name).response_tokens).at(0)
    many = model.sample(np.random.default_rng(0), 200_000, limit)
    assert_close(Summary.of(many, cap), Summary.of(trace, cap), name)
    # A sample the trace's size is not told apart from it.
    same_size = model.sample(np.random.default_rng(1), len(trace), limit)
    assert stats.ks_2samp(trace, same_size).pvalue > 0.01


# The rllm trace holds 80 prompts: its own median is uncertain by about ±8 %, and the fitted lognormal's lands 5.3 %
# below it (412 vs 435 tokens; mean 489 vs 485, p90 871 vs 819, p99 1620 vs 1414). Kept visible, not loosened.
FEW_PROMPTS = pytest.mark.xfail(strict=True, reason="80 prompts: the trace's quantiles carry more than 5 % sampling "
                                "error, and the fit misses p50 by 5.3 %")


@pytest.mark.parametrize("name", [pytest.param(n, marks=FEW_PROMPTS) if n.startswith("rllm") else n for n in PACKED])
def test_fitted_prompt_lengths_reproduce_the_trace(name):
    prompts, _, _ = recorded(name)
    model = length_schedule(fitted(name).prompt_tokens, "input").at(0)
    many = model.sample(np.random.default_rng(0), 200_000, 1 << 40)
    assert_close(Summary.of(many), Summary.of(prompts), f"{name} prompts")
    assert stats.ks_2samp(prompts, model.sample(np.random.default_rng(1), len(prompts), 1 << 40)).pvalue > 0.01


@pytest.mark.parametrize("name", PACKED)
def test_sampled_groups_have_the_traces_within_group_correlation(name):
    _, groups, cap = recorded(name)
    workload = fitted(name)
    algorithm = Algorithm(name="grpo", prompts_per_step=1, samples_per_prompt=len(groups[0]), max_prompt_tokens=1 << 20,
                          max_response_tokens=cap if cap is not None else MAX_COUNT)
    sampler = GroupSampler(workload, algorithm, np.random.default_rng(0), np.random.default_rng(1))
    sampled = np.array([g.response_tokens for g in sampler.draw(6000, 0)])
    assert log_length_icc(sampled) == pytest.approx(log_length_icc(groups), abs=0.05)
    # The marginal stays the model's: the copula only orders samples into groups.
    assert sampled.mean() == pytest.approx(np.concatenate(groups).mean(), rel=0.05)


def test_fitting_is_deterministic_and_gives_the_shipped_model():
    """`rlsim workload fit` gives the same bits twice, and the shipped model: to its digits with the SciPy that fitted
    it, and to 1e-3 relative with another (SciPy 1.17's L-BFGS-B stops up to 6.4e-5 away from it on this flat
    likelihood, well within the fit's statistical error; nothing else in the model may differ)."""
    fields = fit_trace(TRACES / "rllm_deepcoder_14b_16k")
    assert fit_trace(TRACES / "rllm_deepcoder_14b_16k") == fields
    refit, shipped = _leaves(Workload.model_validate(fields).model_dump()), _leaves(fitted("rllm_deepcoder_14b_16k")
                                                                                    .model_dump())
    assert refit.keys() == shipped.keys()
    for path, value in shipped.items():
        if isinstance(value, float):
            assert refit[path] == pytest.approx(value, rel=1e-3), path
        else:
            assert refit[path] == value, path


def _leaves(value: object, path: str = "") -> dict[str, object]:
    """A dumped model's values by their path (`response_tokens.components.0.sigma`)."""
    if isinstance(value, dict):
        return {leaf: v for key, item in value.items() for leaf, v in _leaves(item, f"{path}.{key}").items()}
    if isinstance(value, list | tuple):
        return {leaf: v for i, item in enumerate(value) for leaf, v in _leaves(item, f"{path}.{i}").items()}
    return {path: value}


def test_production_mixture_is_the_jsons_math_fit():
    workload = fitted("production_math_joint")
    assert workload.joint_tokens is not None and len(workload.joint_tokens.components) == 4
    algorithm = Algorithm(name="grpo", prompts_per_step=1, samples_per_prompt=1, max_prompt_tokens=1 << 20,
                          max_response_tokens=MAX_COUNT)
    sampler = GroupSampler(workload, algorithm, np.random.default_rng(0), np.random.default_rng(1))
    groups = sampler.draw(100_000, 0)
    prompt = np.array([g.prompt_tokens for g in groups], float)
    response = np.array([g.response_tokens[0] for g in groups], float)
    # The JSON's own summary of its mixture: mean vector and correlation.
    assert prompt.mean() == pytest.approx(141.34, rel=0.02)
    assert response.mean() == pytest.approx(9574.8, rel=0.02)
    assert np.corrcoef(prompt, response)[0, 1] == pytest.approx(0.114, abs=0.02)


def test_the_dapo_filter_fit_is_the_kept_share():
    assert fitted("verl_dapo_qwen2.5_32b").informative_group_fraction == pytest.approx(182 / 576, abs=1e-4)


# ------------------------------------------------------------------------------------------------ sandbox reward


def test_sandbox_fit_reproduces_deepcoder_reward_times():
    """Batches of 64 responses on one rank's 48 threads, as the rllm trace recorded them."""
    from rlsim.workload.fitting import _makespan

    reward = fitted("rllm_deepcoder_14b_16k").reward
    assert reward.kind == "sandbox" and reward.concurrency == 96  # 48 threads on each of the 2 ranks
    trace = np.array([t.seconds for t in read_reward_timings(TRACES / "rllm_deepcoder_14b_16k")])
    rng = np.random.default_rng(0)
    batches = [_makespan(reward.median_latency_s * np.exp(reward.latency_sigma * rng.standard_normal(64)), 48)
               for _ in range(4000)]
    assert np.log(batches).mean() == pytest.approx(np.log(trace).mean(), abs=0.02)
    assert np.log(batches).std() == pytest.approx(np.log(trace).std(ddof=1), rel=0.05)
    assert np.mean(batches) == pytest.approx(trace.mean(), rel=0.05)


# ------------------------------------------------------------------------------------------------ multi-turn


SEARCH_SCENARIO = """
name: search-r1-fitted
seed: 3
cluster: {{pools: [{{gpu: h100-sxm, nodes: 1}}]}}
model: Qwen2.5-0.5B
algorithm: {{name: grpo, prompts_per_step: 256, samples_per_prompt: 8, max_prompt_tokens: 4096,
            max_response_tokens: 3000}}
workload:
{workload}
  tool_wait: {policy}
placement:
  mode: colocated
  rollout: {{gpus: 8, gpu_memory_utilization: 0.6}}
run: {{steps: 3}}
"""


def simulate_search_r1(policy: str):
    """Run the fitted Search-R1 model through the simulator; the trajectories' final lengths and each tool call's
    wait as the engines saw them."""
    text = (TRACES / "fitted" / "search_r1_qwen2.5_7b.yaml").read_text(encoding="utf-8")
    indented = "\n".join("  " + line for line in text.splitlines() if not line.startswith("#"))
    sim = build(bind(parse_scenario(SEARCH_SCENARIO.format(workload=indented, policy=policy))))
    called: dict[int, float] = {}
    waits: list[float] = []

    def probe(event, rollout):
        if event == "tool_call":
            called[rollout.seq_id] = sim.env.now
        elif event == "tool_returned":
            waits.append(sim.env.now - called.pop(rollout.seq_id))

    for engine in sim.engines:
        engine.probe = probe
    done = sim.env.process(controller_for(sim).run())
    sim.env.run(until=done)
    lengths = [r.prompt_tokens + r.response_tokens for r in sim.recorder.freeze(sim.env.now, 0).sequences
               if r.finished >= 0]
    return np.array(lengths), np.array(waits)


@pytest.mark.parametrize("policy", ["hold", "release"])
def test_simulated_search_r1_trajectories_and_tool_waits_match_the_trace(policy):
    trajectories = read_multiturn(TRACES / "search_r1_qwen2.5_7b")
    trace_lengths = np.array([t.length_tokens for t in trajectories])
    trace_waits = np.array([max(turn.tool_latencies_s) for t in trajectories for turn in t.turns[:-1]])
    lengths, waits = simulate_search_r1(policy)
    assert len(lengths) >= 5000 and len(waits) >= 8000
    for simulated, trace, what in ((lengths, trace_lengths, "trajectory tokens"), (waits, trace_waits, "tool s")):
        assert simulated.mean() == pytest.approx(trace.mean(), rel=0.05), what
        assert np.percentile(simulated, 99) == pytest.approx(np.percentile(trace, 99), rel=0.05), what


def test_search_r1_groups_share_their_number_of_searches():
    trajectories = read_multiturn(TRACES / "search_r1_qwen2.5_7b")
    trace_icc = intraclass_correlation([[len(t.turns) for t in g] for g in multiturn_groups(trajectories)])
    workload = fitted("search_r1_qwen2.5_7b")
    algorithm = Algorithm(name="grpo", prompts_per_step=1, samples_per_prompt=8, max_prompt_tokens=4096,
                          max_response_tokens=3000)
    groups = GroupSampler(workload, algorithm, np.random.default_rng(0), np.random.default_rng(1)).draw(3000, 0)
    sampled = intraclass_correlation([[len(turns) for turns in g.turns] for g in groups])
    assert sampled == pytest.approx(trace_icc, abs=0.05)
    assert math.isclose(np.mean([len(t) for g in groups for t in g.turns]),
                        np.mean([len(t.turns) for t in trajectories]), rel_tol=0.03)
