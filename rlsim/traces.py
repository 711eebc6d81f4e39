"""Readers of the PolyTrace trace formats (github.com/Zhou-jiecheng/PolyTrace; see traces/polytrace/README.md).

packed lengths   `packed_lengths_step_<k>.jsonl`: one prompt a line — `input` its prompt tokens, `output` its n
                 response lengths; each data-parallel rank writes its share, so a step's prompts are in
                 (dp_rank, local_index) order.
reward timings   `reward_timings_step_<k>.jsonl`: seconds one rank took to score its batch of responses.
filter indices   `dapo_filter_indices.jsonl`: per generation batch of DAPO's dynamic sampling, the prompts kept.
multi-turn       `multiturn_workload_step_<k>.jsonl[.gz]`: one trajectory a line — per turn its context
                 (`generation_prompt_len`), cached prefix and generated tokens; its tool calls with latency and the
                 tokens they append; `prompt_group_id` / `sample_id` its GRPO group and place in it.

Files of a folder are read in step order (step 10 after step 9, not after step 1). Gzipped files (`.gz`) read the
same as plain ones: the repository ships the large multi-turn log compressed.

Only parsing lives here, no sampling and no simulation, so the scenario loader (rlsim.config) can read every trace a
scenario names and report a bad one at load time with its file and line, and the workload builds on the same readers.
"""
from __future__ import annotations

import gzip
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from rlsim.errors import TraceFormatError

PACKED = "packed_lengths_step_"
# Longer than any context a model has; a length past it is a corrupt record.
MAX_TRACE_TOKENS = 10_000_000
MULTITURN = "multiturn_workload_step_"
REWARD_TIMINGS = "reward_timings_step_"


def step_files(path: Path, prefix: str) -> list[Path]:
    """`path` itself, or the `<prefix><k>.jsonl[.gz]` files of folder `path` in step order."""
    if not path.is_dir():
        return [path]
    pattern = re.compile(re.escape(prefix) + r"(\d+)\.jsonl(\.gz)?$")
    found = [(int(m.group(1)), p) for p in path.iterdir() if (m := pattern.match(p.name))]
    return [p for _, p in sorted(found)]


def records(file: Path) -> Iterator[tuple[int, dict]]:
    """(line number, JSON object) of each non-empty line."""
    if file.exists() and not file.is_file():
        # A FIFO or a device could stream one endless line into memory.
        raise TraceFormatError(f"{file}: not a regular file (a pipe or a device)")
    opener = gzip.open if file.suffix == ".gz" else open
    try:
        with opener(file, "rt", encoding="utf-8") as lines:
            for number, line in enumerate(lines, 1):
                if line.strip():
                    try:
                        yield number, json.loads(line)
                    except json.JSONDecodeError as err:
                        raise TraceFormatError(f"{file}:{number}: not JSON ({err.msg})") from None
    except OSError as err:
        raise TraceFormatError(f"{file}: cannot read ({err.strerror or err})") from None
    except (UnicodeDecodeError, EOFError) as err:
        raise TraceFormatError(f"{file}: not a JSON-lines text file ({err.__class__.__name__}: a binary or truncated "
                               "file?)") from None


def trace_format(path: Path) -> str:
    """"packed" or "multiturn", from the file names (a single file: from its first record)."""
    if path.is_dir():
        if step_files(path, MULTITURN):
            return "multiturn"
        if step_files(path, PACKED):
            return "packed"
        raise TraceFormatError(f"{path}: no {PACKED}*.jsonl or {MULTITURN}*.jsonl files")
    for _, record in records(path):
        return "multiturn" if "turns" in record else "packed"
    raise TraceFormatError(f"{path}: empty trace")


def _field(file: Path, number: int, record: dict, key: str, kind: type | tuple[type, ...]):
    value = record.get(key)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise TraceFormatError(f"{file}:{number}: field {key!r} missing or not a {getattr(kind, '__name__', kind)}")
    return value


def _tokens(file: Path, number: int, record: dict, key: str, least: int) -> int:
    """A whole count of at least `least` and at most MAX_TRACE_TOKENS."""
    value = _field(file, number, record, key, int)
    if not least <= value <= MAX_TRACE_TOKENS:
        raise TraceFormatError(f"{file}:{number}: field {key!r} must be {least} to {MAX_TRACE_TOKENS:,}, got {value}")
    return value


def _seconds(file: Path, number: int, record: dict, key: str) -> float:
    value = float(_field(file, number, record, key, (int, float)))
    if not 0 <= value < 1e7:  # NaN fails both comparisons
        raise TraceFormatError(f"{file}:{number}: field {key!r} must be a finite time of 0 or more seconds, got {value}")
    return value


