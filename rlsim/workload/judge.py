"""The LLM judge as its engines see it: the scenario its engines generate in, and the longest verdict they write.
The simulation builds the judge's engines from these and the estimate sizes them the same way."""
from __future__ import annotations

from rlsim.config.schema import RolloutPlacement, Scenario
from rlsim.workload.lengths import length_schedule

# The judge serves its own checkpoint, in 16-bit weights whatever the policy's rollout precision.
JUDGE_WEIGHT_DTYPE = "bf16"


def judge_scenario(scenario: Scenario) -> Scenario:
    """The scenario as the judge's engines see it: their own GPUs (no training state beside them) generating on
    placement.reward_model, reading prompts of up to prompt + response + instruction tokens."""
    placement = scenario.placement
    judge = scenario.workload.reward
    assert placement.reward_model is not None and judge.kind == "llm_judge"
    layout = RolloutPlacement(pool=placement.reward_model.pool, gpus=placement.reward_model.gpus,
                              tp=placement.reward_model.tp, max_num_seqs=judge.max_num_seqs)
    algorithm = scenario.algorithm.model_copy(update={
        "max_prompt_tokens": scenario.algorithm.model_len + judge.instruction_tokens,
        "max_sequence_tokens": None,
        "max_response_tokens": judge_max_verdict(scenario)})
    return scenario.model_copy(update={
        "model": scenario.model.model_copy(update={"dtype": JUDGE_WEIGHT_DTYPE}),
        "algorithm": algorithm,
        "placement": placement.model_copy(update={"mode": "disaggregated", "rollout": layout})})


def judge_max_verdict(scenario: Scenario) -> int:
    """The longest verdict the judge writes: its verdict model's 99.9th percentile (the judge's own generation cap)."""
    judge = scenario.workload.reward
    assert judge.kind == "llm_judge"
    return max(1, int(length_schedule(judge.verdict_tokens).at(0).quantile(0.999, 1 << 30)))
