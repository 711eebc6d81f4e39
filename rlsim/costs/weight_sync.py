"""Moving new policy weights from training to rollout: disaggregated sync and colocated switching.

**Disaggregated** (`disaggregated_sync`): after an update the weights go from the training layout to every rollout
engine in three terms, reported separately because they scale differently:

* *gather* — unshard each tensor out of the training layout: Megatron all-gathers tensor-parallel shards over the TP
  group and routed experts over the EP group, and, when one rank sends everything, broadcasts each tensor over the PP
  group; FSDP/ZeRO-3 all-gathers each parameter over its data-parallel group. Tensor by tensor (Megatron's and verl's
  per-tensor export) or bucket by bucket.
* *transfer* — to every rollout GPU over the real topology, by the scenario's `schedule.weight_sync.method`:
  `per_tensor` (verl's default NCCL path: each tensor broadcast on its own from training rank 0 to a group of all
  training and rollout GPUs), `checkpoint_engine` (verl's checkpoint engine after MoonshotAI/checkpoint-engine:
  each training rank stages its 1/N share of the exported tensors in host memory, then bucket after bucket is copied
  back to its owner GPU and broadcast to the group; the *gather* before it is still priced as collecting every tensor
  out of the pipeline stages onto one rank, as the per-tensor export does, since the export walks the same tensors),
  `nccl_broadcast` (bucketed, GPU-resident broadcast from one
  training GPU to the rollout GPUs, as slime does) and `rdma_p2p` (each rollout GPU receives only its own shard by
  point-to-point RDMA, all engines at once, over the max-flow of the training-to-rollout links).
* *load* — each engine copies its TP shard into its weights, by `load_weights` calls: one per tensor (`per_tensor` to
  vLLM engines) or one per bucket. Every call first walks the engine's whole model (`load_call_seconds`). Tensor by
  tensor, a call runs on the engine's host while the trainer exports and sends the next tensor (NCCL calls return to
  the host as soon as they are queued), so only the part of each call longer than that tensor's export and send is
  added.

The terms add up: verl runs them one after another (its `overlap_broadcast_and_consume` is off by default).

**Colocated** (`colocated_switch`): the same GPUs alternate between training and generation. Switching costs the
reshard from the training to the inference layout (gather, over the pipeline stages too, then each engine takes its
shard), moving offloaded training state to host memory and back (pinned or pageable), the rollout engine's sleep
after generating and wake-up before it (`engine_sleep_wake_seconds`: vLLM's sleep level 1 backs its weights up into
pinned host memory and restores them, level 2 discards them), and optionally a checkpoint save.
Weights offloaded per worker call (verl's param_offload) make the export and the log-prob pass each copy them in and
out once more.

Tensors are counted as Hugging Face checkpoints store them (`ModelSpec.layer_weights` × layers, one per routed expert,
plus embedding, output head and final norm), since both the export and vLLM's loader walk that list.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

from rlsim.costs.collectives import COPY_LINK_EFFICIENCY, HOST_LINK_EFFICIENCY, Op, collective_time
from rlsim.costs.layout import EngineLayout, PPBroadcast, TrainingLayout, WeightExport
from rlsim.costs.lora import adapter_bytes, adapter_matrices
from rlsim.costs.memory import ADAM_MOMENT_BYTES, ADAM_STATE_BYTES, reference_weight_bytes, training_model_state
from rlsim.hardware import GPUProfile
from rlsim.models import ModelSpec
from rlsim.models.spec import LAYER_KINDS
from rlsim.overheads import PAGEABLE_COPY_IN_BYTES_PER_S, PAGEABLE_COPY_OUT_BYTES_PER_S
from rlsim.topology import GPU, ClusterTopology, CommGroup

MIB = 2**20

# Host cost of moving one tensor with its own collective rather than inside a flat bucket (allocation, Python loop,
# launch): SGLang PR #13824 (sgl-project/sglang, "update bucketed weights from distributed") measured a Qwen3 30B MoE
# weight update at 5.5 s tensor by tensor and 2.5 s with flattened buckets; 3.0 s over Qwen3-30B-A3B's 18,867 tensors
# is 159 us per tensor. Charged per tensor in each phase that works tensor by tensor (the measurement covers the
# transfer; the export does the same per-tensor work). The NCCL latency of each call is added on top by collective_time.
PER_TENSOR_OVERHEAD_S = 159e-6
# Host time of one `load_weights` call into the engine's model before it loads anything: vLLM's and SGLang's model
# classes rebuild `dict(self.named_parameters())` over the whole model on every call, and MoE models also rebuild their
# expert mapping (one entry per expert and checkpoint projection); read in vLLM's and SGLang's models/qwen3_moe.py.
# calibration/loader_calls.py times both on module trees laid out like the engines' models. On a 2-core AMD EPYC VM
# (Python 3.11, PyTorch 2.13), the median of 5 runs was 1.7 us per parameter tensor walked (1.6-2.0 us over the runs)
# and 0.15 us per mapping entry.
LOAD_CALL_PER_PARAMETER_S = 1.7e-6
EXPERT_MAPPING_PER_ENTRY_S = 0.15e-6
# vLLM/SGLang weight loading per tensor: SGLang PR #24030 (sgl-project/sglang) measured "Load weights" at 26.7 ms for a
# whole Qwen3-30B-A3B update (18,867 tensors, H200, TP=4 EP=4): 1.4 us per tensor.
LOAD_PER_TENSOR_S = 1.4e-6
# Device-memory copies reach ~87% of HBM peak when a GPU profile has no measured stream bandwidth
# (hardware-and-costs.md §2 HBM stream: A100 79-86%, H100 87-95%, H200 83-93%, GB200 92%; the middle of those ranges).
HBM_COPY_EFFICIENCY = 0.87
# vLLM sleep mode level 1 wakes small models in 0.1-0.8 s (hardware-and-costs.md §4; vLLM blog 2025-10-26 "Zero-Reload
# Model Switching with vLLM Sleep Mode", Qwen3-0.6B on A4000): the fastest wake, with almost no weights to reload, is
# the fixed cost of re-mapping the engine's memory.
SLEEP_WAKE_FLOOR_S = 0.1
# Putting a vLLM engine to sleep between generations. Level 2 discards the weights (the update brings new ones) and
# frees the KV cache: 0.31 s for Qwen3-8B on an A100 (0.12 s for Qwen3-0.6B), vllm-project/vllm#48337. Level 1 also
# copies every weight into freshly allocated pinned host memory, which runs at the rate of pinning, not of the host
# link: the same 8B engine backed up ~22 GiB in 10.57 s (2.1 GiB/s) and restored it in 2.19 s (vllm#48337);
# SGLang's allocator (torch_memory_saver) measured the same kind of rates for its CPU backup, 2.41 GiB/s out and 5.32
# GiB/s back, on a PCIe 4 host where a plain pinned copy runs at ~24 GiB/s (fzyzcjy/torch_memory_saver#111). Both rates
# are the vLLM engine's own measurement; weak: one model on one host, and the 22 GiB include more than the weights.
ENGINE_SLEEP_S = 0.31
PINNED_BACKUP_OUT_BYTES_PER_S = 22 * 2**30 / 10.57
PINNED_BACKUP_IN_BYTES_PER_S = 22 * 2**30 / 2.19


@dataclass(frozen=True)
class WeightSyncCost:
    """Seconds to bring every rollout engine to the new weights, by term; `total_s` is their sum."""

    method: str
    gather_s: float
    transfer_s: float
    load_s: float
    tensors: int  # tensors walked (Hugging Face granularity)
    buckets: int  # buckets sent (0 when tensor by tensor)

    @property
    def total_s(self) -> float:
        return self.gather_s + self.transfer_s + self.load_s


@dataclass(frozen=True)
class SwitchCost:
    """Seconds one colocated train <-> generate cycle spends switching, by term; `total_s` is their sum."""

    reshard_s: float  # training layout -> inference layout: gather, then each engine loads its shard
    offload_s: float  # offloaded training state to host memory before generation
    reload_s: float  # and back before training
    wake_s: float  # rollout engine wake-up (at sleep level 1 its weights come back from host; KV cache re-mapped)
    checkpoint_s: float  # optional checkpoint save
    # Weights offloaded per worker call (verl's param_offload): their copy back in before a call and out after it,
    # paid again by the export and by the log-prob pass (the latter is booked in its stages, not in total_s).
    call_weights_in_s: float = 0.0
    call_weights_out_s: float = 0.0
    # Rollout engine put to sleep after generating (at level 1 its weights backed up to host); the frameworks time it
    # with generation.
    sleep_s: float = 0.0

    @property
    def total_s(self) -> float:
        """One cycle's switch: the export's extra round trip of the weights included, the log-prob pass's not."""
        return (self.reshard_s + self.offload_s + self.reload_s + self.wake_s + self.checkpoint_s
                + self.call_weights_in_s + self.call_weights_out_s + self.sleep_s)


