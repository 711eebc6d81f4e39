"""Per-role placement: the critic, the reference policy and the reward model on GPU groups of their own or shared,
refused with the field at fault when the placement cannot hold; roles on different groups run their stages at once,
roles on one group take turns; memory per group."""
from __future__ import annotations

import pytest

from rlsim.cli import main
from rlsim.config import parse_scenario
from rlsim.config.bound import bind
from rlsim.errors import InfeasibleError, ScenarioError
from rlsim.estimate import estimate_step
from rlsim.events import Span
from rlsim.sim.run import simulate_log
from tests.sim_scenarios import scenario_yaml

REWARD_MODEL = "reward: {kind: reward_model, model: Qwen2.5-0.5B}"


def ppo(placement: str = "", *, gpus: int = 16, workload: str = "", **kwargs) -> str:
    """PPO on 8 colocated GPUs of a 2-node pool; `placement` adds role placements (on the other 8 GPUs)."""
    return scenario_yaml(algorithm="ppo", gpus=gpus, nodes=2, rollout_gpus=8, samples=2, mini_batches=2,
                         placement=placement, workload=workload, **kwargs)


def problems(text: str) -> dict[str, str]:
    with pytest.raises(ScenarioError) as err:
        parse_scenario(text)
    return {problem.path: problem.message for problem in err.value.problems}


@pytest.mark.parametrize("placement, workload, path, words", [
    ("critic: {share_with: critic}", "", "placement.critic.share_with", "no GPUs of its own"),
    ("reference: {share_with: reward_model}", "", "placement.reference.share_with", "no GPUs of its own"),
    ("critic: {gpus: 8}\nreference: {share_with: critic, gpus: 4}", "", "placement.reference.gpus", "shares the critic's 8"),
    ("critic: {tp: 2}", "", "placement.critic.gpus", "GPUs of its own"),
    ("critic: {gpus: 8, offload_while_generating: true}", "", "placement.critic.offload_while_generating",
     "only the actor's"),
    ("reference: {gpus: 8}\ntraining: {reference_weights: host}", "", "placement.training.reference_weights",
     "placement of its own"),
    ("critic: {gpus: 16}", "", "cluster.pools[0].nodes", "needs 24"),
    ("critic: {gpus: 6, tp: 4}", "", "placement.critic", "critic GPUs (6) are not a multiple"),
    ("critic: {gpus: 8, tp: 8}", "", "placement.critic.tp", "attention heads"),
    ("reward_model: {tp: 1}", REWARD_MODEL, "placement.reward_model.gpus", "GPUs of its own"),
])
def test_a_role_placement_that_cannot_hold_names_its_field(placement, workload, path, words):
    if "training:" in placement:  # the fixture already writes a training section: extend it instead
        placement = placement.replace("\ntraining: {reference_weights: host}", "")
        text = ppo(placement, workload=workload).replace("training: {", "training: {reference_weights: host, ")
    else:
        text = ppo(placement, workload=workload)
    found = problems(text)
    assert path in found and words in found[path], found


def test_a_placed_critic_needs_an_algorithm_with_one():
    found = problems(scenario_yaml(gpus=16, nodes=2, rollout_gpus=8, placement="critic: {gpus: 8}"))
    assert "algorithm.critic is false" in found["placement.critic"]


def test_an_off_policy_hybrid_placement_keeps_a_reward_model_off_the_generating_gpus():
    text = scenario_yaml(algorithm="ppo", mode="hybrid", schedule="one_step_off", rollout_gpus=8, training_gpus=4,
                         workload=REWARD_MODEL, placement="reward_model: {share_with: actor}")
    assert "generate while one_step_off scores" in problems(text)["placement.reward_model.share_with"]


def test_a_judge_keeps_gpus_of_its_own():
    judge = "reward: {kind: llm_judge, model: Qwen2.5-0.5B}"
    found = problems(ppo("reward_model: {share_with: actor}", workload=judge))
    assert "only a reward model shares" in found["placement.reward_model.share_with"]
    found = problems(ppo("reward_model: {gpus: 8}\ncritic: {share_with: reward_model}", workload=judge))
    assert "its own engines" in found["placement.critic.share_with"]


def stage_spans(text: str) -> tuple[list[Span], dict[str, float]]:
    log = simulate_log(bind(parse_scenario(text))).log
    spans = [s for s in log.spans if s.step == 1 and s.label in ("logprob", "train_forward", "reward_model")]
    return spans, log.steps[1].stages


def first_start(spans: list[Span], stage: str) -> float:
    return min(s.start for s in spans if s.stage == stage)


def busy(spans: list[Span], stage: str) -> float:
    return sum((s.end - s.start) * s.gpu_count for s in spans if s.stage == stage)


def last_end(spans: list[Span], stage: str) -> float:
    return max(s.end for s in spans if s.stage == stage)


