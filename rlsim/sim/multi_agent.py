"""Multi-agent RL (scenario `agents:`; MARFT's agents acting in turn, FlexMARL's several policies): each agent is a
simulation of its own — rollout engines, trainer, weight movement — built on its GPUs into one SimPy environment and
one event log, and a trajectory calls the agents in `agents.turn_order`.

A step draws `prompts_per_step` groups of `samples_per_prompt` trajectories. Each trajectory sends its first call to
its agent's engines (through that agent's load balancer), waits for the response, and sends the next call, whose
prompt is the trajectory so far (cut to `max_prompt_tokens`, as a framework truncates a conversation to its prompt
budget), to the next agent: one agent's engines wait on another's. When every trajectory has ended the trajectories
are scored, and every agent trains on its own calls and loads its new weights, all at once on their separate GPUs;
the step ends when the last agent has done so (a synchronous multi-agent loop, as MARFT runs it).

Idle labels: an agent's engines with nothing to generate while its next calls are with another agent are `starved`
(waiting for their input), after its last call of the step `tail`; an agent that has trained and updated before
another waits at the step's end (`barrier`).
"""
from __future__ import annotations

from collections.abc import Generator, Iterator
from dataclasses import dataclass, field, replace
from itertools import count

import simpy

from rlsim.config.agents import agent_fields, agent_scenario, calls_per_trajectory
from rlsim.config.bound import Bound, bind
from rlsim.errors import InfeasibleError
from rlsim.events import STAGES, StepRecord
from rlsim.events.agents import AgentRecord
from rlsim.sim.build import Simulation, build
from rlsim.sim.dynamic_sampling import KeepAll
from rlsim.sim.groups import trained_tokens
from rlsim.sim.loop import reward_for
from rlsim.sim.recorder import Recorder
from rlsim.sim.roles import GPURange
from rlsim.sim.rollout import RolloutEngine
from rlsim.sim.sequence import Rollout
from rlsim.sim.static_batch import StaticBatchEngine
from rlsim.sim.sync import SyncController
from rlsim.sim.time_sharing import TimeSharing
from rlsim.workload.batches import PromptGroup


class TurnBarrier:
    """One turn of a turn-by-turn batch: `open` fires when its calls may start, `done` when all `count` trajectories
    have ended their call of it."""

    def __init__(self, env: simpy.Environment, count: int):
        self.left = count
        self.open = env.event()
        self.done = env.event()

    def arrive(self) -> None:
        self.left -= 1
        if not self.left:
            self.done.succeed()


class AgentController(SyncController):
    """One agent's controller: its engines, trainer and weight movement, driven by the multi-agent loop, which hands
    it calls (each a group of one rollout) and asks it to train on them and publish its new weights."""

    def train(self, calls: list[int], stages: dict[str, float]) -> Generator:
        yield from self._train_on(calls, stages, mini_batches=self.algorithm.mini_batches)

    def publish(self, stages: dict[str, float]) -> Generator:
        yield from self._publish(stages)

    def finish(self) -> None:
        """The run's end: calls still generating are dropped by it, GPU groups apart from the actor's starved."""
        self.groups.drop_leftovers()
        self._label_apart(self._apart_idle_since, self.env.now, "starved", "gen")


@dataclass
class AgentRun:
    name: str
    sim: Simulation
    controller: AgentController
    calls_per_trajectory: int
    steps: list[StepRecord] = field(default_factory=list)
    generated_tokens: int = 0
    seq_ids: list[int] = field(default_factory=list)

    @property
    def gpus(self) -> list[GPURange]:
        return self.controller.roles.both()

    def record(self) -> AgentRecord:
        return AgentRecord(self.name, self.sim.bound.model.name, tuple(self.gpus), self.calls_per_trajectory,
                           tuple(self.steps), self.generated_tokens, tuple(self.seq_ids))


