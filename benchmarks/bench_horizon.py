"""Simulator cost as a run grows: wall time, CPU time and peak memory of async runs of more and more steps on large
clusters, and how they grow with the steps (the exponent of a power law fitted through the runs). Prints figures,
asserts nothing.

Scenario: Qwen2.5-7B GRPO, async with staleness 2, 256 prompts × 4 responses a step (a prompt per 16 GPUs past
4,096 GPUs, so every training rank has work; lognormal responses, median 300 tokens),
disaggregated three to one on the cluster's GPUs (H100 nodes of 8): the shape of a long RL run, small enough per
step that the run's length, not the step, dominates. Each run is a separate process, so its peak RSS is its own; the
best of `--repeats` runs is kept (the machines are shared: a wall time well above the CPU time means another process
took the core). `--events full|steps|none` also writes the run folder `rlsim run --events` would (into a temporary
folder, removed after), so the figures include the event tables and the trace; without it only `rlsim.simulate` runs.
Targets (issue 36): 1,000 steps on 1,024 GPUs in ≤ 5 min and ≤ 2 GB; 100 steps on 16,384 GPUs in ≤ 2 GB; time
growing linearly with steps (exponent ≤ 1.05).

    python -m benchmarks.bench_horizon [--gpus 1024] [--steps 10,100,1000] [--repeats 1] [--events full]
"""
from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[1]
SCENARIO = ROOT / "scenarios" / "qwen2.5-7b-grpo-32xh100-disaggregated.yaml"

CHILD = """
import json, resource, sys, tempfile, time
from pathlib import Path
import rlsim
gpus, steps, events = int(sys.argv[1]), int(sys.argv[2]), sys.argv[4]
rollout = gpus * 3 // 4
scenario = rlsim.with_(rlsim.load_scenario(sys.argv[3]), {
    "cluster.pools[0].nodes": gpus // 8, "placement.rollout.gpus": rollout, "placement.training.gpus": gpus - rollout,
    "algorithm.prompts_per_step": max(256, gpus // 16), "algorithm.samples_per_prompt": 4, "algorithm.mini_batches": 1,
    "workload.response_tokens.median_tokens": 300, "schedule.mode": "async", "schedule.max_staleness": 2,
    "run.steps": steps, "run.warmup_steps": min(3, steps - 1), "run.max_rollouts": 10**9})
wall, cpu = time.perf_counter(), time.process_time()
result = rlsim.simulate(scenario)
if events != "-":
    with tempfile.TemporaryDirectory() as folder:
        result.save(Path(folder) / "run", events=events)
from rlsim.compiled_engine import engine_build
print(json.dumps({"wall_s": time.perf_counter() - wall, "cpu_s": time.process_time() - cpu, "engine": engine_build(),
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "events": result.log.events}))
"""


def run(gpus: int, steps: int, events: str | None) -> dict:
    # -P: the child imports the rlsim this Python has installed (a wheel's compiled engine included), not the source
    # tree beside the working directory, which would shadow it.
    out = subprocess.run([sys.executable, "-P", "-W", "ignore", "-c", CHILD, str(gpus), str(steps), str(SCENARIO),
                          events or "-"],
                         capture_output=True, text=True, cwd=ROOT)
    if out.returncode != 0:
        raise SystemExit(f"the run of {steps} steps on {gpus} GPUs failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def exponent(points: list[tuple[int, float]]) -> float | None:
    """Least-squares slope of log(value) against log(steps)."""
    if len(points) < 2:
        return None
    xs, ys = [math.log(s) for s, _ in points], [math.log(v) for _, v in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpus", type=int, default=1024)
    parser.add_argument("--steps", default="10,100,1000")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--events", choices=("full", "steps", "none"), default=None,
                        help="also write the run folder with these event tables (default: simulate only)")
    args = parser.parse_args()
    rows = []
    for steps in (int(s) for s in args.steps.split(",")):
        best = min((run(args.gpus, steps, args.events) for _ in range(args.repeats)), key=lambda r: r["cpu_s"])
        rows.append((steps, best))
        print(f"{args.gpus:>6} GPUs {steps:>5} steps  {best['wall_s']:8.1f} s wall {best['cpu_s']:8.1f} s CPU  "
              f"peak {best['peak_mb']:7.0f} MB  {best['events']:>10,} events  (engine {best['engine']})", flush=True)
    for name in ("cpu_s", "peak_mb"):
        growth = exponent([(s, r[name]) for s, r in rows])
        if growth is not None:
            print(f"growth of {name} with steps: exponent {growth:.2f}")


if __name__ == "__main__":
    main()