# ---------------------------------------------------------------------------------------------------- tensors


@dataclass(frozen=True)
class _Tensors:
    """Tensors of one shape and one training sharding."""

    count: int
    nbytes: float  # one tensor, unsharded
    shard: Literal["tp", "ep", "none"]  # what splits it in the training layout, beyond pipeline stages and ZeRO


def _tensor_classes(spec: ModelSpec) -> list[_Tensors]:
    classes = []
    for kind in LAYER_KINDS:
        layers = spec.layer_count(kind)
        if not layers:
            continue
        for w in spec.layer_weights(kind):
            shard: Literal["tp", "ep", "none"]
            if w.copies > 1:
                shard = "ep"  # routed experts: split over expert parallelism (expert TP 1, Megatron-Core default)
            elif w.is_matrix and w.name != "mlp.gate":
                shard = "tp"  # projections split over TP; norms, biases and the router are replicated
            else:
                shard = "none"
            classes.append(_Tensors(layers * w.copies, w.size * spec.dtype_bytes, shard))
    arch = spec.architecture
    vocab = spec.vocab_matrix_params * spec.dtype_bytes
    classes.append(_Tensors(1 if arch.tie_word_embeddings else 2, vocab, "tp"))  # vocab-parallel embedding and head
    classes.append(_Tensors(1, arch.hidden_size * spec.dtype_bytes, "none"))  # final norm
    return classes


