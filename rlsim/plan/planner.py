"""`rlsim plan`: with N GPUs of one type, what is the best way to run this workload?

1. enumerate candidates (rlsim/plan/candidates.py) and validate each as a scenario;
2. prune those whose per-GPU memory does not fit (as `rlsim check` judges it);
3. price the rest with `rlsim estimate` (napkin math, milliseconds each);
4. simulate a shortlist: the best estimate of each placement (colocated, disaggregated, hybrid), then the best of
   the other placement-and-schedule families in order of estimate, each measured after its pipeline has filled;
5. refine: while the best simulated candidate divides the GPUs between roles, simulate its neighbours — one eighth
   of the GPUs either side (same placement, schedule and engine size) and, when it runs async, the next staleness
   bound either side and the other way of taking new weights (same split) — and move to the best — the estimate
   prices stages on representative sequences, tells staleness bounds apart only roughly (a shared tail) and ways
   of taking new weights not at all, and cannot see how long one role starves the other;
6. try the best candidate of each placement with other training layouts (rlsim/plan/layouts.py: tensor, pipeline,
   context and expert parallelism, ZeRO stage, activation recompute), pruned by memory and ranked by the estimate,
   and simulate the best few of each, so placements are compared each at its best layout;
7. rank the simulated candidates by trained tokens per second — or, asked to (`rank="goodput"`, a base scenario
   with run.horizon), by goodput over the horizon, what each delivers once failures, restarts, checkpoints and
   evaluation are paid for (the shortlist and refinement still follow throughput) — and explain the winner against
   the runner-up.
"""
from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO

from rlsim.config.bound import bind
from rlsim.config.loader import scenario_from_document
from rlsim.config.schema import Scenario
from rlsim.costs.memory import GIB
from rlsim.errors import Problem, ScenarioError
from rlsim.estimate import estimate_step
from rlsim.hardware import HardwareCatalog
from rlsim.plan.candidates import (
    LAYOUTS,
    MEASURED_STEPS,
    RANKINGS,
    REFINE,
    SPLITS,
    STALENESS,
    Candidate,
    candidates,
    cross_pool_candidates,
    judge_candidates,
)
from rlsim.plan.layouts import layout_label, training_layouts
from rlsim.pricing.memory import memory_report
from rlsim.progress import Progress
from rlsim.sweep.compute import PointTask
from rlsim.sweep.executors import run_local
from rlsim.sweep.points import Point, point_id
from rlsim.yamlsource import YamlDocument, read_yaml

# Shortlisted in this order: HybridFlow's per-role placements (only with a critic) right after colocation.
PLACEMENTS = ("colocated", "split", "standalone", "disaggregated", "hybrid")


@dataclass(frozen=True)
class Evaluated:
    candidate: Candidate
    estimate_s: float  # estimated step time
    estimate_tokens_per_s: float
    scenario: Scenario
    metrics: dict | None = None  # after simulation

    @property
    def tokens_per_s(self) -> float:
        assert self.metrics is not None
        return self.metrics["throughput"]["tokens_per_s"]

    @property
    def step_s(self) -> float:
        assert self.metrics is not None
        return self.metrics["step_time_s"]["mean"]

    @property
    def goodput_tokens_per_s(self) -> float:
        """Trained tokens per second over run.horizon, failures and checkpoints paid (rlsim.metrics.goodput)."""
        assert self.metrics is not None
        return self.metrics["goodput"]["tokens_per_s"]

    def ranked_by(self, rank: str) -> float:
        return self.goodput_tokens_per_s if rank == "goodput" else self.tokens_per_s


