"""The figures a validation case can be compared on, each read from a simulated run or priced by a cost model.

A figure name is `kind` or `kind.argument`: `step_s`, `stage_s.update_actor`, `share_pct.rollout`,
`weight_sync_s.checkpoint_engine`. A stage figure may add stages up (`stage_s.old_log_prob+ref`) for sources whose
timers span several verl stages, as NeMo-RL's "get logprobs" spans the policy's and the reference's passes. Each kind
says whether larger is better, which decides who wins a paired comparison.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import get_args

from rlsim.api import Result
from rlsim.config.bound import bind
from rlsim.config.schema import Scenario, WeightSync
from rlsim.events import STAGES
from rlsim.pricing.weight_sync import disaggregated_sync_for

# The stages a synchronous step spends in each share of RollPacker's Table 1 (rollout / reward / training), as verl
# times them: its gen timer wraps the worker's generate_sequences, whose sharding manager reshards the weights first.
SHARE_STAGES = {
    "rollout": ("gen", "weight_sync"),
    "reward": ("reward",),
    "training": ("old_log_prob", "ref", "values", "update_actor", "update_critic", "wait"),
}
WEIGHT_SYNC_METHODS: tuple[str, ...] = get_args(WeightSync.model_fields["method"].annotation)
SUM = "+"  # joins the stages a summed stage figure adds up


@dataclass(frozen=True)
class FigureKind:
    unit: str
    higher_is_better: bool
    is_time: bool  # step and stage times: the figures the error bounds are stated over
    arguments: tuple[str, ...]  # valid arguments after the dot; empty when the kind takes none
    needs_run: bool  # read from a simulated run (else priced from the scenario alone)
    read: Callable[[Scenario, Result | None, str], float]
    meaning: str


def _measured(result: Result | None) -> Result:
    assert result is not None, "a figure that needs a run was asked without one"
    return result


def _step_s(_: Scenario, result: Result | None, __: str) -> float:
    return _measured(result).metrics["step_time_s"]["mean"]


def _step_s_less(scenario: Scenario, result: Result | None, stages: str) -> float:
    # verl fully_async's timing_s/step sums a parameter version's local steps (fetch waits and training) and leaves
    # the parameter sync out: it is timed apart (timing_s/param_sync; verl fully_async_trainer.py).
    return _step_s(scenario, result, "") - _stage_s(scenario, result, stages)


def _stage_s(_: Scenario, result: Result | None, stages: str) -> float:
    seconds = _measured(result).metrics["stages_s"]
    return sum(seconds[stage] for stage in stages.split(SUM))


def _tokens_per_s(_: Scenario, result: Result | None, __: str) -> float:
    return _measured(result).metrics["throughput"]["tokens_per_s"]


def _tokens_per_s_per_gpu(_: Scenario, result: Result | None, __: str) -> float:
    return _measured(result).metrics["throughput"]["tokens_per_s_per_gpu"]


def _rollout_tokens_per_s(scenario: Scenario, result: Result | None, __: str) -> float:
    # Trained tokens over the seconds the controller waited for generation, over the measured steps: APRIL's
    # "rollout throughput" (the rate at which a step's batch is produced).
    steps = [s for s in _measured(result).log.steps if s.step >= scenario.run.warmup_steps]
    generating = sum(s.stages.get("gen", 0.0) for s in steps)
    return sum(s.tokens for s in steps) / generating if generating else 0.0


def _generation_tokens_per_s(scenario: Scenario, result: Result | None, __: str) -> float:
    # AReaL's "generation throughput": response tokens the engines finish per second of the measured window, not
    # counting the time the staleness bound holds them back, which a generation-bound run never spends. Waiting for the
    # longest response before a weight update (no interruption) still counts against it.
    log = _measured(result).log
    steps = [s for s in log.steps if s.step >= scenario.run.warmup_steps]
    start, end = steps[0].start, steps[-1].end
    spans = log.spans
    engine_gpus = {g for span in spans.take(spans.labelled("prefill", "decode"))
                   for g in range(span.first_gpu, span.first_gpu + span.gpu_count)}
    blocked = sum(
        max(0.0, min(span.end, end) - max(span.start, start))
        * len(engine_gpus.intersection(range(span.first_gpu, span.first_gpu + span.gpu_count)))
        for span in spans.take(spans.labelled("staleness_block"))
    )
    running = (end - start) - blocked / len(engine_gpus) if engine_gpus else 0.0
    sequences = log.sequences
    generated = int(sequences.response_tokens[(start < sequences.finished) & (sequences.finished <= end)].sum())
    return generated / running if running > 0 else 0.0


def _share_pct(_: Scenario, result: Result | None, share: str) -> float:
    stages = _measured(result).metrics["stages_s"]
    total = sum(stages[s] for group in SHARE_STAGES.values() for s in group)
    return 100.0 * sum(stages[s] for s in SHARE_STAGES[share]) / total if total else 0.0


def _weight_sync_s(scenario: Scenario, _: Result | None, method: str) -> float:
    changed = scenario.model_copy(update={"schedule": scenario.schedule.model_copy(update={
        "weight_sync": scenario.schedule.weight_sync.model_copy(update={"method": method})})})
    return disaggregated_sync_for(bind(changed)).total_s


FIGURE_KINDS: dict[str, FigureKind] = {
    "step_s": FigureKind("s", False, True, (), True, _step_s, "mean step time over the measured steps"),
    "step_s_less": FigureKind("s", False, True, STAGES, True, _step_s_less,
                              "step_s less the mean seconds of a stage (or several joined by +) that the source "
                              "times apart, as verl fully_async's step leaves out its parameter sync"),
    "stage_s": FigureKind("s", False, True, STAGES, True, _stage_s,
                          "mean seconds per measured step in a verl stage (metrics.json stages_s), or in several "
                          f"joined by {SUM}"),
    "tokens_per_s": FigureKind("tokens/s", True, False, (), True, _tokens_per_s,
                               "trained prompt + response tokens per second of the measured window"),
    "tokens_per_s_per_gpu": FigureKind("tokens/s/GPU", True, False, (), True, _tokens_per_s_per_gpu,
                                       "tokens_per_s over every GPU of the cluster"),
    "rollout_tokens_per_s": FigureKind("tokens/s", True, False, (), True, _rollout_tokens_per_s,
                                       "trained tokens per second of the gen stage"),
    "generation_tokens_per_s": FigureKind("tokens/s", True, False, (), True, _generation_tokens_per_s,
                                          "response tokens the engines finish per second of the measured window, "
                                          "not counting time the staleness bound holds them back"),
    "share_pct": FigureKind("%", True, False, tuple(SHARE_STAGES), True, _share_pct,
                            "share of the step's stage seconds: rollout (gen with the weight switch), reward, "
                            "training (the rest)"),
    "weight_sync_s": FigureKind("s", False, True, WEIGHT_SYNC_METHODS, False, _weight_sync_s,
                                "seconds to push new weights from training to every rollout engine by a method "
                                "(rlsim.costs.weight_sync.disaggregated_sync_for, no simulation)"),
}


def split_name(name: str) -> tuple[str, str]:
    kind, _, argument = name.partition(".")
    return kind, argument


def check_name(name: str) -> str | None:
    """Why `name` is not a figure (None when it is one)."""
    kind, argument = split_name(name)
    if kind not in FIGURE_KINDS:
        return f"unknown figure kind {kind!r}"
    arguments = FIGURE_KINDS[kind].arguments
    summed = kind in ("stage_s", "step_s_less")
    parts = argument.split(SUM) if summed else [argument]
    if arguments and (len(set(parts)) < len(parts) or any(part not in arguments for part in parts)):
        joined = f" (or several, each once, joined by {SUM})" if summed else ""
        return f"{kind} needs one of: {', '.join(arguments)}{joined}"
    if not arguments and argument:
        return f"{kind} takes no argument"
    return None


def valid_names() -> str:
    return "; ".join(f"{k}.<{'|'.join(v.arguments)}>" if v.arguments else k for k, v in FIGURE_KINDS.items())


def kind_of(name: str) -> FigureKind:
    return FIGURE_KINDS[split_name(name)[0]]


def read_figure(name: str, scenario: Scenario, result: Result | None) -> float:
    kind, argument = split_name(name)
    return FIGURE_KINDS[kind].read(scenario, result, argument)
