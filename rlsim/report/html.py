"""Self-contained HTML: one run's report, and the page frame `rlsim compare` shares. plotly.js is embedded once per
page, so the file opens offline; every figure after it only carries its data.

Numbers in the summary tables carry `data-key` (a JSON pointer into metrics.json) and `data-value` (the exact value),
so a test, or a reader's script, can check the page against metrics.json.
"""
from __future__ import annotations

import html
from collections.abc import Iterable

import plotly.graph_objects as go
import plotly.io as pio
from plotly.offline import get_plotlyjs

from rlsim.config.schedule_kind import schedule_kind
from rlsim.config.schema import Scenario
from rlsim.events import LABELS
from rlsim.metrics.labels import CATEGORY_OF
from rlsim.report.colors import LABEL_COLORS
from rlsim.report.figures import FIGURES, RunData
from rlsim.report.headline import format_value, lookup, shown

STYLE = """
body { font-family: system-ui, -apple-system, 'Segoe UI', sans-serif; margin: 24px auto; max-width: 1400px;
       color: #222; padding: 0 16px; }
h1 { font-size: 1.6em; margin-bottom: 4px; } h2 { font-size: 1.2em; margin-top: 32px; border-bottom: 1px solid #ddd; }
p.context { color: #555; margin-top: 0; }
table { border-collapse: collapse; font-size: 0.9em; margin: 8px 0; }
th, td { padding: 3px 10px; border-bottom: 1px solid #eee; text-align: right; }
th:first-child, td:first-child { text-align: left; }
.tables { display: flex; gap: 40px; flex-wrap: wrap; align-items: flex-start; }
.tables > div { min-width: 0; max-width: 100%; }
.scroll { overflow-x: auto; max-width: 100%; }
.swatch { display: inline-block; width: 10px; height: 10px; margin-right: 6px; border-radius: 2px; }
.better { color: #1a7f37; } .worse { color: #b42318; }
.note { color: #666; font-size: 0.85em; max-width: 1000px; }
"""

SECTIONS = (
    ("timeline", "Timeline of engines and training ranks",
     "One row per GPU group (an engine's TP group, a training rank's block, or both when colocated); "
     "every second of every GPU carries one label of the idle taxonomy. Zoom with the mouse."),
    ("gpu_time", "Where the GPU-seconds went", "Per pool, stacked by label; the totals are the tables above."),
    ("steps", "Step time by verl stage", "Seconds per stage per RL step, as verl names its timers (timing_s/…)."),
    ("lengths", "Response lengths", "Tokens generated per sequence; dropped ones were cut by a named policy."),
    ("engines", "Rollout engines: KV cache and queues",
     "From the samples each engine records whenever its batch or queue changes, averaged over equal time bins "
     "(see docs/metrics.md)."),
    ("staleness", "Staleness", "Policy versions between a sequence's first token and the update that trained it."),
)


def _cell(metrics: dict, path: tuple[str, ...], text: str) -> str:
    value = lookup(metrics, path)
    key = "/" + "/".join(path)
    return f'<td data-key="{html.escape(key)}" data-value="{"null" if value is None else repr(value)}">{text}</td>'


def headline_table(metrics: dict) -> str:
    rows = "".join(f"<tr><td>{html.escape(h.title)}</td>"
                   f"{_cell(metrics, h.path, format_value(lookup(metrics, h.path), h.unit))}</tr>" for h in shown(metrics))
    return f'<table id="headline"><tr><th>figure</th><th>value</th></tr>{rows}</table>'


def gpu_time_table(metrics: dict) -> str:
    pools = list(metrics["pools"])
    total = sum(metrics["gpu_seconds_by_label"].values()) or 1.0
    head = "<tr><th>label</th><th>kind</th><th>GPU-seconds</th><th>share</th>" + "".join(
        f"<th>{html.escape(p)}</th>" for p in pools) + "</tr>"
    rows = []
    for label in LABELS:
        seconds = metrics["gpu_seconds_by_label"][label]
        if not seconds:
            continue
        swatch = f'<span class="swatch" style="background:{LABEL_COLORS[label]}"></span>'
        cells = [f"<td>{swatch}{label}</td><td>{CATEGORY_OF[label]}</td>",
                 _cell(metrics, ("gpu_seconds_by_label", label), f"{seconds:,.1f}"), f"<td>{seconds / total:.1%}</td>"]
        cells += [_cell(metrics, ("pools", p, "gpu_seconds_by_label", label),
                        f"{metrics['pools'][p]['gpu_seconds_by_label'][label]:,.1f}") for p in pools]
        rows.append("<tr>" + "".join(cells) + "</tr>")
    total_row = "<tr><th>total</th><th></th>" + f"<th>{total:,.1f}</th><th>100%</th>" + "".join(
        f"<th>{sum(metrics['pools'][p]['gpu_seconds_by_label'].values()):,.1f}</th>" for p in pools) + "</tr>"
    return f'<table id="gpu-seconds">{head}{"".join(rows)}{total_row}</table>'


