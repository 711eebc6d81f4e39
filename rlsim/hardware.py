"""GPU and interconnect profiles: what one accelerator and each of its links can do, every number with its source.

A profile is one YAML file: `hardware_profiles/<gpu>.yaml` or `hardware_profiles/interconnects/<link>.yaml`.
Every numeric field is written `{value: ..., source: "..."}` so a reader can check it. YAML names carry units
(`memory_gib`, `hbm_tbps`, `latency_us`); the properties here convert to SI (bytes, FLOP/s, seconds).
A `HardwareCatalog` holds the shipped profiles plus any directories a user adds; nothing is cached globally.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, Any, Generic, Literal, NamedTuple, TypeVar

from pydantic import StringConstraints, model_validator

from rlsim.errors import Problem, ScenarioError, UnknownName
from rlsim.fields import Flag, Frozen, HardwareAmount, HardwareQuantity, PositiveFloat, PositiveInt
from rlsim.loading import closest, validate_document
from rlsim.shipped import shipped
from rlsim.yamlsource import PathKey, YamlDocument, read_yaml

GIB = 2**30

Text = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]
# Profile names double as file names, so they stay filesystem- and YAML-friendly.
ProfileName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")]

T = TypeVar("T")


class Sourced(Frozen, Generic[T]):
    """A value and the document it comes from (datasheet, benchmark result file, or a derivation from them)."""

    value: T
    source: Text

    @model_validator(mode="before")
    @classmethod
    def _written_with_source(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            raise ValueError('every hardware fact is written {value: ..., source: "<document it comes from>"}')
        return data


class SourcedNumber(Sourced[HardwareQuantity]):
    """A positive quantity in the unit its field name says."""


class SourcedCount(Sourced[PositiveInt]):
    """A positive whole count (GPUs, NICs)."""


class SourcedNonNegative(Sourced[HardwareAmount]):
    """A quantity that may be zero (a fitted fixed time, an error)."""


class SourcedFlag(Sourced[Flag]):
    """A yes/no capability."""


def _si(quantity: SourcedNumber | None, scale: float) -> float | None:
    return None if quantity is None else quantity.value * scale


# ------------------------------------------------------------------------------------------- calibrated curves


class CurvePoint(Frozen):
    """One measurement behind a fitted curve: its median time in seconds (`value`) at a size (FLOPs or bytes, as the
    curve says), what was timed, and the raw file row or publication it comes from."""

    value: PositiveFloat
    size: PositiveFloat
    label: Text
    source: Text


class FittedCurve(Frozen):
    """A least-squares fit t = fixed + size / rate to `points`, judged by its leave-one-out (held-out) error.

    `held_out_mape_pct` is absent with a single point. With fewer than three distinct sizes, and for GEMM and
    attention curves (whose fill is one constant of the cost model), only the rate is fitted and `fixed_us` is the
    cost model's default (its source says so).
    """

    fixed_us: SourcedNonNegative
    held_out_mape_pct: SourcedNonNegative | None = None
    points: tuple[CurvePoint, ...]


class ComputeCurve(FittedCurve):
    """Time of a compute-bound kernel against its FLOPs: t = fill + FLOPs / rate, i.e. the efficiency curve
    eff(F) = e_max·F/(F + F_half) with e_max = rate/peak and F_half = fill·rate (reference §6)."""

    dtype: Literal["bf16", "fp16", "fp8", "fp4"]
    tflops: SourcedNumber


class BandwidthCurve(FittedCurve):
    """Time of a transfer against the bytes it moves: t = fixed + bytes / bandwidth."""

    gbyte_per_s: SourcedNumber


class CollectiveCurve(FittedCurve):
    """One collective measured on `ranks` GPUs over `nodes` nodes: its points and the α–β fit
    t = α + size·busbw_factor / busbw, with size the nccl-tests buffer size (see rlsim.costs.collectives) and
    `fixed_us` = α."""

    op: Literal["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "send_recv"]
    ranks: SourcedCount
    nodes: SourcedCount
    busbw_gbyte_per_s: SourcedNumber
    # Between measured sizes collective_time interpolates the points; this is that interpolation's held-out error.
    table_held_out_mape_pct: SourcedNonNegative | None = None


class GPUCalibration(Frozen):
    """Curves fitted by `rlsim calibrate fit` from a raw measurement file, used by the cost models in place of the
    spec-sheet defaults (rlsim.costs.compute.GPURates). `origin: published` marks curves derived from public
    measurements, not measured here. Only curves a cost model prices with are kept: host copies and kernel launches
    are fitted and printed by `fit`, not stored (see docs/calibration.md, Limits)."""

    origin: Literal["measured", "published"]
    note: Text
    gemm: tuple[ComputeCurve, ...] = ()
    attention_prefill: ComputeCurve | None = None
    hbm: BandwidthCurve | None = None
    decode_attention: BandwidthCurve | None = None  # bytes = KV cache read by one decode step

    @model_validator(mode="after")
    def _one_curve_per_dtype(self) -> GPUCalibration:
        dtypes = [c.dtype for c in self.gemm]
        if len(set(dtypes)) != len(dtypes):
            raise ValueError(f"one gemm curve per dtype; got {', '.join(dtypes)}")
        return self

    def gemm_curve(self, dtype: str) -> ComputeCurve | None:
        return next((c for c in self.gemm if c.dtype == dtype), None)


class LinkCalibration(Frozen):
    """Collective curves measured over a link (nccl-tests style), used by `collective_time` for matching groups."""

    origin: Literal["measured", "published"]
    note: Text
    collectives: tuple[CollectiveCurve, ...]

    @model_validator(mode="after")
    def _one_curve_per_group(self) -> LinkCalibration:
        keys = [(c.op, c.ranks.value, c.nodes.value) for c in self.collectives]
        if len(set(keys)) != len(keys):
            raise ValueError("one collective curve per (op, ranks, nodes)")
        return self

    def curve(self, op: str, ranks: int, nodes: int) -> CollectiveCurve | None:
        return next((c for c in self.collectives if (c.op, c.ranks.value, c.nodes.value) == (op, ranks, nodes)), None)


# ---------------------------------------------------------------------------------------------------- interconnects


class InterconnectMeasured(Frozen):
    """Public measurements of a link, next to its spec."""

    # One-direction copy over the link: GPU to GPU on a scale-up fabric, host to GPU on a host link.
    copy_gbyte_per_s: SourcedNumber | None = None


class Interconnect(Frozen):
    """One kind of link: a scale-up fabric between GPUs (NVLink, xGMI), one scale-out NIC, or a GPU's host link.

    Bandwidth is per direction: per GPU for scale-up fabrics, per NIC for scale-out, per GPU for host links.
    `latency_us` is α in the reference cost formulas (t = steps·α + bytes/B): the fixed time of one step of a
    collective or of one message over the link.
    """

    kind: Literal["interconnect"]
    name: ProfileName
    display_name: Text
    aliases: tuple[Text, ...] = ()
    scope: Literal["scale_up", "scale_out", "host"]
    bandwidth_gbyte_per_s: SourcedNumber | None = None
    bandwidth_gbit_per_s: SourcedNumber | None = None  # wire rate, the way NICs are sold
    # What one GPU pair gets, when a full mesh (no switch) gives a pair less than the per-GPU total.
    peer_bandwidth_gbyte_per_s: SourcedNumber | None = None
    latency_us: SourcedNumber
    in_network_reduction: SourcedFlag | None = None  # absent: the fabric is not modelled as reducing in-switch
    measured: InterconnectMeasured = InterconnectMeasured()
    calibration: LinkCalibration | None = None

    @model_validator(mode="after")
    def _one_bandwidth(self) -> Interconnect:
        given = [f for f in ("bandwidth_gbyte_per_s", "bandwidth_gbit_per_s") if getattr(self, f) is not None]
        if len(given) != 1:
            raise ValueError(
                "give exactly one of bandwidth_gbyte_per_s and bandwidth_gbit_per_s"
                + (" (both were given)" if given else " (neither was given)")
            )
        peer = self.peer_bandwidth_gbyte_per_s
        if peer is not None and peer.value * 1e9 > self.bytes_per_s:
            raise ValueError(f"peer_bandwidth_gbyte_per_s ({peer.value}) exceeds the link's total bandwidth")
        return self

    @property
    def bytes_per_s(self) -> float:
        """Spec bandwidth per direction, bytes/s."""
        if self.bandwidth_gbyte_per_s is not None:
            return self.bandwidth_gbyte_per_s.value * 1e9
        assert self.bandwidth_gbit_per_s is not None  # guaranteed by _one_bandwidth
        return self.bandwidth_gbit_per_s.value * 1e9 / 8

    @property
    def peer_bytes_per_s(self) -> float:
        """Bandwidth one GPU pair gets on its own, bytes/s (equal to `bytes_per_s` on a switched fabric)."""
        return _si(self.peer_bandwidth_gbyte_per_s, 1e9) or self.bytes_per_s

    @property
    def latency_s(self) -> float:
        return self.latency_us.value * 1e-6

    @property
    def reduces_in_network(self) -> bool:
        return self.in_network_reduction is not None and self.in_network_reduction.value


# ---------------------------------------------------------------------------------------------------------- GPUs


class PeakTflops(Frozen):
    """Dense (no sparsity) tensor-core peak per data type, TFLOP/s. A GPU lacking a type leaves it out."""

    bf16: SourcedNumber
    fp16: SourcedNumber | None = None
    fp8: SourcedNumber | None = None
    fp4: SourcedNumber | None = None


class ScaleUp(Frozen):
    """The fast fabric joining GPUs into one domain (an NVLink/NVSwitch node, an NVL72 rack, an xGMI mesh)."""

    interconnect: ProfileName
    domain_gpus: SourcedCount


class Node(Frozen):
    """One server (or NVL72 compute tray): its GPUs, its scale-out NICs and each GPU's link to host memory."""

    gpus_per_node: SourcedCount
    nics_per_node: SourcedCount | None = None
    scale_out: ProfileName | None = None  # interconnect name of one NIC
    host_link: ProfileName
    # How much longer the host's CPU takes than the x86 hosts rlsim.config.framework's CPU times stand for (a DGX
    # H100's Xeon in the measurements behind GB200's factors), by kind of work, since a CPU can be slow at one and not
    # the other: `host_cpu_time_factor` for PyTorch's dispatch down to a kernel launch (C++ dispatcher, library
    # heuristics, the driver's launch: kernel_launch_s, eager_op_cpu_s), `host_python_time_factor` for interpreted
    # Python (an engine's scheduling and bookkeeping, the RL driver's work). Absent: such a host (1).
    host_cpu_time_factor: SourcedNumber | None = None
    host_python_time_factor: SourcedNumber | None = None

    @property
    def dispatch_time_factor(self) -> float:
        return self.host_cpu_time_factor.value if self.host_cpu_time_factor is not None else 1.0

    @property
    def python_time_factor(self) -> float:
        return self.host_python_time_factor.value if self.host_python_time_factor is not None else 1.0

    @model_validator(mode="after")
    def _nics_and_their_kind(self) -> Node:
        if (self.nics_per_node is None) != (self.scale_out is None):
            raise ValueError("give nics_per_node and scale_out together, or neither (a node without scale-out network)")
        return self


