"""A plan as one offline HTML page (plotly.js inlined): per GPU budget, the ranking and why the winner wins as
`rlsim plan` prints them, and where each candidate's GPU-time went."""
from __future__ import annotations

import html

from rlsim.plan.planner import Plan
from rlsim.plan.text import budget_summary, plan_text
from rlsim.report.html import figure_div, page
from rlsim.report.plan_figures import gpu_time_figure


def plan_html(plans: list[Plan]) -> str:
    first = plans[0]
    budgets = ", ".join(str(p.gpus) for p in plans)
    title = f"rlsim plan: {first.workload} on {budgets} × {first.gpu}"
    body = [f"<h1>{html.escape(title)}</h1>"]
    if len(plans) > 1:
        body += ['<section id="budgets"><h2>The winner of each budget</h2>',
                 f'<pre class="plan">{html.escape(budget_summary(plans))}</pre></section>']
    for result in plans:
        body += [f'<section id="plan-{result.gpus}"><h2>{html.escape(result.cluster)}</h2>',
                 f'<pre class="plan">{html.escape(plan_text(result))}</pre>',
                 figure_div(gpu_time_figure(result), f"gpu-time-{result.gpus}"), "</section>"]
    # The ranking's rows are wider than a page: they scroll inside their box, not the page.
    body.insert(0, "<style>pre.plan { overflow-x: auto; font-size: 0.85em; }</style>")
    return page(title, body)
