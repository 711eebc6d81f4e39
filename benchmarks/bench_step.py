"""Simulator speed on one synchronous GRPO step at production scale: prints figures, asserts nothing.

Scenario: scenarios/deepcoder-14b-grpo-64xh100.yaml — 512 prompts × 16 = 8,192 rollouts with DeepCoder-14B trace lengths
(16K cap) on 64 engines, colocated training. Runs: fast mode; the same with every response ×4 (cap ×4); and the exact
reference that steps every decode iteration (slow: minutes). Targets from the Event engine issue: ≤ 0.2 s per step on one
core, ×4 lengths ≤ 1.2× the time, fast ≥ 50× faster than exact. Fast-mode figures are the best of three runs after an
untimed one (the first run in a process also pays one-off imports), wall and CPU time each; the exact run is timed
once. The machines are shared: a wall time well above its CPU time means another process took the core.

    python -m benchmarks.bench_step [--skip-exact]
"""
from __future__ import annotations

import argparse
import time
from pathlib import Path

from rlsim.config import load_scenario
from rlsim.config.bound import bind
from rlsim.sim.run import simulate_log

SCENARIO = Path(__file__).parents[1] / "scenarios" / "deepcoder-14b-grpo-64xh100.yaml"
LONGER = {"workload.response_tokens.scale": 4.0, "algorithm.max_response_tokens": 65536}


def measure(label: str, overrides: dict, mode: str = "fast", repeats: int = 3) -> float:
    if repeats > 1:
        simulate_log(bind(load_scenario(SCENARIO, overrides)), mode=mode)
    seconds = cpu = float("inf")
    for _ in range(repeats):
        bound = bind(load_scenario(SCENARIO, overrides))
        began, began_cpu = time.perf_counter(), time.process_time()
        output = simulate_log(bound, mode=mode)
        seconds = min(seconds, time.perf_counter() - began)
        cpu = min(cpu, time.process_time() - began_cpu)
    log = output.log
    rollouts = sum(1 for r in log.sequences if r.step_trained >= 0)
    gen = sum(s.stages["gen"] for s in log.steps)
    print(f"{label:<28} {seconds:8.2f} s wall {cpu:6.2f} s CPU  {log.events:>10,} events  "
          f"{rollouts / seconds:>9,.0f} rollouts/s  (simulated step {log.wall_s:,.0f} s, gen {gen:,.0f} s)")
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-exact", action="store_true", help="skip the slow exact-mode reference")
    args = parser.parse_args()
    fast = measure("fast", {})
    longer = measure("fast, responses ×4", LONGER)
    print(f"×4 lengths cost {longer / fast:.2f}× the time (target ≤ 1.2×); one step {fast:.2f} s (target ≤ 0.2 s)")
    if not args.skip_exact:
        exact = measure("exact (every iteration)", {}, mode="exact", repeats=1)
        print(f"fast is {exact / fast:.0f}× faster than exact (target ≥ 50×)")


if __name__ == "__main__":
    main()
