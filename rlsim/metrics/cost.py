"""What a step costs: GPU-hours and dollars for the whole cluster, priced per pool."""
from __future__ import annotations

from rlsim.metrics.facts import RunFacts


def cost(step_time_s: float, facts: RunFacts, environment_usd_per_step: float | None = None) -> dict:
    """GPU-hours and $ per step and per 1,000 steps at the mean step time. Every GPU of the cluster is booked for the
    whole step, whatever it does; a pool without a price (in its profile or the scenario) leaves the dollars null.
    With an environment pool its sandboxes' price per step (`environment_usd_per_step`) is added to the dollars."""
    gpu_hours = facts.gpus * step_time_s / 3600.0
    unpriced = [pool.name for pool in facts.pools if pool.price_usd_per_gpu_hour is None]
    usd = None if unpriced else sum(pool.gpus * pool.price_usd_per_gpu_hour * step_time_s / 3600.0
                                    for pool in facts.pools)
    figures = {
        "gpu_hours_per_step": gpu_hours,
        "gpu_hours_per_1000_steps": 1000.0 * gpu_hours,
        "usd_per_step": usd,
        "usd_per_1000_steps": None if usd is None else 1000.0 * usd,
        "usd_per_gpu_hour": {pool.name: pool.price_usd_per_gpu_hour for pool in facts.pools},
        "unpriced_pools": unpriced,
    }
    if environment_usd_per_step is not None:
        figures["environment_usd_per_step"] = environment_usd_per_step
        if usd is not None:
            figures["usd_per_step"] = usd + environment_usd_per_step
            figures["usd_per_1000_steps"] = 1000.0 * (usd + environment_usd_per_step)
    return figures
