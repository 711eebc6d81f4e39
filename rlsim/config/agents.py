"""Multi-agent scenarios (`agents:`): each agent's run as a scenario of its own, checked the way any scenario is, and
the checks only a multi-agent run needs (names, turns, GPUs of its own, the features a multi-agent run models).

An agent's scenario is the scenario with the agent's model and placement and no `agents` section; every check of a
single-policy scenario (catalog names, parallel layouts, pools that hold the GPUs, memory) runs on it, and its problems
are reported at the agent's fields (`agents.members[1].placement.rollout.tp`).
"""
from __future__ import annotations

import copy
import re
from collections import Counter
from pathlib import Path

import numpy as np

from rlsim.config.checks import placed_gpus, resolve_and_check
from rlsim.config.schema import Agent, Agents, Placement, Scenario
from rlsim.errors import Problem
from rlsim.loading import closest, validate_document
from rlsim.yamlsource import PathKey, YamlDocument

# The sections an agent may give itself; the rest of its scenario is the scenario's.
AGENT_SECTIONS = ("model", "placement")


def agent_scenario(scenario: Scenario, index: int) -> Scenario:
    """Agent `index` of a resolved multi-agent scenario as a scenario of its own: its model and placement, no agents.
    The first agent keeps the scenario's seed (its sampler draws the trajectories); each other agent's is drawn from
    it, so two agents' engines never share a balancer's or predictor's random stream."""
    assert scenario.agents is not None
    member = scenario.agents.members[index]
    seed = scenario.seed if index == 0 else int(np.random.SeedSequence([scenario.seed, index]).generate_state(1)[0])
    return scenario.model_copy(update={"model": member.model or scenario.model,
                                       "placement": member.placement or scenario.placement,
                                       "agents": None, "seed": seed})


def agent_fields(text: str, scenario: Scenario, index: int) -> str:
    """`text` (a hint naming fields of agent `index`'s scenario) with the model and placement fields named where the
    agent gives them: its own (agents.members[i].placement…), unless it takes the scenario's."""
    assert scenario.agents is not None
    member = scenario.agents.members[index]
    for section in AGENT_SECTIONS:
        if getattr(member, section) != getattr(scenario, section):
            text = re.sub(rf"(?<![\w.\]]){section}\.", f"agents.members[{index}].{section}.", text)
    return text


def calls_per_trajectory(scenario: Scenario) -> dict[str, int]:
    """Each agent's calls in one trajectory, in the members' order."""
    assert scenario.agents is not None
    counts = Counter(scenario.agents.turn_order)
    return {member.name: counts[member.name] for member in scenario.agents.members}


def resolve_agents(scenario: Scenario, doc: YamlDocument, base_dir: Path,
                   scenario_problems: list[Problem]) -> tuple[Scenario, list[Problem]]:
    """Check the agents of a resolved scenario (whose own check found `scenario_problems`) and resolve each agent's
    model and placement the way a scenario's are, so every agent's model has its architecture and its placement its
    defaults."""
    agents = scenario.agents
    assert agents is not None
    problems = _structure(scenario, doc)
    if problems:
        return scenario, problems
    reported = {(p.path, p.message) for p in scenario_problems}
    members: list[Agent] = []
    for i, member in enumerate(agents.members):
        sub_doc = _member_document(doc, i)
        resolved, found = resolve_and_check(validate_document(Scenario, sub_doc), sub_doc, base_dir)
        problems += _member_problems(i, member, found, reported)
        members.append(member.model_copy(update={"model": resolved.model, "placement": resolved.placement}))
    resolved_agents = agents.model_copy(update={"members": members})
    if not problems:
        problems += _own_pools(resolved_agents, doc)
    return scenario.model_copy(update={"agents": resolved_agents}), problems


def _structure(scenario: Scenario, doc: YamlDocument) -> list[Problem]:
    """Names, turns, and the features a multi-agent run models."""
    agents = scenario.agents
    assert agents is not None
    at: PathKey = ("agents",)
    problems = []
    names = [member.name for member in agents.members]
    for i, name in enumerate(names):
        if name in names[:i]:
            problems.append(doc.problem(at + ("members", i, "name"), f"agent {name!r} is named twice", value=name,
                                        valid="a name of its own"))
    for k, name in enumerate(agents.turn_order):
        if name not in names:
            problems.append(doc.problem(at + ("turn_order", k), f"no agent is named {name!r}", value=name,
                                        valid=", ".join(names), suggestion=closest(name, names)))
    for i, name in enumerate(names):
        if name not in agents.turn_order:
            problems.append(doc.problem(at + ("members", i), f"agent {name!r} has no turn: no trajectory calls it",
                                        valid="its name in agents.turn_order, or no such agent"))
    problems += _unsupported(scenario, doc)
    return problems


