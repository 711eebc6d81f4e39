"""The critic, the reference policy and the reward model on GPU groups: each role's pool, GPUs and data-parallel
degree resolved from GPUs of its own or from the role it shares them with, and the checks that name the field at
fault. A group is the GPUs of one role that has its own (`actor` is the policy's training GPUs); every role sharing
them takes turns on them."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rlsim.config.schedule_kind import schedule_kind
from rlsim.config.schema import OffloadHostMemory, Placement, RolePlacement, Scenario, TrainingPlacement
from rlsim.yamlsource import PathKey

Fail = Callable[..., None]  # the checker's fail(path, message, *, value=None, valid=None)
PoolName = Callable[[PathKey, str | None, str], str]  # (path, name as written, default) -> a pool that exists
PLACED_ROLES = ("critic", "reference")
# The actor's fields that say how its state leaves the GPUs while colocated engines generate: no other role's.
ACTOR_ONLY = {"offload_while_generating": False, "offload_weights_per_call": False,
              "offload_host_memory": OffloadHostMemory(), "reference_weights": "resident"}


def data_parallel(path: PathKey, layout: TrainingPlacement, gpus: int, fail: Fail) -> int:
    """The data-parallel degree of `layout` on `gpus` GPUs: as written, checked, or gpus / (tp·pp·cp)."""
    model_parallel = layout.tp * layout.pp * layout.cp
    what = path[-1]
    if layout.dp is None:
        if gpus % model_parallel:
            fail(path, f"{what} GPUs ({gpus}) are not a multiple of tp·pp·cp = {layout.tp}·{layout.pp}·{layout.cp} = "
                 f"{model_parallel}", value=gpus, valid=f"a multiple of {model_parallel}")
        return max(1, gpus // model_parallel)
    if model_parallel * layout.dp != gpus:
        fail(path + ("dp",), f"tp·pp·cp·dp = {layout.tp}·{layout.pp}·{layout.cp}·{layout.dp} = "
             f"{model_parallel * layout.dp} does not equal the {what} GPUs ({gpus})", value=layout.dp,
             valid=f"dp = {gpus // model_parallel}" if gpus % model_parallel == 0 else f"tp·pp·cp dividing {gpus}")
    return layout.dp


def resolve_role_groups(placement: Placement, pool_name: PoolName, fail: Fail) -> Placement:
    """Fill the pool, GPUs and dp of the critic and reference placements, and the pool and GPUs of a reward model
    that shares another role's GPUs (the training placement is resolved already)."""
    at = ("placement",)
    training = placement.training
    assert training.pool is not None and training.gpus is not None
    owners: dict[str, tuple[str, int]] = {"actor": (training.pool, training.gpus)}
    for role in PLACED_ROLES:
        placed = getattr(placement, role)
        if placed is None or placed.share_with is not None:
            continue
        if placed.gpus is None:
            fail(at + (role, "gpus"), f"the {role} needs GPUs of its own, or another role's to share",
                 valid="a GPU count, or share_with: actor, critic, reference or reward_model")
            continue
        owners[role] = (pool_name(at + (role, "pool"), placed.pool, training.pool), placed.gpus)
    reward = placement.reward_model
    if reward is not None and reward.share_with is None:
        if reward.gpus is None:
            fail(at + ("reward_model", "gpus"), "the reward model needs GPUs of its own, or another role's to share",
                 valid="a GPU count, or share_with: actor, critic or reference")
        else:
            assert reward.pool is not None
            owners["reward_model"] = (reward.pool, reward.gpus)

    def shared(role: str, target: str, gpus: int | None, pool: str | None) -> tuple[str, int] | None:
        if target == role or target not in owners:
            fail(at + (role, "share_with"), f"{target} has no GPUs of its own to share", value=target,
                 valid=", ".join(name for name in owners if name != role))
            return None
        own_pool, own_gpus = owners[target]
        if gpus is not None and gpus != own_gpus:
            fail(at + (role, "gpus"), f"shares the {target}'s {own_gpus} GPUs", value=gpus,
                 valid=f"{own_gpus}, or leave it out")
        if pool is not None and pool != own_pool:
            fail(at + (role, "pool"), f"shares the {target}'s GPUs, in pool {own_pool!r}", value=pool, valid=own_pool)
        return owners[target]

    updates: dict[str, Any] = {}
    for role in PLACED_ROLES:
        placed = getattr(placement, role)
        if placed is None:
            continue
        where = shared(role, placed.share_with, placed.gpus, placed.pool) if placed.share_with else owners.get(role)
        if where is None:
            continue
        pool, gpus = where
        updates[role] = placed.model_copy(update={
            "pool": pool, "gpus": gpus, "dp": data_parallel(at + (role,), placed, gpus, fail)})
    if reward is not None and reward.share_with is not None:
        where = shared("reward_model", reward.share_with, reward.gpus, reward.pool)
        if where is not None:
            updates["reward_model"] = reward.model_copy(update={"pool": where[0], "gpus": where[1]})
    return placement.model_copy(update=updates) if updates else placement


