"""The event log: immutable records of what every GPU did, what happened to every sequence, and the state of every
generation engine at each batch-changing event.

It is the single source of every metric. The simulator appends records while it runs and freezes them at the end;
metrics are pure functions over the frozen log and never see a SimPy object.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from rlsim.events.agents import AgentRecord
    from rlsim.events.environments import EnvironmentRecord
    from rlsim.events.sample_spill import SpilledSamples
    from rlsim.events.tables import SampleTable, SequenceTable, SpanTable

# The idle taxonomy (DESIGN.md): every GPU-second carries exactly one of these labels.
BUSY_LABELS = ("prefill", "decode", "logprob", "train_forward", "train_backward", "optimizer", "reward_model")
COMMUNICATION_LABELS = ("weight_sync", "reshard", "exposed_collective")
MEMORY_LABELS = ("offload", "reload")
IDLE_LABELS = ("tail", "env_wait", "starved", "barrier", "staleness_block", "pipeline_bubble", "unassigned")
LABELS = BUSY_LABELS + COMMUNICATION_LABELS + MEMORY_LABELS + IDLE_LABELS

# What `SequenceRecord.dropped_by` says of a rollout still generating or waiting when the last step ended.
RUN_END = "run_end"
# What it says of a complete group the staleness bound dropped: generated on a policy too many versions old.
STALENESS_BOUND = "staleness_bound"
# Stage names as verl logs them (timing_s/...).
STAGES = ("gen", "reward", "old_log_prob", "ref", "values", "adv", "update_actor", "update_critic", "weight_sync", "wait")
# The stages of a step the trainer's side runs, in order: the forward passes, the driver's advantage work, the updates.
TRAINING_STAGES = ("old_log_prob", "ref", "values", "adv", "update_actor", "update_critic")


@dataclass(frozen=True, slots=True)
class Span:
    """GPUs [first_gpu, first_gpu + gpu_count) spent [start, end) doing `label` for `stage` of RL step `step`."""

    first_gpu: int
    gpu_count: int
    start: float
    end: float
    label: str
    stage: str
    step: int
    version: int  # policy version the GPUs hold (rollout) or produce (training)
    unit: str = ""  # the engine or training rank the span belongs to, e.g. "engine3", "dp5"

    @property
    def seconds(self) -> float:
        return self.end - self.start


@dataclass(frozen=True, slots=True)
class SequenceRecord:
    """One rollout: when it was asked for, generated and trained, with which policy versions."""

    seq_id: int
    group: int
    engine: int
    prompt_tokens: int
    response_tokens: int
    truncated: bool
    submitted: float
    finished: float
    version_started: int  # policy version that generated its first token
    version_trained: int  # policy version being trained when it was consumed (-1: dropped)
    step_trained: int  # RL step that consumed it (-1: dropped)
    preemptions: int = 0
    dropped_by: str = ""  # the policy that dropped it, when it was not trained (RUN_END: still in flight at the end)
    admitted: float = -1.0  # when an engine first admitted it (-1: never)
    readmissions: int = 0  # admissions after the first: after a preemption, an interruption, or a released tool call
    # Its group's rewards differ (not all right nor all wrong), so GRPO gives it a non-zero advantage: the workload's
    # informative model draws it per group (workload.informative, or informative_group_fraction).
    informative: bool = True

    @property
    def staleness(self) -> int:
        return self.version_trained - self.version_started if self.step_trained >= 0 else 0


@dataclass(frozen=True, slots=True)
class KVTransfer:
    """A KV cache moved from a prefill engine to a decode engine (prefill/decode disaggregation)."""

    seq_id: int
    source: str  # the prefill engine's unit, prefill0, …
    destination: str  # the decode engine's unit, engine0, …
    start: float  # when it began crossing the link (after transfers ahead of it into the same engine)
    end: float
    tokens: int  # tokens whose KV cache moved (those the decode engine's prefix cache lacked)
    bytes: float


@dataclass(frozen=True, slots=True)
class StepRecord:
    """One RL step as the trainer saw it: when it started and ended, and seconds per verl stage."""

    step: int
    start: float
    end: float
    stages: dict[str, float] = field(default_factory=dict)
    samples: int = 0
    tokens: int = 0  # prompt + response tokens trained on

    @property
    def seconds(self) -> float:
        return self.end - self.start


class EngineSample(NamedTuple):
    """A generation engine's state at `time`, recorded at each event that changes its batch or its queue: an
    admission, a finish, a preemption or interruption, a prefill iteration, a tool call or return, a pause or resume,
    a submission or a steal — O(sequences + turns) per run, never O(tokens). Counters are cumulative and exact: the
    fast mode books what the iteration-by-iteration mode would have booked by then.

    Between two consecutive samples of an engine its decode batch is `decoding` of the earlier one, and every
    iteration run in between (`iterations` of the later one less the earlier one's) added `decoding` KV tokens.

    A named tuple rather than a dataclass: a run records many of them, and tuples are the cheapest to make."""

    engine: str  # the engine's unit, as its spans carry it: "engine3", or "judge0" for an LLM judge's engine
    time: float
    running: int  # sequences holding a slot: decoding, prefilling, or holding it through tool calls
    waiting: int  # sequences queued for admission
    kv_tokens: int  # KV-cache tokens the running sequences hold (released contexts kept as prefix cache excluded)
    decoding: int  # the decode batch: running sequences that gain one token per iteration
    iterations: int  # iterations run so far: decode-only, or prefill chunks with the decodes
    decode_iterations: int  # decode-only iterations run so far (what the engine's `decode` spans did)
    decode_kv_read_tokens: int  # KV tokens those iterations read: Σ per iteration of every decoding sequence's context


@dataclass(frozen=True)
class EventLog:
    """Everything a run produced. Built once by the simulator; read by metrics and reports.

    Spans, engine samples and sequence records are held as columns (rlsim.events.tables: a long run records millions
    of them); each iterates as records. A long run's engine samples are on disk (rlsim.events.sample_spill), read back
    an engine at a time by the metrics and in time order by whoever iterates them. A log may also be built from tuples
    of records (tests, hand-made logs): they are turned into columns here."""

    spans: SpanTable
    sequences: SequenceTable  # by seq_id
    steps: tuple[StepRecord, ...]
    gpus: int
    wall_s: float  # simulated time from the start to the end of the last step
    events: int  # SimPy events processed: the simulator's work, independent of tokens in fast mode
    engine_samples: SampleTable | SpilledSamples = ()  # type: ignore[assignment]  # iterates in time order
    kv_transfers: tuple[KVTransfer, ...] = ()  # prefill/decode disaggregation: in the order they ended
    environments: EnvironmentRecord | None = None  # the environment pool's ledger (workload.environments), if any
    agents: tuple[AgentRecord, ...] = ()  # a multi-agent run's agents (scenario agents:), else none

    def __post_init__(self) -> None:
        from rlsim.events.sample_spill import SpilledSamples  # the tables build on these records
        from rlsim.events.tables import SampleTable, SequenceTable, SpanTable

        if not isinstance(self.spans, SpanTable):
            object.__setattr__(self, "spans", SpanTable.from_spans(self.spans))
        if not isinstance(self.sequences, SequenceTable):
            object.__setattr__(self, "sequences", SequenceTable.from_records(self.sequences))
        if not isinstance(self.engine_samples, SampleTable | SpilledSamples):
            object.__setattr__(self, "engine_samples", SampleTable.from_samples(self.engine_samples))
