"""`--set PATH=VALUE`: the one way every subcommand overrides scenario fields from the command line."""
from __future__ import annotations

import argparse
import re
from pathlib import Path

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
            parsed = yaml.safe_load(value)
        except yaml.YAMLError as exc:
            reason = getattr(exc, "problem", None) or str(exc)
            raise ScenarioError(Problem(f"VALUE is not YAML: {reason}", file=f"--set {item}",
                                        valid="a YAML value, e.g. 48, true, [1, 2] or {kind: rule}")) from None
        if isinstance(parsed, str) and _EXPONENT_NUMBER.fullmatch(parsed.strip()):
            # YAML 1.1 reads 1e-9 as text (it wants 1.0e-9); on a command line it is meant as the number.
            parsed = float(parsed)
        overrides[path.strip()] = parsed
    return overrides


_EXPONENT_NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")


def add_calibration_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--calibration", type=Path, default=None, metavar="FILE",
                        help="overlay of framework fields (as `rlsim fit` writes) merged over the scenario's; "
                        "--set still wins")


def calibration_overrides(path: Path | None) -> dict[str, object]:
    """An overlay file's `framework:` fields as `--set`-style overrides (`framework.engine_step_cpu_s` -> 0.003)."""
    if path is None:
        return {}
    from rlsim.config.framework import Framework
    from rlsim.yamlsource import read_yaml

    document = read_yaml(path)
    data = document.data
    if not isinstance(data, dict) or set(data) != {"framework"} or not isinstance(data["framework"], dict):
        raise ScenarioError(Problem("expected a calibration overlay: a `framework:` mapping and nothing else",
                                    file=str(path), line=document.line_of(()), valid="framework: {FIELD: VALUE}"))
    overrides: dict[str, object] = {}
    for name, value in data["framework"].items():
        if name not in Framework.model_fields:
            raise ScenarioError(Problem(f"unknown field {name!r}", path=f"framework.{name}", file=str(path),
                                        line=document.line_of(("framework", name)),
                                        valid=", ".join(Framework.model_fields)))
        overrides[f"framework.{name}"] = value
    return overrides
