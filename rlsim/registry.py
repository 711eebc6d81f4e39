"""Every policy and kind a scenario selects by name, in one kind of table: name → the object the simulator runs.

A policy is one decorated function (or class) in the file that implements it, e.g. in `rlsim/sim/balance.py`:

    @register_balancer("least_kv")
    def least_kv(unit, engines, dispatcher): ...

and the YAML then accepts `schedule.load_balancer: least_kv`. Nothing else changes: the scenario's schema checks a
name against the registry when it validates a file (not against a list written in the schema), and `rlsim schema`
lists the registry's names as the field's enum.

Why the tables live here, at the bottom of the package: the schema (`rlsim.config`) must know the names, but it may not
import the simulator that implements them (tests/test_design_rules.py). So each kind is declared here, with the module
that holds its built-in entries (its *home*); the implementations register into it when their module is imported, and
the first question about a kind's names (`names`, `in`, `[]`) imports its home first. Config thus names no simulator
module, and still sees every built-in policy — plus any registered from outside the package before the scenario is
loaded (tests/test_registry.py registers a toy balancer, schedule and length model).

Kinds whose variants carry parameters are tagged unions of parameter classes. A length model registers its class with
its builder, and the schema's union is the registry's (`rlsim.fields.Variants`); for latency models, budgets, group
filters and rewards the unions are written in `rlsim.config.workload`, their registries hold the builders, one per tag,
and tests/test_registry.py checks that every tag has one.

This module imports nothing from rlsim but `errors`.
"""
from __future__ import annotations

import difflib
from collections.abc import Callable, Iterator
from importlib import import_module
from typing import Any, Generic, TypeVar

from rlsim.errors import UnknownName

T = TypeVar("T")


class Registry(Generic[T]):
    """The entries of one kind, by the name the YAML uses. `home` is the module whose import registers the built-in
    ones; it is imported on the first look-up, so asking for names never depends on what happens to be imported."""

    def __init__(self, kind: str, home: str):
        self.kind = kind
        self.home = home
        self._entries: dict[str, T] = {}
        self._home_loaded = False

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator: file `entry` under `name` (a name registered twice is an error, not an override)."""
        def decorate(entry: T) -> T:
            if name in self._entries:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._entries[name] = entry
            return entry
        return decorate

    def unregister(self, name: str) -> None:
        """Remove `name` (for tests that register a policy of their own and must leave no trace)."""
        del self._entries[name]

    def __getitem__(self, name: str) -> T:
        entries = self._loaded()
        if name not in entries:
            known = sorted(entries)
            match = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
            raise UnknownName(self.kind, name, known, match[0] if match else None)
        return entries[name]

    def __contains__(self, name: object) -> bool:
        return name in self._loaded()

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def names(self) -> list[str]:
        """Every registered name, sorted."""
        return sorted(self._loaded())

    def _loaded(self) -> dict[str, T]:
        if not self._home_loaded:
            self._home_loaded = True  # first: the home's own import may ask again
            try:
                import_module(self.home)
            except BaseException:
                self._home_loaded = False
                raise
        return self._entries


# The kinds. Typed loosely here (an entry's type belongs to its home); each home narrows it, e.g.
# `BALANCERS: Registry[Balancer] = registry.LOAD_BALANCERS`.
LOAD_BALANCERS: Registry[Any] = Registry("load balancer", "rlsim.sim.balance")
DP_BALANCERS: Registry[Any] = Registry("DP balancer", "rlsim.sim.dp_balance")
SCHEDULES: Registry[Any] = Registry("schedule", "rlsim.sim.schedules")
REWARDS: Registry[Any] = Registry("reward kind", "rlsim.sim.reward")
TOOL_WAITS: Registry[Any] = Registry("tool-wait policy", "rlsim.sim.engine.tool_waits")
QUEUE_ORDERS: Registry[Any] = Registry("queue order", "rlsim.sim.engine.queue_order")
LENGTH_MODELS: Registry[Any] = Registry("length model", "rlsim.workload.length_models")
LATENCY_MODELS: Registry[Any] = Registry("latency model", "rlsim.workload.latency")
BUDGETS: Registry[Any] = Registry("sample budget", "rlsim.workload.budgets")
GROUP_FILTERS: Registry[Any] = Registry("group filter", "rlsim.workload.filters")
LONG_TAIL_REMEDIES: Registry[Any] = Registry("long-tail remedy", "rlsim.sim.long_tail")
