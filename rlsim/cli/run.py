"""`rlsim run SCENARIO`: simulate the RL loop, print a per-step table, write the run folder."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import yaml

from rlsim.cli.exitcodes import OK
from rlsim.config import load_scenario
from rlsim.config.bound import bind
from rlsim.errors import Problem, ScenarioError
from rlsim.events import STAGES
from rlsim.metrics import summary
from rlsim.sim.run import simulate_log


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("run", help="simulate the RL loop and report step times and GPU-seconds",
                                   description="Simulate the scenario's RL loop step by step; print a per-step table "
                                   "and write DIR/resolved.yaml and DIR/metrics.json.")
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
    overrides = parse_overrides(args.overrides)
    scenario = load_scenario(args.scenario, overrides)
    if args.steps is not None:
        # Fewer steps than the file's warm-up would leave nothing to measure: keep at least the last step measured.
        overrides["run.steps"] = args.steps
        overrides["run.warmup_steps"] = min(scenario.run.warmup_steps, max(0, args.steps - 1))
        scenario = load_scenario(args.scenario, overrides)
    output = simulate_log(bind(scenario), mode="exact" if args.exact else "fast")
    metrics = summary(output.log, scenario.run.warmup_steps)
    out = args.out or Path("runs") / scenario.name
    out.mkdir(parents=True, exist_ok=True)
    (out / "resolved.yaml").write_text(yaml.safe_dump(scenario.model_dump(mode="json"), sort_keys=False))
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2, sort_keys=True) + "\n")
    timing = {"host_seconds": output.simulator_wall_s, "events": output.log.events,
              "events_per_second": output.log.events / output.simulator_wall_s if output.simulator_wall_s else 0.0}
    (out / "timing.json").write_text(json.dumps(timing, indent=2) + "\n")
    if args.json:
        print(json.dumps(metrics, indent=2, sort_keys=True))
    else:
        print(step_table(output.log, metrics, out, output.simulator_wall_s))
    return OK


def step_table(log, metrics: dict, out: Path, host_seconds: float) -> str:
    shown = [s for s in STAGES if any(step.stages.get(s, 0.0) > 0 for step in log.steps)]
    header = f"{'step':>4}{'time s':>10}" + "".join(f"{name:>14}" for name in shown)
    lines = [header]
    for step in log.steps:
        lines.append(f"{step.step:>4}{step.seconds:>10.2f}" + "".join(f"{step.stages.get(n, 0.0):>14.2f}" for n in shown))
    t = metrics["throughput"]
    busy = metrics["gpu_seconds_by_label"]
    total = sum(busy.values()) or 1.0
    top = sorted(busy.items(), key=lambda kv: -kv[1])[:5]
    lines.append(f"mean step {metrics['step_time_s']['mean']:.2f} s; {t['tokens_per_s']:,.0f} tokens/s "
                 f"({t['tokens_per_s_per_gpu']:,.0f} per GPU); staleness mean {metrics['staleness']['mean']:.2f}")
    lines.append("GPU-time: " + ", ".join(f"{label} {seconds / total:.1%}" for label, seconds in top))
    sim = metrics["simulator"]
    lines.append(f"simulated {sim['wall_s']:.1f} s in {host_seconds:.2f} s ({sim['events']:,} events); "
                 f"wrote {out}/metrics.json, resolved.yaml and timing.json")
    return "\n".join(lines)