class Measured(Frozen):
    """Public measurements of the GPU (reference §2): what is achievable, as opposed to the spec.

    The all-reduce and host-to-device figures are sourced records that no cost model reads: the evidence a reader
    checks the collective and copy models against (rlsim.costs.collectives derives HOST_LINK_EFFICIENCY from the
    host-to-device ones)."""

    gemm_bf16_tflops: SourcedNumber | None = None  # best large BF16 GEMM
    gemm_fp8_tflops: SourcedNumber | None = None  # best large FP8 GEMM (None: FP8 reaches BF16's fraction of peak)
    hbm_stream_tbps: SourcedNumber | None = None
    allreduce_busbw_gbyte_per_s: SourcedNumber | None = None  # NCCL/RCCL bus bandwidth inside the node, large messages
    small_allreduce_latency_us: SourcedNumber | None = None  # 1-8 KB all-reduce inside the node
    host_to_device_gbyte_per_s: SourcedNumber | None = None
    # vLLM's fused-MoE decode kernel: beyond rlsim's price of streaming the weights of the experts it touches, a fixed
    # time per call and one per expert touched (calibration/fused_moe.py, from NVIDIA aiconfigurator's measured tables).
    fused_moe_call_us: SourcedNumber | None = None
    fused_moe_expert_us: SourcedNumber | None = None

    @property
    def gemm_bf16_flops(self) -> float | None:
        return _si(self.gemm_bf16_tflops, 1e12)

    @property
    def gemm_fp8_flops(self) -> float | None:
        return _si(self.gemm_fp8_tflops, 1e12)

    @property
    def hbm_stream_bytes_per_s(self) -> float | None:
        return _si(self.hbm_stream_tbps, 1e12)

    @property
    def fused_moe_call_seconds(self) -> float | None:
        return _si(self.fused_moe_call_us, 1e-6)

    @property
    def fused_moe_expert_seconds(self) -> float | None:
        return _si(self.fused_moe_expert_us, 1e-6)