def tensor_count(spec: ModelSpec) -> int:
    """Tensors in the model's Hugging Face checkpoint (one per routed expert and matrix)."""
    return sum(c.count for c in _tensor_classes(spec))


# Checkpoint projections an engine stores fused in one parameter (vLLM's and SGLang's stacked_params_mapping).
_FUSED_PROJECTIONS = {"q_proj": "qkv_proj", "k_proj": "qkv_proj", "v_proj": "qkv_proj",
                      "gate_proj": "gate_up_proj", "up_proj": "gate_up_proj"}


def engine_parameter_count(spec: ModelSpec) -> int:
    """Parameter tensors in an inference engine's copy of the model: the checkpoint's, with q/k/v (weights and biases
    apart) and gate/up fused into one tensor each, and the routed experts stacked into two (w13 for gate and up, w2
    for down)."""
    count = 0
    for kind in LAYER_KINDS:
        layers = spec.layer_count(kind)
        if not layers:
            continue
        names = set()
        for w in spec.layer_weights(kind):
            parts = w.name.split(".")
            if w.copies > 1:
                names.add("experts.w2" if "down_proj" in parts else "experts.w13")
            else:
                names.add(".".join(_FUSED_PROJECTIONS.get(part, part) for part in parts))
        count += layers * len(names)
    arch = spec.architecture
    return count + (1 if arch.tie_word_embeddings else 2) + 1  # embedding, output head, final norm


