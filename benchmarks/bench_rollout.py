"""Simulator speed of the rollout engines: one synchronous GRPO generation step, printed as figures (not a timed test).

8,192 rollouts (512 prompts × 16 samples) with DeepCoder-like long-tailed response lengths (lognormal, median 6k
tokens, 15% reaching the 16k cap, as in the PolyTrace DeepCoder run) on 64 engines of Qwen2.5-7B, one H100 each;
then the same with every response length ×4 (cap 64k), with the same KV cache (now far too small: preemptions) and
with a KV cache ×4 (the same pressure as the first step); then the exact mode, which steps every iteration, on a
slice of the same step small enough to finish in reasonable time, against the fast mode on that slice.

    python -m benchmarks.bench_rollout [--prompts 512] [--engines 64] [--exact-prompts 16] [--profile]
"""
from __future__ import annotations

import argparse
import math
import time
from functools import cache

import numpy as np
import simpy

from rlsim.config.framework import Framework
from rlsim.config.schema import Schedule
from rlsim.costs.compute import GPURates
from rlsim.costs.layout import EngineLayout
from rlsim.costs.rollout import EngineCosts, kv_cache_tokens
from rlsim.hardware import HardwareCatalog
from rlsim.models import ModelCatalog
from rlsim.pricing.layouts import engine_overheads
from rlsim.sim.balance import Dispatcher
from rlsim.sim.recorder import Recorder
from rlsim.sim.rollout import RolloutEngine
from rlsim.sim.sequence import Rollout

SAMPLES = 16
CAP = 16_000
MEDIAN = 6_000
SIGMA = math.log(CAP / MEDIAN) / 1.0364  # P(length >= cap) = 15%: the cap sits at the 85th percentile


class CountingEnvironment(simpy.Environment):
    def __init__(self):
        super().__init__()
        self.events = 0

    def step(self):
        super().step()
        self.events += 1


def workload(prompts: int, scale: int, seed: int = 0) -> list[Rollout]:
    rng = np.random.default_rng(seed)
    prompt_tokens = np.clip(rng.lognormal(math.log(435), 0.5, prompts), 32, 4096).astype(int)
    lengths = np.clip(np.rint(rng.lognormal(math.log(MEDIAN), SIGMA, (prompts, SAMPLES))), 1, CAP).astype(int)
    return [Rollout(g * SAMPLES + i, g, int(prompt_tokens[g]), int(lengths[g, i]) * scale, bool(lengths[g, i] >= CAP),
                    submitted=0.0)
            for g in range(prompts) for i in range(SAMPLES)]


@cache
def model_and_gpu():
    return ModelCatalog.load().spec("Qwen2.5-7B"), HardwareCatalog.load().gpu("h100-sxm")


def one_step(prompts: int, engines: int, scale: int, mode: str, balancer: str = "round_robin",
             group_placement: str = "spread", kv_scale: int = 1, repeat: int = 1) -> dict[str, float]:
    """Generate one step's rollouts; wall time is the best of `repeat` runs (the simulation is deterministic)."""
    runs = [_one_step(prompts, engines, scale, mode, balancer, group_placement, kv_scale) for _ in range(repeat)]
    return min(runs, key=lambda figures: figures["wall_s"])


def _one_step(prompts: int, engines: int, scale: int, mode: str, balancer: str, group_placement: str,
              kv_scale: int) -> dict[str, float]:
    spec, gpu = model_and_gpu()
    placement = EngineLayout(gpus=engines)
    # One cost model for identical engines: their decode profiles are built once and shared.
    costs = EngineCosts.for_layout(spec, GPURates.from_profile(gpu), placement, None, None,
                                   engine_overheads(Framework(), placement))
    kv = kv_cache_tokens(spec, gpu.memory_bytes, placement) * kv_scale
    rollouts = workload(prompts, scale)
    wall = time.perf_counter()
    env = CountingEnvironment()
    recorder = Recorder(engines)
    done: list[Rollout] = []
    pool = [RolloutEngine(env, e, costs, kv, placement.max_num_seqs, placement.max_num_batched_tokens, e, 1, recorder,
                          done.append, mode=mode) for e in range(engines)]
    schedule = Schedule(load_balancer=balancer, group_placement=group_placement)
    Dispatcher(schedule, pool, np.random.default_rng(0)).dispatch(rollouts)
    env.run()
    wall = time.perf_counter() - wall
    assert len(done) == len(rollouts)
    return {
        "rollouts": len(rollouts), "events": env.events, "wall_s": wall, "rollouts_per_s": len(rollouts) / wall,
        "makespan_s": max(r.finished for r in done), "preemptions": sum(e.preemptions for e in pool),
        "tokens": sum(r.target_tokens for r in rollouts), "kv_tokens_per_engine": kv,
    }