class GPUProfile(Frozen):
    """One accelerator type and the node it ships in.

    `scale_up` absent means the GPUs of a node reach each other only through their host links (e.g. L40S on PCIe).
    """

    kind: Literal["gpu"]
    name: ProfileName
    display_name: Text
    aliases: tuple[Text, ...] = ()
    vendor: Text
    peak_tflops: PeakTflops
    memory_gib: SourcedNumber
    hbm_tbps: SourcedNumber  # device memory bandwidth, TB/s (decimal); GDDR on cards without HBM
    # Streaming multiprocessors (NVIDIA) or compute units (AMD): how many GEMM output tiles run at once, which sets
    # the wave quantization of `rlsim.costs.compute`. Optional: without it that model keeps tile quantization but
    # treats the tiles as perfectly balanced over the GPU (no partial last wave, no split-K).
    sm_count: SourcedCount | None = None
    scale_up: ScaleUp | None = None
    node: Node
    tdp_w: SourcedNumber
    price_usd_per_gpu_hour: SourcedNumber | None = None  # overridable default; absent when no market price is known
    # Job-stopping failures per GPU per day in a large fleet (the default of a scenario's failures section); absent
    # when no fleet has published one for this GPU.
    failures_per_gpu_day: SourcedNumber | None = None
    measured: Measured = Measured()
    calibration: GPUCalibration | None = None

    @model_validator(mode="after")
    def _domain_tiles_nodes(self) -> GPUProfile:
        # A scale-up domain is either a part of one node or a whole number of nodes (NVL72 = 18 trays of 4).
        if self.scale_up is not None:
            domain, node = self.scale_up.domain_gpus.value, self.node.gpus_per_node.value
            if domain % node and node % domain:
                raise ValueError(
                    f"scale_up.domain_gpus ({domain}) must divide or be a multiple of node.gpus_per_node ({node})"
                )
        return self

    @property
    def dtypes(self) -> tuple[str, ...]:
        """Data types with a known tensor-core peak."""
        return tuple(name for name in PeakTflops.model_fields if getattr(self.peak_tflops, name) is not None)

    def peak_flops(self, dtype: str) -> float:
        """Dense peak in FLOP/s for `dtype` ("bf16", "fp8", ...). Raises UnknownName for a type this GPU lacks."""
        key = dtype.strip().lower()
        known = key in PeakTflops.model_fields
        peak = getattr(self.peak_tflops, key) if known else None
        if peak is None:
            # A typo gets a did-you-mean; a real type this GPU lacks (fp8 on A100) does not.
            typo_fix = None if known else closest(key, PeakTflops.model_fields)
            raise UnknownName(f"{self.name} dtype", dtype, list(self.dtypes), typo_fix)
        return peak.value * 1e12

    @property
    def memory_bytes(self) -> float:
        return self.memory_gib.value * GIB

    @property
    def hbm_bytes_per_s(self) -> float:
        return self.hbm_tbps.value * 1e12


