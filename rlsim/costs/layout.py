"""The layouts the cost models price, as plain values the costs own: a training layout, an engine layout, how new
weights are exported. Every field is resolved (no `None` to re-check): `rlsim.pricing` fills them from a scenario,
and a test or notebook may build them directly. The field names are the scenario's (`placement.training.tp` is
`TrainingLayout.tp`), so a value reads the same in the YAML, the costs and their docs."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

TrainingBackend = Literal["fsdp", "fsdp2", "megatron"]
Recompute = Literal["none", "selective", "full"]
LogprobKernel = Literal["fused", "fp32_vocab_parallel", "fp32_unfused"]
HostMemory = Literal["pinned", "pageable"]
ReferenceWeights = Literal["resident", "host", "swap"]
InferenceEngine = Literal["vllm", "sglang", "hf"]  # hf: Hugging Face transformers generate(), static batches
WeightSyncMethod = Literal["nccl_broadcast", "checkpoint_engine", "per_tensor", "rdma_p2p"]
PPBroadcast = Literal["tp_shards", "full_tensors"]

TrainingPrecision = Literal["bf16", "fp8"]

@dataclass(frozen=True, slots=True)
class MovedState:
    """Training state that leaves the GPU while colocated engines generate (weights with their gradient buffers, and
    the optimizer state)."""

    weights: bool = False
    optimizer: bool = False

    @property
    def any(self) -> bool:
        return self.weights or self.optimizer


@dataclass(frozen=True, slots=True)
class HostCopies:
    """The host memory each kind of offloaded state is copied into: pinned or pageable."""

    weights: HostMemory = "pinned"
    optimizer: HostMemory = "pinned"


@dataclass(frozen=True, slots=True)
class TrainingLayout:
    """One training role's layout on `gpus` GPUs of `pool`: tp·pp·cp·dp = gpus, experts over `ep`."""

    pool: str = ""
    gpus: int = 1
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    dp: int = 1
    virtual_pipeline_stages: int = 1
    backend: TrainingBackend = "fsdp"
    zero_stage: int = 3
    micro_batch_tokens: int = 16384
    forward_micro_batch_tokens: int = 16384  # per GPU in the forward-only passes (log-probs, reference, values)
    activation_recompute: Recompute = "full"
    overlap_grad_reduce: bool = True  # ZeRO-0/1's gradient reduction under the last backward, or after it
    sequence_packing: bool = True
    pp_pads_micro_batches: bool = False
    logprob_kernel: LogprobKernel = "fused"
    offload_params: bool = False
    offload_optimizer: bool = False
    moved_while_generating: MovedState = field(default_factory=MovedState)
    offload_weights_per_call: bool = False
    offload_host_memory: HostCopies = field(default_factory=HostCopies)
    reference_weights: ReferenceWeights = "resident"
    # The decoder layers' GEMMs in FP8 (Transformer Engine / torchao float8), everything else 16-bit.
    precision: TrainingPrecision = "bf16"
    lora_rank: int = 0  # > 0: only LoRA adapters of this rank train (rlsim.costs.lora)


@dataclass(frozen=True, slots=True)
class EngineLayout:
    """Generation engines on `gpus` GPUs of `pool`, `tp` GPUs each, experts over `ep` inside an engine."""

    pool: str = ""
    gpus: int = 1
    tp: int = 1
    ep: int = 1
    gpu_memory_utilization: float = 0.9
    max_num_seqs: int = 256
    max_num_batched_tokens: int = 8192
    engine: InferenceEngine = "vllm"
    cuda_graphs: bool = True
    sleep_level: int = 2  # colocated: 1 backs the weights up to pinned host memory while asleep, 2 discards them

    @property
    def engines(self) -> int:
        return self.gpus // self.tp


@dataclass(frozen=True, slots=True)
class WeightExport:
    """How a trainer hands new weights to the engines: the method, the bytes per broadcast bucket, and what a
    tensor-by-tensor export broadcasts over the pipeline stages."""

    method: WeightSyncMethod = "nccl_broadcast"
    bucket_bytes: int = 512 * 2**20
    pp_broadcast: PPBroadcast = "tp_shards"
