"""Framework overheads as scenario fields (`framework:`): the costs that real RL stacks (vLLM/SGLang engines and a
trainer driven from Python) have and a first-principles GPU model lacks, so a user can model another engine version.
One set of defaults serves every scenario and every validation case: the measured constants of rlsim.overheads, each
with its source.
"""
from __future__ import annotations

from pydantic import Field

from rlsim.fields import Flag, Frozen, NonNegativeFloat, PositiveFloat, PositiveInt
from rlsim.overheads import (
    CUDA_GRAPH_MAX_TOKENS,
    DRIVER_BATCH_BYTES_PER_S,
    EAGER_OP_CPU_S,
    ENGINE_STEP_CPU_PER_SEQUENCE_S,
    ENGINE_STEP_CPU_S,
    KERNEL_GAP_S,
    KERNEL_LAUNCH_S,
    MEGATRON_KERNEL_EFFICIENCY,
    OVERLAP_BY_ENGINE,
    PAGEABLE_COPY_IN_BYTES_PER_S,
    PAGEABLE_COPY_OUT_BYTES_PER_S,
    TRAINER_STEP_OVERHEAD_S,
    TRAINING_KERNEL_EFFICIENCY,
)

# The fields below that are CPU time of Python and PyTorch work. Their sources ran on x86 servers or do not name
# the host, and none ran on a Grace; a host slower at that work scales them (`Framework.on_host`), by kind: the ones
# that go through PyTorch's dispatch to a kernel launch, and the ones that are interpreted Python. The kernel gap is
# the GPU's, the copy rates the host link's.
HOST_DISPATCH_TIMES = ("kernel_launch_s", "eager_op_cpu_s")
HOST_PYTHON_TIMES = ("engine_step_cpu_s", "engine_step_cpu_per_sequence_s", "trainer_step_overhead_s")
HOST_CPU_TIMES = HOST_DISPATCH_TIMES + HOST_PYTHON_TIMES


class Framework(Frozen):
    """CPU-side costs of the serving engines and the RL driver, with defaults from public measurements (see the module's
    sources)."""

    engine_step_cpu_s: NonNegativeFloat = Field(
        ENGINE_STEP_CPU_S, description="CPU seconds per engine iteration for scheduling and sampled-token bookkeeping"
    )
    engine_step_cpu_per_sequence_s: NonNegativeFloat = Field(
        ENGINE_STEP_CPU_PER_SEQUENCE_S,
        description="CPU seconds per engine iteration for each sequence it schedules, on top of engine_step_cpu_s",
    )
    overlap_scheduling: Flag | None = Field(
        None,
        description="the engine prepares step n+1 on the CPU while the GPU runs step n (SGLang's overlap scheduler, "
        "vLLM's --async-scheduling); default: as the engine ships (SGLang on, vLLM off)",
    )
    kernel_launch_s: NonNegativeFloat = Field(
        KERNEL_LAUNCH_S,
        description="CPU seconds to launch one kernel outside a CUDA graph from compiled code (vLLM iterations above "
        "cuda_graph_max_tokens) or from an SGLang engine",
    )
    eager_op_cpu_s: NonNegativeFloat = Field(
        EAGER_OP_CPU_S,
        description="CPU seconds per kernel a vLLM engine launches in eager mode (placement.rollout.cuda_graphs: "
        "false, vLLM's enforce_eager: no CUDA graphs, no torch.compile): the op's Python dispatch and its launch",
    )
    kernel_gap_s: NonNegativeFloat = Field(KERNEL_GAP_S, description="GPU idle seconds between consecutive kernels")
    cuda_graph_max_tokens: PositiveInt = Field(
        CUDA_GRAPH_MAX_TOKENS, description="largest iteration (tokens) that replays a captured CUDA graph"
    )
    training_kernel_efficiency: float = Field(
        TRAINING_KERNEL_EFFICIENCY, gt=0, le=1,
        description="share of the modelled kernel rates that training and log-prob passes sustain over a step on the "
        "FSDP backends (fsdp, fsdp2; 1: every kernel at its own measured rate)",
    )
    megatron_kernel_efficiency: float = Field(
        MEGATRON_KERNEL_EFFICIENCY, gt=0, le=1,
        description="the same share for the megatron backend (Megatron-Core)",
    )
    pageable_copy_out_bytes_per_s: float = Field(
        PAGEABLE_COPY_OUT_BYTES_PER_S, gt=0, allow_inf_nan=False,
        description="bytes/s per GPU of offloaded state copied out to pageable host memory (a blocking .to('cpu'), "
        "tensor by tensor; placement.training.offload_host_memory says which state goes there)",
    )
    pageable_copy_in_bytes_per_s: float = Field(
        PAGEABLE_COPY_IN_BYTES_PER_S, gt=0, allow_inf_nan=False,
        description="bytes/s per GPU of offloaded state copied back in from pageable host memory",
    )
    trainer_step_overhead_s: NonNegativeFloat = Field(
        TRAINER_STEP_OVERHEAD_S,
        description="seconds of Python work per RL step on the driver outside the timed stages (advantages, batch "
        "bookkeeping); the training GPUs wait for it, reported as verl's adv stage",
    )
    driver_batch_bytes_per_s: PositiveFloat | None = Field(
        DRIVER_BATCH_BYTES_PER_S,
        description="bytes/s at which the RL driver hands the padded batch to its training workers and takes their "
        "results back, per worker call (a single controller: verl's DataProto through Ray, NeMo-RL's); null when the "
        "workers exchange batches among themselves (AReaL) and the driver moves none",
    )

    def kernel_efficiency(self, backend: str) -> float:
        """The share of the modelled kernel rates a training step on `backend` sustains."""
        return self.megatron_kernel_efficiency if backend == "megatron" else self.training_kernel_efficiency

    def on_host(self, dispatch_factor: float, python_factor: float = 1.0) -> Framework:
        """These overheads on a host whose CPU takes `dispatch_factor` times as long to dispatch and launch PyTorch
        ops and `python_factor` times as long for interpreted Python (a GPU profile's node.host_cpu_time_factor and
        node.host_python_time_factor): the CPU times scale, the GPU-side ones do not."""
        if dispatch_factor == 1 and python_factor == 1:
            return self
        update = {name: getattr(self, name) * dispatch_factor for name in HOST_DISPATCH_TIMES}
        update |= {name: getattr(self, name) * python_factor for name in HOST_PYTHON_TIMES}
        return self.model_copy(update=update)

    def overlaps(self, engine: str) -> bool:
        """Whether an engine of kind `engine` (placement.rollout.engine) overlaps its CPU work with the GPU."""
        return OVERLAP_BY_ENGINE[engine] if self.overlap_scheduling is None else self.overlap_scheduling
