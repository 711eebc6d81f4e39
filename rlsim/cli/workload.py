"""`rlsim workload fit TRACE --out model.yaml` and `rlsim workload show SPEC`.

fit   fits workload models to a PolyTrace trace (packed lengths, multi-turn log, reward timings, DAPO filter indices, or
      the production parameters JSON) and writes the `workload:` fields as YAML, then prints how the fitted model's
      samples compare with the trace.
show  reads a scenario, a workload file (the fields under `workload:`) or a single length model (a mapping with
      `kind`), draws samples through the simulator's own group sampler, prints mean, p50, p90, p99, max and the
      truncated share of prompt and response lengths, and writes a self-contained histogram page (plotly.js inlined,
      opens offline).
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import yaml
from pydantic import RootModel

from rlsim.cli.exitcodes import OK
from rlsim.config.schema import Algorithm, Scenario
from rlsim.config.workload import FixedLength, LengthModel, Workload
from rlsim.errors import Problem, ScenarioError
from rlsim.loading import validate_document
from rlsim.workload.fitting import Summary, fit_trace
from rlsim.workload.traces import TraceFormatError, read_lengths, trace_format
from rlsim.yamlsource import read_yaml


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("workload", help="fit workload models to traces, and show a workload's lengths",
                                   description=__doc__.split("\n\n", 1)[1] if __doc__ else None,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="workload_command", metavar="COMMAND", required=True)

    fit = commands.add_parser("fit", help="fit a parametric workload model to a trace")
    fit.add_argument("trace", type=Path, help="trace file or folder (PolyTrace formats)")
    fit.add_argument("--out", type=Path, required=True, help="YAML file to write the workload fields to")
    fit.add_argument("--max-response-tokens", type=int, default=None, dest="cap",
                     help="the cap the trace was generated under (default: its longest length, when several hit it)")
    fit.add_argument("--drift", action="store_true", help="fit each recorded step and interpolate between them")
    fit.set_defaults(handler=run_fit)

    show = commands.add_parser("show", help="statistics and a histogram page of a workload's lengths")
    show.add_argument("spec", type=Path, help="scenario, workload or length-model YAML file")
    show.add_argument("--html", type=Path, default=None,
                      help="histogram page to write (default: <SPEC name>-lengths.html in the current directory)")
    show.add_argument("--groups", type=int, default=4096, help="prompt groups to draw (default: 4096)")
    show.add_argument("--step", type=int, default=0, help="policy version to draw at (drifting workloads)")
    show.add_argument("--max-response-tokens", type=int, default=None, dest="cap",
                      help="response cap for a workload or length-model file (a scenario has its own)")
    show.add_argument("--samples-per-prompt", type=int, default=8, help="for a workload or length-model file")
    show.set_defaults(handler=run_show)


# ------------------------------------------------------------------------------------------------ fit


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
    print(_table({"trace": Summary.of(recorded, cap), "fitted": Summary.of(drawn, cap)}))


def _document(source: Path, data: dict):
    from rlsim.yamlsource import parse_yaml

    return parse_yaml(yaml.safe_dump(data), str(source))


# ------------------------------------------------------------------------------------------------ show


def run_show(args: argparse.Namespace) -> int:
    workload, algorithm, title = _load_spec(args.spec, args.cap, args.samples_per_prompt)
    from rlsim.workload.batches import GroupSampler

    sampler = GroupSampler(workload, algorithm, np.random.default_rng(0), np.random.default_rng(1))
    groups = sampler.draw(args.groups, args.step)
    prompts = np.array([g.prompt_tokens for g in groups for _ in g.response_tokens])
    responses = np.array([r for g in groups for r in g.response_tokens])
    truncated = np.array([t for g in groups for t in g.truncated])
    cap = algorithm.max_response_tokens
    stats = {"prompt": Summary.of(prompts), "response": Summary.of(responses)}
    stats["response"] = Summary(**{**stats["response"].as_dict(), "truncated": float(truncated.mean())})
    turns = [t for g in groups for t in (g.turns or ())]
    limits = [f"responses capped at {cap}"] if cap < 1 << 30 else []
    if algorithm.max_sequence_tokens is not None:
        limits.append(f"prompt + response at {algorithm.model_len}")
    print(f"{title}: {len(groups)} groups, {len(responses)} samples drawn at step {args.step}"
          + (f" ({', '.join(limits)})" if limits else ""))
    print(_table(stats))
    if turns:
        tool_s = [u.tool_s for t in turns for u in t[:-1]]
        print(f"multi-turn: {np.mean([len(t) for t in turns]):.2f} turns per trajectory, tool calls "
              f"{np.mean(tool_s):.3f} s mean, {np.percentile(tool_s, 99):.3f} s p99")
    # The current directory, not the spec's: inputs (often in a repo's scenarios/) are not where outputs belong.
    out = args.html or Path(args.spec.stem + "-lengths.html")
    out.write_text(_histogram_page(title, prompts, responses), encoding="utf-8")
    print(f"wrote {out}")
    return OK


def _load_spec(path: Path, cap: int | None, samples: int) -> tuple[Workload, Algorithm, str]:
    """The workload a file describes, and the algorithm limits to draw it under."""
    from rlsim.config import load_scenario
    from rlsim.config.checks import resolve_workload_paths

    doc = read_yaml(path)
    data = doc.data
    if isinstance(data, dict) and "workload" in data and "cluster" in data:
        scenario: Scenario = load_scenario(path)
        algorithm = scenario.algorithm
        if cap is not None:
            algorithm = algorithm.model_copy(update={"max_response_tokens": cap})
        return scenario.workload, algorithm, scenario.name
    if isinstance(data, dict) and "kind" in data:
        model = validate_document(_LengthFile, doc).root
        workload = Workload(prompt_tokens=FixedLength(kind="fixed", tokens=1), response_tokens=model)
        title, at = f"{path.name} ({model.kind})", ("response_tokens",)
    else:
        workload = validate_document(Workload, doc)
        title, at = path.name, ()
    workload = resolve_workload_paths(workload, doc, path.resolve().parent, at=at)
    algorithm = Algorithm(name="grpo", prompts_per_step=1, samples_per_prompt=samples, max_prompt_tokens=1 << 30,
                          max_response_tokens=cap if cap is not None else 1 << 30)
    return workload, algorithm, title


class _LengthFile(RootModel[LengthModel]):
    """A file holding one length model."""


def _table(stats: dict[str, Summary]) -> str:
    lines = [f"{'':<10}{'mean':>10}{'p50':>10}{'p90':>10}{'p99':>10}{'max':>10}{'truncated':>11}"]
    for name, s in stats.items():
        lines.append(f"{name:<10}{s.mean:>10.1f}{s.p50:>10.0f}{s.p90:>10.0f}{s.p99:>10.0f}{s.max:>10.0f}"
                     f"{s.truncated:>10.2%}")
    return "\n".join(lines)


def _histogram_page(title: str, prompts: np.ndarray, responses: np.ndarray) -> str:
    """A page of two histograms. Figures are plain plotly specs; rlsim.report renders them (only it imports plotly)."""
    from rlsim.report.html import figure_div, page

    figures = []
    for name, values in (("response", responses), ("prompt", prompts)):
        figure = {
            "data": [{"type": "histogram", "x": values.tolist(), "nbinsx": 120, "name": f"{name} tokens",
                      "marker": {"color": "#4C78A8" if name == "response" else "#F58518"}}],
            "layout": {"title": {"text": f"{name} length (tokens): mean {values.mean():,.0f}, "
                                         f"p99 {np.percentile(values, 99):,.0f}"},
                       "xaxis": {"title": {"text": "tokens"}}, "yaxis": {"title": {"text": "samples"}},
                       "bargap": 0.02, "height": 420},
        }
        figures.append(figure_div(figure, f"{name}-histogram"))
    return page(f"{title}: lengths", [f"<h1>{title}</h1>", *figures])
