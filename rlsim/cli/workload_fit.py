"""`rlsim workload fit TRACE --out model.yaml`: fit workload models to a trace, write them as YAML, and compare the
fitted response lengths with the trace's."""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import yaml

from rlsim.cli.exitcodes import OK
from rlsim.cli.workload_show import summary_table
from rlsim.config.workload import Workload
from rlsim.errors import Problem, ScenarioError, TraceFormatError
from rlsim.loading import validate_document
from rlsim.traces import read_lengths, trace_format
from rlsim.workload.fitting import Summary, fit_trace


def run_fit(args: argparse.Namespace) -> int:
    trace: Path = args.trace
    if not trace.exists():
        raise ScenarioError(Problem("no such trace file or directory", file=str(trace)))
    try:
        fields = fit_trace(trace, cap=args.cap, drift=args.drift)
    except (TraceFormatError, ValueError) as err:
        raise ScenarioError(Problem(str(err), file=str(trace))) from None
    header = (f"# Workload fitted by `rlsim workload fit {trace.as_posix()}`"
              + (" --drift" if args.drift else "") + (f" --max-response-tokens {args.cap}" if args.cap else "")
              + "\n# Paste under `workload:` in a scenario (see docs/workloads.md).\n")
    args.out.write_text(header + yaml.safe_dump(fields, sort_keys=False), encoding="utf-8")
    print(f"wrote {args.out}")
    if "response_tokens" in fields and trace_format(trace) == "packed":
        _compare_fit(trace, fields, args.cap)
    return OK


def _compare_fit(trace: Path, fields: dict, cap: int | None) -> None:
    from rlsim.workload.fitting import response_cap
    from rlsim.workload.lengths import length_schedule

    recorded = read_lengths(trace, "output")
    cap = cap if cap is not None else response_cap(recorded)
    model = validate_document(Workload, _document(trace, {"prompt_tokens": fields["prompt_tokens"],
                                                          "response_tokens": fields["response_tokens"]}))
    limit = cap if cap is not None else 1 << 40
    assert model.response_tokens is not None
    drawn = length_schedule(model.response_tokens).over_steps(1).sample(np.random.default_rng(0), 100_000, limit)
    print(summary_table({"trace": Summary.of(recorded, cap), "fitted": Summary.of(drawn, cap)}))


def _document(source: Path, data: dict):
    from rlsim.yamlsource import parse_yaml

    return parse_yaml(yaml.safe_dump(data), str(source))