# ------------------------------------------------------------------------------------------------ packed lengths


@dataclass(frozen=True)
class RecordedGroup:
    """One prompt of a trace: its length and the lengths of its samples, as recorded."""

    step: int
    index: int  # place of the prompt in its step
    prompt_tokens: int
    response_tokens: tuple[int, ...]


def _stamp(files: list[Path]) -> tuple:
    """What identifies the files' contents for caching: names, sizes and modification times."""
    return tuple((str(f.resolve()), f.stat().st_size, f.stat().st_mtime_ns) for f in files if f.exists())


def read_packed(path: Path) -> tuple[tuple[RecordedGroup, ...], ...]:
    """The groups of each step of a packed-length trace, steps in order, prompts in (dp_rank, local_index) order."""
    files = step_files(path, PACKED)
    return _read_packed(path, _stamp(files))


@lru_cache(maxsize=16)
def _read_packed(path: Path, stamp: tuple) -> tuple[tuple[RecordedGroup, ...], ...]:
    steps: list[tuple[RecordedGroup, ...]] = []
    for file in step_files(path, PACKED):
        rows: list[tuple] = []
        for number, record in records(file):
            prompt = _field(file, number, record, "input", int)
            if not 1 <= prompt <= MAX_TRACE_TOKENS:
                raise TraceFormatError(f"{file}:{number}: 'input' must be a prompt length of 1 to "
                                       f"{MAX_TRACE_TOKENS:,} tokens, got {prompt}")
            outputs = _field(file, number, record, "output", list)
            if not outputs or not all(isinstance(o, int) and not isinstance(o, bool) and 1 <= o <= MAX_TRACE_TOKENS
                                      for o in outputs):
                raise TraceFormatError(f"{file}:{number}: 'output' must be a non-empty list of response lengths of 1 "
                                       f"to {MAX_TRACE_TOKENS:,} tokens (a response holds at least its end token)")
            rows.append(((record.get("dp_rank", 0), record.get("local_index", number)), record.get("step", len(steps)),
                         prompt, tuple(outputs)))
        if not rows:
            continue
        rows.sort(key=lambda row: row[0])
        steps.append(tuple(RecordedGroup(step, i, prompt, outputs) for i, (_, step, prompt, outputs) in enumerate(rows)))
    if not steps:
        raise TraceFormatError(f"{path}: no packed-length records")
    return tuple(steps)


# ------------------------------------------------------------------------------------------------ multi-turn


@dataclass(frozen=True)
class RecordedTurn:
    """One generation turn: the context it started from, what it generated, and the tool calls that followed."""

    context_tokens: int  # generation_prompt_len: tokens in context when the turn started
    cached_tokens: int  # of those, found in the engine's prefix cache
    generated_tokens: int  # completion_tokens
    tool_latencies_s: tuple[float, ...]  # the calls it made (run concurrently)
    tool_tokens: tuple[int, ...]  # tokens each call's response appended


@dataclass(frozen=True)
class RecordedTrajectory:
    step: int
    group: int  # prompt_group_id
    sample: int  # sample_id
    prompt_tokens: int
    turns: tuple[RecordedTurn, ...]

    @property
    def length_tokens(self) -> int:
        """Context at the end: the last turn's context and what it generated."""
        last = self.turns[-1]
        return last.context_tokens + last.generated_tokens

    def appended_after(self, turn: int) -> int:
        """Tokens the context grew by between turn `turn` and the next that the policy did not generate (tool responses
        and chat-template text); floored at 0 where re-rendering the template shrank the context by a few tokens."""
        this, following = self.turns[turn], self.turns[turn + 1]
        return max(0, following.context_tokens - this.context_tokens - this.generated_tokens)


def read_multiturn(path: Path) -> tuple[RecordedTrajectory, ...]:
    """Every trajectory of a multi-turn trace, steps in order, trajectories in recorded order."""
    return _read_multiturn(path, _stamp(step_files(path, MULTITURN)))