def load_call_seconds(spec: ModelSpec) -> float:
    """Host seconds one `load_weights` call spends before loading: the walk over the engine's parameters, and for an
    MoE model the rebuild of its expert mapping."""
    moe = spec.architecture.moe
    entries = 3 * moe.num_experts if moe is not None else 0
    return engine_parameter_count(spec) * LOAD_CALL_PER_PARAMETER_S + entries * EXPERT_MAPPING_PER_ENTRY_S


def engine_shard_bytes(spec: ModelSpec, rollout: EngineLayout) -> float:
    """Weight bytes one rollout GPU holds: dense weights split over the engine's TP, routed experts over its EP."""
    expert = spec.routed_expert_params * spec.dtype_bytes
    return (spec.weight_bytes - expert) / rollout.tp + expert / (rollout.ep if rollout.ep > 1 else rollout.tp)


# ---------------------------------------------------------------------------------------------------- gather


@dataclass(frozen=True)
class _Groups:
    """The training communicators a gather uses, as GPU lists (Megatron rank order tp-cp-ep-dp-pp, rank r = gpus[r])."""

    tp: tuple[GPU, ...]
    ep: tuple[GPU, ...]
    pp: tuple[GPU, ...]
    zero: tuple[GPU, ...]  # the ranks ZeRO-3/FSDP shards every parameter over (one GPU when weights are not sharded)

    @classmethod
    def of(cls, layout: TrainingLayout, gpus: Sequence[GPU]) -> _Groups:
        tp, pp = layout.tp, layout.pp
        per_stage = len(gpus) // pp
        if layout.backend == "megatron":
            # Expert tensor parallelism 1 makes an EP group consecutive ranks (Megatron-Core expert rank generator).
            zero: tuple[GPU, ...] = (gpus[0],)
            ep = tuple(gpus[: layout.ep])
        else:
            # FSDP/ZeRO-3 shards each parameter over the data-parallel ranks that share a TP rank.
            zero = tuple(gpus[:per_stage:tp]) if layout.zero_stage >= 3 else (gpus[0],)
            ep = (gpus[0],)
        return cls(tp=tuple(gpus[:tp]), ep=ep, pp=tuple(gpus[::per_stage][:pp]), zero=zero)


_Call = tuple[Op, float, str, int]  # (collective, bytes per call, group name, number of calls)


def _export_calls(c: _Tensors, comms: dict[str, CommGroup], pp_broadcast: PPBroadcast | None) -> list[_Call]:
    """The collectives that unshard the tensors of class `c`."""
    calls: list[_Call] = []
    if comms["zero"].size > 1:
        calls.append(("all_gather", c.nbytes, "zero", c.count))
    if c.shard == "tp" and comms["tp"].size > 1:
        calls.append(("all_gather", c.nbytes, "tp", c.count))
    ep = comms["ep"].size
    if c.shard == "ep" and ep > 1:
        # One all-gather brings the same local expert from every EP rank: ep experts per call.
        calls.append(("all_gather", c.nbytes * ep, "ep", math.ceil(c.count / ep)))
    if pp_broadcast and comms["pp"].size > 1:
        split = comms["tp"].size if c.shard == "tp" and pp_broadcast == "tp_shards" else 1
        calls.append(("broadcast", c.nbytes / split, "pp", c.count))
    return calls


def _export_comms(groups: _Groups, topology: ClusterTopology) -> dict[str, CommGroup]:
    return {name: topology.group(getattr(groups, name)) for name in ("tp", "ep", "pp", "zero")}


