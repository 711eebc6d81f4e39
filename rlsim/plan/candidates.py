"""Every way to run one workload on N GPUs of one type that `rlsim plan` considers.

Placements: colocated (every GPU generates and trains, in turn); disaggregated with the rollout share of the GPUs in
eighths (1/8 … 7/8); hybrid with the training share in eighths up to half (those GPUs also generate, the rest only
generate). With a critic (PPO), HybridFlow's per-role placements too (Sheng et al., EuroSys 2025, arXiv:2409.19256,
§8.3): colocated is its "colocate" (every model on all GPUs, taking turns); "split" puts the actor, the reference and
the engines on one half of the GPUs and the critic and the reward model on the other; "standalone" gives the actor
with the engines, the critic, the reference and the reward model a quarter each, or GPUs by each role's work
(`uneven_sizings`). A reward model shares the actor's GPUs in the other placements. Schedules: colocated, split and
standalone run sync (generation and training cannot overlap on shared GPUs); the others run sync, one-step-off, or
async with staleness η ∈ {1, 2, 4}, its engines taking new weights either by AReaL's interruptible generation or in
flight (NeMo-RL, PipelineRL). Parallel layouts: rollout engines of tp 1, 2, 4 or 8 GPUs (within a node); training
keeps the base scenario's layout (backend, ZeRO stage, tp/pp/cp, micro-batch tokens, recompute, offload, where the
reference policy lives) with data parallelism over its GPUs, and so does a placed critic or reference on its group.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from typing import Any

SPLITS = 8  # GPU shares in eighths: coarse enough to simulate the best few, fine enough for a ¾ rollout split
ROLLOUT_TPS = (1, 2, 4, 8)
STALENESS = (1, 2, 4)  # small bounds, the range AReaL studies (Fu et al. 2025, "AReaL", arXiv:2505.24298)
# vLLM's default share of HBM for an engine that owns its GPUs (docs: EngineArgs gpu_memory_utilization = 0.9).
DEDICATED_MEMORY_UTILIZATION = 0.9
TRAINING_LAYOUT_KEYS = ("backend", "zero_stage", "tp", "pp", "cp", "ep", "micro_batch_tokens", "logprob_micro_batch_tokens",
                        "activation_recompute", "offload_params", "offload_optimizer", "virtual_pipeline_stages",
                        "reference_weights", "sequence_packing", "pp_pads_micro_batches", "logprob_kernel",
                        "overlap_grad_reduce")
# Extra simulations refinement may spend: an async winner has up to five neighbours (two splits, two staleness bounds,
# the other way of taking weights), so 12 allow two full rounds and most of a third. On the documented workload at 64
# H100s, 4 stopped after one round at η=2 interrupted (201k tokens/s); the climb ends at η=2 in flight (212k) after 11.
REFINE = 12
# Simulations spent on each placement's best candidate with other training layouts, once placements and schedules
# are simulated: the two best estimates of the layouts that fit (the estimate prices training layouts from the same
# cost model as the simulation).
LAYOUTS = 2
# What `rlsim plan` ranks the simulated candidates by: trained tokens/s in steady state, or goodput over the scenario's
# run.horizon (failures, restarts, checkpoints and evaluation paid for).
RANKINGS = ("throughput", "goodput")
# Steps each shortlisted simulation measures after its warm-up (its schedule's fill), as validation cases do.
MEASURED_STEPS = 2
# Settings of moving training state to the host while generating: they only mean something where the roles share GPUs.
COLOCATED_TRAINING_KEYS = ("offload_while_generating", "offload_weights_per_call", "offload_host_memory")


@dataclass(frozen=True)
class Schedule:
    mode: str
    staleness: int | None = None
    # How an async run's engines take new weights: AReaL interrupts generation and recomputes the KV cache of the
    # sequences in flight ("interrupt"); NeMo-RL's in_flight_weight_updates and PipelineRL load them between two
    # engine iterations and let those sequences continue ("in_flight").
    weight_update: str = "interrupt"

    @property
    def label(self) -> str:
        if self.mode != "async":
            return self.mode.replace("_", "-")
        return f"async η={self.staleness}" + (" in-flight" if self.weight_update == "in_flight" else "")

    def overrides(self) -> dict[str, Any]:
        partial = self.weight_update if self.mode == "async" else "off"
        return {"schedule.mode": self.mode, "schedule.max_staleness": self.staleness,
                "schedule.partial_rollout": {"mode": partial}}


WEIGHT_UPDATES = ("interrupt", "in_flight")
SCHEDULES = (Schedule("sync"), Schedule("one_step_off"),
             *(Schedule("async", eta, update) for eta in STALENESS for update in WEIGHT_UPDATES))


# HybridFlow's per-role placements of PPO: (name, the roles of each GPU group), the GPUs shared equally by the groups
# of the roles the workload has. The actor and the engines share the first group.
ROLE_PLACEMENTS = (
    ("split", (("actor", "reference"), ("critic", "reward_model"))),
    ("standalone", (("actor",), ("critic",), ("reference",), ("reward_model",))),
)
# HybridFlow sized its standalone placement by each role's work (§8.3: 13B at 128 GPUs, actor 64, critic 32, reference
# and reward model 16 each). Beside the equal shares, standalone is also tried at every sizing whose groups each hold
# a power-of-two count of whole nodes (of GPUs, within one node), a role with more work per step never holding fewer
# GPUs than one with less: the actor (generation, log-probs, update) first, the critic (values, update) next, the
# forward-only reference and reward model last. Halvings keep the sizings few — one at 64 and at 128 GPUs, two at 96.
WORK_RANK = {"actor": 0, "critic": 1, "reference": 2, "reward_model": 2}
UNEVEN_PLACEMENTS = ("standalone",)
ROLE_NAMES = {"actor": "actor+rollout", "critic": "critic", "reference": "ref", "reward_model": "reward model"}
# The actor's layout fields a placed critic or reference does not take (rlsim.config.role_groups.ACTOR_ONLY).
ACTOR_ONLY_KEYS = ("reference_weights",)


@dataclass(frozen=True)
class Candidate:
    placement: str  # colocated, disaggregated, hybrid, or (with a critic) split or standalone
    schedule: Schedule
    rollout_gpus: int
    training_gpus: int
    rollout_tp: int
    gpus: int
    overrides: dict[str, Any]
    role_groups: tuple[tuple[str, ...], ...] = ()  # split and standalone: the roles of each GPU group
    group_gpus: tuple[int, ...] = ()  # split and standalone: the GPUs of each group, in role_groups' order
    training: str = ""  # a training layout other than the base scenario's (rlsim/plan/layouts.py), else empty
    pools: tuple[str, str] = ()  # with two GPU types: the rollout's GPU and the training's, each its own pool
    judge_gpus: int = 0  # an LLM judge's GPUs of its own, carved from the budget
    prefill_gpus: int = 0  # prefill engines' GPUs (prefill/decode disaggregation), in the training's pool

    @property
    def family(self) -> str:
        return f"{self.placement} {self.schedule.label}"

    @property
    def label(self) -> str:
        if self.placement == "colocated":
            split = f"all {self.gpus - self.judge_gpus}"
        elif self.role_groups:
            split = " / ".join(f"{gpus} {'+'.join(ROLE_NAMES[role] for role in group)}"
                               for gpus, group in zip(self.group_gpus, self.role_groups, strict=True))
        elif self.pools and self.prefill_gpus:
            split = (f"{self.rollout_gpus} {self.pools[0]} decode + {self.prefill_gpus} {self.pools[1]} prefill + "
                     f"{self.training_gpus} {self.pools[1]} train")
        elif self.pools:
            split = f"{self.rollout_gpus} {self.pools[0]} rollout + {self.training_gpus} {self.pools[1]} train"
        elif self.placement == "disaggregated":
            split = f"{self.rollout_gpus} rollout + {self.training_gpus} train"
        else:
            split = f"{self.training_gpus} shared + {self.rollout_gpus - self.training_gpus} rollout-only"
        layout = f", {self.training}" if self.training else ""
        judge = f", judge on {self.judge_gpus}" if self.judge_gpus else ""
        return f"{self.placement} {split}, rollout tp{self.rollout_tp}, {self.schedule.label}{judge}{layout}"

    @property
    def rollout_share(self) -> float:
        """Share of the GPUs that only generate (colocated: none are dedicated, all generate)."""
        dedicated = {"disaggregated": self.rollout_gpus,
                     "hybrid": self.rollout_gpus - self.training_gpus}.get(self.placement, 0)
        return dedicated / self.gpus


def candidates(base: dict, gpus: int, gpu: str, gpus_per_node: int) -> list[Candidate]:
    """Every candidate for `gpus` GPUs of profile `gpu`; `base` is the base scenario as written (for its rollout and
    training settings). Candidates may still be invalid or not fit: the planner validates and prunes them."""
    per_node = min(gpus, gpus_per_node)
    cluster = [_pool("main", gpu, gpus, gpus_per_node, base)]
    placement = base.get("placement") or {}
    rollout_base = {k: v for k, v in (placement.get("rollout") or {}).items() if k not in ("gpus", "tp", "pool")}
    training_base = {k: v for k, v in (placement.get("training") or {}).items() if k in TRAINING_LAYOUT_KEYS}
    shared_memory = rollout_base.get("gpu_memory_utilization", 0.5)
    colocated_only = {k: v for k, v in (placement.get("training") or {}).items() if k in COLOCATED_TRAINING_KEYS}

    # A reward model on GPUs (workload.reward.kind reward_model) is placed by the candidate, at the base's tp.
    reward_kind = (((base.get("workload") or {}).get("reward") or {}).get("kind"))
    reward_tp = (placement.get("reward_model") or {}).get("tp", 1)
    reward_on_actor = {"reward_model": {"share_with": "actor", "tp": reward_tp}} if reward_kind == "reward_model" else {}
    # How the driver runs the stages of roles on different GPU groups is the framework's, not the placement's choice.
    driver = {"concurrent_stages": placement["concurrent_stages"]} if "concurrent_stages" in placement else {}

    def make(mode: str, schedule: Schedule, rollout: int, training: int, tp: int, memory: float,
             name: str | None = None, groups: tuple[tuple[str, ...], ...] = (),
             sizes: tuple[int, ...] = ()) -> Candidate:
        training_layout = {**training_base, **(colocated_only if mode == "colocated" else {}), "gpus": training}
        layout = {"mode": mode, "rollout": {**rollout_base, "gpus": rollout, "tp": tp, "gpu_memory_utilization": memory},
                  "training": training_layout, **reward_on_actor, **placed_roles(groups, sizes), **driver}
        return Candidate(name or mode, schedule, rollout, training, tp, gpus,
                         {"cluster.pools": cluster, "placement": layout, **schedule.overrides()}, groups, sizes)

    def placed_roles(groups: tuple[tuple[str, ...], ...], sizes: tuple[int, ...]) -> dict[str, Any]:
        """Each group but the actor's: its first role on its size of GPUs of its own, the others sharing them."""
        own = {k: v for k, v in training_base.items() if k not in ACTOR_ONLY_KEYS}
        return {role: {**({"tp": reward_tp} if role == "reward_model" else own),
                       **({"share_with": group[0]} if i else {"gpus": size})}
                for group, size in zip(groups[1:], sizes[1:], strict=True) for i, role in enumerate(group)}

    present = {"actor", *_roles_used(base), *(("reward_model",) if reward_kind == "reward_model" else ())}
    found = []
    for tp in (t for t in ROLLOUT_TPS if t <= per_node):
        found.append(make("colocated", SCHEDULES[0], gpus, gpus, tp, shared_memory))
        for name, groups in ROLE_PLACEMENTS if "critic" in present else ():
            used = tuple(g for g in (tuple(role for role in group if role in present) for group in groups) if g)
            equal = () if gpus % len(used) else ((gpus // len(used),) * len(used),)
            uneven = uneven_sizings(used, gpus, per_node) if name in UNEVEN_PLACEMENTS else []
            for sizes in (*equal, *uneven):
                if sizes[0] % tp or any(size > per_node and size % per_node for size in sizes):
                    continue
                found.append(make("colocated", SCHEDULES[0], sizes[0], sizes[0], tp, shared_memory, name, used, sizes))
        for share in range(1, SPLITS):
            part = gpus * share // SPLITS
            if gpus * share % SPLITS or part % tp:
                continue
            for schedule in SCHEDULES:
                found.append(make("disaggregated", schedule, part, gpus - part, tp, DEDICATED_MEMORY_UTILIZATION))
                if share <= SPLITS // 2:  # hybrid: this share trains (and generates), the rest only generates
                    found.append(make("hybrid", schedule, gpus, part, tp, shared_memory))
    return found


def uneven_sizings(groups: tuple[tuple[str, ...], ...], gpus: int, per_node: int) -> list[tuple[int, ...]]:
    """GPUs of each role group for `gpus` GPUs, other than equal shares: each group a power-of-two count of whole
    nodes (of GPUs, within one node), no group whose first role has more work (WORK_RANK) smaller than one with
    less."""
    unit = per_node if gpus > per_node else 1
    units = gpus // unit
    powers = [2 ** k for k in range(units.bit_length()) if 2 ** k <= units]
    ranks = [WORK_RANK[group[0]] for group in groups]
    found = []
    for counts in itertools.product(powers, repeat=len(groups)):
        if sum(counts) != units or len(set(counts)) == 1:
            continue
        if any(counts[i] < counts[j] for i, j in itertools.permutations(range(len(groups)), 2) if ranks[i] < ranks[j]):
            continue
        found.append(tuple(count * unit for count in counts))
    return found


def cross_pool_candidates(base: dict, first: tuple[str, int, int], second: tuple[str, int, int]) -> list[Candidate]:
    """With two GPU types, (profile, GPUs, GPUs per node) each: one pool generates and the other trains, each way
    round, with every schedule that lets separate GPUs overlap and every engine size that fits in a node (RollArt's
    "hardware affinity" at the level of roles: generation where memory bandwidth is cheap, training where FLOPs are);
    and the same with the prompts prefilled on an eighth or a quarter of the training pool's GPUs (RollArt's affinity
    within generation: compute-bound prefill beside training, bandwidth-bound decode on the other type)."""
    placement = base.get("placement") or {}
    rollout_base = {k: v for k, v in (placement.get("rollout") or {}).items() if k not in ("gpus", "tp", "pool")}
    training_base = {k: v for k, v in (placement.get("training") or {}).items() if k in TRAINING_LAYOUT_KEYS}
    found = []
    for (rollout_gpu, rollout_count, rollout_node), (train_gpu, train_count, train_node) in ((first, second),
                                                                                            (second, first)):
        cluster = [_pool("rollout", rollout_gpu, rollout_count, rollout_node, base),
                   _pool("train", train_gpu, train_count, train_node, base)]
        for tp in (t for t in ROLLOUT_TPS if t <= min(rollout_node, rollout_count) and rollout_count % t == 0):
            layout = {"mode": "disaggregated",
                      "rollout": {**rollout_base, "pool": "rollout", "gpus": rollout_count, "tp": tp,
                                  "gpu_memory_utilization": DEDICATED_MEMORY_UTILIZATION},
                      "training": {**training_base, "pool": "train", "gpus": train_count}}
            for prefill in [0, *_prefill_shares(train_count, tp)]:
                placed = layout if not prefill else {
                    **layout, "rollout": {**layout["rollout"], "prefill": {"pool": "train", "gpus": prefill, "tp": tp}},
                    "training": {**layout["training"], "gpus": train_count - prefill}}
                for schedule in SCHEDULES:
                    found.append(Candidate("disaggregated", schedule, rollout_count, train_count - prefill, tp,
                                           rollout_count + train_count,
                                           {"cluster.pools": cluster, "placement": placed, **schedule.overrides()},
                                           pools=(rollout_gpu, train_gpu), prefill_gpus=prefill))
    return found


# Shares of the training pool a P/D candidate gives its prefill engines: prefill is a small part of generation's
# work (a prompt's tokens in a few large iterations against thousands of decode steps), so a few GPUs serve many
# decode engines (RollArt: prefill on a fraction of the H800s, decode on the H20s).
PREFILL_SHARES = (1 / 8, 1 / 4)


def _prefill_shares(train_count: int, tp: int) -> list[int]:
    """Prefill GPU counts for a training pool of `train_count` GPUs: whole engines of `tp`, training keeping most."""
    counts = {max(tp, round(train_count * share / tp) * tp) for share in PREFILL_SHARES}
    return sorted(count for count in counts if count < train_count // 2)


# An LLM judge's share of the GPU budget: engines of its own, carved from the GPUs rollout and training would get.
JUDGE_SHARES = (1 / 8, 1 / 4)


def judge_candidates(base: dict, gpus: int, gpu: str, gpus_per_node: int) -> list[Candidate]:
    """With an LLM judge (workload.reward.kind llm_judge): every candidate of the GPUs left once the judge has about
    an eighth or a quarter of them (whole nodes beyond one node, whole engines of the base's judge tp), the judge's
    GPUs placed after the policy's."""
    judge_tp = ((base.get("placement") or {}).get("reward_model") or {}).get("tp", 1)
    unit = gpus_per_node if gpus > gpus_per_node else 1
    sizes = sorted({max(unit, round(gpus * share / unit) * unit) for share in JUDGE_SHARES})
    found = []
    for judge in sizes:
        left = gpus - judge
        if judge % judge_tp or left < 2:
            continue
        whole = [_pool("main", gpu, gpus, gpus_per_node, base)]
        for candidate in candidates(base, left, gpu, gpus_per_node):
            placement = {**candidate.overrides["placement"], "reward_model": {"gpus": judge, "tp": judge_tp}}
            found.append(replace(candidate, gpus=gpus, judge_gpus=judge,
                                 overrides={**candidate.overrides, "cluster.pools": whole, "placement": placement}))
    return found


# A base pool's network, kept when a planned pool has its GPU type: the links a testbed had (HybridFlow's A100 nodes
# with one 200 Gb/s NIC each, where the profile has eight) are part of the question the plan answers.
POOL_LINK_KEYS = ("intra_node", "inter_node", "nics_per_node")


def _pool(name: str, gpu: str, count: int, per_node: int, base: dict) -> dict[str, Any]:
    """A planned pool of `count` GPUs of `gpu`, whole nodes of `per_node` (or one smaller node), with the links of
    the base's first pool of that GPU type."""
    nodes, per = (count // per_node, per_node) if count >= per_node else (1, count)
    same = [p for p in ((base.get("cluster") or {}).get("pools") or []) if isinstance(p, dict) and p.get("gpu") == gpu]
    links = {k: same[0][k] for k in POOL_LINK_KEYS if same and k in same[0]}
    return {"name": name, "gpu": gpu, "nodes": nodes, "gpus_per_node": per, **links}


def _roles_used(base: dict) -> set[str]:
    """The critic and reference of the base's algorithm, as the schema defaults them (PPO trains a critic; every
    algorithm but DAPO runs a reference pass)."""
    algorithm = base.get("algorithm") or {}
    name = algorithm.get("name")
    used = {"critic": algorithm.get("critic", name == "ppo"), "reference": algorithm.get("ref_model", name != "dapo")}
    return {role for role, on in used.items() if on}
