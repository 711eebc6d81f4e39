"""Resolve and check a long run's sections (failures, checkpoint, evaluation) against `run.horizon` and the pools:
each pool's failure rate is filled from its GPU profile unless the scenario gives one, so the resolved scenario names
the rate every pool fails at."""
from __future__ import annotations

from collections.abc import Callable

from rlsim.config.long_run import Failures, duration_seconds, rate_for_pool
from rlsim.config.schema import Scenario
from rlsim.hardware import HardwareCatalog

Fail = Callable[..., None]  # the checker's fail(path, message, *, value=None, valid=None)
HOURS_PER_DAY = 24.0
# The goodput model draws once per failure (rlsim.metrics.goodput), ~10 µs each. 100,000 H100s for ten years at
# Llama 3's rate expect ~173,000 failures, so past this bound a rate or a horizon is a unit slip, and its run would
# take seconds to sample.
MAX_EXPECTED_FAILURES = 200_000
SECTIONS = ("failures", "checkpoint", "evaluation")


def resolve_long_run(scenario: Scenario, hardware: HardwareCatalog, fail: Fail) -> Failures | None:
    """The failures section with a per-GPU-day rate for every pool, or None without run.horizon (and then no section
    may be given)."""
    if scenario.run.horizon is None:
        for section in SECTIONS:
            if getattr(scenario, section) is not None:
                fail((section,), f"{section} applies to a long run: set run.horizon (e.g. 30d) to report goodput over it",
                     valid="run.horizon set, or no " + section + " section")
        return None
    evaluation = scenario.evaluation
    if evaluation is not None and evaluation.prompts * evaluation.samples_per_prompt > scenario.run.max_rollouts:
        fail(("evaluation", "prompts"), f"an evaluation pass of {evaluation.prompts * evaluation.samples_per_prompt:,} "
             f"responses is past run.max_rollouts ({scenario.run.max_rollouts:,}), what a run may generate",
             value=evaluation.prompts, valid="fewer prompts or samples, or a larger run.max_rollouts")
    failures = scenario.failures or Failures()
    names = [pool.name for pool in scenario.cluster.pools]
    for field in ("failures_per_gpu_day", "mtbf_gpu_hours"):
        given = getattr(failures, field)
        for name in given if isinstance(given, dict) else ():
            if name not in names:
                fail(("failures", field, name), f"no pool named {name!r}", value=name, valid=", ".join(names))
    rates: dict[str, float] = {}
    for pool in scenario.cluster.pools:
        rate = rate_for_pool(failures.failures_per_gpu_day, pool.name)
        mtbf = rate_for_pool(failures.mtbf_gpu_hours, pool.name)
        if rate is None and mtbf is not None:
            rate = HOURS_PER_DAY / mtbf
        if rate is None:
            published = hardware.gpu(pool.gpu).failures_per_gpu_day
            if published is None:
                fail(("failures", "failures_per_gpu_day"), f"no fleet has published a failure rate for {pool.gpu} "
                     f"(pool {pool.name!r}); give one", valid=f"failures_per_gpu_day: {{{pool.name}: <failures per "
                     "GPU per day>}, or mtbf_gpu_hours (Llama 3's H100s: 4.7e-4 per GPU-day)")
                continue
            rate = published.value
        rates[pool.name] = rate
    days = duration_seconds(scenario.run.horizon) / (HOURS_PER_DAY * 3600)
    expected = sum(pool.gpus * rates.get(pool.name, 0.0) for pool in scenario.cluster.pools) * days
    if expected > MAX_EXPECTED_FAILURES:
        fail(("failures",), f"{expected:,.0f} failures expected over the horizon: the rate is per GPU per day "
             "(Llama 3's H100s: 4.7e-4) and the horizon a duration (30d)",
             valid=f"rates and a horizon expecting at most {MAX_EXPECTED_FAILURES:,} failures")
    return failures.model_copy(update={"failures_per_gpu_day": rates, "mtbf_gpu_hours": None})
