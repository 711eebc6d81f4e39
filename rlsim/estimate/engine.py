"""How long one rollout engine takes to generate a set of sequences, for `rlsim estimate`: its continuous batching
replayed on a handful of representative sequences, without the simulator.

The rules are the simulated engine's (`rlsim.sim.rollout`, vLLM V1's scheduler):
* first come, first served admission while a sequence slot (`max_num_seqs`), the iteration's token budget
  (`max_num_batched_tokens`) and the KV cache allow; prefill chunks share an iteration with the decodes;
* when the decodes' growth would overflow the KV cache, the latest admitted sequence is preempted: it keeps its tokens,
  goes back to the front of the queue and prefills its whole context again when readmitted;
* between two batch changes the decode batch is fixed, and its iterations are priced in closed form
  (`EngineCosts.decode_k_iterations_seconds`), so the cost grows with the sequences, never with their tokens.

This is what makes the long tail: an engine ends with the sequences that run longest, decoding at the batch they form
(every capped response of the engine at once, not one alone), and a long response admitted late ends late.
Left out: prefix sharing within a group (a group's samples are spread over engines by default), multi-turn tool calls
(the caller adds a trajectory's tool waits) and interruption by weight updates.

A decode engine of a prefill/decode-disaggregated rollout (`prefilled`) admits sequences whose first token a prefill
engine sampled: they join the decode batch at admission with nothing to prefill, as `rlsim.sim.engine.kv_fetch` has
them; one preempted later recomputes its context here (vLLM fetches a KV cache once).

HF generate() engines (`static_batch_run`) follow `rlsim.sim.static_batch` instead: static batches of padded rows,
each decoded until its longest response ends.
"""
from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from rlsim.costs.rollout import EngineCosts, PrefillChunk


@dataclass(frozen=True)
class EngineLimits:
    max_num_seqs: int
    max_num_batched_tokens: int
    kv_tokens: int  # KV-cache tokens of one engine


@dataclass(frozen=True)
class EngineRun:
    seconds: float  # until the last sequence finished
    peak_batch: int  # the most sequences it decoded at once: its concurrency
    mean_batch: float  # decode batch, averaged over decode time
    tail_batch: int  # decode batch at the start of the engine's last quarter
    tail_share: float  # share of the time spent decoding under a quarter of the peak batch: the long tail
    preemptions: int


class _Seq:
    __slots__ = ("index", "prompt", "target", "generated", "prefill_left", "finish", "base", "fetched")

    def __init__(self, index: int, prompt: int, target: int):
        self.index = index  # submission order: breaks ties between finishes
        self.prompt = prompt
        self.target = target
        self.generated = 0
        self.prefill_left = 0
        self.finish = -1  # iteration at which it finishes while decoding; -1 otherwise
        self.base = 0  # generated = base + iteration while decoding
        self.fetched = False  # its KV cache came from a prefill engine (once: a preempted sequence recomputes)

    @property
    def context(self) -> int:
        return self.prompt + self.generated


