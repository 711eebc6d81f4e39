#!/usr/bin/env python3
"""The share of its modelled kernel rates that a Megatron-Core training step sustains: rlsim's MEGATRON_KERNEL_EFFICIENCY.

Megatron-Bridge (NVIDIA-NeMo/Megatron-Bridge) publishes the tokens/s/GPU of Megatron-Core pretraining. Its BF16 runs of
models in rlsim's catalog are priced here at the same layout, at full kernel rates, and the median of published over
modelled throughput is the default of `framework.megatron_kernel_efficiency`, as llm-foundry's FSDP runs give
`framework.training_kernel_efficiency` (training_efficiency.py). The runs:

* the model-verification cards' pretraining runs, natural routing on real data (examples/model_verification_cards/
  <model>/card.yaml, "pretrain: H100": "last_10_steps_tokens_per_second_per_gpu_avg"): Qwen3-8B on 16 H100s, TP1 DP16,
  GBS/MBS 1024/1, 4,096 tokens, verified 2026-07-21; Qwen3-30B-A3B on 16 H100s, TP1 EP16, GBS/MBS 1024/1, HybridEP
  dispatcher and CUDA graphs around the router, verified 2026-07-19 ("Timing and throughput are support sanity checks,
  not ... tuned performance claims");
* the performance summary's tuned runs, the experts' token counts forced to balance (docs/performance-summary.md,
  archive "25.11 NeMo Container", DGX-GB200 table): Qwen3-235B-A22B and DeepSeek-V3 on 256 GB200s.

    python calibration/megatron_bridge.py
"""
from __future__ import annotations

import statistics
from typing import NamedTuple

from rlsim.config.bound import pool_hardware
from rlsim.config.schema import Pool, TrainingPlacement
from rlsim.costs.training import GroupCollectives, TrainingCosts, training_rates
from rlsim.hardware import HardwareCatalog
from rlsim.models import ModelCatalog
from rlsim.overheads import MEGATRON_KERNEL_EFFICIENCY
from rlsim.topology import ClusterTopology


class Row(NamedTuple):
    model: str
    gpu: str  # "gb200" (NVL72 trays of 4) or "h100-sxm" (DGX nodes of 8)
    gpus: int
    global_batch: int  # sequences per optimizer step
    micro_batch: int  # sequences
    sequence: int
    pp: int
    virtual_pp: int
    ep: int
    routing: str  # "natural" or "forced" (balanced)
    tokens_per_s_per_gpu: float  # published


# Every BF16 Megatron-Bridge run of a catalog model on a GPU rlsim profiles (TP1, CP1, no FSDP, no recompute in all).
ROWS = (
    Row("Qwen3-8B", "h100-sxm", 16, 1024, 1, 4096, pp=1, virtual_pp=1, ep=1, routing="natural",
        tokens_per_s_per_gpu=10456.3),
    Row("Qwen3-30B-A3B", "h100-sxm", 16, 1024, 1, 4096, pp=1, virtual_pp=1, ep=16, routing="natural",
        tokens_per_s_per_gpu=8654.6),
    Row("Qwen3-235B-A22B", "gb200", 256, 8192, 1, 4096, pp=8, virtual_pp=3, ep=32, routing="forced",
        tokens_per_s_per_gpu=4916),
    Row("DeepSeek-V3", "gb200", 256, 4096, 1, 4096, pp=4, virtual_pp=4, ep=64, routing="forced",
        tokens_per_s_per_gpu=3139),
)


def cluster(gpu: str, gpus: int) -> ClusterTopology:
    """GB200 NVL72 compute trays of 4 GPUs with NVLink-C2C hosts, or DGX H100 nodes of 8 on PCIe hosts; one 400 Gb/s
    NDR NIC per GPU in both (the profiles' defaults)."""
    per_node, intra = (4, "nvlink5") if gpu == "gb200" else (8, "nvlink4")
    pool = Pool(name="main", gpu=gpu, nodes=gpus // per_node, gpus_per_node=per_node, intra_node=intra,
                inter_node="ib-ndr", nics_per_node=per_node)
    return ClusterTopology.from_pools({"main": pool_hardware(pool, HardwareCatalog.load())})


def modelled_tokens_per_s_per_gpu(row: Row, efficiency: float = 1.0) -> float:
    """One optimizer step of the row's global batch, priced on the first data-parallel rank's pipeline with the
    kernels at `efficiency` of their modelled rates."""
    topology = cluster(row.gpu, row.gpus)
    layout = TrainingPlacement(gpus=row.gpus, pp=row.pp, ep=row.ep, dp=row.gpus // row.pp,
                               virtual_pipeline_stages=row.virtual_pp, backend="megatron", zero_stage=1,
                               micro_batch_tokens=row.sequence * row.micro_batch, activation_recompute="none")
    rates = training_rates(HardwareCatalog.load().gpu(row.gpu), efficiency)
    costs = TrainingCosts(ModelCatalog.load().spec(row.model), rates, layout,
                          GroupCollectives.on_cluster(topology, topology.gpus("main"), layout))
    dp = row.gpus // row.pp
    micro_batches = [[row.sequence] * row.micro_batch] * (row.global_batch // dp // row.micro_batch)
    return row.global_batch * row.sequence / costs.update(micro_batches).seconds / row.gpus


def ratios() -> dict[Row, float]:
    """Published over modelled throughput at full kernel rates, run by run."""
    return {row: row.tokens_per_s_per_gpu / modelled_tokens_per_s_per_gpu(row) for row in ROWS}


def main() -> None:
    found = ratios()
    for row, ratio in found.items():
        sustained = modelled_tokens_per_s_per_gpu(row, MEGATRON_KERNEL_EFFICIENCY)
        print(f"{row.model:<16} {row.gpus:>3} {row.gpu:<8}  PP{row.pp} VP{row.virtual_pp} EP{row.ep:<3} {row.routing:<7}  "
              f"published {row.tokens_per_s_per_gpu:>6,.0f}  modelled {row.tokens_per_s_per_gpu / ratio:>6,.0f} "
              f"(at {MEGATRON_KERNEL_EFFICIENCY}: {sustained:>6,.0f}) tokens/s/GPU  ratio {ratio:.3f}")
    print(f"median ratio, all {len(found)} runs: {statistics.median(found.values()):.3f}")


if __name__ == "__main__":
    main()