def goodput_table(metrics: dict) -> str:
    """With run.horizon: where the horizon's GPU-hours went besides kept steps, and the closed form beside the sample
    (docs/metrics.md, "Goodput"); empty without one."""
    result = metrics.get("goodput")
    if result is None:
        return ""
    rows: list[tuple[str, tuple[str, ...], str]] = [("horizon", ("horizon_s",), f"{result['horizon_s'] / 86400:,.4g} days"),
            ("steps kept", ("steps",), f"{result['steps']:,}"),
            ("failures sampled", ("failures",), f"{result['failures']:,}"),
            ("failures expected", ("expected_failures",), f"{result['expected_failures']:,.1f}"),
            ("share on kept steps", ("fraction",), f"{result['fraction']:.1%}")]
    rows += [(f"lost: {cause.replace('_', ' ')}", ("gpu_hours_lost", cause), f"{share:.2%}")
             for cause, share in result["gpu_hours_lost"].items()]
    form = result["closed_form"]
    if form["expected_fraction"] is not None:
        rows.append(("share on kept steps, closed form", ("closed_form", "expected_fraction"),
                     f"{form['expected_fraction']:.1%}"))
    if form["young_daly_save_freq"] is not None:
        rows.append(("Young's save_freq", ("closed_form", "young_daly_save_freq"), f"{form['young_daly_save_freq']:,}"))
    cells = "".join(f"<tr><td>{html.escape(title)}</td>{_cell(metrics, ('goodput', *path), text)}</tr>"
                    for title, path, text in rows)
    return f'<table id="goodput"><tr><th>over the horizon</th><th>value</th></tr>{cells}</table>'


# Rows of the per-agent table (a multi-agent run): (title, path in an agent's metrics, format).
AGENT_ROWS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("model", ("model",), "{}"), ("GPUs", ("gpus",), "{:,}"), ("share of the calls", ("call_share",), "{:.0%}"),
    ("response tokens generated", ("generated_tokens",), "{:,}"),
    ("trained calls per step", ("trained_samples_per_step",), "{:,.0f}"),
    ("trained tokens/s", ("tokens_per_s",), "{:,.1f}"),
    *((f"{stage} s (mean)", ("stages_s", stage), "{:,.2f}") for stage in
      ("gen", "old_log_prob", "ref", "adv", "update_actor", "weight_sync")),
    ("step done after, s", ("busy_until_s",), "{:,.2f}"), ("GPU-time busy", ("utilisation", "busy"), "{:.1%}"),
    ("MFU while generating", ("mfu", "generation"), "{:.1%}"), ("MFU in training", ("mfu", "training"), "{:.1%}"),
    ("KV cache in use while generating", ("kv_occupancy", "mean"), "{:.1%}"),
    *((f"GPU-time {label}", ("label_shares", label), "{:.1%}") for label in ("starved", "tail", "barrier")),
)


def agents_table(metrics: dict) -> str:
    """A multi-agent run's agents side by side (docs/metrics.md, "Agents"); empty for one policy."""
    agents = metrics.get("agents")
    if not agents:
        return ""
    head = "<tr><th>per agent</th>" + "".join(f"<th>{html.escape(name)}</th>" for name in agents) + "</tr>"
    rows = []
    for title, path, form in AGENT_ROWS:
        cells = [_cell(metrics, ("agents", name, *path), html.escape(form.format(lookup(agent, path))))
                 for name, agent in agents.items()]
        rows.append(f"<tr><td>{html.escape(title)}</td>{''.join(cells)}</tr>")
    return f'<table id="agents">{head}{"".join(rows)}</table>'


def figure_div(fig: go.Figure, div_id: str) -> str:
    return pio.to_html(fig, include_plotlyjs=False, full_html=False, div_id=div_id,
                       config={"displaylogo": False, "responsive": True})


