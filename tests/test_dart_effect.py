"""DART's signature effect (Li et al., "Efficient Multi-turn RL for GUI Agents via Decoupled Training and Adaptive
Data Curation", arXiv 2509.23866): decoupling the environment cluster, rollout service and trainer, with rollout-wise
sampling (an environment that ends a trajectory starts the next at once), gave 1.6× rollout GPU utilisation, 1.9×
training throughput and 5.5× environment utilisation over batch-wise sampling.

Their setting, from the paper and its released scripts (Computer-use-agents/dart-gui, examples/osworld/async): UI-TARS-
1.5-7B (a Qwen2.5-VL-7B; rlsim prices its language model, Qwen2.5-7B, and not the vision encoder), GRPO with 8 tasks ×
8 rollouts a step, at most 30 actions (turns) per OSWorld task, at most 500 tokens per action, 32k-token prompts of
which the screenshots are most; runs named gpu2_env18 … gpu4_env48, i.e. 9-12 desktop environments per rollout GPU.
What neither gives is taken as stated here: the action (environment step: execute, then screenshot) takes ~3 s
(lognormal), a screenshot appends 1,000 tokens, the reset of a desktop VM for a new task ~20 s, and task lengths
spread from 5 to 30 actions (failures run to the cap). The baseline is batch-wise: verl's synchronous loop, colocated
on 16 H100s, each of the step's 64 trajectories holding one of 64 environments to its end. DART is modelled as its
mechanisms exist in rlsim: trajectory-level asynchrony (schedule async, staleness 2) on a disaggregated split (8
rollout GPUs, 8 training), the same 64 environments, engines freeing their slots during actions (tool_wait release).

Where rlsim's figures differ, and why:
- throughput ×1.6 (paper ×1.9): DART also refreshes engines' weights one worker at a time and curates data (dynamic
  rollout counts and trajectory lengths), which shorten its steps further; rlsim models neither.
- environment utilisation ×1.5 (paper ×5.5): DART trains step-wise (each action a sample, its context a window of the
  last five screenshots), so its training phase is long, and batch-wise its environments sit idle through all of it;
  rlsim trains each trajectory once, so the synchronous baseline's training phase is short and its environments idle
  mostly in the generation tail. The direction — environments held and busy far more of the time — is the paper's.
- rollout GPU utilisation ×2 (paper ×1.6): rlsim's rollout GPUs in the decoupled run are half as many doing the same
  generation, and it has none of the real rollout service's overheads (image preprocessing, request routing).
"""
from __future__ import annotations

import pytest

from rlsim.config import parse_scenario
from rlsim.config.bound import bind
from rlsim.metrics import gpu_label_seconds, summary
from rlsim.metrics.environments import environment_summary
from rlsim.sim.run import simulate_log

BATCH_WISE = """
name: dart-batch-wise
seed: 0
cluster:
  pools:
    - {name: h100, gpu: h100-sxm, nodes: 2}
model: Qwen2.5-7B
algorithm:
  name: grpo
  prompts_per_step: 8
  samples_per_prompt: 8
  max_prompt_tokens: 32000
  max_response_tokens: 500
workload:
  prompt_tokens: {kind: fixed, tokens: 2000}
  multiturn:
    turns: {values: [5, 10, 15, 30], weights: [1, 2, 2, 3]}
    tool_turn_tokens: {kind: lognormal, median_tokens: 120, sigma: 0.5}
    answer_turn_tokens: {kind: lognormal, median_tokens: 120, sigma: 0.5}
    tool_latency: {kind: lognormal, median_s: 3.0, sigma: 0.5}
    tool_response_tokens: {kind: fixed, tokens: 1000}
  tool_wait: release
  environments:
    sandboxes: 64
    scope: trajectory
    cold_start: {kind: lognormal, median_s: 20.0, sigma: 0.5}
placement:
  mode: colocated
  rollout: {gpus: 16, tp: 1}
  training: {backend: fsdp, zero_stage: 3}
run: {steps: 6, warmup_steps: 2}
"""

ROLLOUT_WISE = (BATCH_WISE.replace("name: dart-batch-wise", "name: dart-rollout-wise")
                .replace("  mode: colocated\n  rollout: {gpus: 16, tp: 1}\n  training: {backend: fsdp, zero_stage: 3}",
                         "  mode: disaggregated\n  rollout: {gpus: 8, tp: 1}\n"
                         "  training: {gpus: 8, backend: fsdp, zero_stage: 3}\nschedule: {mode: async, max_staleness: 2}"))

GENERATION = ("prefill", "decode")


def figures(text: str, rollout_gpus: int) -> dict:
    log = simulate_log(bind(parse_scenario(text))).log
    metrics = summary(log, 2)
    pool = environment_summary(log, 2, metrics["step_time_s"]["mean"])
    assert pool is not None
    per_gpu = gpu_label_seconds(log)[:rollout_gpus]
    generating = sum(seconds.get(label, 0.0) for seconds in per_gpu for label in GENERATION)
    return {"samples_per_s": metrics["throughput"]["samples_per_s"], "held": pool["held_fraction"],
            "busy": pool["utilisation"], "rollout_gpu": generating / (rollout_gpus * log.wall_s)}


def test_decoupled_rollout_wise_sampling_raises_throughput_and_environment_and_gpu_utilisation():
    batch = figures(BATCH_WISE, 16)
    dart = figures(ROLLOUT_WISE, 8)
    throughput = dart["samples_per_s"] / batch["samples_per_s"]
    assert throughput == pytest.approx(1.9, rel=0.25)  # rlsim: ~1.6
    # Environments held by a trajectory, and running its actions, a larger share of their time (paper 5.5×; rlsim
    # ~1.5×, see the module docstring for why).
    assert dart["held"] / batch["held"] > 1.3 and dart["busy"] / batch["busy"] > 1.3
    assert dart["rollout_gpu"] / batch["rollout_gpu"] == pytest.approx(1.6, rel=0.4)  # rlsim: ~2.0
