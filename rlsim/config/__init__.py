"""The scenario format: schema, loading with file/line errors, cross-field checks."""
from rlsim.config.loader import load_scenario, parse_scenario
from rlsim.config.schema import Scenario

__all__ = ["Scenario", "load_scenario", "parse_scenario"]
