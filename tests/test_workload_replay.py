"""Replay of recorded traces: exactly the recorded lengths, groups and turns, in order; DAPO's recorded filter decisions
pick exactly the prompts verl trained on."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from rlsim.config import parse_scenario
from rlsim.config.bound import bind
from rlsim.config.schema import Algorithm
from rlsim.config.workload import Workload
from rlsim.sim.run import simulate_log
from rlsim.traces import multiturn_groups, read_filter_indices, read_multiturn, read_packed
from rlsim.workload.batches import GroupSampler

TRACES = Path(__file__).parents[1] / "traces" / "polytrace"


def sampler(path: Path, cap: int = 1 << 20, **workload) -> GroupSampler:
    algorithm = Algorithm(name="grpo", prompts_per_step=1, samples_per_prompt=8, max_prompt_tokens=1 << 20,
                          max_response_tokens=cap)
    return GroupSampler(Workload(replay={"path": str(path)}, **workload), algorithm, np.random.default_rng(0),
                        np.random.default_rng(1))


def test_packed_replay_yields_the_recorded_groups_in_order_then_starts_again():
    recorded = [g for step in read_packed(TRACES / "verl_video_qwen2.5_vl_7b") for g in step]
    replay = sampler(TRACES / "verl_video_qwen2.5_vl_7b", cap=16000)
    drawn = replay.draw(1000, 0) + replay.draw(len(recorded) - 1000 + 5, 7)  # the version does not matter
    assert [(g.prompt_tokens, g.response_tokens) for g in drawn[:len(recorded)]] == [
        (g.prompt_tokens, g.response_tokens) for g in recorded]
    assert [g.response_tokens for g in drawn[len(recorded):]] == [g.response_tokens for g in recorded[:5]]
    assert [g.group for g in drawn] == list(range(len(drawn)))
    # A recorded length at the cap was truncated there.
    assert sum(t for g in drawn[:len(recorded)] for t in g.truncated) == 3


def test_multi_turn_replay_yields_the_recorded_turns():
    trajectories = read_multiturn(TRACES / "search_r1_qwen2.5_7b")
    groups = multiturn_groups(trajectories)
    drawn = sampler(TRACES / "search_r1_qwen2.5_7b").draw(len(groups), 0)
    for group, recorded in zip(drawn, groups, strict=True):
        assert group.prompt_tokens == recorded[0].prompt_tokens
        assert len(group.turns) == len(recorded)
        for turns, trajectory in zip(group.turns, recorded, strict=True):
            assert [t.tokens for t in turns] == [t.generated_tokens for t in trajectory.turns]
            assert [t.tool_s for t in turns[:-1]] == [max(t.tool_latencies_s) for t in trajectory.turns[:-1]]
            # Each turn starts from the recorded context (where the template did not shrink it).
            context = group.prompt_tokens
            for turn, recorded_turn in zip(turns, trajectory.turns, strict=True):
                assert context >= recorded_turn.context_tokens
                context += turn.tokens + turn.tool_tokens


def test_replayed_multi_turn_trajectories_run_as_recorded():
    text = f"""
name: search-r1-replay
cluster: {{pools: [{{gpu: h100-sxm, nodes: 1}}]}}
model: Qwen2.5-0.5B
algorithm: {{name: grpo, prompts_per_step: 64, samples_per_prompt: 8, max_prompt_tokens: 4096,
            max_response_tokens: 3000}}
workload:
  replay: {{path: {TRACES / "search_r1_qwen2.5_7b"}}}
  tool_wait: release
placement: {{mode: colocated, rollout: {{gpus: 8, gpu_memory_utilization: 0.6}}}}
run: {{steps: 2}}
"""
    log = simulate_log(bind(parse_scenario(text))).log
    groups = multiturn_groups(read_multiturn(TRACES / "search_r1_qwen2.5_7b"))
    recorded = [t for g in groups[:128] for t in g]
    trained = sorted((r for r in log.sequences if r.step_trained >= 0), key=lambda r: r.seq_id)
    assert [r.response_tokens for r in trained] == [sum(t.generated_tokens for t in r.turns) for r in recorded]
    appended = [sum(tr.appended_after(i) for i in range(len(tr.turns) - 1)) for tr in recorded]
    assert [r.prompt_tokens for r in trained] == [tr.prompt_tokens + a for tr, a in zip(recorded, appended, strict=True)]


def test_dapo_replay_with_its_recorded_filter_trains_the_prompts_verl_used():
    """96-prompt generation batches, 32 prompts per step: the first step uses the 27 kept of batch 1 and the first 5
    kept of batch 2, as dapo_filter_indices.jsonl recorded."""
    folder = TRACES / "verl_dapo_qwen2.5_32b"
    text = f"""
name: dapo-replay
cluster: {{pools: [{{gpu: h100-sxm, nodes: 1}}]}}
model: Qwen2.5-0.5B
algorithm: {{name: dapo, prompts_per_step: 32, samples_per_prompt: 8, max_prompt_tokens: 2048,
            max_response_tokens: 20480}}
workload:
  replay: {{path: {folder}}}
  informative: {{kind: trace, path: {folder / "dapo_filter_indices.jsonl"}}}
  generation_batch_prompts: 96
placement: {{mode: colocated, rollout: {{gpus: 8, gpu_memory_utilization: 0.6}}}}
run: {{steps: 2}}
"""
    log = simulate_log(bind(parse_scenario(text))).log
    batches = read_filter_indices(folder / "dapo_filter_indices.jsonl")
    for step, (first, second) in enumerate(((0, 1), (2, 3))):
        # Group ids count the replayed prompts: batch b's prompt i is group 96·b + i.
        used = [first * 96 + i for i in sorted(batches[first].kept)] + [second * 96 + i for i in sorted(batches[second].kept)]
        trained = sorted({r.group for r in log.sequences if r.step_trained == step})
        assert trained == used[:32]
        assert [second * 96 + i for i in batches[second].used] == used[len(batches[first].kept):32]
    recorded = [g for s in read_packed(folder) for g in s]
    for r in log.sequences:
        assert r.response_tokens in recorded[r.group].response_tokens
