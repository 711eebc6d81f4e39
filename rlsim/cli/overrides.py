"""`--set PATH=VALUE`: the one way every subcommand overrides scenario fields from the command line."""
from __future__ import annotations

import argparse

import yaml

from rlsim.errors import Problem, ScenarioError
from rlsim.yamlsource import parse_path

HELP = ("override a scenario field, e.g. --set placement.rollout.gpus=48, --set cluster.pools[0].nodes=2 or "
        "--set model=Qwen/Qwen3-8B (repeatable; VALUE is YAML)")


def add_set_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="PATH=VALUE", help=HELP)


def parse_overrides(items: list[str]) -> dict[str, object]:
    """`["a.b=4", "c={x: 1}"]` -> `{"a.b": 4, "c": {"x": 1}}`; a malformed item raises ScenarioError naming it."""
    overrides = {}
    for item in items:
        path, sep, value = item.partition("=")
        if not sep or not path.strip():
            raise ScenarioError(Problem("expected PATH=VALUE", file=f"--set {item}",
                                        valid="e.g. placement.rollout.gpus=48"))
        parse_path(path.strip())  # a malformed path fails here, before any file is read
        try:
            overrides[path.strip()] = yaml.safe_load(value)
        except yaml.YAMLError as exc:
            reason = getattr(exc, "problem", None) or str(exc)
            raise ScenarioError(Problem(f"VALUE is not YAML: {reason}", file=f"--set {item}",
                                        valid="a YAML value, e.g. 48, true, [1, 2] or {kind: rule}")) from None
    return overrides
