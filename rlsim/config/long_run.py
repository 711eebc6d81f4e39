"""A long run's interruptions: GPU failures and the restart after each, checkpoints, and evaluation passes.

A scenario measures a few steady-state steps; `run.horizon` asks what a run of that length (a month, say) delivers once
failures, restarts, checkpoint saves and restores and periodic evaluation are paid for: its goodput
(`rlsim.metrics.goodput`). Without `run.horizon` none of this applies and the sections stay empty.

Names follow verl (`trainer.save_freq`, `trainer.test_freq`, `rollout.val_kwargs.n`) and Megatron (`--async-save`).
"""
from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, Field, model_validator

from rlsim.fields import Flag, Frozen, NonNegativeFloat, PositiveFloat, PositiveInt

# The longest horizon a planner asks about is a year or two of booking; past ten years a horizon is a typo (and its
# failure count would run into the millions).
MAX_HORIZON_S = 10 * 365 * 86400.0
DURATION_UNITS_S = {"s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0, "w": 7 * 86400.0}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|min|m|h|d|w)\s*$")

# PyTorch's NCCL process group aborts a collective that has not completed in 10 minutes (c10d ProcessGroupNCCL,
# kProcessGroupNCCLDefaultTimeout; torch.distributed.constants.default_pg_nccl_timeout): a job whose peer died in a
# collective learns of it that late unless it watches health by other means. Crashes that kill a process (an Xid
# error) end the job sooner, so this is the slow end of detection.
NCCL_WATCHDOG_TIMEOUT_S = 600.0
# A vLLM engine's cold start, weights loaded and CUDA graphs captured: ~48 s (vLLM sleep-mode measurements on A100,
# hardware-and-costs.md §4). It is a floor on a restart's start-up: trainer workers, Ray and NCCL initialisation come
# on top and depend on the site, so a measured figure should replace it.
ENGINE_COLD_START_S = 48.0
# Llama 3's storage fabric (arXiv 2407.21783 §3.3.1): Tectonic sustains 2 TB/s for the 16,384-H100 run, whose 2,048
# eight-GPU nodes write checkpoints in bursts; 2e12 / 2048 = 0.98 GB/s a node. A parallel file system or local NVMe
# can do better; set your own.
STORAGE_GBYTE_PER_S_PER_NODE = 2e12 / 2048 / 1e9


def duration_seconds(text: str) -> float:
    """'30d' → 2,592,000.0; units s, m (or min), h, d, w."""
    match = _DURATION.match(text)
    if match is None:
        raise ValueError("a duration is a number and a unit: 30d, 12h, 90m, 3600s (units s, m, h, d, w)")
    return float(match.group(1)) * DURATION_UNITS_S[match.group(2)]


def _checked_duration(value: str) -> str:
    seconds = duration_seconds(value)
    if not 0 < seconds <= MAX_HORIZON_S:
        raise ValueError(f"a horizon is longer than 0 s and at most ten years ({MAX_HORIZON_S:,.0f} s)")
    return value


Duration = Annotated[str, Field(min_length=2, max_length=32, strict=True), AfterValidator(_checked_duration)]


# A failure rate per GPU: one number for every pool, or one per pool name.
RatePerGPU = Annotated[float, Field(ge=0, le=1e3, allow_inf_nan=False, strict=True)]
MTBF = Annotated[float, Field(gt=0, le=1e9, allow_inf_nan=False, strict=True)]


class Failures(Frozen):
    """Failures that stop the job (a GPU, its memory, a NIC, a host, a software fault): a Poisson process per pool at
    GPUs × the per-GPU rate. Each loses the work since the last checkpoint, then the job is detected as failed,
    restarted and restored. Give the rate per GPU as failures per GPU-day or as an MTBF in GPU-hours (not both);
    left out, each pool takes its GPU profile's published rate (`failures_per_gpu_day` in hardware_profiles/)."""

    failures_per_gpu_day: RatePerGPU | dict[str, RatePerGPU] | None = Field(
        None, description="job-stopping failures per GPU per day, for every pool or per pool name (Llama 3's 16,384 "
        "H100s: 419 unexpected interruptions in 54 days, 4.7e-4); 0 turns failures off. Default: each pool's GPU "
        "profile")
    mtbf_gpu_hours: MTBF | dict[str, MTBF] | None = Field(
        None, description="the same rate as one GPU's mean time between failures in hours (24 / failures_per_gpu_day)")
    detection_s: NonNegativeFloat = Field(
        NCCL_WATCHDOG_TIMEOUT_S, description="from the failure until the job is known to have failed: PyTorch's NCCL "
        "watchdog timeout (default 10 minutes) when the surviving ranks hang in a collective")
    startup_s: NonNegativeFloat = Field(
        ENGINE_COLD_START_S, description="rescheduling and start-up of the job after a failure: Ray, trainer workers, "
        "NCCL, and rollout engines (vLLM's cold start with CUDA graphs, ~48 s, is the default and a floor); the "
        "checkpoint's reading is priced apart")

    @model_validator(mode="after")
    def _one_rate(self) -> Failures:
        if self.failures_per_gpu_day is not None and self.mtbf_gpu_hours is not None:
            raise ValueError("give failures_per_gpu_day or mtbf_gpu_hours, not both (mtbf_gpu_hours = 24 / "
                             "failures_per_gpu_day)")
        return self

    @property
    def restart_s(self) -> float:
        """Detection and start-up: the seconds a failure costs before the checkpoint is read."""
        return self.detection_s + self.startup_s


class Checkpoint(Frozen):
    """Checkpoints of the trained roles' state (weights and optimizer state, verl's checkpoint.contents model and
    optimizer), saved every `save_freq` steps to shared storage and read back after a failure."""

    save_freq: PositiveInt = Field(
        description="RL steps between checkpoints (verl trainer.save_freq; verl's default -1 never saves: leave this "
        "section out for that)")
    write_gbyte_per_s_per_node: PositiveFloat = Field(
        STORAGE_GBYTE_PER_S_PER_NODE, description="storage write bandwidth per training node, GB/s (default: Llama "
        "3's Tectonic, 2 TB/s sustained over 2,048 nodes)")
    read_gbyte_per_s_per_node: PositiveFloat = Field(
        STORAGE_GBYTE_PER_S_PER_NODE, description="storage read bandwidth per training node when a checkpoint is "
        "restored, GB/s")
    async_save: Flag = Field(
        False, description="training waits only while the state is copied to host memory and the write proceeds in "
        "the background (Megatron --async-save, verl's Megatron checkpoint async_save); a write longer than the steps "
        "until the next save makes that save wait for it")


class Evaluation(Frozen):
    """A generation-only pass over a validation set every `test_freq` steps (verl trainer.test_freq): the engines
    generate, nothing trains."""

    test_freq: PositiveInt = Field(description="RL steps between evaluation passes (verl trainer.test_freq)")
    prompts: PositiveInt = Field(description="prompts in the validation set (verl data.val_files; MATH-500 has 500)")
    samples_per_prompt: PositiveInt = Field(
        1, description="responses per validation prompt (verl actor_rollout_ref.rollout.val_kwargs.n, default 1)")


def rate_for_pool(rate: float | dict[str, float] | None, pool: str) -> float | None:
    """The per-GPU figure a pool gets from a field that is one number, a mapping by pool name, or unset."""
    if isinstance(rate, dict):
        return rate.get(pool)
    return rate


__all__ = ["Checkpoint", "Duration", "Evaluation", "Failures", "duration_seconds", "rate_for_pool"]