def _per_tensor_export_seconds(spec: ModelSpec, groups: _Groups, topology: ClusterTopology, *,
                               pp_broadcast: PPBroadcast | None) -> list[float]:
    """Seconds to unshard one tensor of each class of `_tensor_classes(spec)`, tensor by tensor."""
    comms = _export_comms(groups, topology)
    return [
        PER_TENSOR_OVERHEAD_S + sum(
            count * collective_time(op, nbytes, comms[name]).seconds for op, nbytes, name, count in
            _export_calls(c, comms, pp_broadcast)) / c.count
        for c in _tensor_classes(spec)
    ]


def _gather_seconds(
    spec: ModelSpec, groups: _Groups, topology: ClusterTopology, *, per_tensor: bool, bucket_bytes: float,
    pp_broadcast: PPBroadcast | None,
) -> float:
    """Time to unshard every tensor; `pp_broadcast` adds the broadcast over the pipeline stages that gives their ranks
    every tensor (of TP shards, or of full tensors when TP is gathered first): what lets a single rank send
    everything, and what colocated engines need, since each engine's GPUs hold only some stages' layers and every
    engine loads them all."""
    if per_tensor:
        per_class = _per_tensor_export_seconds(spec, groups, topology, pp_broadcast=pp_broadcast)
        return sum(c.count * s for c, s in zip(_tensor_classes(spec), per_class, strict=True))
    comms = _export_comms(groups, topology)
    volume: dict[tuple[Op, str], float] = {}
    for c in _tensor_classes(spec):
        for op, nbytes, name, count in _export_calls(c, comms, pp_broadcast):
            volume[op, name] = volume.get((op, name), 0.0) + nbytes * count
    seconds = 0.0
    for (op, name), total in volume.items():
        buckets = max(1, math.ceil(total / bucket_bytes))
        seconds += buckets * collective_time(op, total / buckets, comms[name]).seconds
    return seconds


# ---------------------------------------------------------------------------------------------------- disaggregated


def disaggregated_sync(
    spec: ModelSpec,
    training: TrainingLayout,
    training_gpus: Sequence[GPU],
    rollout: EngineLayout,
    rollout_gpus: Sequence[GPU],
    sync: WeightExport,
    topology: ClusterTopology,
) -> WeightSyncCost:
    """Time to push updated weights from `training_gpus` (in Megatron rank order) to the engines on `rollout_gpus`."""
    if not training_gpus or not rollout_gpus:
        raise ValueError("disaggregated sync needs training and rollout GPUs")
    if set(training_gpus) & set(rollout_gpus):
        raise ValueError("disaggregated training and rollout GPUs must not overlap; use colocated_switch")
    if training.lora_rank:
        return adapter_sync(spec, training, training_gpus, rollout, rollout_gpus, sync, topology)
    method = sync.method
    bucket = sync.bucket_bytes
    total = spec.weight_bytes
    groups = _Groups.of(training, training_gpus)
    per_tensor_export = method in ("per_tensor", "checkpoint_engine")
    gather = _gather_seconds(spec, groups, topology, per_tensor=per_tensor_export, bucket_bytes=bucket,
                             pp_broadcast=sync.pp_broadcast if per_tensor_export else None)
    tensors = tensor_count(spec)
    everyone = topology.group([*training_gpus, *rollout_gpus])
    gpu = topology.hardware(rollout_gpus[0].pool).gpu
    buckets = 0
    if method == "per_tensor":
        classes = _tensor_classes(spec)
        sends = [collective_time("broadcast", c.nbytes, everyone).seconds + PER_TENSOR_OVERHEAD_S for c in classes]
        transfer = sum(c.count * send for c, send in zip(classes, sends, strict=True))
        call = load_call_seconds(spec)
        if rollout.engine == "vllm":
            # verl loads each tensor with its own call (_sync_vllm_weights), which overlaps the export and send of
            # the next tensor; what is longer shows.
            exports = _per_tensor_export_seconds(spec, groups, topology, pp_broadcast=sync.pp_broadcast)
            load_calls = sum(c.count * max(0.0, call - export - send)
                             for c, export, send in zip(classes, exports, sends, strict=True))
        else:
            # For SGLang verl collects the broadcast tensors and loads a bucket at a time, synchronously
            # (_sync_sglang_weights).
            load_calls = max(1, math.ceil(total / bucket)) * call
    elif method == "checkpoint_engine":
        host = _host_bytes_per_s(topology, training_gpus[0])
        share = total / len(training_gpus)
        rounds = max(1, math.ceil(share / bucket))
        buckets = rounds * len(training_gpus)
        # Stage the share in pinned host memory (all ranks at once), then per round each owner copies one bucket back
        # to its GPU (at once) and the owners broadcast their buckets one after another.
        transfer = share / host + rounds * min(bucket, share) / host
        transfer += buckets * collective_time("broadcast", total / buckets, everyone).seconds
    elif method == "nccl_broadcast":
        senders = topology.group([training_gpus[0], *rollout_gpus])
        buckets = max(1, math.ceil(total / bucket))
        transfer = buckets * collective_time("broadcast", total / buckets, senders).seconds
    elif method == "rdma_p2p":
        shard = engine_shard_bytes(spec, rollout)
        buckets = max(1, math.ceil(shard / bucket))
        fabric = topology.transfer(training_gpus, rollout_gpus, COPY_LINK_EFFICIENCY)
        one = topology.transfer(training_gpus, rollout_gpus[:1], COPY_LINK_EFFICIENCY)
        transfer = buckets * fabric.latency_s + max(shard * len(rollout_gpus) / fabric.bytes_per_s, shard / one.bytes_per_s)
    else:
        raise ValueError(f"unknown weight sync method {method!r}")
    if method != "per_tensor":
        load_calls = buckets * load_call_seconds(spec)  # the engines load each bucket with one call
    load = _load_seconds(spec, rollout, gpu) + load_calls
    return WeightSyncCost(method, gather, transfer, load, tensors, buckets)


