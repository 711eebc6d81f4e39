#!/usr/bin/env python3
"""The fixed times vLLM's fused-MoE decode kernel spends beyond streaming the experts' weights, per call and per expert
it touches: each GPU profile's `measured.fused_moe_call_us` and `fused_moe_expert_us`, and rlsim's defaults
DEFAULT_FUSED_MOE_CALL_S and DEFAULT_FUSED_MOE_EXPERT_S.

NVIDIA's ai-dynamo/aiconfigurator measures MoE kernels for its performance model (aic-core/src/aiconfigurator_core/
systems/data/<gpu>/moe/vllm/<version>/moe_perf.parquet, snapshot 095f58a5, 2026-08-21): one fused-MoE call replayed in a
CUDA graph, 3 warm-ups and at least 6 timed replays (collector/vllm/collect_moe.py). aiconfigurator_fused_moe_bf16.csv
keeps its BF16 rows of vLLM's Triton kernel (`vllm_fused_moe`, and `..._triton_tritonexperts` from vLLM 0.24) for the
expert shapes of three catalog models (Qwen3-30B-A3B, Qwen3-235B-A22B, DeepSeek-V3) at 1-8-way tensor parallelism,
without expert parallelism, tokens spread over the experts ("balanced"), at the batch sizes where such routing and
rlsim's (uniform random) touch the same experts within 6 %: 1, 2 and 4 tokens (a long tail's decode steps), and 64,
128 and 256 tokens for 128 experts, 128 and 256 for 256 (every expert touched).

For each row, rlsim prices the same call on the engine of that model, GPU and TP with neither fixed time: its routed
experts' GEMMs (weights streamed at the profile's measured rate, plus each GEMM's fill) and its routing kernel. What the
measurement takes beyond that is fitted per GPU as call + experts touched × per-expert time, by alternating medians:
the per-call time is the median over the small-batch rows of what is left once the experts' share is taken out, the
per-expert time the median over the every-expert rows of what is left once the call's is, until both settle. Over
every row together the same fit gives the defaults for profiles without measurements. The call's time holds the
kernel's routing, alignment and output sum beyond rlsim's routing kernel; the expert's, each expert's tile pipelines
starting and draining.

    python calibration/fused_moe.py
"""
from __future__ import annotations

import csv
import statistics
from dataclasses import replace
from pathlib import Path
from typing import NamedTuple

from rlsim.costs.compute import GPURates
from rlsim.costs.rollout import EngineCosts
from rlsim.hardware import HardwareCatalog
from rlsim.models import ModelCatalog

TABLE = Path(__file__).with_name("aiconfigurator_fused_moe_bf16.csv")
SMALL_BATCH = 4  # tokens: the rows that fit the per-call time


class Row(NamedTuple):
    gpu: str  # rlsim profile
    vllm: str
    model: str
    moe_tp: int
    tokens: int
    latency_us: float  # measured


def rows() -> list[Row]:
    with TABLE.open(newline="") as handle:
        return [Row(r["gpu"], r["vllm"], r["model"], int(r["moe_tp"]), int(r["tokens"]), float(r["latency_us"]))
                for r in csv.DictReader(handle)]


def priced_us(row: Row, call_seconds: float | None = 0.0, expert_seconds: float | None = 0.0) -> tuple[float, float]:
    """(rlsim's µs for the row's call, experts it touches), with these fixed times (None: the profile's)."""
    spec = ModelCatalog.load().spec(row.model)
    rates = GPURates.from_profile(HardwareCatalog.load().gpu(row.gpu))
    if call_seconds is not None:
        rates = replace(rates, moe_call_seconds=call_seconds)
    if expert_seconds is not None:
        rates = replace(rates, moe_expert_seconds=expert_seconds)
    engine = EngineCosts(spec, rates, tp=row.moe_tp, all_reduce_seconds=(lambda _: 0.0) if row.moe_tp > 1 else None)
    parts = engine.breakdown(decode_batch=row.tokens)
    moe_layers = spec.layer_count("moe")
    seconds = sum(s for name, s in parts.items() if name.startswith("mlp.experts.") or name == "moe_routing")
    assert spec.architecture.moe is not None
    return seconds / moe_layers * 1e6, spec.architecture.moe.experts_touched(row.tokens)


def fit(rows: list[Row]) -> tuple[float, float]:
    """(per-call µs, per-expert µs) fitted to the rows' time beyond rlsim's price without either."""
    beyond = []
    for row in rows:
        priced, experts = priced_us(row)
        beyond.append((row.latency_us - priced, experts, row.tokens <= SMALL_BATCH))
    call = expert = 0.0
    for _ in range(100):
        call = statistics.median(extra - experts * expert for extra, experts, small in beyond if small)
        settled = expert
        expert = statistics.median((extra - call) / experts for extra, experts, small in beyond if not small)
        if abs(expert - settled) < 1e-6:
            break
    return call, expert


def fits() -> tuple[dict[str, tuple[float, float]], tuple[float, float]]:
    """Per GPU profile, and over every row, the fitted (per-call µs, per-expert µs)."""
    by_gpu: dict[str, list[Row]] = {}
    for row in rows():
        by_gpu.setdefault(row.gpu, []).append(row)
    return {gpu: fit(found) for gpu, found in by_gpu.items()}, fit(rows())


def main() -> None:
    per_gpu, overall = fits()
    for gpu, (call, expert) in sorted(per_gpu.items()):
        errors = [priced_us(row, None, None)[0] / row.latency_us - 1 for row in rows() if row.gpu == gpu]
        print(f"{gpu:<9} {call:5.2f} µs per call, {expert:.3f} µs per expert, over {len(errors)} rows; priced with the "
              f"profile's: median |error| {100 * statistics.median(abs(e) for e in errors):.1f} %, "
              f"worst {100 * max(abs(e) for e in errors):.1f} %")
    print(f"every row: {overall[0]:.2f} µs per call, {overall[1]:.3f} µs per expert")


if __name__ == "__main__":
    main()