@dataclass(frozen=True)
class Plan:
    gpus: int
    gpu: str
    model: str
    workload: str  # one line: what is planned for
    considered: int
    invalid: dict[str, int]  # first line of the reason -> candidates
    infeasible: dict[str, int]  # role that does not fit -> candidates
    estimated: tuple[Evaluated, ...]  # memory-feasible candidates, best estimate first
    ranked: tuple[Evaluated, ...]  # simulated candidates, best first
    measured_steps: int  # per simulation, after its schedule's pipeline fill
    notes: tuple[str, ...] = field(default=())
    pool: tuple[str, int] | None = None  # a second pool of another GPU type: (profile, GPUs)
    rank: str = "throughput"  # one of RANKINGS

    @property
    def total_gpus(self) -> int:
        return self.gpus + (self.pool[1] if self.pool else 0)

    @property
    def cluster(self) -> str:
        """The GPUs planned for, as a reader says it: `16 × h100-sxm`, or `32 × h800-sxm + 64 × h20`."""
        second = f" + {self.pool[1]} × {self.pool[0]}" if self.pool else ""
        return f"{self.gpus} × {self.gpu}{second}"

    @property
    def winner(self) -> Evaluated:
        return self.ranked[0]


def plan(base: str | Path | YamlDocument, base_dir: str | Path | None = None, *, gpus: int, gpu: str | None = None,
         model: str | None = None, overrides: Mapping[str, Any] | None = None,
         schedules: tuple[str, ...] | None = None, simulate: int = 4, measured_steps: int = MEASURED_STEPS,
         workers: int = 1, refine: int = REFINE, layouts: int = LAYOUTS, pool: tuple[str, int] | None = None,
         rank: str = "throughput", progress: TextIO | None = None) -> Plan:
    """Plan the model, algorithm and workload of `base` (a scenario file, or its parsed document with the folder its
    relative paths resolve in) on `gpus` GPUs of profile `gpu` (default: the base's first pool's). `overrides` change
    the base first (dotted paths, as `rlsim run --set`); `schedules` limits the schedule modes considered (sync,
    one_step_off, async); `refine` bounds the extra simulations spent moving the winner to a neighbouring split,
    staleness bound or way of updating weights; `layouts` the simulations spent on each placement's best candidate
    with other training layouts (parallel degrees, ZeRO stage, recompute: rlsim/plan/layouts.py), the best
    estimates of those that fit. Each
    candidate is simulated for `measured_steps` after its own schedule's pipeline fill (rlsim.config.run_length), so
    an async η = 4 warms up longer than a one-step-off run. `pool`: a second pool of another GPU type, (profile, GPUs),
    beside the `gpus` of `gpu`: the candidates then also give one pool the rollout and the other the training, each
    way round (`cross_pool_candidates`). `rank`: "throughput" (trained tokens/s) or "goodput" (over the base's
    run.horizon, with its failures, checkpoints and evaluation)."""
    if not isinstance(base, YamlDocument):
        base_dir = Path(base).resolve().parent
        base = read_yaml(base)
    base_dir = Path(base_dir or Path.cwd())
    if overrides:
        base = base.with_overrides(dict(overrides))
    data = base.data if isinstance(base.data, dict) else {}
    _check_rank(rank, data)
    judged = (((data.get("workload") or {}).get("reward") or {}).get("kind")) == "llm_judge"
    gpu = gpu or _first_pool_gpu(base)
    hardware = HardwareCatalog.load()
    per_node = _whole_nodes(hardware, gpu, gpus, "rlsim plan --gpus", "rlsim plan --gpu", minimum=2)
    second = None
    if pool is not None:
        second = (pool[0], pool[1], _whole_nodes(hardware, pool[0], pool[1], "rlsim plan --pool", "rlsim plan --pool"))
    # The run length is each candidate's own (set below), whatever the base file says.
    fixed: dict[str, Any] = {"run.steps": None, "run.warmup_steps": None}
    if model:
        fixed["model"] = model
    invalid: dict[str, int] = {}
    infeasible: dict[str, int] = {}
    estimated = []
    found = (judge_candidates if judged else candidates)(data, gpus, gpu, per_node)
    if second is not None:
        found += cross_pool_candidates(data, (gpu, gpus, per_node), second)
    found = [c for c in found if schedules is None or c.schedule.mode in schedules]
    pricing = _Pricing(base, fixed, base_dir, measured_steps, invalid, infeasible)
    for candidate in found:
        evaluated = pricing.evaluate(candidate)
        if evaluated is not None:
            estimated.append(evaluated)
    # The estimate cannot tell weight updates apart, nor staleness bounds when training sets the pace; on a tie the
    # fresher samples (smaller η) come first, then AReaL's interruption (the planner's longest-standing async
    # schedule) before updates in flight.
    estimated.sort(key=lambda e: (-e.estimate_tokens_per_s, e.candidate.schedule.staleness or 0,
                                  e.candidate.schedule.weight_update != "interrupt", e.candidate.label))
    if not estimated:
        raise ScenarioError(Problem(f"no way to run this workload on {gpus} {gpu} fits: "
                                    + "; ".join(f"{n}× {r}" for r, n in {**invalid, **infeasible}.items()),
                                    file="rlsim plan"))
    shortlist = _shortlist(estimated, simulate)
    ranked, notes = _simulate(shortlist, workers, base_dir, Progress(len(shortlist), f"{gpus}-GPU shortlist", progress))
    if ranked:
        ranked, more_notes = _refine(ranked, estimated, refine, workers, base_dir, progress)
        notes += more_notes
    if ranked and layouts:
        ranked, more_notes = _try_training_layouts(ranked, pricing, layouts, per_node, workers, base_dir, progress)
        notes += more_notes
    if not ranked:
        raise ScenarioError(Problem("no shortlisted candidate could be simulated: " + "; ".join(notes),
                                    file="rlsim plan"))
    if rank == "goodput":
        ranked = tuple(sorted(ranked, key=lambda e: (-e.goodput_tokens_per_s, e.candidate.label)))
    first = estimated[0].scenario
    workload = (f"{first.model.name} {first.algorithm.name.upper()}: {first.algorithm.prompts_per_step} prompts × "
                f"{first.algorithm.samples_per_prompt} samples per step, prompts ≤ {first.algorithm.max_prompt_tokens}"
                f" and responses ≤ {first.algorithm.max_response_tokens} tokens")
    return Plan(gpus, gpu, first.model.name, workload, len(found), invalid, infeasible, tuple(estimated), ranked,
                measured_steps, tuple(notes), pool, rank)


