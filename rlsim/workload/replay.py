"""Replay of a recorded trace: its groups exactly as recorded, in order, step after step; after the last step the
trace starts again from its first. Packed-length traces give each prompt's length and its samples' response lengths;
multi-turn traces give each trajectory's turns — tokens generated per turn, each tool call's latency, and the
tokens the context grew by before the next turn (tool responses and template text)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rlsim.traces import RecordedTrajectory, multiturn_groups, read_multiturn, read_packed, trace_format
from rlsim.workload.multiturn import Trajectory, Turn


@dataclass(frozen=True)
class ReplayedGroup:
    prompt_tokens: int
    responses: tuple[int, ...]  # tokens generated per sample
    trajectories: tuple[Trajectory, ...] | None  # multi-turn traces only


def trajectory_of(recorded: RecordedTrajectory) -> Trajectory:
    turns = recorded.turns
    replayed = [Turn(turn.generated_tokens, turn.tool_latencies_s, recorded.appended_after(i))
                for i, turn in enumerate(turns[:-1])]
    replayed.append(Turn(turns[-1].generated_tokens))
    return Trajectory(tuple(replayed), truncated=False)


def recorded_groups(path: Path) -> list[ReplayedGroup]:
    """Every group of the trace, in recorded order."""
    if trace_format(path) == "multiturn":
        out = []
        for group in multiturn_groups(read_multiturn(path)):
            trajectories = tuple(trajectory_of(t) for t in group)
            out.append(ReplayedGroup(group[0].prompt_tokens, tuple(t.generated for t in trajectories), trajectories))
        return out
    return [ReplayedGroup(g.prompt_tokens, g.response_tokens, None) for step in read_packed(path) for g in step]


class ReplaySource:
    """Hands out the recorded groups in order, cycling."""

    def __init__(self, path: Path):
        self.groups = recorded_groups(path)
        self.position = 0

    def take(self, count: int) -> list[ReplayedGroup]:
        taken = [self.groups[(self.position + i) % len(self.groups)] for i in range(count)]
        self.position += count
        return taken