def page(title: str, body: Iterable[str]) -> str:
    """A complete HTML document with plotly.js inlined once, before any figure."""
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>{html.escape(title)}</title><style>{STYLE}</style>"
            f"<script type=\"text/javascript\">{get_plotlyjs()}</script></head><body>"
            + "\n".join(body) + "</body></html>\n")


def scenario_context(scenario: Scenario) -> str:
    placement, algorithm = scenario.placement, scenario.algorithm
    pools = ", ".join(f"{p.name}: {p.gpus} × {p.gpu}" for p in scenario.cluster.pools)
    schedule = scenario.schedule.mode + (f" (η = {scenario.schedule.max_staleness:g})"
                                         if schedule_kind(scenario.schedule.mode).takes_max_staleness else "")
    return (f"{scenario.model.name}, {algorithm.name.upper()} {algorithm.prompts_per_step} prompts × "
            f"{algorithm.samples_per_prompt}; {placement.mode} on {pools}; rollout {placement.rollout.gpus} GPUs "
            f"(tp {placement.rollout.tp}); {schedule} schedule; {scenario.run.steps} steps "
            f"({scenario.run.warmup_steps} warm-up); seed {scenario.seed}"
            + (f"; agents called in turn: {' → '.join(scenario.agents.turn_order)}" if scenario.agents else ""))


def run_report_html(data: RunData, scenario: Scenario) -> str:
    metrics = data.metrics
    body = [f"<h1>{html.escape(scenario.name)}</h1>",
            f'<p class="context">{html.escape(scenario_context(scenario))}</p>',
            f'<p class="note">{html.escape(scenario.description)}</p>' if scenario.description else "",
            '<section id="summary"><h2>Summary</h2><div class="tables">', headline_table(metrics),
            gpu_time_table(metrics), goodput_table(metrics), agents_table(metrics), "</div></section>"]
    for name, title, note in SECTIONS:
        body += [f'<section id="{name}"><h2>{html.escape(title)}</h2><p class="note">{html.escape(note)}</p>',
                 figure_div(FIGURES[name](data), f"fig-{name}"), "</section>"]
    body.append('<p class="note">Step time, throughput and cost are over the measured steps (after the warm-up); '
                "GPU-seconds, utilisation and MFU over the whole run. Formulas: docs/metrics.md.</p>")
    return page(f"rlsim: {scenario.name}", body)


# For notebook output: the page's styles, scoped to the card so they leave the notebook's own look alone.
CARD_STYLE = """
.rlsim-card { font-family: system-ui, -apple-system, 'Segoe UI', sans-serif; color: #222; }
.rlsim-card p.context { color: #555; margin-top: 0; }
.rlsim-card table { border-collapse: collapse; font-size: 0.9em; margin: 8px 0; }
.rlsim-card th, .rlsim-card td { padding: 3px 10px; border-bottom: 1px solid #eee; text-align: right; }
.rlsim-card th:first-child, .rlsim-card td:first-child { text-align: left; }
.rlsim-card .tables { display: flex; gap: 40px; flex-wrap: wrap; align-items: flex-start; }
.rlsim-card .swatch { display: inline-block; width: 10px; height: 10px; margin-right: 6px; border-radius: 2px; }
.rlsim-card .better { color: #1a7f37; } .rlsim-card .worse { color: #b42318; }
"""


def card(body: str) -> str:
    """HTML for a notebook cell's output: no plotly.js (figures are displayed on their own)."""
    return f'<div class="rlsim-card"><style>{CARD_STYLE}</style>{body}</div>'


def result_card_html(data: RunData, scenario: Scenario) -> str:
    """A notebook's view of a result: the context line, a bar of GPU-time shares and the summary tables."""
    seconds = data.metrics["gpu_seconds_by_label"]
    total = sum(seconds.values()) or 1.0
    shares = "".join(
        f'<div title="{label} {seconds[label] / total:.1%}" style="width:{100 * seconds[label] / total:.3f}%;'
        f'background:{LABEL_COLORS[label]}"></div>' for label in LABELS if seconds[label] > 0)
    return card(f"<h3>{html.escape(scenario.name)}</h3><p class=\"context\">{html.escape(scenario_context(scenario))}</p>"
                '<div style="display:flex;height:14px;width:100%;max-width:900px;border-radius:3px;overflow:hidden">'
                f"{shares}</div>"
                f'<div class="tables">{headline_table(data.metrics)}{gpu_time_table(data.metrics)}</div>')
