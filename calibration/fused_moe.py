#!/usr/bin/env python3
"""The fixed time vLLM's fused-MoE decode kernel spends per expert it touches: each GPU profile's
`measured.fused_moe_expert_us` and rlsim's DEFAULT_FUSED_MOE_EXPERT_S.

NVIDIA's ai-dynamo/aiconfigurator measures MoE kernels for its performance model (aic-core/src/aiconfigurator_core/
systems/data/<gpu>/moe/vllm/<version>/moe_perf.parquet, snapshot 095f58a5, 2026-08-21): one fused-MoE call replayed in a
CUDA graph, 3 warm-ups and at least 6 timed replays (collector/vllm/collect_moe.py). aiconfigurator_fused_moe_bf16.csv
keeps its BF16 rows of vLLM's Triton kernel (`vllm_fused_moe`, and `..._triton_tritonexperts` from vLLM 0.24) for the
expert shapes of three catalog models (Qwen3-30B-A3B, Qwen3-235B-A22B, DeepSeek-V3) at 1-8-way tensor parallelism,
without expert parallelism, tokens spread over the experts ("balanced"), at the batch sizes where such routing and
rlsim's (uniform random) touch the same experts within 2 %: 64, 128 and 256 tokens for 128 experts, 128 and 256 for 256.

For each row, rlsim prices the same call on the engine of that model, GPU and TP with no per-expert time: its routed
experts' GEMMs (weights streamed at the profile's measured rate, plus each GEMM's fill) and its routing kernel. What the
measurement takes beyond that, divided by the experts touched, is the row's per-expert time; its median over a GPU's
rows is that profile's value, and the median over every row the default for profiles without measurements. Whatever
the kernel does besides streaming weights lands there: the per-expert tile pipelines' start and drain, the token
alignment and the weighted sum of the experts' outputs.

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


def priced_us(row: Row, moe_expert_seconds: float | None = 0.0) -> tuple[float, float]:
    """(rlsim's µs for the row's call, experts it touches) with `moe_expert_seconds` per expert (None: the profile's)."""
    spec = ModelCatalog.load().spec(row.model)
    rates = GPURates.from_profile(HardwareCatalog.load().gpu(row.gpu))
    if moe_expert_seconds is not None:
        rates = replace(rates, moe_expert_seconds=moe_expert_seconds)
    engine = EngineCosts(spec, rates, tp=row.moe_tp, all_reduce_seconds=(lambda _: 0.0) if row.moe_tp > 1 else None)
    parts = engine.breakdown(decode_batch=row.tokens)
    moe_layers = spec.layer_count("moe")
    seconds = sum(s for name, s in parts.items() if name.startswith("mlp.experts.") or name == "moe_routing")
    assert spec.architecture.moe is not None
    return seconds / moe_layers * 1e6, spec.architecture.moe.experts_touched(row.tokens)


def per_expert_us(row: Row) -> float:
    """The row's measured time beyond rlsim's price without a per-expert time, per expert touched."""
    priced, experts = priced_us(row)
    return (row.latency_us - priced) / experts


def medians() -> tuple[dict[str, float], float]:
    """Per GPU profile, and over every row, the median per-expert time (µs)."""
    found: dict[str, list[float]] = {}
    for row in rows():
        found.setdefault(row.gpu, []).append(per_expert_us(row))
    everything = [value for values in found.values() for value in values]
    return {gpu: statistics.median(values) for gpu, values in found.items()}, statistics.median(everything)


def main() -> None:
    per_gpu, overall = medians()
    for gpu, value in sorted(per_gpu.items()):
        errors = [priced_us(row, None)[0] / row.latency_us - 1 for row in rows() if row.gpu == gpu]
        print(f"{gpu:<9} median {value:.3f} µs per expert over {len(errors)} rows; priced with the profile's value: "
              f"median |error| {100 * statistics.median(abs(e) for e in errors):.1f} %, "
              f"worst {100 * max(abs(e) for e in errors):.1f} %")
    print(f"every row: median {overall:.3f} µs per expert")


if __name__ == "__main__":
    main()