def test_a_critic_on_gpus_of_its_own_runs_beside_the_actor():
    apart, apart_stages = stage_spans(ppo("critic: {gpus: 8}\nreward_model: {share_with: critic}", workload=REWARD_MODEL))
    together, together_stages = stage_spans(ppo("reward_model: {share_with: actor}", gpus=8, workload=REWARD_MODEL))
    # Apart: the values pass runs while the old log-probs do, update_critic while update_actor does (each once the
    # driver, which hands one stage's batch at a time, has handed it its batch), on the critic's GPUs 8-15.
    for critic, actor in (("values", "old_log_prob"), ("update_critic", "update_actor")):
        assert first_start(apart, critic) < last_end(apart, actor) and first_start(apart, actor) < last_end(apart, critic)
    assert {s.first_gpu for s in apart if s.stage in ("values", "update_critic", "reward")} <= set(range(8, 16))
    # Together: every stage in verl's order, one after another.
    assert first_start(together, "ref") > first_start(together, "old_log_prob")
    assert first_start(together, "values") > first_start(together, "ref")
    assert first_start(together, "update_actor") > first_start(together, "update_critic")
    # The critic's pass is priced alike on 8 GPUs of either group; its stage's own seconds also hold the wait for
    # the driver, busy handing the actor its batch.
    assert busy(apart, "values") == pytest.approx(busy(together, "values"), rel=1e-9)
    assert apart_stages["values"] > together_stages["values"]


def test_a_critic_sharing_the_actors_gpus_with_its_layout_takes_turns_as_before():
    default = simulate_log(bind(parse_scenario(ppo(gpus=8)))).log
    shared = simulate_log(bind(parse_scenario(ppo("critic: {share_with: actor}", gpus=8)))).log
    assert [r.stages for r in shared.steps] == [r.stages for r in default.steps]
    assert shared.wall_s == default.wall_s
    assert {s.unit for s in shared.spans if s.stage == "values" and s.label == "logprob"} == {
        f"critic{r}" for r in range(8)}


def test_a_critic_that_does_not_fit_is_refused_with_changes_to_its_placement():
    text = scenario_yaml(algorithm="ppo", model="Qwen2.5-7B", gpus=16, nodes=2, rollout_gpus=8, samples=2,
                         placement="critic: {gpus: 1, zero_stage: 0}", tp=1)
    with pytest.raises(InfeasibleError) as err:
        simulate_log(bind(parse_scenario(text.replace("nodes: 2, gpus_per_node: 8", "nodes: 2, gpus_per_node: 8"))))
    message = str(err.value)
    assert message.startswith("critic does not fit in GPU memory") and "placement.critic." in message


def test_check_shows_memory_per_role_group(tmp_path, capsys):
    path = tmp_path / "split.yaml"
    path.write_text(ppo("critic: {gpus: 8}\nreward_model: {share_with: critic}", workload=REWARD_MODEL))
    assert main(["check", str(path)]) == 0
    out = capsys.readouterr().out
    assert "critic 8 GPUs of its own on main" in out and "reward model on the critic's 8 GPUs, taking turns" in out
    assert "critic+reward_model on main" in out and "reward model weights" in out


SPLIT = "critic: {gpus: 8}\nreward_model: {share_with: critic}"


@pytest.mark.parametrize("concurrent", ["updates", "none"])
def test_a_driver_that_waits_for_each_call_runs_the_stages_of_separate_groups_in_turn(concurrent):
    # verl's worker-group calls block (single_controller's register(blocking=True)); its split-placement example
    # issues only the two updates without blocking (placement.concurrent_stages: updates).
    spans, _ = stage_spans(ppo(f"{SPLIT}\nconcurrent_stages: {concurrent}", workload=REWARD_MODEL))
    overlapping, _ = stage_spans(ppo(SPLIT, workload=REWARD_MODEL))
    assert first_start(spans, "values") >= max(last_end(spans, "old_log_prob"), last_end(spans, "ref"))
    updates_overlap = (first_start(spans, "update_actor") < last_end(spans, "update_critic")
                       and first_start(spans, "update_critic") < last_end(spans, "update_actor"))
    assert updates_overlap == (concurrent == "updates")
    # The same work, priced alike; only when it runs moves.
    for stage in ("old_log_prob", "ref", "values", "update_critic", "update_actor"):
        assert busy(spans, stage) == pytest.approx(busy(overlapping, stage), rel=1e-9)
    def training(spans: list[Span]) -> float:
        return max(last_end(spans, "update_actor"), last_end(spans, "update_critic")) - first_start(spans, "old_log_prob")

    assert training(spans) > training(overlapping)


def test_the_estimate_prices_the_stages_of_separate_groups_as_the_driver_runs_them():
    seconds = {concurrent: estimate_step(bind(parse_scenario(
        ppo(f"{SPLIT}\nconcurrent_stages: {concurrent}", workload=REWARD_MODEL)))) for concurrent in
        ("all", "updates", "none")}
    stage = {name: seconds["all"].stage(name) for name in ("old_log_prob", "ref", "values", "update_critic",
                                                            "update_actor")}
    # In turn, the values pass no longer hides behind the actor's log-prob and reference passes; nor, with no stage
    # at once, the critic's update behind the actor's.
    assert seconds["updates"].step_s == pytest.approx(seconds["all"].step_s + stage["values"], rel=1e-9)
    assert seconds["none"].step_s == pytest.approx(
        seconds["updates"].step_s + min(stage["update_critic"], stage["update_actor"]), rel=1e-9)
    assert "forward passes in turn" in seconds["updates"].overlap
