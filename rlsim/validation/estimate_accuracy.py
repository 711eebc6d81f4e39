"""How far `rlsim estimate` is from the simulation, scenario by scenario: the table of docs/estimate.md.

Each scenario is simulated in steady state, after its schedule's pipeline fill (`rlsim.config.run_length.fill_steps`, as
`rlsim run` and validation cases measure), over MEASURED_STEPS steps, and its mean step time set beside the estimate's.

    python -m rlsim.validation.estimate_accuracy                      print the table for scenarios/*.yaml
    python -m rlsim.validation.estimate_accuracy --write docs/estimate.md   replace the table between the page's markers
    python -m rlsim.validation.estimate_accuracy FILE...              other scenarios
"""
from __future__ import annotations

import argparse
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from rlsim.api import load_scenario, simulate
from rlsim.config.bound import bind
from rlsim.config.run_length import fill_steps
from rlsim.estimate import estimate_step
from rlsim.examples import EXAMPLES
from rlsim.validation.docs import rewrite_between_markers

MEASURED_STEPS = 3
# The accuracy the estimate is held to (tests/test_estimate_accuracy.py): synchronous steps add their stages, so only
# the stages' own error counts; off-policy steps also depend on how generation and training overlap.
BOUNDS = {"sync": 0.15, "one_step_off": 0.25, "async": 0.25}
# The estimate prices a plain step: a scenario with a long-tail remedy (schedule.long_tail) or several agents
# (agents:) is not one it models.
SHIPPED = sorted(path for path in EXAMPLES.glob("*.yaml")
                 if load_scenario(path).schedule.long_tail is None and load_scenario(path).agents is None)
BEGIN, END = "<!-- estimate-accuracy: begin -->", "<!-- estimate-accuracy: end -->"


@dataclass(frozen=True)
class Accuracy:
    scenario: str
    schedule: str
    estimate_s: float
    simulated_s: float

    @property
    def error(self) -> float:
        return self.estimate_s / self.simulated_s - 1

    @property
    def within_bound(self) -> bool:
        return abs(self.error) <= BOUNDS[self.schedule]


def accuracy(path: Path) -> Accuracy:
    """The estimate and the steady-state simulated step time of one scenario file."""
    warmup = fill_steps(load_scenario(path).schedule)
    scenario = load_scenario(path, {"run.steps": warmup + MEASURED_STEPS, "run.warmup_steps": warmup})
    simulated = simulate(scenario).metrics["step_time_s"]["mean"]
    return Accuracy(path.stem, scenario.schedule.mode, estimate_step(bind(scenario)).step_s, simulated)


def table(rows: Iterable[Accuracy]) -> str:
    lines = ["| scenario | schedule | estimate (s) | simulated (s) | error | bound |", "|---|---|---:|---:|---:|---:|"]
    for row in rows:
        lines.append(f"| {row.scenario} | {row.schedule} | {row.estimate_s:,.1f} | {row.simulated_s:,.1f} | "
                     f"{row.error:+.1%} | ±{BOUNDS[row.schedule]:.0%} |")
    return "\n".join(lines)


def write_table(page: Path, text: str) -> None:
    """Replace what lies between the page's markers with `text`."""
    if not rewrite_between_markers(page, BEGIN, END, text):
        raise SystemExit(f"{page} has no {BEGIN} … {END} markers")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlsim.validation.estimate_accuracy", description=__doc__.split("\n")[0])
    parser.add_argument("scenarios", nargs="*", type=Path, help="scenario files (default: scenarios/*.yaml)")
    parser.add_argument("--write", type=Path, help="a page whose table to replace, between its markers")
    args = parser.parse_args(argv)
    text = table(accuracy(path) for path in args.scenarios or SHIPPED)
    if args.write:
        write_table(args.write, text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