# -------------------------------------------------------------------------------------------------------- catalog


@dataclass(frozen=True)
class GPULinks:
    """The interconnects one GPU type uses, resolved from its profile."""

    scale_up: Interconnect | None
    scale_out: Interconnect | None
    host: Interconnect


class _Loaded(NamedTuple):
    profile: GPUProfile | Interconnect
    doc: YamlDocument


_MODELS: dict[str, type[GPUProfile] | type[Interconnect]] = {"gpu": GPUProfile, "interconnect": Interconnect}



def shipped_profiles_dir() -> Path:
    """Where the profiles that come with rlsim live: inside an installed wheel, else at the top of a source checkout."""
    return shipped("hardware_profiles", "hardware_profiles")


@dataclass(frozen=True)
class HardwareCatalog:
    """Every known GPU and interconnect profile. Lookup is case-insensitive and accepts aliases."""

    _gpus: Mapping[str, GPUProfile]
    _interconnects: Mapping[str, Interconnect]
    _gpu_keys: Mapping[str, str]  # lower-cased name or alias -> canonical name
    _interconnect_keys: Mapping[str, str]

    @classmethod
    def load(cls, extra_dirs: Sequence[Path | str] = ()) -> HardwareCatalog:
        """Read the shipped profiles, then each of `extra_dirs` in order; a later profile replaces an earlier namesake.

        A directory holds GPU files at its top and interconnect files in `interconnects/` (the `kind:` field decides).
        Malformed files, clashing names and GPU profiles naming a missing interconnect raise ScenarioError.
        """
        loaded: dict[tuple[str, str], _Loaded] = {}
        for root in (shipped_profiles_dir(), *map(Path, extra_dirs)):
            in_root: dict[tuple[str, str], _Loaded] = {}
            for path in _profile_files(root):
                entry = _read_profile(path)
                key = (entry.profile.kind, entry.profile.name.lower())
                if key in in_root:
                    other = in_root[key].doc.file
                    raise ScenarioError(entry.doc.problem(("name",), f"{key[0]} {key[1]!r} is also defined in {other}"))
                in_root[key] = entry
            loaded.update(in_root)
        return cls._build(list(loaded.values()))

    @classmethod
    def _build(cls, entries: list[_Loaded]) -> HardwareCatalog:
        problems: list[Problem] = []
        links = [e for e in entries if isinstance(e.profile, Interconnect)]
        link_keys = _index(links, "interconnect", problems)
        by_link = {e.profile.name: e.profile for e in links}
        gpus = [_resolve_links(e, link_keys, by_link, problems) for e in entries if isinstance(e.profile, GPUProfile)]
        gpu_keys = _index(gpus, "GPU", problems)
        if problems:
            raise ScenarioError(sorted(problems, key=lambda p: (p.file or "", p.line or 0)))
        return cls(
            _gpus=MappingProxyType({e.profile.name: e.profile for e in gpus}),
            _interconnects=MappingProxyType(by_link),
            _gpu_keys=MappingProxyType(gpu_keys),
            _interconnect_keys=MappingProxyType(link_keys),
        )

    def gpu(self, name: str) -> GPUProfile:
        return self._gpus[_lookup("GPU", name, self._gpu_keys)]

    def interconnect(self, name: str) -> Interconnect:
        return self._interconnects[_lookup("interconnect", name, self._interconnect_keys)]

    def gpu_names(self) -> list[str]:
        return sorted(self._gpus)

    def interconnect_names(self) -> list[str]:
        return sorted(self._interconnects)

    def links(self, gpu: str | GPUProfile) -> GPULinks:
        """The scale-up, scale-out and host interconnects of a GPU type."""
        profile = self.gpu(gpu) if isinstance(gpu, str) else gpu
        return GPULinks(
            scale_up=self.interconnect(profile.scale_up.interconnect) if profile.scale_up else None,
            scale_out=self.interconnect(profile.node.scale_out) if profile.node.scale_out else None,
            host=self.interconnect(profile.node.host_link),
        )


