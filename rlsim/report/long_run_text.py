"""`rlsim check`'s lines on a long run: the failure rate and job MTBF, the restart, the checkpoint's size with its save
and restore times, the evaluation pass, and Young's checkpoint interval as a hint when `save_freq` is far from it."""
from __future__ import annotations

from rlsim.metrics.goodput import SECONDS_PER_HOUR, closed_form
from rlsim.metrics.long_run import LongRunFacts

GIB = 2**30
# save_freq within a factor of two of Young's costs little: the lost share is flat near the optimum (doubling or
# halving the interval adds a quarter of the optimum's first-order waste).
FAR_FACTOR = 2.0


def long_run_lines(facts: LongRunFacts, step_s: float, tokens_per_step: float, gpus: int, step_source: str) -> list[str]:
    """The lines, for a step of `step_s` seconds (`step_source` says where that figure comes from)."""
    times = facts.times(step_s)
    rate = times.failures_per_s
    pools = ", ".join(f"{p.pool} {p.gpus:,} GPUs × {p.per_gpu_per_s * 86400:.3g}/GPU-day" for p in facts.pools)
    mtbf = f"job MTBF {1 / rate / SECONDS_PER_HOUR:,.1f} h, {rate * facts.horizon_s:,.1f} failures expected" \
        if rate else "no failures"
    lines = [f"long run   {facts.horizon_s / 86400:,.4g} days; failures {pools}: {mtbf}; restart {facts.restart_s:,.0f} s"]
    if facts.save_freq is None:
        lines.append("           no checkpoints (verl's save_freq -1): a failure loses every step since the start")
    else:
        roles = " + ".join("/".join(g.roles) for g in facts.groups)
        mode = "blocking (async_save: the copy to host memory and any write past the next save)" \
            if facts.async_save else "blocking"
        lines.append(f"           checkpoint every {facts.save_freq} steps: {facts.checkpoint_bytes / GIB:,.1f} GiB "
                     f"({roles}); write {facts.write_s:,.1f} s, {times.save_s:,.1f} s {mode}; restore "
                     f"{facts.restore_s:,.1f} s")
    if facts.test_freq is not None:
        lines.append(f"           evaluation every {facts.test_freq} steps: {facts.evaluation_s:,.1f} s of generation")
    young = closed_form(step_s, tokens_per_step, gpus, times)
    interval, steps = young["young_daly_interval_s"], young["young_daly_save_freq"]
    if interval is not None and facts.save_freq is not None and not (
            1 / FAR_FACTOR <= facts.save_freq / steps <= FAR_FACTOR):
        lines.append(f"  hint: Young's interval for a {times.save_s:,.1f} s save and a {1 / rate / SECONDS_PER_HOUR:,.1f} h "
                     f"MTBF is {interval:,.0f} s of work, about {steps} steps of {step_s:,.0f} s ({step_source}); "
                     f"checkpoint.save_freq: {steps} would lose less than {facts.save_freq}")
    return lines
