"""Where a trajectory's tool calls run: `ToolLatency` (no environment pool: a call takes its drawn latency) or
`SandboxPool` (workload.environments: a call needs a sandbox — an idle one, one started on demand that pays its cold
start, or, when the pool is at its limit, the next one freed, first come first served — then a CPU core for its
CPU-seconds, then its latency).

An engine sees only when a turn's calls return: it hands them over with `calls(engine, rollout, call_s)` (each call's
latency; they run concurrently, each in a sandbox of its own, or side by side in the trajectory's), a SimPy
generator, and says `finished(rollout)` when a trajectory ends (a trajectory-scoped sandbox is discarded then). The
pool is a ledger of counts and FIFO queues with a handful of events per call (its waits, a cold start, its CPU and
latency timeouts), never per sandbox-second.

Both also book the engines' idle time while their trajectories are out on tool calls: from the moment an engine has
one in a call to the moment it has none, its GPUs' idle time is `env_wait` (the engine waits on the environment),
recorded over every other context's label (it is the more immediate cause: the `tail` of a generation phase, or a
staleness block, holds back new work, not the trajectory the engine waits for).
"""
from __future__ import annotations

import math
from collections import deque
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import numpy as np
import simpy

from rlsim.events.environments import EnvironmentRecord

if TYPE_CHECKING:
    from rlsim.config.environments import EnvironmentPool
    from rlsim.sim.recorder import Recorder
    from rlsim.sim.sequence import Rollout


def tool_calls_for(env: simpy.Environment, recorder: Recorder, pool: EnvironmentPool | None,
                   rng: np.random.Generator) -> ToolLatency:
    """Where the run's tool calls run: the scenario's pool, or their latency alone; the recorder gets its ledger."""
    calls = ToolLatency(env, recorder) if pool is None else SandboxPool(env, recorder, pool, rng)
    recorder.environments = calls.record
    return calls


class ToolLatency:
    """Tool calls without an environment pool: each turn's calls take their latency, nothing else. With a recorder,
    the engines' waits on them are booked as `env_wait`."""

    def __init__(self, env: simpy.Environment, recorder: Recorder | None = None):
        self.env = env
        self.recorder = recorder
        self._out: dict[Any, list] = {}  # per engine: [trajectories in tool calls, since when it has had any]

    def calls(self, engine: Any, rollout: Rollout, call_s: tuple[float, ...]) -> Generator:
        """The turn's tool calls, from now until the slowest returns."""
        self._leave(engine)
        yield self.env.timeout(max(call_s, default=0.0))
        self._back(engine)

    def finished(self, rollout: Rollout) -> None:
        """The trajectory ended (its last turn generated): nothing is held for it here."""

    def record(self, wall_s: float) -> EnvironmentRecord | None:
        """What the pool did up to wall_s, for the event log (None: there is no pool)."""
        return None

    def deadlock(self) -> str | None:
        """Why nothing can happen any more, when the pool is the cause (None: it is not)."""
        return None

    def _leave(self, engine: Any) -> None:
        out = self._out.get(engine)
        if out is None:
            self._out[engine] = [1, self.env.now]
        elif out[0] == 0:
            out[0], out[1] = 1, self.env.now
        else:
            out[0] += 1

    def _back(self, engine: Any) -> None:
        out = self._out[engine]
        out[0] -= 1
        if out[0] == 0 and self.recorder is not None:
            self.recorder.late_context(engine.first_gpu, engine.gpu_count, out[1], self.env.now, "env_wait", "gen",
                                       unit=engine.telemetry.unit)


