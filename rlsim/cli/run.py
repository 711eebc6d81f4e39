"""`rlsim run SCENARIO`: simulate the RL loop, print a per-step table and the headline, write the run folder."""
from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from rlsim.cli.exitcodes import OK
from rlsim.cli.file_names import bounded_name, folder_name
from rlsim.cli.overrides import (
    add_calibration_argument,
    add_set_argument,
    calibration_overrides,
    parse_overrides,
)
from rlsim.report.event_files import AUTO_FULL_MAX_SPANS, EVENT_CHOICES

if TYPE_CHECKING:
    from rlsim.events import StepRecord


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("run", help="simulate the RL loop and report step times and GPU-seconds",
                                   description="Simulate the scenario's RL loop step by step; print a per-step table "
                                   "and the headline figures, and write the run folder: resolved.yaml, metrics.json, "
                                   "timing.json, spans/sequences/steps.csv.gz, trace.json (Perfetto) and report.html.")
    parser.add_argument("scenario", type=Path, help="scenario YAML file")
    parser.add_argument("--steps", type=int, help="override run.steps: steps simulated, warm-up included (default: "
                        "the schedule's pipeline fill, then 3 measured steps)")
    parser.add_argument("--out", type=Path, help="run folder (default: runs/<scenario name>, then --<path>=<value> "
                        "for each --set and --steps, so a what-if never overwrites its baseline)")
    add_set_argument(parser)
    add_calibration_argument(parser)
    parser.add_argument("--json", action="store_true", help="print metrics.json to stdout instead of the table")
    parser.add_argument("--events", choices=EVENT_CHOICES, default="auto",
                        help="event tables in the run folder: full (spans, sequences, steps, engine samples as CSV, "
                        "and trace.json), steps (the per-step table), none; auto (default): full unless the run "
                        f"records more than {AUTO_FULL_MAX_SPANS:,} spans, then steps")
    parser.add_argument("--exact", action="store_true",
                        help="step every decode iteration (slow reference mode; results agree with the default)")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    # Imported here, not at the top: `rlsim --help` builds every subcommand's parser and needs none of them.
    from rlsim.config import load_scenario
    from rlsim.config.bound import bind
    from rlsim.metrics import RunFacts, run_metrics
    from rlsim.report.figures import RunData
    from rlsim.report.run_folder import metrics_json, write_run_folder
    from rlsim.report.text import STEP_HEADER, headline_text, step_line
    from rlsim.sim.run import simulate_log

    overrides = {**calibration_overrides(args.calibration), **parse_overrides(args.overrides)}
    scenario = load_scenario(args.scenario, overrides)
    if args.steps is not None:
        overrides["run.steps"] = args.steps
        # A warm-up as long as the run would leave nothing to measure: keep at least the last step measured. A warm-up
        # the scenario leaves unset follows the new length by itself.
        if scenario.run.warmup_steps >= args.steps:
            overrides["run.warmup_steps"] = max(0, args.steps - 1)
        scenario = load_scenario(args.scenario, overrides)
    bound = bind(scenario)
    out = args.out or Path("runs") / run_folder_name(scenario.name, overrides)
    check_run_folder(out)  # before simulating, so a bad --out costs nothing
    streaming = not args.json
    width = shutil.get_terminal_size().columns
    if streaming:
        warmup = f", the first {scenario.run.warmup_steps} warm-up" if scenario.run.warmup_steps else ""
        print(f"simulating {scenario.name}: {scenario.run.steps} steps{warmup}")
        print(STEP_HEADER, flush=True)

    def show(step: StepRecord) -> None:
        print(step_line(step, scenario.run.warmup_steps, width), flush=True)

    output = simulate_log(bound, mode="exact" if args.exact else "fast", on_step=show if streaming else None)
    facts = RunFacts.from_bound(bound)
    data = RunData(output.log, facts, run_metrics(output.log, facts))
    written = write_run_folder(out, scenario, data, output.simulator_wall_s, args.events)
    warning = data.metrics["measured"]["warning"]
    if warning:
        print(f"warning: {warning}", file=sys.stderr)
    if args.json:
        print(metrics_json(data.metrics), end="")
    else:
        print(headline_text(data.metrics))
        sim = data.metrics["simulator"]
        print(f"simulated {sim['wall_s']:.1f} s in {output.simulator_wall_s:.2f} s ({sim['events']:,} events); "
              f"wrote {out}/: {written_note(written, len(output.log.spans))}")
    return OK


def written_note(written: list[Path], spans: int) -> str:
    """What the run folder holds, in the words a user looks for; why the span tables are missing when they are."""
    names = {path.name for path in written}
    parts = ["report.html", "metrics.json"]
    if "trace.json" in names:
        parts.append("trace.json (ui.perfetto.dev)")
    if "spans.csv.gz" in names:
        parts.append("events as CSV")
    elif "steps.csv.gz" in names:
        parts.append(f"steps as CSV ({spans:,} spans not written: --events full writes them)")
    return ", ".join(parts)


def run_folder_name(scenario_name: str, overrides: dict[str, object]) -> str:
    """The default run folder: the scenario's name, then each override, so a what-if never overwrites its baseline
    (`runs/quickstart--placement.rollout.tp=2`). Names too long for a file system end in a digest of the overrides."""
    if not overrides:
        return folder_name(scenario_name)
    changes = ",".join(f"{path}={value if isinstance(value, str) else json.dumps(value, sort_keys=True, separators=(',', ':'))}"
                       for path, value in sorted(overrides.items()))
    safe = re.sub(r"[^A-Za-z0-9._=,+\-\[\]]+", "_", changes)
    return bounded_name(f"{folder_name(scenario_name)}--{safe}")


def check_run_folder(out: Path) -> None:
    """Refuse a run folder that cannot be written: an existing file, or a parent that is a file or cannot be made."""
    from rlsim.errors import Problem, ScenarioError

    if out.exists() and not out.is_dir():
        raise ScenarioError(Problem("is a file; the run folder must be a folder (or not exist yet)", file=str(out),
                                    path="--out"))
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ScenarioError(Problem(f"cannot make the run folder's parent: {exc.strerror or exc}", file=str(out),
                                    path="--out")) from None