def adapter_sync(spec: ModelSpec, training: TrainingLayout, training_gpus: Sequence[GPU], rollout: EngineLayout,
                 rollout_gpus: Sequence[GPU], sync: WeightExport, topology: ClusterTopology) -> WeightSyncCost:
    """LoRA (rlsim.costs.lora): the training ranks gather the adapters, one broadcasts them to the engines' GPUs (none
    when they are the same GPUs), and each engine loads them into its adapter slots (vLLM add_lora), tensor by tensor;
    the base weights stay. Adapter bytes are a few hundred MB at most, so the export runs as one bucket."""
    nbytes = adapter_bytes(spec, training.lora_rank)
    tensors = adapter_matrices(spec)
    gather = collective_time("all_gather", nbytes, topology.group(list(training_gpus))).seconds
    colocated = set(rollout_gpus) <= set(training_gpus)
    transfer = 0.0 if colocated else collective_time(
        "broadcast", nbytes, topology.group([training_gpus[0], *rollout_gpus])).seconds
    gpu = topology.hardware(rollout_gpus[0].pool).gpu
    load = 2 * nbytes / rollout.tp / _hbm_bytes_per_s(gpu) + tensors * LOAD_PER_TENSOR_S
    return WeightSyncCost(sync.method, gather, transfer, load, tensors, 0 if colocated else 1)


def _load_seconds(spec: ModelSpec, rollout: EngineLayout, gpu: GPUProfile) -> float:
    """Each engine GPU copies its shard out of the received tensors into its weights (read + write), tensor by tensor."""
    return 2 * engine_shard_bytes(spec, rollout) / _hbm_bytes_per_s(gpu) + tensor_count(spec) * LOAD_PER_TENSOR_S


def _hbm_bytes_per_s(gpu: GPUProfile) -> float:
    measured = gpu.measured.hbm_stream_bytes_per_s
    return measured if measured is not None else gpu.hbm_bytes_per_s * HBM_COPY_EFFICIENCY


