"""`rlsim workload show SPEC`: draw a workload's lengths through the simulator's group sampler, print their
statistics and write a histogram page."""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
from pydantic import RootModel

from rlsim.cli.exitcodes import OK
from rlsim.config.schema import Algorithm, Scenario
from rlsim.config.workload import FixedLength, LengthModel, Workload
from rlsim.fields import MAX_COUNT
from rlsim.loading import validate_document
from rlsim.workload.fitting import Summary
from rlsim.yamlsource import read_yaml


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
    limits = [f"responses capped at {cap}"] if cap < MAX_COUNT else []
    if algorithm.max_sequence_tokens is not None:
        limits.append(f"prompt + response at {algorithm.model_len}")
    print(f"{title}: {len(groups)} groups, {len(responses)} samples drawn at step {args.step}"
          + (f" ({', '.join(limits)})" if limits else ""))
    print(summary_table(stats))
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
    algorithm = Algorithm(name="grpo", prompts_per_step=1, samples_per_prompt=samples, max_prompt_tokens=MAX_COUNT,
                          max_response_tokens=cap if cap is not None else MAX_COUNT)
    return workload, algorithm, title


class _LengthFile(RootModel[LengthModel]):
    """A file holding one length model."""


def summary_table(stats: dict[str, Summary]) -> str:
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
