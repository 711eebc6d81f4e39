"""The prompt groups of a run from launch to training: drawn from the workload's sampler for the policy version that
generates them, sent to the engines (held back while a concurrency cap is full), counted down as their samples
finish, kept in the order they complete, and finally trained or dropped — each rollout's record written then.

A concurrency cap (`schedule.max_concurrent_groups_per_engine`, verl fully_async's 16 groups per server, or
`schedule.max_concurrent_groups` for the whole rollout, AReaL's max_concurrent_rollouts) holds launched groups back
from the engines until a group in flight has finished its last sample, in any schedule.
"""
from __future__ import annotations

from bisect import insort
from collections import deque
from collections.abc import Callable, Generator, Iterator
from itertools import count

import simpy

from rlsim.events import RUN_END
from rlsim.sim.balance import Dispatcher
from rlsim.sim.clock import sim_now
from rlsim.sim.engines import GenerationEngine
from rlsim.sim.recorder import Recorder
from rlsim.sim.sequence import MultiTurnRollout, Rollout, SegmentedRollout
from rlsim.workload.batches import GroupSampler, PromptGroup

# Completions closer together than this count as simultaneous. Fast mode sums iteration times in closed form and exact
# mode one by one, so the same instant can differ by ~1e-15 s between them; decisions must not depend on that.
TIE_WINDOW_S = 1e-9


