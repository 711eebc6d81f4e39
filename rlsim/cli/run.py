"""`rlsim run SCENARIO`: simulate the RL loop, print a per-step table and the headline, write the run folder."""
from __future__ import annotations

import argparse
from pathlib import Path

import yaml

from rlsim.cli.exitcodes import OK
from rlsim.errors import Problem, ScenarioError
from rlsim.events import STAGES, EventLog


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("run", help="simulate the RL loop and report step times and GPU-seconds",
                                   description="Simulate the scenario's RL loop step by step; print a per-step table "
                                   "and the headline figures, and write the run folder: resolved.yaml, metrics.json, "
                                   "timing.json, spans/sequences/steps.csv.gz, trace.json (Perfetto) and report.html.")
    parser.add_argument("scenario", type=Path, help="scenario YAML file")
    parser.add_argument("--steps", type=int, help="override run.steps")
    parser.add_argument("--out", type=Path, help="run folder (default: runs/<scenario name>)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="PATH=VALUE",
                        help="override a field, e.g. --set placement.rollout.gpus=48 (repeatable; VALUE is YAML)")
    parser.add_argument("--json", action="store_true", help="print metrics.json to stdout instead of the table")
    parser.add_argument("--exact", action="store_true",
                        help="step every decode iteration (slow reference mode; results agree with the default)")
    parser.set_defaults(handler=run)


def parse_overrides(items: list[str]) -> dict[str, object]:
    overrides = {}
    for item in items:
        path, sep, value = item.partition("=")
        if not sep or not path.strip():
            raise ScenarioError(Problem("expected PATH=VALUE, e.g. placement.rollout.gpus=48", file=f"--set {item}"))
        overrides[path.strip()] = yaml.safe_load(value)
    return overrides


def run(args: argparse.Namespace) -> int:
    # Imported here, not at the top: `rlsim --help` builds every subcommand's parser and needs none of them.
    from rlsim.config import load_scenario
    from rlsim.config.bound import bind
    from rlsim.metrics import RunFacts, run_metrics
    from rlsim.report.figures import RunData
    from rlsim.report.run_folder import metrics_json, write_run_folder
    from rlsim.report.text import headline_text
    from rlsim.sim.run import simulate_log

    overrides = parse_overrides(args.overrides)
    scenario = load_scenario(args.scenario, overrides)
    if args.steps is not None:
        # Fewer steps than the file's warm-up would leave nothing to measure: keep at least the last step measured.
        overrides["run.steps"] = args.steps
        overrides["run.warmup_steps"] = min(scenario.run.warmup_steps, max(0, args.steps - 1))
        scenario = load_scenario(args.scenario, overrides)
    bound = bind(scenario)
    output = simulate_log(bound, mode="exact" if args.exact else "fast")
    facts = RunFacts.from_bound(bound)
    data = RunData(output.log, facts, run_metrics(output.log, facts))
    out = args.out or Path("runs") / scenario.name
    write_run_folder(out, scenario, data, output.simulator_wall_s)
    if args.json:
        print(metrics_json(data.metrics), end="")
    else:
        print(step_table(output.log))
        print(headline_text(data.metrics))
        sim = data.metrics["simulator"]
        print(f"simulated {sim['wall_s']:.1f} s in {output.simulator_wall_s:.2f} s ({sim['events']:,} events); "
              f"wrote {out}/: report.html, trace.json (ui.perfetto.dev), metrics.json, events as CSV")
    return OK


def step_table(log: EventLog) -> str:
    shown = [s for s in STAGES if any(step.stages.get(s, 0.0) > 0 for step in log.steps)]
    lines = [f"{'step':>4}{'time s':>10}" + "".join(f"{name:>14}" for name in shown)]
    for step in log.steps:
        lines.append(f"{step.step:>4}{step.seconds:>10.2f}" + "".join(f"{step.stages.get(n, 0.0):>14.2f}" for n in shown))
    return "\n".join(lines)
