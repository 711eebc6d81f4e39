"""The GPU groups the actor, critic, reference policy and reward model run on, one lock each.

A group is the GPUs of a role that has its own (`actor`: the policy's training GPUs); roles placed to share a group
take turns on it through its lock (a SimPy resource of capacity 1), while stages of roles on different groups run at
once. With every role on the actor's GPUs, today's serial order falls out of the lock: the stages queue in the order
the controller starts them.
"""
from __future__ import annotations

from dataclasses import dataclass

import simpy

GPURange = tuple[int, int]  # first GPU index and count
ROLES = ("actor", "critic", "reference", "reward_model")
TRAINING_ROLES = ("actor", "critic", "reference")


@dataclass
class RoleGroup:
    name: str  # the role whose GPUs these are
    gpus: GPURange
    lock: simpy.Resource


class RoleGroups:
    def __init__(self, env: simpy.Environment, ranges: dict[str, GPURange], group_of: dict[str, str]):
        """`ranges`: the GPUs of each group by the name of its role; `group_of`: the group each role runs on."""
        self._groups = {name: RoleGroup(name, gpus, simpy.Resource(env, capacity=1)) for name, gpus in ranges.items()}
        self._group_of = group_of

    def of(self, role: str) -> RoleGroup:
        return self._groups[self._group_of[role]]

    def training(self) -> list[RoleGroup]:
        """The groups the training stages run on (actor, critic and reference), each once, the actor's first."""
        names = dict.fromkeys(self._group_of[role] for role in TRAINING_ROLES if role in self._group_of)
        return [self._groups[name] for name in names]

    def apart(self) -> list[RoleGroup]:
        """Training groups other than the actor's: GPUs that only run the critic, reference (or a reward model
        sharing them) and wait for samples between steps."""
        return [group for group in self.training() if group.name != "actor"]

    def shares_training_group(self, role: str) -> bool:
        """Whether `role` runs on a group that a training stage also uses."""
        return self._group_of.get(role) in {group.name for group in self.training()}
