"""Which of rlsim's stages each of verl's step timers (`timing_s/*`) measures.

verl times each phase of `RayPPOTrainer.fit` with `marked_timer(name, timing_raw)` (verl/trainer/ppo/ray_trainer.py);
rlsim books the same phases under its stage names (rlsim/events.py STAGES, docs/metrics.md). The mapping is the one
the V10 validation cases use (scenarios/validation/cases.yaml).
"""
from __future__ import annotations

from collections.abc import Mapping

STEP = "step"  # not a stage: the whole step, the simulation's step time
TIMER_PREFIX = "timing_s/"

# Timers a step may log on top of its stages. They run inside `timing_s/step`, which rlsim never simulates: the step
# is compared without them.
SIDE_TIMERS = ("testing", "save_checkpoint")

ONE_TO_ONE = ("reward", "old_log_prob", "ref", "values", "adv", "update_actor", "update_critic")


def timer_stages(colocated: bool) -> Mapping[str, tuple[str, ...]]:
    """verl timer -> the rlsim stages whose sum it measures.

    gen                 colocated, verl's gen timer wraps generate_sequences, whose sharding manager first wakes the
                        engines and reshards the weights into them: rlsim's gen + weight_sync. With split pools the
                        weights move outside it: gen alone.
    generate_sequences  the engines' generate call alone (verl logs it beside gen from mid-2025): gen
    reshard             the sharding manager's entry (wake-up, weights exported and loaded, KV cache re-allocated):
                        weight_sync
    update_weights      the weight push of verl's split-pool recipes (one-step-off, fully async): weight_sync
    """
    timers: dict[str, tuple[str, ...]] = {
        "gen": ("gen", "weight_sync") if colocated else ("gen",),
        "generate_sequences": ("gen",),
        "reshard": ("weight_sync",),
        "update_weights": ("weight_sync",),
    }
    timers.update({name: (name,) for name in ONE_TO_ONE})
    timers[STEP] = (STEP,)
    return timers