def _host_bytes_per_s(topology: ClusterTopology, gpu: GPU) -> float:
    return topology.hardware(gpu.pool).host_link.bytes_per_s * HOST_LINK_EFFICIENCY


# ---------------------------------------------------------------------------------------------------- colocated


def colocated_switch(
    spec: ModelSpec,
    training: TrainingLayout,
    rollout: EngineLayout,
    gpus: Sequence[GPU],
    sync: WeightExport,
    topology: ClusterTopology,
    *,
    offload_bytes_per_gpu: float = 0.0,
    pageable_offload_bytes_per_gpu: float = 0.0,
    pageable_bytes_per_s: tuple[float, float] = (PAGEABLE_COPY_OUT_BYTES_PER_S, PAGEABLE_COPY_IN_BYTES_PER_S),
    checkpoint_bytes_per_gpu: float = 0.0,
    storage_bytes_per_s: float | None = None,
    per_call_weights: tuple[float, float] = (0.0, 0.0),
) -> SwitchCost:
    """Switching cost of one train <-> generate cycle on shared `gpus` (training rank order).

    `offload_bytes_per_gpu` is the training state each GPU parks in pinned host memory while it generates (moved out
    and back once per cycle at the host link's rate); `pageable_offload_bytes_per_gpu` the state it parks in pageable
    memory, copied out and back at `pageable_bytes_per_s` (out, in). A checkpoint of `checkpoint_bytes_per_gpu` is
    written at `storage_bytes_per_s` per GPU when that rate is given. `per_call_weights` (pinned, pageable bytes per
    GPU) are the weights copied in and out again around each worker call that loads them (verl's param_offload).
    """
    if storage_bytes_per_s is not None and storage_bytes_per_s <= 0:
        raise ValueError("storage_bytes_per_s must be positive")
    if training.lora_rank:
        # Only the adapters move; the engine keeps its base weights, so it sleeps backing them up (verl keeps sleep
        # level 1 under LoRA).
        reshard = adapter_sync(spec, training, gpus, rollout, gpus, sync, topology).total_s
        rollout = replace(rollout, sleep_level=1)
    else:
        groups = _Groups.of(training, gpus)
        per_tensor_export = sync.method in ("per_tensor", "checkpoint_engine")
        gather = _gather_seconds(spec, groups, topology, per_tensor=per_tensor_export, bucket_bytes=sync.bucket_bytes,
                                 pp_broadcast=sync.pp_broadcast)
        hardware = topology.hardware(gpus[0].pool)
        reshard = gather + _load_seconds(spec, rollout, hardware.gpu) + load_call_seconds(spec)  # one call, every tensor
    host = _host_bytes_per_s(topology, gpus[0])
    copy_out, copy_in = pageable_bytes_per_s
    offload = offload_bytes_per_gpu / host + pageable_offload_bytes_per_gpu / copy_out
    reload = offload_bytes_per_gpu / host + pageable_offload_bytes_per_gpu / copy_in
    sleep, wake = engine_sleep_wake_seconds(spec, rollout)
    checkpoint = checkpoint_bytes_per_gpu / storage_bytes_per_s if storage_bytes_per_s else 0.0
    pinned_call, pageable_call = per_call_weights
    return SwitchCost(reshard_s=reshard, offload_s=offload, reload_s=reload, wake_s=wake, checkpoint_s=checkpoint,
                      call_weights_in_s=pinned_call / host + pageable_call / copy_in,
                      call_weights_out_s=pinned_call / host + pageable_call / copy_out, sleep_s=sleep)


def engine_sleep_wake_seconds(spec: ModelSpec, rollout: EngineLayout) -> tuple[float, float]:
    """Seconds a colocated engine takes to fall asleep after generating and to wake before the next: at sleep level 1
    each GPU backs its shard of the weights up into pinned host memory and restores it (all GPUs at once, each at the
    pinning rate); at level 2 the weights are discarded, so only the fixed costs remain (the update loads new ones)."""
    shard = engine_shard_bytes(spec, rollout) if rollout.sleep_level == 1 else 0.0
    return (ENGINE_SLEEP_S + shard / PINNED_BACKUP_OUT_BYTES_PER_S,
            SLEEP_WAKE_FLOOR_S + shard / PINNED_BACKUP_IN_BYTES_PER_S)