def _profile_files(root: Path) -> list[Path]:
    if not root.is_dir():
        reason = "is not a directory" if root.exists() else "no such directory"
        raise ScenarioError(Problem(f"hardware profile directory: {reason}", file=str(root)))
    found: list[Path] = []
    for folder in (root, root / "interconnects"):
        found += sorted(p for p in folder.glob("*") if p.suffix in (".yaml", ".yml") and p.is_file())
    return found


def _read_profile(path: Path) -> _Loaded:
    stat = path.stat()
    return _read_profile_version(path, stat.st_mtime_ns, stat.st_size)


@lru_cache(maxsize=512)
def _read_profile_version(path: Path, mtime_ns: int, size: int) -> _Loaded:
    """One version of a profile file, parsed once: sweeps and tests load the same files thousands of times. The key
    holds the file's modification time and size, so an edited file is read again; the result is a frozen model."""
    doc = read_yaml(path)
    data = doc.data
    kind = data.get("kind") if isinstance(data, dict) else None
    if isinstance(data, dict) and kind not in _MODELS:
        message = "needs `kind: gpu` or `kind: interconnect`" if kind is None else f"{kind!r} is not a profile kind"
        typo_fix = closest(str(kind), _MODELS) if kind is not None else None
        raise ScenarioError(doc.problem(("kind",), message, value=kind, valid=", ".join(_MODELS), suggestion=typo_fix))
    profile = validate_document(_MODELS.get(kind, GPUProfile), doc)
    if profile.name.lower() != path.stem.lower():
        # Overrides match by name, so a copied file that kept the old name would silently replace another profile.
        raise ScenarioError(
            doc.problem(("name",), f"name {profile.name!r} differs from the file name {path.name!r}", valid=path.stem)
        )
    return _Loaded(profile, doc)