def own_gpus(placement: Placement) -> list[tuple[str, int]]:
    """(pool, GPUs) of the critic, reference and reward model groups with GPUs of their own, in placement order."""
    found = []
    for role in PLACED_ROLES:
        placed: RolePlacement | None = getattr(placement, role)
        if placed is not None and placed.share_with is None and placed.pool is not None and placed.gpus is not None:
            found.append((placed.pool, placed.gpus))
    return found


def check_role_groups(scenario: Scenario, fail: Fail) -> None:
    """A placed role the algorithm runs, with no setting that only the actor's placement means."""
    placement, algorithm = scenario.placement, scenario.algorithm
    at = ("placement",)
    for role, used, flag in (("critic", algorithm.critic, "critic"), ("reference", algorithm.ref_model, "ref_model")):
        placed: RolePlacement | None = getattr(placement, role)
        if placed is None:
            continue
        if not used:
            fail(at + (role,), f"places a {role}, but the algorithm runs none (algorithm.{flag} is false)",
                 valid=f"remove it, or set algorithm.{flag}: true")
        if placed.share_with == "reward_model" and scenario.workload.reward.kind == "llm_judge":
            fail(at + (role, "share_with"), "an LLM judge's GPUs run its own engines; only a reward model's take turns "
                 "with another role", value="reward_model",
                 valid="actor, critic or reference, or GPUs of its own (gpus)")
        for name, default in ACTOR_ONLY.items():
            if getattr(placed, name) != default:
                fail(at + (role, name), "only the actor's training placement (placement.training) says how state "
                     "leaves the GPUs or where the reference's weights live", value=getattr(placed, name),
                     valid="leave it out")
    if placement.reference is not None and placement.training.reference_weights != "resident":
        fail(at + ("training", "reference_weights"), "the reference policy has a placement of its own "
             "(placement.reference), where its weights are resident", value=placement.training.reference_weights,
             valid="resident, or leave placement.reference out")
    reward = placement.reward_model
    if (reward is not None and reward.share_with == "actor" and placement.mode == "hybrid"
            and schedule_kind(scenario.schedule.mode).off_policy):
        # Off-policy, groups are scored while the engines on the actor's GPUs generate: the two would share GPUs.
        fail(at + ("reward_model", "share_with"), f"the engines on the actor's GPUs of a hybrid placement generate "
             f"while {scenario.schedule.mode} scores each group", value="actor",
             valid="critic or reference, or GPUs of its own (gpus), or schedule.mode sync")
    if reward is not None and reward.share_with is not None and scenario.workload.reward.kind != "reward_model":
        fail(at + ("reward_model", "share_with"), "only a reward model shares another role's GPUs; an LLM judge's "
             "engines need GPUs of their own", value=reward.share_with, valid="leave it out, and give gpus")
