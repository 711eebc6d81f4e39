#!/usr/bin/env python3
"""rlsim's training model against Megatron-Bridge's published BF16 pretraining of MoE models.

Two kinds of Megatron-Bridge measurement of Megatron-Core pretraining in tokens/s/GPU, priced here at the same layout
with the same `training_kernel_efficiency` every scenario uses, and printed as published over modelled throughput:

* tuned, the experts' token counts forced to balance: the performance summary (NVIDIA-NeMo/Megatron-Bridge
  docs/performance-summary.md, archive "25.11 NeMo Container", DGX-GB200 table), its BF16 rows for models in rlsim's
  catalog (`TUNED`);
* natural routing, as an RL run routes: the Qwen3-30B-A3B model-verification card
  (examples/model_verification_cards/qwen3-30b-a3b/card.yaml, "pretrain: H100", verified 2026-07-19: 16 H100s,
  TP1 PP1 EP16, GBS/MBS 1024/1, 4,096 tokens, HybridEP dispatcher and CUDA graphs around the router; "Timing and
  throughput are support sanity checks, not ... tuned performance claims") (`NATURAL`).

It checks the training model on MoE models, on GB200 and with real routing, which llm-foundry's dense FSDP runs
(training_efficiency.py) do not reach. Nothing is fitted to it.

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
    gpu: str  # "gb200" (NVL72 trays of 4) or "h100-sxm" (DGX nodes of 8)
    gpus: int
    global_batch: int  # sequences per optimizer step
    micro_batch: int  # sequences
    sequence: int
    pp: int
    virtual_pp: int
    ep: int
    tokens_per_s_per_gpu: float  # published


# The summary's BF16 rows whose model rlsim's catalog holds (TP1, CP1, no FSDP in both).
TUNED = (
    Row("Qwen3-235B-A22B", "gb200", 256, 8192, 1, 4096, pp=8, virtual_pp=3, ep=32, tokens_per_s_per_gpu=4916),
    Row("DeepSeek-V3", "gb200", 256, 4096, 1, 4096, pp=4, virtual_pp=4, ep=64, tokens_per_s_per_gpu=3139),
)
# The card's BF16 pretraining run with natural routing: "last_10_steps_tokens_per_second_per_gpu_avg: 8654.602".
NATURAL = (
    Row("Qwen3-30B-A3B", "h100-sxm", 16, 1024, 1, 4096, pp=1, virtual_pp=1, ep=16, tokens_per_s_per_gpu=8654.6),
)


def cluster(gpu: str, gpus: int) -> ClusterTopology:
    """GB200 NVL72 compute trays of 4 GPUs with NVLink-C2C hosts, or DGX H100 nodes of 8 on PCIe hosts; one 400 Gb/s
    NDR NIC per GPU in both (the profiles' defaults)."""
    hardware = HardwareCatalog.load()
    per_node, intra, host = (4, "nvlink5", "nvlink-c2c") if gpu == "gb200" else (8, "nvlink4", "pcie5")
    pool = Pool(name="main", gpu=gpu, nodes=gpus // per_node, gpus_per_node=per_node, intra_node=intra,
                inter_node="ib-ndr", nics_per_node=per_node)
    return ClusterTopology.from_pools({"main": PoolHardware(
        pool=pool, gpu=hardware.gpu(gpu), intra_node=hardware.interconnect(intra),
        inter_node=hardware.interconnect("ib-ndr"), host_link=hardware.interconnect(host))})


def modelled_tokens_per_s_per_gpu(row: Row) -> float:
    """One optimizer step of the row's global batch, priced on the first data-parallel rank's pipeline."""
    topology = cluster(row.gpu, row.gpus)
    layout = TrainingPlacement(gpus=row.gpus, pp=row.pp, ep=row.ep, dp=row.gpus // row.pp,
                               virtual_pipeline_stages=row.virtual_pp, backend="megatron", zero_stage=1,
                               micro_batch_tokens=row.sequence * row.micro_batch, activation_recompute="none")
    rates = training_rates(HardwareCatalog.load().gpu(row.gpu), TRAINING_KERNEL_EFFICIENCY)
    costs = TrainingCosts(ModelCatalog.load().spec(row.model), rates, layout,
                          GroupCollectives.on_cluster(topology, topology.gpus("main"), layout))
    dp = row.gpus // row.pp
    micro_batches = [[row.sequence] * row.micro_batch] * (row.global_batch // dp // row.micro_batch)
    return row.global_batch * row.sequence / costs.update(micro_batches).seconds / row.gpus


def main() -> None:
    for label, rows in (("tuned, forced balance", TUNED), ("natural routing", NATURAL)):
        for row in rows:
            modelled = modelled_tokens_per_s_per_gpu(row)
            print(f"{row.model:<16} {row.gpus} {row.gpu:<8}  PP{row.pp} VP{row.virtual_pp} EP{row.ep}  {label:<21}  "
                  f"published {row.tokens_per_s_per_gpu:>6,.0f}  modelled {modelled:>6,.0f} tokens/s/GPU  "
                  f"ratio {row.tokens_per_s_per_gpu / modelled:.2f}")


if __name__ == "__main__":
    main()