class GroupLedger:
    """Every group launched and not yet trained or dropped. `on_group_done(group)` is called when a group's last
    sample finishes; the controller decides when it counts as complete (`complete`)."""

    def __init__(self, env: simpy.Environment, sampler: GroupSampler, dispatcher: Dispatcher,
                 engines: list[GenerationEngine], recorder: Recorder, group_cap: int | None, max_response_tokens: int,
                 on_group_done: Callable[[int], None]):
        self.env = env
        self.sampler = sampler
        self.dispatcher = dispatcher
        self.recorder = recorder
        self.max_response_tokens = max_response_tokens
        self.on_group_done = on_group_done
        for engine in engines:
            engine.on_finish = self._finished
        # Where rollouts take their ids: a multi-agent run gives every agent's ledger one source, so ids stay unique.
        self.seq_ids: Iterator[int] = count()
        self._members: dict[int, list[Rollout]] = {}  # group -> its rollouts
        self._left: dict[int, int] = {}  # group -> samples still generating
        # The groups of `_left` with a sample still generating, kept as it changes: the synchronous loop asks after
        # every completion, and counting them each time was quadratic in the groups of a step.
        self._groups_generating = 0
        self._informative: dict[int, bool] = {}  # group -> whether dynamic sampling keeps it
        # (completion instant in tie windows, group) of complete groups, kept sorted: taken in that order, so that
        # simultaneous completions never depend on the order SimPy happens to process them in.
        self._complete: list[tuple[int, int]] = []
        self.changed = env.event()  # fires when a group completes or is dropped on completion
        self._group_cap = group_cap
        self._held: deque[list[Rollout]] = deque()  # launched groups the concurrency cap keeps from the engines
        self._generating = 0  # groups sent to the engines whose last sample has not finished
        self._trained: dict[int, list[Rollout]] = {}  # group -> its rollouts, once trained
        self._drafts: dict[int, PromptGroup] = {}  # group -> as drawn, for a remedy that sends its prompt again
        # group -> (samples it trains, the policy that drops the rest): a group launched with more samples than it
        # needs completes with its first `quorum` finished (RollPacker's η·R0 responses, of which R0 train).
        self._quorum: dict[int, tuple[int, str]] = {}
        # group -> (its rollouts that will not train, the policy that drops them): DUET's aborted responses run to
        # where they are cut and are left out of the loss.
        self._excluded: dict[int, tuple[frozenset[Rollout], str]] = {}
        # Set by a remedy that decodes responses a segment at a time (UloRL): the most tokens a response generates
        # before it stops until it is sent again, and what to tell when any rollout stops (at a segment's end or its
        # own).
        self.segment_tokens: int | None = None
        self.on_rollout_stopped: Callable[[Rollout], None] | None = None

    # ------------------------------------------------------------------------------------------- launch

    def launch(self, count: int, version: int, *, samples: int | None = None,
               quorum: tuple[int, str] | None = None) -> list[Rollout]:
        """Draw `count` groups for policy `version` and send them out; `samples`: responses per prompt in place of
        the budget's; `quorum`: (samples the group trains, the policy that drops the rest), see `_quorum`. Returns
        the rollouts launched."""
        if count <= 0:
            return []
        return self.send(self.sampler.draw(count, version, samples), quorum=quorum)

    def send(self, drawn: list[PromptGroup], *, quorum: tuple[int, str] | None = None) -> list[Rollout]:
        """Send drawn groups out (launched, or sent again as new groups); returns their rollouts."""
        launched = []
        now = sim_now(self.env)
        for group in drawn:
            members = self._rollouts_of(group, now)
            self._members[group.group] = members
            self._set_left(group.group, len(members) if quorum is None else quorum[0])
            self._informative[group.group] = group.informative
            self._drafts[group.group] = group
            if quorum is not None:
                self._quorum[group.group] = quorum
            launched.append(members)
        rollouts = [r for members in launched for r in members]
        if self._group_cap is None:
            self.dispatcher.dispatch(rollouts)
            return rollouts
        self._held.extend(launched)
        self._send_held()
        return rollouts

    def _set_left(self, group: int, left: int) -> None:
        """Sets the samples `group` still waits for, keeping the count of groups still generating."""
        self._groups_generating += (left > 0) - (self._left.get(group, 0) > 0)
        self._left[group] = left

    def _send_held(self) -> None:
        """Send held groups to the engines while the concurrency cap has room, in launch order; a group waits in the
        framework's queue, not the engine's, so its samples count as submitted when sent."""
        assert self._group_cap is not None
        while self._held and self._generating < self._group_cap:
            members = self._held.popleft()
            for rollout in members:
                rollout.submitted = sim_now(self.env)
            self._generating += 1
            self.dispatcher.dispatch(members)

    def _rollouts_of(self, group: PromptGroup, now: float) -> list[Rollout]:
        """The group's samples, submitted at `now` (its fields read once: a PromptGroup is an interpreted class)."""
        seq_ids, gid, prompt = self.seq_ids, group.group, group.prompt_tokens
        lengths, truncated, turns, segment = group.response_tokens, group.truncated, group.turns, self.segment_tokens
        members: list[Rollout] = []
        for i in range(len(lengths)):
            if turns is not None:
                members.append(MultiTurnRollout(next(seq_ids), gid, prompt, lengths[i], truncated[i], submitted=now,
                                                turns=turns[i]))
            elif segment is not None:
                final = lengths[i]
                members.append(SegmentedRollout(next(seq_ids), gid, prompt, min(final, segment), truncated[i],
                                                submitted=now, final_tokens=final))
            else:
                members.append(Rollout(next(seq_ids), gid, prompt, lengths[i], truncated[i], now))
        return members

    def _finished(self, rollout: Rollout) -> None:
        if not isinstance(rollout, SegmentedRollout) or rollout.complete:  # not only its segment ended
            self._sample_finished(rollout)
        if self.on_rollout_stopped is not None:
            self.on_rollout_stopped(rollout)

    def _sample_finished(self, rollout: Rollout) -> None:
        group = rollout.group
        if self._left[group] <= 0:
            return  # a sample past its group's quorum, which no longer waits for it
        self._set_left(group, self._left[group] - 1)
        if self._left[group]:
            return
        if self._group_cap is not None:
            # The group's place frees now; a held group goes out once the engine's callback has returned (a launch
            # sends its own groups, so nothing need be scheduled while none is held).
            self._generating -= 1
            if self._held:
                self.env.timeout(0).callbacks.append(lambda _: self._send_held())
        self.on_group_done(group)

    # ------------------------------------------------------------------------------------------- completion

    def members(self, group: int) -> list[Rollout]:
        """The group's rollouts that train: all of them but those excluded, or under a quorum the first to finish."""
        members = self._members[group]
        if group in self._excluded:
            excluded = self._excluded[group][0]
            members = [r for r in members if r not in excluded]
        if group not in self._quorum:
            return members
        quorum = self._quorum[group][0]
        return sorted((r for r in members if r.done), key=lambda r: (r.finished, r.seq_id))[:quorum]

    def exclude(self, group: int, rollouts: list[Rollout], policy: str) -> None:
        """These rollouts of the group generate but will not train; `policy` is recorded as what dropped them."""
        if rollouts:
            self._excluded[group] = (frozenset(rollouts), policy)

    def _dropped_by(self, group: int, rollout: Rollout) -> str:
        """The policy that keeps a rollout of a trained group out of training."""
        excluded = self._excluded.get(group)
        return excluded[1] if excluded is not None and rollout in excluded[0] else self._quorum[group][1]

    def draft(self, group: int) -> PromptGroup:
        """The group as drawn."""
        return self._drafts[group]

    def open_groups(self) -> list[int]:
        """Every group launched and neither trained nor dropped, by id."""
        return sorted(self._members)

    def informative(self, group: int) -> bool:
        return self._informative[group]

    def oldest_version(self, group: int) -> int:
        """The policy version its first sample started under: how stale the group is."""
        return min(r.version_started for r in self._members[group])

    def complete(self, group: int) -> None:
        # Kept in the order `take` serves: completion instant (to the tie window), then group id.
        insort(self._complete, (round(sim_now(self.env) / TIE_WINDOW_S), group))

    def notify(self) -> None:
        event, self.changed = self.changed, self.env.event()
        event.succeed()

    @property
    def complete_count(self) -> int:
        return len(self._complete)

    def generating(self) -> bool:
        """Whether any launched group still has a sample generating."""
        return self._groups_generating > 0

    def generating_count(self) -> int:
        return self._groups_generating

    def take(self, count: int) -> list[int]:
        """The `count` earliest-completed groups (simultaneous ones by group id), removed from the complete set."""
        taken = [group for _, group in self._complete[:count]]
        del self._complete[:count]
        return taken

    def take_all_by_id(self) -> list[int]:
        """Every complete group in launch (id) order, removed from the complete set."""
        taken = sorted(group for _, group in self._complete)
        self._complete = []
        return taken

    def settle(self) -> Generator:
        """Let every completion of this instant arrive before deciding which groups to take."""
        yield self.env.timeout(TIE_WINDOW_S)
        while True:
            seen = len(self._complete)
            yield self.env.timeout(0)  # queues behind every event already due now
            if len(self._complete) == seen:
                return

    # ------------------------------------------------------------------------------------------- the end of a group

    def lengths(self, groups: list[int]) -> list[int]:
        cap = self.max_response_tokens
        return [trained_tokens(r, cap) for g in groups for r in self.members(g)]

    def take_trained(self, groups: list[int]) -> list[Rollout]:
        """The trained rollouts of these groups, handed over once, when their step is recorded: the ledger keeps no
        rollout past its step, so its memory does not grow with the run."""
        return [r for g in groups for r in self._trained.pop(g)]

    def consume(self, groups: list[int], version: int, step: int) -> None:
        for group in groups:
            members = self.members(group)
            informative = self._informative[group]
            for r in members:
                _record(self.recorder, r, version, step, informative=informative)
            self._trained[group] = members
            kept = set(members)
            for r in self._members[group]:
                if r not in kept:
                    _record(self.recorder, r, -1, -1, dropped_by=self._dropped_by(group, r), informative=informative)
            self._forget(group)

    def _forget(self, group: int) -> None:
        del self._members[group]
        self._set_left(group, 0)
        del self._left[group]
        del self._informative[group]
        del self._drafts[group]
        self._quorum.pop(group, None)
        self._excluded.pop(group, None)

    def drop(self, group: int, policy: str) -> None:
        informative = self._informative[group]
        for r in self._members[group]:
            _record(self.recorder, r, -1, -1, dropped_by=policy, informative=informative)
        self._forget(group)

    def drop_leftovers(self) -> None:
        """Rollouts still generating or waiting when the last step ends are dropped by the run's end, and named so."""
        for group in list(self._members):
            self.drop(group, RUN_END)


def trained_tokens(r: Rollout, max_response_tokens: int) -> int:
    """A finished rollout's tokens in training: its context, the response part (generated and tool tokens) cut at
    max_response_tokens as verl cuts multi-turn responses."""
    return r.prompt_tokens + min(r.context_tokens - r.prompt_tokens, max_response_tokens)


def _record(recorder: Recorder, r: Rollout, version: int, step: int, dropped_by: str = "", *,
            informative: bool) -> None:
    """The rollout's `SequenceRecord`, appended to the recorder's columns field by field."""
    # A trajectory's prompt tokens are all it did not generate: its prompt and every tool response appended.
    recorder.sequences.append_row(r.seq_id, r.group, r.engine, r.context_tokens - r.generated, r.generated,
                                  r.truncated, r.submitted, r.finished, r.version_started, version, step,
                                  r.preemptions, dropped_by, r.admitted, max(0, r.admissions - 1), informative)
