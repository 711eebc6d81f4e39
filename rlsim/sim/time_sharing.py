"""GPUs that several agents of a multi-agent run hold in turn (each colocated on the same GPU group, with
`agents.turn_by_turn`): which agent's engines are awake on each group, one agent's update at a time, and the swap
when the GPUs pass to another agent — the holder's engines go to sleep (vLLM sleep level 1: weights backed up to host,
KV cache freed) and the next agent's wake, each at its own colocated switch's seconds.

An agent's own colocated cycle around its update (engines asleep, training state in, weights exported, engines
awake) is charged as when it holds the GPUs alone; the swap is charged on top, each time the GPUs change hands.
"""
from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING

import simpy

from rlsim.config.agents import time_shared

if TYPE_CHECKING:  # the multi-agent loop builds this from its agents
    from rlsim.sim.multi_agent import AgentRun


class TimeSharing:
    def __init__(self, env: simpy.Environment, agents: list[AgentRun]):
        self._env = env
        groups: dict[tuple[str, int], list[AgentRun]] = {}
        for agent in agents:
            group = time_shared(agent.sim.bound.scenario.placement)
            if group is not None:
                groups.setdefault(group, []).append(agent)
        shared = {group: members for group, members in groups.items() if len(members) > 1}
        self._group_of = {agent.name: group for group, members in shared.items() for agent in members}
        self._holder = {group: members[0] for group, members in shared.items()}  # whose engines are awake
        self._lock = {group: simpy.Resource(env, capacity=1) for group in shared}

    def hand_to(self, agent: AgentRun) -> Generator:
        """The agent's GPUs become its own: the agent holding them puts its engines to sleep, the agent's wake."""
        group = self._group_of.get(agent.name)
        if group is None or self._holder[group] is agent:
            return
        holder = self._holder[group]
        assert holder.sim.switch is not None and agent.sim.switch is not None, "time-shared agents are colocated"
        yield from holder.controller.roles.span_all("offload", holder.sim.switch.sleep_s, "gen")
        yield from agent.controller.roles.span_all("reload", agent.sim.switch.wake_s, "gen")
        self._holder[group] = agent

    def alone(self, agent: AgentRun, body: Generator, stages: dict[str, float]) -> Generator:
        """Run `body` (the agent's update) holding its GPUs: agents sharing them wait their turn. The wait and the
        swap count in the agent's `wait` stage, so its stages still add up to its part of the step."""
        group = self._group_of.get(agent.name)
        if group is None:
            yield from body
            return
        began = self._env.now
        with self._lock[group].request() as turn:
            yield turn
            yield from self.hand_to(agent)
            stages["wait"] = stages.get("wait", 0.0) + self._env.now - began
            yield from body
