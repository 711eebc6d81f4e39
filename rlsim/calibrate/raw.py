"""The raw measurement file: what `calibration/microbench.py` writes and `rlsim calibrate fit` reads.

The harness's JSON is the contract between the two (the harness cannot import rlsim, so this module is the schema's
one definition on the rlsim side; tests run the harness and validate its output here). Files of published
measurements use the same schema, written as YAML with `origin: published`: they may give a row's throughput as
published (`tflops`, `gbyte_per_s`, `busbw_gbyte_per_s`) instead of its time, and every row must cite its source.

The file is read with the YAML reader (JSON is YAML) so that every error names its file, line and field.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rlsim.costs.collectives import bus_factor
from rlsim.errors import Problem, ScenarioError
from rlsim.loading import validate_document
from rlsim.yamlsource import read_yaml

SCHEMA = "rlsim-calibration-raw/1"
COLLECTIVE_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "send_recv")
DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp8": 1, "fp4": 0.5}

# JSON writes 1e-05 where YAML 1.1 wants 1.0e-05, so numbers are read in lax mode (a numeric string is a number).
Positive = Annotated[float, Field(gt=0, allow_inf_nan=False)]
Count = Annotated[int, Field(gt=0)]


class _Row(BaseModel):
    """One timed point: the median of its repetitions (or the time implied by a published throughput)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    median_s: Positive | None = None
    p10_s: Positive | None = None
    p90_s: Positive | None = None
    reps: Count | None = None
    label: str | None = None
    source: str | None = None  # required in a file of published measurements

    @staticmethod
    def _time_from(data: dict, rate_field: str, work: float, unit: float) -> dict:
        """Fill median_s from a published throughput `rate_field` (in `unit` per second) of `work`."""
        rate = data.get(rate_field)
        if (data.get("median_s") is None) == (rate is None):
            raise ValueError(f"give exactly one of median_s and {rate_field}")
        if rate is not None:
            if not isinstance(rate, (int, float)) or isinstance(rate, bool) or not 0 < rate < math.inf:
                raise ValueError(f"{rate_field} must be a finite number > 0")
            data = {**data, "median_s": work / (float(rate) * unit)}
        return data


def _whole(value: Any) -> bool:
    """A whole number as JSON may write it (4096 or 4096.0), which the lax `Count` fields take."""
    return (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            and float(value).is_integer())


class GemmRow(_Row):
    kernel: Literal["gemm"]
    dtype: Literal["bf16", "fp16", "fp8", "fp4"]
    m: Count
    n: Count
    k: Count
    flops: Positive | None = None
    bytes: Positive | None = None  # operands read + result written (BF16 result)
    tflops: Positive | None = None  # published throughput, instead of median_s

    @model_validator(mode="before")
    @classmethod
    def _derived(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        if not all(_whole(data.get(f)) for f in "mnk"):
            raise ValueError("m, n and k must be whole numbers of rows and columns")
        m, n, k = (int(data[f]) for f in "mnk")
        dtype = data.get("dtype")
        width = DTYPE_BYTES.get(dtype, 2) if isinstance(dtype, str) else 2  # a bad dtype is refused at its field
        data = {"flops": 2.0 * m * n * k, "bytes": width * (m * k + n * k) + 2 * m * n, **data}
        return cls._time_from(data, "tflops", data["flops"], 1e12)


class PrefillRow(_Row):
    kernel: Literal["attention_prefill"]
    dtype: Literal["bf16", "fp16", "fp8"]
    batch: Count
    seq: Count
    heads: Count
    kv_heads: Count
    head_dim: Count
    flops: Positive
    bytes: Positive


class DecodeRow(_Row):
    kernel: Literal["attention_decode"]
    dtype: Literal["bf16", "fp16", "fp8"]
    batch: Count
    context: Count
    heads: Count
    kv_heads: Count
    head_dim: Count
    flops: Positive
    bytes: Positive  # KV cache read


class _TransferRow(_Row):
    """A copy of `bytes`, timed or given as its published bandwidth."""

    bytes: Positive
    gbyte_per_s: Positive | None = None

    @model_validator(mode="before")
    @classmethod
    def _derived(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not isinstance(data.get("bytes"), (int, float)):
            return data
        return cls._time_from(data, "gbyte_per_s", data["bytes"], 1e9)


class CopyRow(_TransferRow):
    kernel: Literal["hbm_copy"]  # bytes: read + write, twice the buffer
    buffer_bytes: Positive | None = None


class HostRow(_TransferRow):
    kernel: Literal["host_copy"]
    direction: Literal["h2d", "d2h"]
    memory: Literal["pinned", "pageable"]


class LaunchRow(_Row):
    kernel: Literal["launch"]
    mode: Literal["eager", "graph"]
    launches: Count


class CollectiveRow(_Row):
    kernel: Literal["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "send_recv"]
    ranks: Annotated[int, Field(ge=2)]
    nodes: Count
    bytes: Positive  # the nccl-tests "size" of the buffer
    busbw_gbyte_per_s: Positive | None = None  # published bus bandwidth, instead of median_s

    @model_validator(mode="before")
    @classmethod
    def _derived(cls, data: Any) -> Any:
        if not isinstance(data, dict) or not isinstance(data.get("bytes"), (int, float)):
            return data
        if data.get("kernel") not in COLLECTIVE_OPS or not isinstance(data.get("ranks"), int) or data["ranks"] < 2:
            return data
        return cls._time_from(data, "busbw_gbyte_per_s", data["bytes"] * bus_factor(data["kernel"], data["ranks"]), 1e9)


Row = Annotated[GemmRow | PrefillRow | DecodeRow | CopyRow | HostRow | LaunchRow | CollectiveRow,
                Field(discriminator="kernel")]


class RawFile(BaseModel):
    """A whole raw file. `device`, `versions`, `world` and `protocol` are recorded for the reader, not interpreted."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    schema_: Literal["rlsim-calibration-raw/1"] = Field(alias="schema")
    origin: Literal["measured", "published"]
    note: str | None = None  # required for published data: where it comes from, as a whole
    created_utc: str | None = None
    host: str | None = None
    mode: Literal["quick", "full", "published"]
    device: dict[str, Any]
    versions: dict[str, Any] = {}
    world: dict[str, Any] = {}
    protocol: dict[str, Any] = {}
    elapsed_s: Annotated[float, Field(ge=0, allow_inf_nan=False)] | None = None
    skipped: list[dict[str, Any]] = []
    measurements: list[Row]

    @model_validator(mode="after")
    def _noted_and_not_empty(self) -> RawFile:
        if self.origin == "published" and not self.note:
            raise ValueError("a file of published measurements needs a `note` saying where they come from")
        if not self.measurements:
            raise ValueError("no measurements")
        return self


def load_raw(path: Path | str) -> RawFile:
    """Read and validate a raw file; problems raise ScenarioError with file, line and field."""
    path = Path(path)
    if not path.is_file():
        raise ScenarioError(Problem("no such raw measurement file", file=str(path)))
    doc = read_yaml(path)
    raw = validate_document(RawFile, doc)
    if raw.origin == "published":
        missing = [i for i, row in enumerate(raw.measurements) if not row.source]
        if missing:
            raise ScenarioError([doc.problem(("measurements", i), "a published measurement must cite its `source`")
                                 for i in missing])
    return raw
