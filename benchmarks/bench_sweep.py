"""Sweep throughput and `rlsim plan` latency: prints figures, asserts nothing.

Sweep: scenarios/sweeps/quickstart-200.yaml (200 points of Qwen2.5-1.5B GRPO on 8 H100s, 8 prompts × 4 samples,
2 steps each) on the local executor with 1 and 2 workers and on a local Ray cluster of 2 CPUs; points per second
over the whole `run_sweep` call (expansion, simulation, run folders, table and report).
Plan: the documented workload (scenarios/sweeps/plan-qwen2.5-7b-grpo.yaml, Qwen2.5-7B GRPO, 256 × 16 rollouts) on 16,
64 and 128 H100s with the command's defaults (4 candidates simulated for 3 steps, one a warm-up). The issue's target: under a
minute each.

    python -m benchmarks.bench_sweep [--skip-ray] [--skip-plan]
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from rlsim.plan import plan
from rlsim.sweep import run_sweep
from rlsim.yamlsource import read_yaml

ROOT = Path(__file__).parents[1]
SWEEP = ROOT / "scenarios" / "sweeps" / "quickstart-200.yaml"
WORKLOAD = ROOT / "scenarios" / "sweeps" / "plan-qwen2.5-7b-grpo.yaml"


def sweep_throughput(label: str, **options) -> None:
    with tempfile.TemporaryDirectory() as folder:
        began = time.perf_counter()
        result = run_sweep(SWEEP, Path(folder) / "out", **options)
        seconds = time.perf_counter() - began
    print(f"{label:<24} {len(result.rows)} points in {seconds:6.1f} s  {len(result.rows) / seconds:6.2f} points/s")


def plan_latency(gpus: int) -> None:
    began = time.perf_counter()
    result = plan(read_yaml(WORKLOAD), WORKLOAD.parent, gpus=gpus, workers=os.cpu_count() or 1)
    seconds = time.perf_counter() - began
    print(f"plan on {gpus:>3} H100s        {seconds:6.1f} s  ({result.considered} candidates, {len(result.estimated)} "
          f"estimated, {len(result.ranked)} simulated); winner: {result.winner.candidate.label}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-ray", action="store_true")
    parser.add_argument("--skip-plan", action="store_true")
    args = parser.parse_args()
    print(f"{os.cpu_count()} cores")
    sweep_throughput("local, 1 worker", workers=1)
    sweep_throughput("local, 2 workers", workers=2)
    if not args.skip_ray:
        sweep_throughput("ray (local, 2 CPUs)", workers=2, executor="ray")
    if not args.skip_plan:
        for gpus in (16, 64, 128):
            plan_latency(gpus)


if __name__ == "__main__":
    main()
