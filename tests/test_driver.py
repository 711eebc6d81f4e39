"""The driver's hand-off of the batch to the training workers (rlsim.costs.driver): priced per worker call from the
padded batch, the same on any number of GPUs, so it lifts the log-prob pass's share of the update most where the
passes themselves are short — the direction of verl's colocated runs on 32 -> 128 GPUs."""
import pytest

import rlsim
from rlsim.config.bound import bind
from rlsim.costs.driver import DriverHandOff, per_token_fp32
from rlsim.estimate.step import estimate_step
from rlsim.overheads import DRIVER_BATCH_BYTES_PER_S

V1 = "scenarios/validation/v1-qwen2.5-math-7b-dapo-colocated-h20.yaml"


def test_the_rate_reproduces_the_measured_hand_off():
    """verl PR #3425: a batch of 6,400 sequences padded to 20,480 tokens took 2.58 s to serialise on the driver and
    0.74 s to deserialise on the workers."""
    batch = DriverHandOff(max_prompt_tokens=4096, max_response_tokens=20480 - 4096, bytes_per_s=DRIVER_BATCH_BYTES_PER_S)
    assert batch.call_seconds(6400, per_token_fp32=0) == pytest.approx(3.32)
    # Results and per-token inputs add their fp32 values over the response positions.
    assert batch.call_seconds(6400, per_token_fp32("old_log_prob", reference=False)) > batch.call_seconds(6400, 0)
    assert per_token_fp32("update_actor", reference=True) == per_token_fp32("update_actor", reference=False) + 1


def _ratio(gpus: int, driver: bool) -> tuple[float, float]:
    scenario = rlsim.load_scenario(V1)
    changes = {"cluster.pools[0].nodes": gpus // 8, "placement.rollout.gpus": gpus}
    if not driver:
        changes["framework.driver_batch_bytes_per_s"] = None
    step = estimate_step(bind(rlsim.with_(scenario, changes)))
    return step.stage("old_log_prob"), step.stage("update_actor")


def test_the_hand_off_does_not_shrink_with_gpus_and_lifts_the_log_prob_share_most_on_many():
    """verl's fully_async page, Qwen2.5-Math-7B DAPO colocated on H20: old_log_prob/update_actor is 0.34-0.40 on 32
    GPUs and 0.47 on 128 — a per-call cost the GPUs do not divide. The hand-off adds ~8 s a call for V1's batch
    (8,192 sequences padded to 30,720 tokens) on 32 and on 128 GPUs alike."""
    added = {}
    for gpus in (32, 128):
        with_driver, without = _ratio(gpus, True), _ratio(gpus, False)
        added[gpus] = with_driver[0] - without[0]
        assert 6 < added[gpus] < 10
        share_with, share_without = with_driver[0] / with_driver[1], without[0] / without[1]
        assert share_with > share_without
    assert added[32] == pytest.approx(added[128])
    lift = {gpus: (lambda w, o: (w[0] / w[1]) / (o[0] / o[1]))(_ratio(gpus, True), _ratio(gpus, False))
            for gpus in (32, 128)}
    assert lift[128] > lift[32] > 1