def show(name: str, figures: dict[str, float]) -> None:
    print(f"{name:<34} {figures['rollouts']:>6} rollouts  {figures['events']:>9,} events  "
          f"{figures['wall_s']:>8.3f} s wall  {figures['rollouts_per_s']:>9,.0f} rollouts/s  "
          f"simulated {figures['makespan_s']:>7.1f} s  {figures['preemptions']:>5} preemptions  "
          f"{figures['tokens'] / 1e6:.1f}M tokens")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=512)
    parser.add_argument("--engines", type=int, default=64)
    parser.add_argument("--exact-prompts", type=int, default=16, help="prompts of the slice run in exact mode")
    parser.add_argument("--exact-engines", type=int, default=2)
    parser.add_argument("--full-exact", action="store_true", help="also run the whole step in exact mode (about a minute)")
    parser.add_argument("--profile", action="store_true", help="profile the fast step with cProfile")
    args = parser.parse_args()

    one_step(8, 2, 1, "fast")  # warm imports and catalogs outside the timings
    if args.profile:
        import cProfile
        import pstats
        cProfile.runctx("one_step(args.prompts, args.engines, 1, 'fast')", globals(), {"args": args, "one_step": one_step},
                        "/tmp/bench_rollout.prof")
        pstats.Stats("/tmp/bench_rollout.prof").sort_stats("tottime").print_stats(15)
        return
    fast = one_step(args.prompts, args.engines, 1, "fast", repeat=3)
    show(f"fast, {args.engines} engines", fast)
    long = one_step(args.prompts, args.engines, 4, "fast")
    show(f"fast, {args.engines} engines, lengths x4", long)
    print(f"  lengths x4 / x1 wall time: {long['wall_s'] / fast['wall_s']:.2f}x, events {long['events'] / fast['events']:.2f}x"
          " (the cache holds a third of the longer sequences: preemptions and recompute prefills)")
    # The same KV pressure as the first step: what the lengths alone cost the simulator.
    same_pressure = one_step(args.prompts, args.engines, 4, "fast", kv_scale=4, repeat=3)
    show(f"fast, {args.engines} engines, lengths and KV x4", same_pressure)
    print(f"  lengths and KV x4 / x1 wall time: {same_pressure['wall_s'] / fast['wall_s']:.2f}x, "
          f"events {same_pressure['events'] / fast['events']:.2f}x")
    for balancer, placement in (("least_kv", "spread"), ("length_aware", "spread"), ("round_robin", "together")):
        show(f"fast, {balancer}, {placement}",
             one_step(args.prompts, args.engines, 1, "fast", balancer, placement, repeat=3))
    small_fast = one_step(args.exact_prompts, args.exact_engines, 1, "fast", repeat=3)
    small_exact = one_step(args.exact_prompts, args.exact_engines, 1, "exact")
    show(f"fast, slice on {args.exact_engines} engines", small_fast)
    show(f"exact, slice on {args.exact_engines} engines", small_exact)
    print(f"  exact / fast wall time on the slice: {small_exact['wall_s'] / small_fast['wall_s']:.0f}x, "
          f"events {small_exact['events'] / small_fast['events']:.0f}x; makespans differ by "
          f"{abs(small_exact['makespan_s'] / small_fast['makespan_s'] - 1):.1e}")
    speedup = small_exact["wall_s"] / small_fast["wall_s"]
    if args.full_exact:
        exact = one_step(args.prompts, args.engines, 1, "exact")
        show(f"exact, {args.engines} engines", exact)
        speedup = exact["wall_s"] / fast["wall_s"]
        print(f"  exact / fast wall time: {speedup:.0f}x; makespans differ by "
              f"{abs(exact['makespan_s'] / fast['makespan_s'] - 1):.1e}")
    print("targets (issue 4):")
    print(f"  one step <= 0.2 s on one core:   {fast['wall_s']:.3f} s")
    print(f"  lengths x4 <= 1.2x the time:     {long['wall_s'] / fast['wall_s']:.2f}x with the same KV cache, "
          f"{same_pressure['wall_s'] / fast['wall_s']:.2f}x with the same KV pressure")
    print(f"  fast >= 50x faster than exact:   {speedup:.0f}x")


if __name__ == "__main__":
    main()
