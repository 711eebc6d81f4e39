"""Workload models: response and prompt lengths (and, as they grow, turns, tools, rewards and drift)."""
from rlsim.workload.lengths import LengthDistribution, length_distribution

__all__ = ["LengthDistribution", "length_distribution"]