class SandboxPool(ToolLatency):
    """A pool of sandboxes (see the module docstring and rlsim.config.environments). Sandboxes are numbered as they
    start; the warm ones (`warm_sandboxes`) start at 0, ready, and never stop for idleness."""

    def __init__(self, env: simpy.Environment, recorder: Recorder | None, config: EnvironmentPool,
                 rng: np.random.Generator):
        from rlsim.workload.latency import latency_distribution

        super().__init__(env, recorder)
        self.config = config
        self.per_trajectory = config.scope == "trajectory"
        self.limit = config.max_sandboxes
        self.floor = config.warm_sandboxes
        scaling = config.autoscaling
        self.scale_up_delay = scaling.scale_up_delay_s if scaling is not None else 0.0
        self.keep_alive = scaling.keep_alive_s if scaling is not None else math.inf
        self.cold_start = latency_distribution(config.cold_start) if config.cold_start is not None else None
        self.rng = rng
        self.cpu_seconds = config.cpu_seconds_per_call
        self.cores_free = config.cpu_cores  # None: never the limit
        self.core_queue: deque[simpy.Event] = deque()

        self.running = self.floor  # started and not stopped, busy or idle
        self.starting = 0
        self.idle: deque[tuple[int, float]] = deque([(s, 0.0) for s in range(self.floor)])  # (sandbox, idle since)
        self.waiting: deque[simpy.Event] = deque()  # calls waiting for a sandbox, first come first served
        self.held: dict[Rollout, tuple[int, float]] = {}  # trajectory scope: its sandbox and since when
        # The ledger the event log gets: each sandbox's life, each call's times, each hold of a sandbox.
        self.started = [0.0] * self.floor  # when each sandbox was asked for
        self.ready = [0.0] * self.floor
        self.stopped = [math.nan] * self.floor
        self.arrived: list[float] = []
        self.acquired: list[float] = []
        self.done: list[float] = []
        self.holds: list[tuple[float, float]] = []

    # ---- the engines' side ------------------------------------------------------------------------------------

    def calls(self, engine: Any, rollout: Rollout, call_s: tuple[float, ...]) -> Generator:
        self._leave(engine)
        arrived = self.env.now
        if not self.per_trajectory:
            yield from self._side_by_side([self._call(arrived, seconds) for seconds in call_s])
        elif call_s:
            # The trajectory's sandbox runs the turn's calls side by side: one use of it in the ledger.
            held = self.held.get(rollout)
            if held is None:
                sandbox = yield from self._acquire()
                self.held[rollout] = (sandbox, self.env.now)
            acquired = self.env.now
            yield from self._side_by_side([self._execute(seconds) for seconds in call_s])
            self._booked(arrived, acquired)
        self._back(engine)

    def _side_by_side(self, calls: list[Generator]) -> Generator:
        """Run the calls concurrently until the last returns (one runs inline, with no process of its own)."""
        if len(calls) == 1:
            yield from calls[0]
        elif calls:
            yield self.env.all_of([self.env.process(call) for call in calls])

    def _call(self, arrived: float, seconds: float) -> Generator:
        """One call in a sandbox of its own (scope call): the sandbox, its CPU work and its latency."""
        sandbox = yield from self._acquire()
        acquired = self.env.now
        yield from self._execute(seconds)
        self._booked(arrived, acquired)
        self.holds.append((acquired, self.env.now))
        self._free(sandbox)

    def _booked(self, arrived: float, acquired: float) -> None:
        self.arrived.append(arrived)
        self.acquired.append(acquired)
        self.done.append(self.env.now)

    def finished(self, rollout: Rollout) -> None:
        held = self.held.pop(rollout, None) if self.per_trajectory else None
        if held is None:
            return
        sandbox, since = held
        now = self.env.now
        self.holds.append((since, now))
        # Its state is the trajectory's: it is discarded, and a fresh one starts if the pool is below its floor.
        self._expire(now)
        self.running -= 1
        self.stopped[sandbox] = now
        if self.running + self.starting < self.floor:
            self._start(0.0)
        self._scale_up()

    def deadlock(self) -> str | None:
        """Calls wait for a sandbox that no trajectory will give back: every one is held (scope trajectory) by a
        trajectory waiting for an engine — queued behind, or paused with, the very trajectories that wait. Frameworks
        avoid it by starting no more trajectories than they have environments."""
        if self.waiting and not self.idle and self.starting == 0 and self.running >= self.limit:
            return (f"{len(self.waiting)} tool calls wait for a sandbox while all {self.running} are held by "
                    "trajectories that wait for an engine")
        return None

    # ---- the ledger ---------------------------------------------------------------------------------------------

    def _acquire(self) -> Generator[simpy.Event, int, int]:
        """An idle sandbox (the most recently freed: the longest idle are the first to stop), else the next one
        ready, first come first served."""
        self._expire(self.env.now)
        if self.idle:
            return self.idle.pop()[0]
        request = self.env.event()
        self.waiting.append(request)
        self._scale_up()
        sandbox = yield request
        return sandbox

    def _scale_up(self) -> None:
        """Start sandboxes for the waiting calls that none starting will serve, up to the limit."""
        while self.starting < len(self.waiting) and self.running + self.starting < self.limit:
            self._start(self.scale_up_delay)

    def _start(self, delay: float) -> None:
        sandbox = len(self.started)
        now = self.env.now
        self.started.append(now)
        self.ready.append(math.nan)
        self.stopped.append(math.nan)
        self.starting += 1
        assert self.cold_start is not None  # the config requires one wherever sandboxes start
        boot = float(self.cold_start.ppf(self.rng.random(1))[0])
        self.env.timeout(delay + boot).callbacks.append(lambda _: self._booted(sandbox))

    def _booted(self, sandbox: int) -> None:
        self.starting -= 1
        self.running += 1
        self.ready[sandbox] = self.env.now
        self._free(sandbox)

    def _free(self, sandbox: int) -> None:
        """The sandbox is ready for a call: the first waiting one takes it, else it idles."""
        now = self.env.now
        self._expire(now)
        if self.waiting:
            self.waiting.popleft().succeed(sandbox)
        else:
            self.idle.append((sandbox, now))

    def _expire(self, now: float) -> None:
        """Stop the sandboxes idle for keep_alive_s by now, longest idle first, down to the floor. Done lazily, at
        the pool's next event: nothing else changes in between, so each stops at its own expiry time."""
        idle = self.idle
        while idle and self.running > self.floor and idle[0][1] + self.keep_alive <= now:
            sandbox, since = idle.popleft()
            self.running -= 1
            self.stopped[sandbox] = since + self.keep_alive

    def _execute(self, seconds: float) -> Generator:
        """The call's CPU work on a core (waiting for one, first come first served, when all are busy), then its
        latency."""
        if self.cpu_seconds == 0 or self.cores_free is None:
            yield self.env.timeout(self.cpu_seconds + seconds)
            return
        if self.cores_free > 0:
            self.cores_free -= 1
        else:
            core = self.env.event()
            self.core_queue.append(core)
            yield core
        yield self.env.timeout(self.cpu_seconds)
        if self.core_queue:
            self.core_queue.popleft().succeed()
        else:
            self.cores_free += 1
        yield self.env.timeout(seconds)

    def record(self, wall_s: float) -> EnvironmentRecord:
        self._expire(wall_s)
        holds = self.holds + [(since, wall_s) for _, since in self.held.values()]
        stopped = np.array(self.stopped, dtype=float)
        return EnvironmentRecord(
            scope=self.config.scope, max_sandboxes=self.limit, warm_sandboxes=self.floor,
            usd_per_sandbox_hour=self.config.usd_per_sandbox_hour,
            sandbox_started=np.array(self.started, dtype=float),
            sandbox_ready=np.minimum(np.nan_to_num(np.array(self.ready, dtype=float), nan=wall_s), wall_s),
            sandbox_stopped=np.where(np.isnan(stopped), wall_s, np.minimum(stopped, wall_s)),
            on_demand=np.arange(len(self.started)) >= self.floor,
            call_arrived=np.array(self.arrived, dtype=float), call_acquired=np.array(self.acquired, dtype=float),
            call_done=np.array(self.done, dtype=float),
            hold_start=np.array([h[0] for h in holds], dtype=float), hold_end=np.array([h[1] for h in holds], dtype=float))
