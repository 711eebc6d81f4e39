"""Load a scenario file: YAML with line numbers → pydantic validation → cross-field checks → resolved, frozen Scenario."""
from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from rlsim.config.agents import resolve_agents
from rlsim.config.checks import resolve_and_check, scenario_warnings
from rlsim.config.schema import Scenario
from rlsim.errors import ScenarioError, ScenarioWarning
from rlsim.loading import validate_document
from rlsim.yamlsource import YamlDocument, parse_yaml, read_yaml


def load_scenario(path: str | Path, overrides: dict[str, Any] | None = None) -> Scenario:
    """Read, validate and resolve a scenario file, after applying dotted-path `overrides` (as `rlsim run --set` gives).

    Bad input raises ScenarioError naming file, line and field (or the override that set it); a valid scenario that
    probably does not say what was meant (GPUs no role uses) issues a ScenarioWarning.
    """
    doc = read_yaml(path)
    if overrides:
        doc = doc.with_overrides(overrides)
    scenario = scenario_from_document(doc, base_dir=Path(path).resolve().parent)
    for problem in scenario_warnings(scenario, doc):
        warnings.warn(ScenarioWarning(problem), stacklevel=2)
    return scenario


def parse_scenario(text: str, *, file: str = "<string>", base_dir: Path | None = None) -> Scenario:
    """Like load_scenario, for YAML text (notebooks, tests); relative paths resolve against `base_dir` (default: cwd)."""
    return scenario_from_document(parse_yaml(text, file), base_dir=base_dir or Path.cwd())


def scenario_from_document(doc: YamlDocument, *, base_dir: Path) -> Scenario:
    scenario = validate_document(Scenario, doc)
    resolved, problems = resolve_and_check(scenario, doc, base_dir)
    if resolved.agents is not None:
        resolved, more = resolve_agents(resolved, doc, base_dir, problems)
        problems += more
    if problems:
        problems.sort(key=lambda p: p.line if p.line is not None else 10**9)
        raise ScenarioError(problems)
    return resolved
