"""Random mutations of valid scenarios: the loader either returns a Scenario or raises ScenarioError — nothing else."""
from __future__ import annotations

from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlsim.config import parse_scenario
from rlsim.config.schema import Scenario
from rlsim.errors import ScenarioError
from tests.scenario_text import VALID

SCENARIOS = [VALID] + [p.read_text() for p in sorted(Path(__file__).parents[1].glob("scenarios/*.yaml"))]

REPLACEMENTS = st.one_of(
    st.integers(min_value=-10**6, max_value=10**6),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
    st.text(max_size=12),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=6), st.integers(), max_size=2),
    st.sampled_from(["h100-sxm", "Qwen3-8B", "grpo", "async", "colocated", "fsdp", "trace", "lognormal", "fixed"]),
)


def paths(data, prefix=()):
    """Every path to a value in a nested dict/list."""
    yield prefix
    if isinstance(data, dict):
        for key, value in data.items():
            yield from paths(value, prefix + (key,))
    elif isinstance(data, list):
        for index, value in enumerate(data):
            yield from paths(value, prefix + (index,))


def parent_and_key(data, path):
    node = data
    for part in path[:-1]:
        node = node[part]
    return node, path[-1]


@st.composite
def mutated_scenario(draw):
    data = yaml.safe_load(draw(st.sampled_from(SCENARIOS)))
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        candidates = [p for p in paths(data) if p]
        if not candidates:
            break
        path = draw(st.sampled_from(candidates))
        parent, key = parent_and_key(data, path)
        operation = draw(st.sampled_from(["replace", "delete", "rename", "add", "scale"]))
        if operation == "replace":
            parent[key] = draw(REPLACEMENTS)
        elif operation == "delete":
            del parent[key]
        elif operation == "rename" and isinstance(parent, dict):
            parent[key + draw(st.sampled_from(["s", "_", "x"]))] = parent.pop(key)
        elif operation == "add" and isinstance(parent, dict):
            parent[draw(st.text(min_size=1, max_size=8))] = draw(REPLACEMENTS)
        elif operation == "scale" and isinstance(parent[key], int) and not isinstance(parent[key], bool):
            parent[key] = parent[key] * draw(st.sampled_from([0, -1, 2, 3, 7, 1000]))
    return yaml.safe_dump(data, sort_keys=False)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_scenario())
def test_mutations_load_or_raise_scenario_error(text):
    try:
        scenario = parse_scenario(text, file="mutant.yaml")
    except ScenarioError as err:
        assert err.problems and all(p.file == "mutant.yaml" for p in err.problems)
        assert all(p.line is not None for p in err.problems), err.render()
    else:
        assert isinstance(scenario, Scenario)


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(SCENARIOS), st.integers(min_value=0, max_value=10**6), st.text(max_size=3))
def test_text_level_corruption_loads_or_raises_scenario_error(text, position, insert):
    position %= len(text) + 1
    corrupted = text[:position] + insert + text[position + 1:]
    try:
        parse_scenario(corrupted, file="corrupt.yaml")
    except ScenarioError as err:
        assert err.problems[0].file == "corrupt.yaml"