def _check_rank(rank: str, data: dict) -> None:
    if rank not in RANKINGS:
        raise ScenarioError(Problem(f"cannot rank by {rank!r}", file="rlsim plan --rank", value=rank,
                                    valid=", ".join(RANKINGS)))
    if rank == "goodput" and not (data.get("run") or {}).get("horizon"):
        raise ScenarioError(Problem("ranking by goodput needs the horizon it is measured over", path="run.horizon",
                                    file="rlsim plan --rank goodput",
                                    valid="run.horizon in the scenario, or --set run.horizon=30d"))


@dataclass
class _Pricing:
    """A candidate as a scenario of its own, validated, memory-checked and estimated; why the others were left out is
    counted in `invalid` and `infeasible`."""

    base: YamlDocument
    fixed: dict[str, Any]
    base_dir: Path
    measured_steps: int
    invalid: dict[str, int]
    infeasible: dict[str, int]

    def evaluate(self, candidate: Candidate) -> Evaluated | None:
        try:
            scenario = scenario_from_document(self.base.with_overrides({**self.fixed, **candidate.overrides}),
                                              base_dir=self.base_dir)
        except ScenarioError as err:
            reason = f"{err.first.path}: {err.first.message}"
            self.invalid[reason] = self.invalid.get(reason, 0) + 1
            return None
        warmup = scenario.run.warmup_steps  # the schedule's fill
        scenario = scenario.model_copy(update={"run": scenario.run.model_copy(
            update={"steps": warmup + self.measured_steps, "warmup_steps": warmup})})
        bound = bind(scenario)
        memory = memory_report(scenario, bound.model, {name: hw.gpu for name, hw in bound.pools.items()},
                               bound.reward_model)
        short = [m for m in memory if not m.fits]
        if short:
            reason = f"{short[0].role} needs {short[0].total_bytes / GIB:.0f} of {short[0].capacity_bytes / GIB:.0f} GiB"
            self.infeasible[reason] = self.infeasible.get(reason, 0) + 1
            return None
        estimate = estimate_step(bound)
        return Evaluated(candidate, estimate.step_s, estimate.tokens_per_s, scenario)