def colocated_switch_of(
    spec: ModelSpec, training: TrainingLayout, rollout: EngineLayout, gpus: Sequence[GPU], export: WeightExport,
    topology: ClusterTopology, *, pageable_bytes_per_s: tuple[float, float] = (
        PAGEABLE_COPY_OUT_BYTES_PER_S, PAGEABLE_COPY_IN_BYTES_PER_S),
    save_checkpoint: bool = False, storage_bytes_per_s: float | None = None,
) -> SwitchCost:
    """`colocated_switch` for a training layout: moves the state `training.moved_while_generating` names (state that
    lives on the host throughout has nothing to move), to the host memory `offload_host_memory` says (of the optimizer
    state, only the Adam moments go to pageable memory: the fp32 master copy is a parameter, not optimizer state),
    and with `save_checkpoint` writes each GPU's weights and optimizer state at `storage_bytes_per_s`. With
    `offload_weights_per_call` the moved weights' round trip per extra worker call is priced too, in the weights'
    host memory."""
    state = training_model_state(spec, replace(training, offload_params=False, offload_optimizer=False))
    moved = training.moved_while_generating
    weights = state["weights"] if moved.weights else 0.0
    optimizer = state["optimizer"] if moved.optimizer else 0.0
    memory = training.offload_host_memory
    pageable = (weights if memory.weights == "pageable" else 0.0) + (
        optimizer * ADAM_MOMENT_BYTES / ADAM_STATE_BYTES if memory.optimizer == "pageable" else 0.0)
    if save_checkpoint and storage_bytes_per_s is None:
        raise ValueError("save_checkpoint needs storage_bytes_per_s, the write rate one GPU gets from storage")
    checkpoint = state["weights"] + state["optimizer"] if save_checkpoint else 0.0
    per_call = weights if training.offload_weights_per_call else 0.0
    per_call_weights = (0.0, per_call) if memory.weights == "pageable" else (per_call, 0.0)
    return colocated_switch(spec, training, rollout, gpus, export, topology,
                            offload_bytes_per_gpu=weights + optimizer - pageable,
                            pageable_offload_bytes_per_gpu=pageable, pageable_bytes_per_s=pageable_bytes_per_s,
                            checkpoint_bytes_per_gpu=checkpoint, storage_bytes_per_s=storage_bytes_per_s,
                            per_call_weights=per_call_weights)


# Host copies per reference pass of one GPU's share of the weights, by where the reference policy lives
# (placement.training.reference_weights): a resident copy needs none; verl's Megatron ref param_offload loads the
# reference in before its pass and copies it back out after (verl/utils/megatron_utils.py, load_megatron_model_to_gpu
# and offload_megatron_model_to_cpu, "we need this for ref module"); NeMo-RL's use_reference_model copies the policy's
# weights out, loads the reference's and restores the policy's afterwards (nemo_rl/models/policy/
# megatron_policy_worker.py and dtensor_policy_worker.py). FSDP's CPU offload, which streams every layer in for every
# micro-batch, is not this and is not modelled.
REFERENCE_COPIES = {"resident": 0, "host": 2, "swap": 3}


def reference_copy_seconds(spec: ModelSpec, training: TrainingLayout, gpus: Sequence[GPU],
                           topology: ClusterTopology) -> float:
    """Seconds each reference pass spends bringing the reference policy's weights onto the training `gpus` (all copy
    at once over their own host links); 0 with a resident reference."""
    copies = REFERENCE_COPIES[training.reference_weights]
    if not copies:
        return 0.0
    return copies * reference_weight_bytes(spec, training) / _host_bytes_per_s(topology, gpus[0])
