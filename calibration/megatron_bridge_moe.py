#!/usr/bin/env python3
"""rlsim's training model against Megatron-Bridge's published BF16 pretraining of MoE models on GB200.

Megatron-Bridge's performance summary (NVIDIA-NeMo/Megatron-Bridge docs/performance-summary.md, archive "25.11 NeMo
Container", DGX-GB200 table) measures tokens/s/GPU of tuned Megatron-Core pretraining, with the experts' token counts
forced to balance. Its BF16 rows for models in rlsim's catalog are priced here at the same layout, with the same
`training_kernel_efficiency` every scenario uses, and printed as published over modelled throughput. It checks the
training model on large MoE models and on GB200, which llm-foundry's FSDP runs (training_efficiency.py) do not reach.
Nothing is fitted to it.

    python calibration/megatron_bridge_moe.py
"""
from __future__ import annotations

from typing import NamedTuple

from rlsim.config.bound import PoolHardware
from rlsim.config.framework import TRAINING_KERNEL_EFFICIENCY
from rlsim.config.schema import Pool, TrainingPlacement
from rlsim.costs.training import GroupCollectives, TrainingCosts, training_rates
from rlsim.hardware import HardwareCatalog
from rlsim.models import ModelCatalog
from rlsim.topology import ClusterTopology


class Row(NamedTuple):
    model: str
    gpus: int
    global_batch: int  # sequences per optimizer step
    micro_batch: int  # sequences
    sequence: int
    pp: int
    virtual_pp: int
    ep: int
    tokens_per_s_per_gpu: float  # published


# The table's BF16 rows whose model rlsim's catalog holds (TP1, CP1, no FSDP in both).
ROWS = (
    Row("Qwen3-235B-A22B", 256, 8192, 1, 4096, pp=8, virtual_pp=3, ep=32, tokens_per_s_per_gpu=4916),
    Row("DeepSeek-V3", 256, 4096, 1, 4096, pp=4, virtual_pp=4, ep=64, tokens_per_s_per_gpu=3139),
)


def gb200_racks(gpus: int) -> ClusterTopology:
    """GB200 NVL72 compute trays of 4 GPUs, 4 × 400 Gb/s NDR NICs each (the profile's defaults)."""
    hardware = HardwareCatalog.load()
    pool = Pool(name="main", gpu="gb200", nodes=gpus // 4, gpus_per_node=4, intra_node="nvlink5", inter_node="ib-ndr",
                nics_per_node=4)
    return ClusterTopology.from_pools({"main": PoolHardware(
        pool=pool, gpu=hardware.gpu("gb200"), intra_node=hardware.interconnect("nvlink5"),
        inter_node=hardware.interconnect("ib-ndr"), host_link=hardware.interconnect("nvlink-c2c"))})


def modelled_tokens_per_s_per_gpu(row: Row) -> float:
    """One optimizer step of the row's global batch, priced on the first data-parallel rank's pipeline."""
    topology = gb200_racks(row.gpus)
    layout = TrainingPlacement(gpus=row.gpus, pp=row.pp, ep=row.ep, dp=row.gpus // row.pp,
                               virtual_pipeline_stages=row.virtual_pp, backend="megatron", zero_stage=1,
                               micro_batch_tokens=row.sequence * row.micro_batch, activation_recompute="none")
    rates = training_rates(HardwareCatalog.load().gpu("gb200"), TRAINING_KERNEL_EFFICIENCY)
    costs = TrainingCosts(ModelCatalog.load().spec(row.model), rates, layout,
                          GroupCollectives.on_cluster(topology, topology.gpus("main"), layout))
    dp = row.gpus // row.pp
    micro_batches = [[row.sequence] * row.micro_batch] * (row.global_batch // dp // row.micro_batch)
    return row.global_batch * row.sequence / costs.update(micro_batches).seconds / row.gpus


def main() -> None:
    for row in ROWS:
        modelled = modelled_tokens_per_s_per_gpu(row)
        print(f"{row.model:<16} {row.gpus} GB200  PP{row.pp} VP{row.virtual_pp} EP{row.ep}  published "
              f"{row.tokens_per_s_per_gpu:>6,.0f}  modelled {modelled:>6,.0f} tokens/s/GPU  "
              f"ratio {row.tokens_per_s_per_gpu / modelled:.2f}")


if __name__ == "__main__":
    main()
