#!/usr/bin/env python3
"""The share of its modelled kernel rates that a real training step sustains: rlsim's TRAINING_KERNEL_EFFICIENCY.

rlsim prices a training step kernel by kernel, each at the rate measured for that kernel alone. llm-foundry's
benchmark table (mosaicml/llm-foundry scripts/train/benchmarking/README.md, "H100 80GB BF16") measures whole steps:
MFU of 32 FSDP (full shard) runs of its MPT models from 3B to 70B on 8-64 H100s, with and without activation
checkpointing. This script prices each run with rlsim's training model at full kernel rates, on the nearest catalog
model (Qwen2.5 of the same size: the MFU of each is taken over its own FLOPs), and prints the median of measured over
modelled MFU: the default of `framework.training_kernel_efficiency`. The smaller MPT models (1B and below) are left
out: their stand-ins spend a large share of their FLOPs in a vocabulary three times MPT's.

    python calibration/training_efficiency.py
"""
from __future__ import annotations

import statistics
from typing import NamedTuple

from rlsim.config.bound import pool_hardware
from rlsim.config.schema import Pool, TrainingPlacement
from rlsim.costs.compute import GPURates
from rlsim.costs.training import GroupCollectives, TrainingCosts, model_training_flops
from rlsim.hardware import HardwareCatalog
from rlsim.models import ModelCatalog
from rlsim.topology import ClusterTopology

STAND_INS = {"3b": "Qwen2.5-3B", "7b": "Qwen2.5-7B", "13b": "Qwen2.5-14B", "30b": "Qwen2.5-32B", "70b": "Qwen2.5-72B"}


class Run(NamedTuple):
    model: str  # llm-foundry's MPT size
    sequence: int
    gpus: int
    mfu: float  # measured, as a fraction
    micro_batch: int  # sequences
    accumulation: int  # micro-batches per optimizer step
    checkpointing: bool


# The table's rows for 3B-70B, in its order: model, sequence length, GPUs, MFU %, micro-batch, accumulation, checkpointing.
RUNS = tuple(Run(m, s, g, mfu / 100, mb, acc, ck) for m, s, g, mfu, mb, acc, ck in (
    ("70b", 2048, 64, 42.57, 8, 4, True), ("70b", 2048, 32, 36.15, 2, 16, True),
    ("30b", 8192, 8, 29.92, 1, 21, True), ("30b", 4096, 8, 35.86, 1, 21, True), ("30b", 2048, 32, 43.92, 14, 3, True),
    ("30b", 2048, 16, 43.07, 10, 3, True), ("30b", 2048, 8, 38.11, 3, 21, True), ("30b", 1024, 8, 38.76, 6, 21, True),
    ("13b", 32768, 8, 31.68, 1, 3, True), ("13b", 16384, 8, 35.55, 3, 3, True), ("13b", 4096, 8, 41.6, 10, 3, True),
    ("13b", 2048, 64, 39.86, 2, 1, False), ("13b", 2048, 32, 39.95, 2, 1, False), ("13b", 2048, 16, 39.58, 2, 1, False),
    ("13b", 2048, 8, 39.79, 2, 1, False), ("13b", 1024, 8, 44.27, 40, 3, True),
    ("7b", 65536, 8, 28.59, 1, 2, True), ("7b", 32768, 8, 30.94, 2, 2, True), ("7b", 8192, 8, 37.14, 8, 2, True),
    ("7b", 4096, 8, 40.42, 16, 2, True), ("7b", 2048, 8, 46.44, 6, 1, False), ("7b", 1024, 8, 42.83, 64, 2, True),
    ("3b", 65536, 8, 26.81, 1, 2, True), ("3b", 32768, 8, 28.84, 3, 6, True), ("3b", 16384, 8, 36.34, 1, 6, False),
    ("3b", 8192, 8, 40.31, 3, 6, False), ("3b", 4096, 8, 42.31, 5, 6, False), ("3b", 2048, 64, 40.8, 6, 3, False),
    ("3b", 2048, 32, 41.7, 6, 3, False), ("3b", 2048, 16, 43.73, 10, 3, False), ("3b", 1024, 8, 46.2, 20, 6, False),
    ("3b", 512, 8, 46.32, 40, 6, False),
))


def h100_nodes(nodes: int) -> ClusterTopology:
    """DGX H100 nodes: 8 GPUs on NVLink 4, 8 × 400 Gb/s NDR NICs each (llm-foundry's MosaicML clusters)."""
    pool = Pool(name="main", gpu="h100-sxm", nodes=nodes, gpus_per_node=8, intra_node="nvlink4", inter_node="ib-ndr",
                nics_per_node=8)
    return ClusterTopology.from_pools({"main": pool_hardware(pool, HardwareCatalog.load())})


def modelled_mfu(run: Run) -> float:
    """rlsim's MFU for the run at full kernel rates: model FLOPs over the priced step time and the GPUs' peak."""
    rates = GPURates.from_profile(HardwareCatalog.load().gpu("h100-sxm"), "bf16")
    topology = h100_nodes(run.gpus // 8)
    layout = TrainingPlacement(gpus=run.gpus, dp=run.gpus, backend="fsdp", zero_stage=3,
                               micro_batch_tokens=run.sequence * run.micro_batch,
                               activation_recompute="full" if run.checkpointing else "none")
    costs = TrainingCosts(ModelCatalog.load().spec(STAND_INS[run.model]), rates, layout,
                          GroupCollectives.on_cluster(topology, topology.gpus("main"), layout))
    micro_batches = [[run.sequence] * run.micro_batch] * run.accumulation
    flops = sum(model_training_flops(costs.spec, batch) for batch in micro_batches)
    return flops / (costs.update(micro_batches).seconds * rates.peak_flops)


def ratios() -> dict[Run, float]:
    """Measured over modelled MFU, run by run."""
    return {run: run.mfu / modelled_mfu(run) for run in RUNS}


def main() -> None:
    found = ratios()
    for run, ratio in found.items():
        print(f"MPT-{run.model:<4} {run.sequence:>6} tokens {run.gpus:>3} GPUs  checkpointing {run.checkpointing!s:<5}  "
              f"measured {run.mfu:6.1%}  modelled {run.mfu / ratio:6.1%}  ratio {ratio:.3f}")
    for label, chosen in (("with checkpointing", True), ("without", False)):
        print(f"median ratio {label}: {statistics.median(r for k, r in found.items() if k.checkpointing == chosen):.3f}")
    print(f"median ratio, all {len(found)} runs: {statistics.median(found.values()):.3f}")


if __name__ == "__main__":
    main()