def _try_training_layouts(ranked: tuple[Evaluated, ...], pricing: _Pricing, budget: int, per_node: int, workers: int,
                          base_dir: Path, progress: TextIO | None) -> tuple[tuple[Evaluated, ...], list[str]]:
    """The best simulated candidate of each placement with other training layouts (rlsim/plan/layouts.py), so that
    placements are compared each at its best layout, as HybridFlow's auto-mapping compares them: each layout
    validated, memory-pruned and estimated, the `budget` best estimates of each simulated; the ranking takes them in,
    and a note per placement says how many were tried."""
    best_of_each = {e.candidate.placement: e for e in reversed(ranked)}
    chosen: list[Evaluated] = []
    notes: list[str] = []
    for best in sorted(best_of_each.values(), key=lambda e: (-e.tokens_per_s, e.candidate.label)):
        tried, note = _layouts_of(best, pricing, per_node)
        chosen += tried[:budget]
        notes.append(f"{note}, the best {min(budget, len(tried))} of {len(tried)} estimates simulated")
    if not chosen:
        return ranked, notes
    bar = Progress(len(chosen), f"{ranked[0].candidate.gpus}-GPU training layouts", progress)
    simulated, failed = _simulate(chosen, workers, base_dir, bar)
    return tuple(sorted((*ranked, *simulated), key=lambda e: (-e.tokens_per_s, e.candidate.label))), [*notes, *failed]


def _layouts_of(best: Evaluated, pricing: _Pricing, per_node: int) -> tuple[list[Evaluated], str]:
    """`best` with each other training layout that validates and fits, best estimate first, and what was tried."""
    spec = bind(best.scenario).model
    # Counted apart: the plan's own counts are of the placement-and-schedule candidates.
    pricing = replace(pricing, invalid={}, infeasible={})
    layouts = training_layouts(spec, best.scenario.placement.training, per_node)[1:]
    tried = []
    for layout in layouts:
        changes = {f"placement.training.{key}": value for key, value in layout.items() if key != "dp"}
        candidate = replace(best.candidate, overrides={**best.candidate.overrides, **changes},
                            training=layout_label(layout))
        evaluated = pricing.evaluate(candidate)
        if evaluated is not None:
            tried.append(evaluated)
    tried.sort(key=lambda e: (-e.estimate_tokens_per_s, e.candidate.label))
    left_out = sum(pricing.invalid.values()) + sum(pricing.infeasible.values())
    return tried, (f"training layouts of the best {best.candidate.placement} candidate: {len(layouts)} tried, "
                   f"{left_out} invalid or too large")


def _whole_nodes(hardware: HardwareCatalog, gpu: str, count: int, count_flag: str, gpu_flag: str, *,
                 minimum: int = 1) -> int:
    """GPUs per node of profile `gpu`, once `count` of them are checked to be whole nodes (or fit in one)."""
    try:
        per_node = hardware.gpu(gpu).node.gpus_per_node.value
    except LookupError as err:
        raise ScenarioError(Problem(str(err), file=gpu_flag, value=gpu)) from None
    if count < minimum or (count > per_node and count % per_node):
        raise ScenarioError(Problem(f"{count} GPUs of {gpu} are not whole nodes of {per_node}", file=count_flag,
                                    value=count, valid=f"{minimum} to {per_node}, or a multiple of {per_node}"))
    return per_node


def _first_pool_gpu(base: YamlDocument) -> str:
    try:
        return str(base.data["cluster"]["pools"][0]["gpu"])
    except (KeyError, IndexError, TypeError):
        raise ScenarioError(Problem("no GPU type: give --gpu, or a cluster.pools[0].gpu in the scenario",
                                    file="rlsim plan --gpu")) from None


