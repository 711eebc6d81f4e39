"""A rollout in flight: the mutable state a rollout engine advances. Its immutable record is written when it ends."""
from __future__ import annotations

from dataclasses import dataclass, field
from itertools import accumulate
from typing import TYPE_CHECKING

from rlsim.workload.multiturn import Turn

if TYPE_CHECKING:  # the engine's module imports this one
    from rlsim.sim.engine.slot import SharedPrompt


@dataclass(eq=False)
class Rollout:
    """One response being generated for one prompt of a group (a GRPO group shares its prompt)."""

    seq_id: int
    group: int
    prompt_tokens: int
    target_tokens: int  # response length it will reach, already clipped at max_response_tokens
    truncated: bool  # target was clipped at the cap
    submitted: float
    generated: int = 0  # response tokens produced so far
    version_started: int = -1  # policy version of its first generated token (-1: not started)
    engine: int = -1
    preemptions: int = 0
    finished: float = -1.0
    admitted: float = -1.0  # first admission by an engine (-1: not yet)
    admissions: int = 0  # so far: the first, then one after each preemption, interruption or released tool call
    # Its group's prompt entry in the KV cache of the engine it last waited or ran at (prefix sharing), which that
    # engine's ledger checks is its own and still indexed before it reads it (`KVLedger`).
    shared_prompt: SharedPrompt | None = field(default=None, repr=False)

    # Written out rather than generated: compiled, a dataclass's generated __init__ stays an interpreted function that
    # sets each field through its descriptor (~390 ns a rollout against ~150), and a step launches 8,192. Its
    # parameters and defaults are the fields' (tests/test_engine_parts.py checks), as are the subclasses'.
    def __init__(self, seq_id: int, group: int, prompt_tokens: int, target_tokens: int, truncated: bool,
                 submitted: float, generated: int = 0, version_started: int = -1, engine: int = -1,
                 preemptions: int = 0, finished: float = -1.0, admitted: float = -1.0, admissions: int = 0,
                 shared_prompt: SharedPrompt | None = None) -> None:
        self.seq_id = seq_id
        self.group = group
        self.prompt_tokens = prompt_tokens
        self.target_tokens = target_tokens
        self.truncated = truncated
        self.submitted = submitted
        self.generated = generated
        self.version_started = version_started
        self.engine = engine
        self.preemptions = preemptions
        self.finished = finished
        self.admitted = admitted
        self.admissions = admissions
        self.shared_prompt = shared_prompt

    @property
    def context_tokens(self) -> int:
        """Tokens in its KV cache once prefilled: prompt plus generated so far."""
        return self.prompt_tokens + self.generated

    @property
    def remaining(self) -> int:
        return self.target_tokens - self.generated

    @property
    def done(self) -> bool:
        return self.generated >= self.target_tokens

    @property
    def peak_context_tokens(self) -> int:
        """The most KV-cache tokens it ever holds: its context when it ends."""
        return self.prompt_tokens + self.target_tokens


@dataclass(eq=False)
class MultiTurnRollout(Rollout):
    """A trajectory of generation turns separated by tool calls. `target_tokens` counts the tokens of all its turns;
    `remaining` those left in the current turn."""

    turns: tuple[Turn, ...] = ()
    turn: int = 0  # the turn being generated (or whose tool calls are running)
    appended: int = 0  # tool-response tokens appended to its context so far
    in_tool: bool = False  # its tool calls are running

    def __init__(self, seq_id: int, group: int, prompt_tokens: int, target_tokens: int, truncated: bool,
                 submitted: float, generated: int = 0, version_started: int = -1, engine: int = -1,
                 preemptions: int = 0, finished: float = -1.0, admitted: float = -1.0, admissions: int = 0,
                 shared_prompt: SharedPrompt | None = None, turns: tuple[Turn, ...] = (), turn: int = 0,
                 appended: int = 0, in_tool: bool = False) -> None:
        # Written out as Rollout's is: mypyc compiles a generated __init__ below a written one into a call that fails.
        super().__init__(seq_id, group, prompt_tokens, target_tokens, truncated, submitted, generated,
                         version_started, engine, preemptions, finished, admitted, admissions, shared_prompt)
        self.turns = turns
        self.turn = turn
        self.appended = appended
        self.in_tool = in_tool
        self._turn_ends = tuple(accumulate(t.tokens for t in self.turns))
        if not self.turns or self._turn_ends[-1] != self.target_tokens:
            raise ValueError(f"rollout {self.seq_id}: its turns generate {sum(t.tokens for t in self.turns)} tokens, "
                             f"not its target of {self.target_tokens}")

    @property
    def context_tokens(self) -> int:
        return self.prompt_tokens + self.appended + self.generated

    @property
    def remaining(self) -> int:
        return self._turn_ends[self.turn] - self.generated

    @property
    def peak_context_tokens(self) -> int:
        return self.prompt_tokens + self.target_tokens + sum(t.tool_tokens for t in self.turns)


@dataclass(eq=False)
class SegmentedRollout(Rollout):
    """A response decoded a segment at a time (UloRL's segment rollout): `target_tokens` is where the current segment
    ends, `final_tokens` where the response does. An engine stops it at the segment's end as if it had finished."""

    final_tokens: int = 0

    def __init__(self, seq_id: int, group: int, prompt_tokens: int, target_tokens: int, truncated: bool,
                 submitted: float, generated: int = 0, version_started: int = -1, engine: int = -1,
                 preemptions: int = 0, finished: float = -1.0, admitted: float = -1.0, admissions: int = 0,
                 shared_prompt: SharedPrompt | None = None, final_tokens: int = 0) -> None:
        super().__init__(seq_id, group, prompt_tokens, target_tokens, truncated, submitted, generated,
                         version_started, engine, preemptions, finished, admitted, admissions, shared_prompt)
        self.final_tokens = final_tokens

    def next_segment(self, segment_tokens: int) -> None:
        """The next segment: at most `segment_tokens` more, never past the response's end."""
        self.target_tokens = min(self.final_tokens, self.generated + segment_tokens)

    @property
    def complete(self) -> bool:
        """It reached the end of its response, not only of a segment."""
        return self.generated >= self.final_tokens