@lru_cache(maxsize=4)
def _read_multiturn(path: Path, stamp: tuple) -> tuple[RecordedTrajectory, ...]:
    out: list[RecordedTrajectory] = []
    for file in step_files(path, MULTITURN):
        for number, record in records(file):
            turns_raw = _field(file, number, record, "turns", list)
            calls = _field(file, number, record, "tool_calls", list)
            if not turns_raw:
                raise TraceFormatError(f"{file}:{number}: a trajectory needs at least one turn")
            if not all(isinstance(item, dict) for item in [*turns_raw, *calls]):
                raise TraceFormatError(f"{file}:{number}: 'turns' and 'tool_calls' must be lists of objects")
            turns = []
            for turn in turns_raw:
                mine = [c for c in calls if c.get("turn") == turn.get("turn")]
                turns.append(RecordedTurn(
                    _tokens(file, number, turn, "generation_prompt_len", 0),
                    _tokens(file, number, {"cached_tokens": 0, **turn}, "cached_tokens", 0),
                    _tokens(file, number, turn, "completion_tokens", 1),
                    tuple(_seconds(file, number, c, "latency_s") for c in mine),
                    tuple(_tokens(file, number, c, "append_len", 0) for c in mine)))
            out.append(RecordedTrajectory(
                _tokens(file, number, {"step": 0, **record}, "step", 0),
                _tokens(file, number, {"prompt_group_id": len(out), **record}, "prompt_group_id", 0),
                _tokens(file, number, {"sample_id": 0, **record}, "sample_id", 0),
                _tokens(file, number, record, "prompt_len", 1), tuple(turns)))
    if not out:
        raise TraceFormatError(f"{path}: no multi-turn records")
    return tuple(out)


def multiturn_groups(trajectories: tuple[RecordedTrajectory, ...]) -> list[list[RecordedTrajectory]]:
    """Consecutive trajectories of the same step and prompt group form a group, in recorded order."""
    groups: list[list[RecordedTrajectory]] = []
    for trajectory in trajectories:
        if groups and (groups[-1][0].step, groups[-1][0].group) == (trajectory.step, trajectory.group):
            groups[-1].append(trajectory)
        else:
            groups.append([trajectory])
    return groups


# ------------------------------------------------------------------------------------------------ any trace


def read_trace(path: Path) -> tuple[RecordedTrajectory, ...] | tuple[tuple[RecordedGroup, ...], ...]:
    """Every record of the trace at `path`, packed-length or multi-turn (whichever its files are)."""
    return read_multiturn(path) if trace_format(path) == "multiturn" else read_packed(path)



def read_lengths(path: Path, field: str) -> list[int]:
    """Every prompt length (`field` "input") or response length ("output") of a trace, in recorded order. For a
    multi-turn trace the response is the whole trajectory after its prompt (generated and tool tokens)."""
    if field not in ("input", "output"):
        raise ValueError(f"field must be 'input' or 'output', got {field!r}")
    if trace_format(path) == "multiturn":
        trajectories = read_multiturn(path)
        if field == "input":
            return [t.prompt_tokens for t in trajectories]
        return [t.length_tokens - t.prompt_tokens for t in trajectories]
    lengths: list[int] = []
    for step in read_packed(path):
        for group in step:
            lengths.extend([group.prompt_tokens] if field == "input" else group.response_tokens)
    return lengths


# ------------------------------------------------------------------------------------------------ filters and rewards


@dataclass(frozen=True)
class FilterBatch:
    """One generation batch of DAPO's dynamic sampling: how many prompts it had, which it kept, and which of those
    the train batch used (the first ones, until the batch was full)."""

    prompts: int
    kept: frozenset[int]
    used: tuple[int, ...] = ()


def read_filter_indices(path: Path) -> list[FilterBatch]:
    batches = []
    for number, record in records(path):
        prompts = _field(path, number, record, "prompt_count", int)
        kept = _field(path, number, record, "kept_prompt_indices", list)
        if any(not isinstance(i, int) or not 0 <= i < prompts for i in kept):
            raise TraceFormatError(f"{path}:{number}: kept_prompt_indices must lie in 0..{prompts - 1}")
        used = record.get("used_prompt_indices", [])
        batches.append(FilterBatch(prompts, frozenset(kept), tuple(used) if isinstance(used, list) else ()))
    if not batches:
        raise TraceFormatError(f"{path}: no filter records")
    return batches


@dataclass(frozen=True)
class RewardTiming:
    step: int
    batch_size: int  # responses the rank scored
    seconds: float  # wall time it took


def read_reward_timings(path: Path) -> list[RewardTiming]:
    out = []
    for file in step_files(path, REWARD_TIMINGS):
        for number, record in records(file):
            out.append(RewardTiming(int(record.get("step", 0)), _field(file, number, record, "batch_size", int),
                                    float(_field(file, number, record, "reward_time_s", (int, float)))))
    if not out:
        raise TraceFormatError(f"{path}: no {REWARD_TIMINGS}*.jsonl records")
    return out