def _unsupported(scenario: Scenario, doc: YamlDocument) -> list[Problem]:
    """Features whose interplay with calls handed between agents is not modelled: refused, not approximated."""
    workload, schedule = scenario.workload, scenario.schedule
    refused: list[tuple[PathKey, bool, object, str]] = [
        (("schedule", "mode"), schedule.mode != "sync", schedule.mode, "sync"),
        (("schedule", "partial_rollout", "mode"), schedule.partial_rollout.mode != "off", schedule.partial_rollout.mode,
         "off"),
        (("schedule", "long_tail"), schedule.long_tail is not None, "set", "none"),
        (("algorithm", "dynamic_sampling"), scenario.algorithm.dynamic_sampling, True, "false"),
        (("workload", "multiturn"), workload.multiturn is not None, "set", "none: each call is one generation"),
        (("workload", "environments"), workload.environments is not None, "set", "none"),
        (("workload", "replay"), workload.replay is not None, "set", "none: calls draw their lengths"),
        (("workload", "reward", "kind"), workload.reward.kind not in ("rule", "sandbox"), workload.reward.kind,
         "rule, sandbox"),
        (("run", "horizon"), scenario.run.horizon is not None, "set", "none"),
    ]
    return [doc.problem(path, "not modelled in a multi-agent run (agents:)", value=value, valid=valid)
            for path, bad, value, valid in refused if bad]


def _member_document(doc: YamlDocument, index: int) -> YamlDocument:
    """The scenario's document with agent `index`'s model and placement in place of the scenario's, keeping the lines
    (and `--set` overrides) they were written at, and no agents section."""
    data = copy.deepcopy(doc.data)
    raw = data.pop("agents")["members"][index]
    prefix: PathKey = ("agents", "members", index)
    lines = {path: line for path, line in doc.lines.items() if path[:1] != ("agents",)}
    overrides = {path: text for path, text in doc.overrides.items() if path[:1] != ("agents",)}
    for section in AGENT_SECTIONS:
        if section not in raw:
            continue
        data[section] = raw[section]
        here = prefix + (section,)
        for table, source in ((lines, doc.lines), (overrides, doc.overrides)):
            for path in [p for p in table if p[:1] == (section,)]:
                del table[path]
            table.update({path[3:]: value for path, value in source.items() if path[:4] == here})  # type: ignore[misc]
    return YamlDocument(data=data, file=doc.file, lines=lines, overrides=overrides)


def _member_problems(index: int, member: Agent, found: list[Problem],
                     scenario_problems: set[tuple[str, str]]) -> list[Problem]:
    """An agent's problems at its own fields; those of sections it takes from the scenario are the scenario's, which
    its own check reports once."""
    problems = []
    for problem in found:
        section = problem.path.split(".")[0].split("[")[0]
        if section in AGENT_SECTIONS and getattr(member, section) is not None:
            problems.append(Problem(problem.message, f"agents.members[{index}].{problem.path}", problem.file,
                                    problem.line, problem.value, problem.valid, problem.suggestion))
        elif (problem.path, problem.message) not in scenario_problems:
            problems.append(Problem(f"agent {member.name!r}: {problem.message}", problem.path, problem.file,
                                    problem.line, problem.value, problem.valid, problem.suggestion))
    return problems


def time_shared(placement: Placement) -> tuple[str, int] | None:
    """The GPU group a colocated placement with nothing placed apart holds whole — (pool, GPUs), which agents may
    time-share — else None."""
    placed = placed_gpus(placement)
    if placement.mode != "colocated" or len(placed) != 1:
        return None
    ((pool, gpus),) = placed.items()
    return pool, gpus


def _own_pools(agents: Agents, doc: YamlDocument) -> list[Problem]:
    """Every agent on pools of its own, unless agents time-share one GPU group whole: each colocated on the same GPUs
    (nothing placed apart), a turn at a time (agents.turn_by_turn), so one agent's engines run while the others'
    sleep."""
    problems = []
    owner: dict[str, tuple[str, Placement]] = {}
    for i, member in enumerate(agents.members):
        assert member.placement is not None
        for pool in placed_gpus(member.placement):
            if pool not in owner:
                owner[pool] = (member.name, member.placement)
                continue
            other, placement = owner[pool]
            group = time_shared(member.placement)
            if agents.turn_by_turn and group is not None and group == time_shared(placement):
                continue
            problems.append(doc.problem(
                ("agents", "members", i, "placement"), f"agent {member.name!r} runs on pool {pool!r}, which agent "
                f"{other!r} uses too: agents time-share GPUs only colocated on the same GPUs, with nothing placed "
                "apart, a turn at a time (agents.turn_by_turn: true)", value=pool,
                valid="pools of its own for each agent (cluster.pools), or the same colocated GPUs with "
                "agents.turn_by_turn: true"))
    return problems