def _shortlist(estimated: list[Evaluated], count: int) -> list[Evaluated]:
    """The best estimate of each placement, then the best of each remaining placement-and-schedule family, in order
    of estimate. The estimate cannot see the long tail, staleness or queueing, so every placement gets simulated."""
    chosen: list[Evaluated] = []
    for placement in PLACEMENTS:
        best = next((e for e in estimated if e.candidate.placement == placement), None)
        if best is not None:
            chosen.append(best)
    families = {e.candidate.family for e in chosen}
    for evaluated in estimated:
        if len(chosen) >= max(count, 1):
            break
        if evaluated.candidate.family not in families:
            chosen.append(evaluated)
            families.add(evaluated.candidate.family)
    return chosen[:max(count, 1)]


def _is_neighbour(best: Candidate, other: Candidate) -> bool:
    """`other` is the same as `best` but for its split moved one eighth of the GPUs, or (async) the next staleness
    bound up or down, or the other way of taking new weights."""
    if (other.placement != best.placement or other.rollout_tp != best.rollout_tp or other.pools != best.pools
            or other.judge_gpus != best.judge_gpus or other.prefill_gpus != best.prefill_gpus):
        return False
    if other.schedule == best.schedule:
        return abs(other.training_gpus - best.training_gpus) == (best.gpus - best.judge_gpus) // SPLITS
    mine, theirs = best.schedule, other.schedule
    if mine.mode != "async" or theirs.mode != "async" or other.training_gpus != best.training_gpus:
        return False
    if theirs.weight_update != mine.weight_update:
        return theirs.staleness == mine.staleness
    return abs(STALENESS.index(theirs.staleness) - STALENESS.index(mine.staleness)) == 1


def _refine(ranked: tuple[Evaluated, ...], estimated: list[Evaluated], budget: int, workers: int,
            base_dir: Path, progress: TextIO | None) -> tuple[tuple[Evaluated, ...], list[str]]:
    """Hill-climb from the winner over its neighbours (`_is_neighbour`: the split one eighth either side; for an async
    winner, the staleness bound one step either side and the other way of taking new weights, which the estimate
    prices roughly or not at all), simulating every neighbour at each round, within `budget` extra simulations."""
    seen = {e.candidate.label for e in ranked}
    notes: list[str] = []
    while budget > 0:
        best = ranked[0].candidate
        if best.placement not in ("disaggregated", "hybrid"):
            break  # colocated, split and standalone have no rollout share to move
        neighbours = [e for e in estimated
                      if e.candidate.label not in seen and _is_neighbour(best, e.candidate)][:budget]
        if not neighbours:
            break
        budget -= len(neighbours)
        seen.update(e.candidate.label for e in neighbours)
        bar = Progress(len(neighbours), f"{best.gpus}-GPU refinement", progress)
        simulated, failed = _simulate(neighbours, workers, base_dir, bar)
        notes += failed
        ranked = tuple(sorted((*ranked, *simulated), key=lambda e: (-e.tokens_per_s, e.candidate.label)))
        if ranked[0].candidate == best:
            break
    return ranked, notes


def _simulate(shortlist: list[Evaluated], workers: int, base_dir: Path,
              bar: Progress) -> tuple[tuple[Evaluated, ...], list[str]]:
    """Simulate the shortlist (on `workers` local processes); a candidate whose simulation fails is left out, with a
    note saying why."""
    tasks = [PointTask(Point(i, point_id(e.scenario, base_dir), {}, e.scenario), (), False)
             for i, e in enumerate(shortlist)]
    metrics: dict[int, dict] = {}
    notes = []
    with bar:
        for outcome in run_local(tasks, workers):
            if outcome.row["status"] == "ok":
                metrics[outcome.index] = json.loads(outcome.files["metrics.json"])
            else:
                notes.append(f"{shortlist[outcome.index].candidate.label}: {outcome.row['status']}: "
                             f"{outcome.row['error']}")
            bar.advance(outcome.row["status"])
    simulated = [Evaluated(e.candidate, e.estimate_s, e.estimate_tokens_per_s, e.scenario, metrics[i])
                 for i, e in enumerate(shortlist) if i in metrics]
    return tuple(sorted(simulated, key=lambda e: (-e.tokens_per_s, e.candidate.label))), sorted(notes)