def _index(entries: Sequence[_Loaded], kind: str, problems: list[Problem]) -> dict[str, str]:
    """Map each lower-cased name and alias to its profile's name; an alias that is already taken is a problem."""
    keys = {e.profile.name.lower(): e.profile.name for e in entries}
    files = {e.profile.name: e.doc.file for e in entries}
    for entry in entries:
        for i, alias in enumerate(entry.profile.aliases):
            owner = keys.setdefault(alias.lower(), entry.profile.name)
            if owner != entry.profile.name:
                message = f"alias {alias!r} already names {kind} {owner!r} ({files[owner]})"
                problems.append(entry.doc.problem(("aliases", i), message))
    return keys


def _resolve_links(
    entry: _Loaded, link_keys: Mapping[str, str], links: Mapping[str, Interconnect], problems: list[Problem]
) -> _Loaded:
    """Check that each interconnect a GPU profile names exists with the right scope; rewrite aliases to names."""
    gpu = entry.profile
    assert isinstance(gpu, GPUProfile)

    def resolve(path: PathKey, written: str | None, scope: str) -> str | None:
        if written is None:
            return None
        name = link_keys.get(written.lower())
        fitting = ", ".join(n for n in sorted(links) if links[n].scope == scope)
        if name is None:
            typo_fix = link_keys.get(closest(written, link_keys) or "")
            message = f"no interconnect named {written!r}"
            problems.append(entry.doc.problem(path, message, value=written, valid=fitting, suggestion=typo_fix))
        elif links[name].scope != scope:
            message = f"{name!r} is a {links[name].scope} interconnect, this field needs a {scope} one"
            problems.append(entry.doc.problem(path, message, value=written, valid=fitting))
        return name or written

    node = gpu.node.model_copy(
        update={
            "scale_out": resolve(("node", "scale_out"), gpu.node.scale_out, "scale_out"),
            "host_link": resolve(("node", "host_link"), gpu.node.host_link, "host"),
        }
    )
    scale_up = gpu.scale_up and gpu.scale_up.model_copy(
        update={"interconnect": resolve(("scale_up", "interconnect"), gpu.scale_up.interconnect, "scale_up")}
    )
    return _Loaded(gpu.model_copy(update={"scale_up": scale_up, "node": node}), entry.doc)


def _lookup(kind: str, name: str, keys: Mapping[str, str]) -> str:
    found = keys.get(str(name).strip().lower())
    if found is None:
        match = closest(str(name), keys)
        raise UnknownName(kind, name, sorted(set(keys.values())), keys[match] if match else None)
    return found