class MultiAgentLoop:
    """The agents of a multi-agent scenario in one environment, and the synchronous loop over their steps."""

    def __init__(self, bound: Bound, *, mode: str = "fast"):
        scenario = bound.scenario
        assert scenario.agents is not None
        self.scenario = scenario
        self.env = simpy.Environment()
        self.recorder: Recorder | None = None
        calls = calls_per_trajectory(scenario)
        self.agents: list[AgentRun] = []
        seq_ids: Iterator[int] = count()  # one id source for every agent's rollouts
        for i, member in enumerate(scenario.agents.members):
            try:
                sim = build(bind(agent_scenario(scenario, i)), mode=mode, env=self.env, recorder=self.recorder,
                            unit_suffix=f":{member.name}")
            except InfeasibleError as err:
                # The fields a hint names are the agent's own.
                raise replace(err, role=f"agent {member.name}: {err.role}", hints=tuple(
                    agent_fields(hint, scenario, i) for hint in err.hints)) from None
            self.recorder = sim.recorder
            controller = AgentController(sim, reward_for(sim), KeepAll())
            controller.groups.seq_ids = seq_ids
            controller.groups.on_group_done = self._call_done
            self.agents.append(AgentRun(member.name, sim, controller, calls[member.name]))
        by_name = {agent.name: agent for agent in self.agents}
        self.order = [by_name[name] for name in scenario.agents.turn_order]
        first = self.agents[0]
        self.sampler = first.sim.sampler  # the first agent keeps the scenario's seed, so its draws are the scenario's
        self.reward = first.controller.reward  # scores each trajectory once it has ended
        self._call_ids = count()  # every call is a group of one rollout in its agent's ledger: ids unique across agents
        self._waiting: dict[int, simpy.Event] = {}  # call -> fires when its response is complete
        self._last_call_end: dict[str, float] = {}  # agent -> when its last call of this step ended
        self.version = 0
        self.sharing = TimeSharing(self.env, self.agents)

    @property
    def rollout_engines(self) -> list[RolloutEngine | StaticBatchEngine]:
        return [engine for agent in self.agents for engine in agent.sim.rollout_engines]

    def run(self) -> Generator:
        for step in range(self.scenario.run.steps or 0):
            yield from self._step(step)
        for agent in self.agents:
            agent.controller.finish()
        self.reward.close(self.env.now)
        assert self.recorder is not None
        self.recorder.agents = tuple(agent.record() for agent in self.agents)

    def _step(self, step: int) -> Generator:
        env, algorithm = self.env, self.scenario.algorithm
        assert self.recorder is not None
        self.recorder.phase.step = step
        start = env.now
        calls: dict[str, list[int]] = {agent.name: [] for agent in self.agents}
        self._last_call_end = {agent.name: start for agent in self.agents}
        drawn = self.sampler.draw(algorithm.prompts_per_step, self.version,
                                  samples=algorithm.samples_per_prompt * len(self.order))
        # A group's responses are its trajectories' calls, a turn order's worth each.
        starts = [(group, i) for group in drawn for i in range(len(group.response_tokens) // len(self.order))]
        assert self.scenario.agents is not None
        turns = [TurnBarrier(env, len(starts)) for _ in self.order] if self.scenario.agents.turn_by_turn else None
        if turns is not None:
            env.process(self._open_turns(turns))
        trajectories = [env.process(self._trajectory(group, i, calls, turns)) for group, i in starts]
        yield simpy.AllOf(env, trajectories)
        gen_end = env.now
        for agent in self.agents:
            roles = agent.controller.roles
            roles.rollout_context(start, self._last_call_end[agent.name], "starved", "gen")
            roles.rollout_context(self._last_call_end[agent.name], gen_end, "tail", "gen")
            roles.training_context(start, gen_end, "starved", "gen")
        shared = {"gen": gen_end - start}
        yield from self._score([trajectory.value for trajectory in trajectories], shared)
        own = {agent.name: dict(shared) for agent in self.agents}
        updates = [env.process(self._update(agent, calls[agent.name], own[agent.name], step, start))
                   for agent in self.agents]
        yield simpy.AllOf(env, updates)
        for agent in self.agents:
            for first, gpus in agent.gpus:
                self.recorder.context(first, gpus, agent.steps[-1].end, env.now, "barrier", "weight_sync")
        self.version += 1
        last = max(self.agents, key=lambda agent: (agent.steps[-1].end, -self.agents.index(agent)))
        self.recorder.step(StepRecord(step, start, env.now, dict(last.steps[-1].stages),
                                      samples=sum(agent.steps[-1].samples for agent in self.agents),
                                      tokens=sum(agent.steps[-1].tokens for agent in self.agents)))

    def _trajectory(self, group: PromptGroup, i: int, calls: dict[str, list[int]],
                    turns: list[TurnBarrier] | None) -> Generator:
        """Trajectory `i` of the group: its calls in turn order, each to its agent; with `turns`, a call only once the
        whole batch's calls of the turn before have ended. Returns its last call's rollout."""
        env, cap = self.env, self.scenario.algorithm.max_prompt_tokens
        context = group.prompt_tokens
        rollout: Rollout | None = None
        for k, agent in enumerate(self.order):
            if turns is not None:
                yield turns[k].open
            j = i * len(self.order) + k
            call = next(self._call_ids)
            done = self._waiting[call] = env.event()
            calls[agent.name].append(call)
            (rollout,) = agent.controller.groups.send([PromptGroup(
                call, min(context, cap), (group.response_tokens[j],), (group.truncated[j],),
                informative=group.informative)])
            agent.seq_ids.append(rollout.seq_id)
            yield done
            agent.generated_tokens += rollout.generated
            self._last_call_end[agent.name] = env.now
            context += rollout.generated
            if turns is not None:
                turns[k].arrive()
        return rollout

    def _open_turns(self, turns: list[TurnBarrier]) -> Generator:
        """Each turn once the one before has ended, its agent holding the GPUs it time-shares."""
        for k, agent in enumerate(self.order):
            if k:
                yield turns[k - 1].done
            yield from self.sharing.hand_to(agent)
            turns[k].open.succeed()

    def _call_done(self, call: int) -> None:
        self._waiting.pop(call).succeed()

    def _score(self, finished: list[Rollout], stages: dict[str, float]) -> Generator:
        """One reward per trajectory, on its final answer; every agent's GPUs wait for it."""
        start = self.env.now
        yield from self.reward.score_batch([[rollout] for rollout in finished])
        for agent in self.agents:
            agent.controller.roles.all_context(start, self.env.now, "starved", "reward")
        stages["reward"] = self.env.now - start

    def _update(self, agent: AgentRun, calls: list[int], stages: dict[str, float], step: int,
                start: float) -> Generator:
        """The agent trains on its own calls and loads its new weights into its engines, holding the GPUs it
        time-shares with other agents."""
        yield from self.sharing.alone(agent, self._train_and_publish(agent, calls, stages, step, start), stages)

    def _train_and_publish(self, agent: AgentRun, calls: list[int], stages: dict[str, float], step: int,
                           start: float) -> Generator:
        controller = agent.controller
        yield from controller.train(calls, stages)
        controller.groups.consume(calls, controller.version, step)
        yield from controller.publish(stages)
        for name in STAGES:
            stages.setdefault(name, 0.0)
        trained = controller.groups.take_trained(calls)
        cap = self.scenario.algorithm.max_response_tokens
        agent.steps.append(StepRecord(step, start, self.env.now, stages, samples=len(trained),
                                      tokens=sum(trained_tokens(r, cap) for r in trained)))