class _Engine:
    """The engine's state between iterations; `run` advances it until every sequence is done."""

    def __init__(self, costs: EngineCosts, limits: EngineLimits, sequences: Sequence[tuple[int, int]],
                 prefilled: bool = False):
        self.costs, self.limits, self.prefilled = costs, limits, prefilled
        for prompt, target in sequences:
            if prompt + target > limits.kv_tokens:
                raise ValueError(f"a sequence of {prompt + target} tokens does not fit a KV cache of "
                                 f"{limits.kv_tokens} tokens")
        self.waiting = deque(_Seq(i, max(1, p), max(1, t)) for i, (p, t) in enumerate(sequences))
        self.running: dict[_Seq, None] = {}  # in admission order
        self.prefilling: list[_Seq] = []
        self.finishes: list[tuple[int, int, _Seq]] = []
        self.iteration = self.decoding = self.context = self.kv_used = self.preemptions = 0
        self.seconds = 0.0
        self.batches: list[tuple[float, float, int]] = []  # (start, seconds, decode batch) of each decode stretch

    def run(self) -> EngineRun:
        while self.waiting or self.running:
            preempted = self._make_room()
            waiting = len(self.waiting)
            plan = self._schedule(admit=not preempted or not self.running)
            if plan:
                self._prefill_iteration(plan)
            elif self.decoding:
                self._decode()
            elif len(self.waiting) == waiting:  # (prefilled sequences may be admitted and end at once)
                raise ValueError("the engine cannot admit its next sequence")  # only with a cache too small
        return _summary(self.seconds, self.batches, self.preemptions)

    def _make_room(self) -> bool:
        preempted = False
        while self.running and self.kv_used + self.decoding > self.limits.kv_tokens:
            self._evict(next(reversed(self.running)))
            self.preemptions += 1
            preempted = True
        return preempted

    def _schedule(self, admit: bool) -> list[tuple[_Seq, int]]:
        limits = self.limits
        budget = limits.max_num_batched_tokens - self.decoding
        plan = []
        for seq in self.prefilling:
            if budget <= 0:
                break
            plan.append((seq, min(seq.prefill_left, budget)))
            budget -= plan[-1][1]
        while admit and budget > 0 and self.waiting and self._admissible(self.waiting[0]):
            seq = self.waiting.popleft()
            self.running[seq] = None
            if self.prefilled and not seq.fetched:
                # A prefill engine sampled its first token; its KV cache arrives in place of a prefill.
                seq.fetched = True
                self.kv_used += seq.context + 1
                self._first_token(seq)
                continue
            seq.prefill_left = seq.context
            self.kv_used += seq.context + 1
            self.prefilling.append(seq)
            plan.append((seq, min(seq.prefill_left, budget)))
            budget -= plan[-1][1]
        return plan

    def _admissible(self, seq: _Seq) -> bool:
        limits = self.limits
        return (len(self.running) < limits.max_num_seqs and self.decoding < limits.max_num_batched_tokens
                and self.kv_used + self.decoding + seq.context + 1 <= limits.kv_tokens)

    def _prefill_iteration(self, plan: list[tuple[_Seq, int]]) -> None:
        chunks = [PrefillChunk(tokens, seq.context - seq.prefill_left, tokens == seq.prefill_left)
                  for seq, tokens in plan]
        self.seconds += self.costs.iteration_seconds(self.decoding, self.context, chunks)
        self._advance(1)
        for seq, tokens in plan:
            seq.prefill_left -= tokens
        self._finish_due()
        self.prefilling = [seq for seq in self.prefilling if seq.prefill_left]
        for seq, _ in plan:
            if not seq.prefill_left:
                self._first_token(seq)

    def _first_token(self, seq: _Seq) -> None:
        """Its last prefill chunk sampled its first token: it decodes from now on, or is done."""
        seq.generated += 1
        if seq.generated >= seq.target:
            self._leave(seq, decoding=False)
            return
        seq.base = seq.generated - self.iteration
        seq.finish = self.iteration + seq.target - seq.generated
        self.decoding += 1
        self.context += seq.context - 1
        heapq.heappush(self.finishes, (seq.finish, seq.index, seq))

    def _decode(self) -> None:
        batch = self.decoding
        k = min(self._next_finish() - self.iteration, (self.limits.kv_tokens - self.kv_used) // batch)
        seconds = self.costs.decode_k_iterations_seconds(batch, self.context, k)
        self.batches.append((self.seconds, seconds, batch))
        self.seconds += seconds
        self._advance(k)
        self._finish_due()

    def _advance(self, iterations: int) -> None:
        self.iteration += iterations
        self.context += iterations * self.decoding
        self.kv_used += iterations * self.decoding

    def _next_finish(self) -> int:
        while self.finishes[0][2].finish != self.finishes[0][0]:  # stale: preempted since
            heapq.heappop(self.finishes)
        return self.finishes[0][0]

    def _finish_due(self) -> None:
        while self.finishes and self.finishes[0][0] <= self.iteration:
            finish, _, seq = heapq.heappop(self.finishes)
            if seq.finish == finish:
                self._leave(seq, decoding=True)

    def _decoded(self, seq: _Seq) -> None:
        """Bring a decoding sequence's token count up to date and take it out of the decode batch."""
        seq.generated = seq.base + self.iteration
        seq.finish = -1
        self.decoding -= 1
        self.context -= seq.context - 1

    def _leave(self, seq: _Seq, decoding: bool) -> None:
        if decoding:
            self._decoded(seq)
        del self.running[seq]
        self.kv_used -= seq.context

    def _evict(self, seq: _Seq) -> None:
        del self.running[seq]
        if seq.prefill_left:
            self.prefilling.remove(seq)
            self.kv_used -= seq.context + 1
        else:
            self._decoded(seq)
            self.kv_used -= seq.context
        self.waiting.appendleft(seq)


def engine_run(costs: EngineCosts, limits: EngineLimits, sequences: Sequence[tuple[int, int]],
               prefilled: bool = False) -> EngineRun:
    """Generate `sequences` ((prompt tokens, response tokens), in submission order) on one engine from empty;
    `prefilled`: a decode engine fed by prefill engines."""
    return _Engine(costs, limits, sequences, prefilled).run()


@dataclass(frozen=True)
class StaticBatches:
    """How an HF generate() engine sizes its batches: each row reserves `max_new_tokens` beyond its padded prompt,
    padded to the batch's longest and to at least `padded_prompt` tokens."""

    max_new_tokens: int
    padded_prompt: int = 0


def static_batch_run(costs: EngineCosts, limits: EngineLimits, sequences: Sequence[tuple[int, int]],
                     static: StaticBatches) -> EngineRun:
    """Generate `sequences` on one HF generate() engine from empty (`rlsim.sim.static_batch`'s rules): batches taken
    in submission order, up to `max_num_seqs` rows while every row, padded to the batch's longest prompt, fits the KV
    cache with `max_new_tokens` more; each prefilled in one pass and decoded until its longest response ends."""
    waiting = deque((max(1, p), max(1, t)) for p, t in sequences)
    max_new_tokens = static.max_new_tokens
    seconds = 0.0
    batches: list[tuple[float, float, int]] = []
    while waiting:
        rows = steps = 0
        longest = static.padded_prompt
        while waiting and rows < limits.max_num_seqs:
            prompt, target = waiting[0]
            padded = max(longest, prompt)
            if rows and (rows + 1) * (padded + max_new_tokens) > limits.kv_tokens:
                break
            waiting.popleft()
            rows, longest, steps = rows + 1, padded, max(steps, target)
        seconds += costs.iteration_seconds(prefill=[PrefillChunk(longest)] * rows)
        if steps > 1:
            decode = costs.decode_k_iterations_seconds(rows, rows * longest, steps - 1)
            batches.append((seconds, decode, rows))
            seconds += decode
    return _summary(seconds, batches, 0)


def _summary(seconds: float, batches: list[tuple[float, float, int]], preemptions: int) -> EngineRun:
    """An engine's run from its total time and its decode stretches, (start, seconds, decode batch) each."""
    decode_seconds = batch_seconds = 0.0
    for _, stretch, size in batches:
        decode_seconds += stretch
        batch_seconds += stretch * size
    mean = batch_seconds / decode_seconds if decode_seconds else 0.0
    peak = max((size for _, _, size in batches), default=0)
    # The decode batch at the start of the engine's last quarter: the concurrency its tail decodes at.
    quarter = 0.75 * seconds
    tail_batch = next((size for start, _, size in reversed(batches) if start <= quarter), 1)
    low = sum(stretch for _, stretch, size in batches if 4 * size < peak)
    return EngineRun(seconds, peak, mean, tail_batch, low / seconds if seconds else 0.0, preemptions)
