"""docs/validation.md: the hand-written introduction (kept as written) followed by the generated table, the paired
comparisons, the headline, and a link to the parity plot written beside it."""
from __future__ import annotations

from pathlib import Path

from rlsim.validation.cases import Manifest
from rlsim.validation.figures import FIGURE_KINDS, split_name
from rlsim.validation.parity import parity_svg
from rlsim.validation.table import (
    MEDIAN_BOUND_PCT,
    RATIO_BOUND_PCT,
    WORST_BOUND_PCT,
    Validation,
    summary_line,
)

MARKER = "<!-- Everything below is written by `rlsim validate`; edit the text above this line only. -->"
# The README's accuracy sentence sits between these two lines; `rlsim validate` rewrites what is between them.
README_START = "<!-- accuracy: written by `rlsim validate` from its results; do not edit by hand -->"
README_END = "<!-- /accuracy -->"
PARITY_FILE = "validation-parity.svg"


def _cell(value: float) -> str:
    return f"{value:,.3g}" if abs(value) < 100 else f"{value:,.0f}"


def generated_section(validation: Validation, manifest: Manifest) -> str:
    titles = {c.name: c for c in manifest.cases}
    lines = ["## Results", "", summary_line(validation) + ".", "",
             f"Bounds: on step and stage times whose inputs are known (the source publishes the run's response "
             f"lengths, or the figure does not depend on them), median |error| ≤ {MEDIAN_BOUND_PCT:g}% and worst ≤ "
             f"{WORST_BOUND_PCT:g}%; on every pair, the published winner and a speed-up within {RATIO_BOUND_PCT:g}%. "
             "Figures whose cases borrow their lengths from a trace are shown and summarised, not bounded: their "
             "error mixes the model's with the trace's. Figures marked *not a time* (throughputs, shares) are shown "
             "with their errors but left out of the medians.", "",
             "| inputs | step/stage times | median \\|error\\| | worst \\|error\\| |", "|---|---:|---:|---:|",
             *(f"| {c.inputs} | {c.time_figures} | {c.median_abs_error_pct:.1f}% | {c.worst_abs_error_pct:.1f}% |"
               for c in validation.by_inputs), "",
             "| group | step/stage times | median \\|error\\| | worst \\|error\\| |", "|---|---:|---:|---:|",
             *(f"| {g.group} | {g.time_figures} | {g.median_abs_error_pct:.1f}% | {g.worst_abs_error_pct:.1f}% |"
               for g in validation.by_group), "",
             f"![parity plot: simulated against published, log-log]({PARITY_FILE})", "",
             "| group | case | inputs | figure | unit | published | simulated | error |",
             "|---|---|---|---|---|---:|---:|---:|"]
    for r in validation.rows:
        bounded = "" if r.is_time else " (not a time)"
        published = "–" if r.published is None else _cell(r.published)
        error = "–" if r.error_pct is None else f"{r.error_pct:+.1f}%"
        lines.append(f"| {r.group} | {r.case} | {r.inputs} | `{r.figure}`{bounded} | {r.unit} | {published} | "
                     f"{_cell(r.simulated)} | {error} |")
    lines += ["", "### Paired comparisons", "",
              "| comparison | what | published speed-up | simulated | ratio error | winner published / simulated |",
              "|---|---|---:|---:|---:|---|"]
    for p in validation.pairs:
        verdict = "right" if p.winner_correct else "**wrong**"
        lines.append(f"| {p.name} | {p.what} | {p.published_speedup:.2f}× | {p.simulated_speedup:.2f}× | "
                     f"{p.ratio_error_pct:+.1f}% | {p.published_winner} / {p.simulated_winner} ({verdict}) |")
    kinds = dict.fromkeys(split_name(r.figure)[0] for r in validation.rows)
    lines += ["", "### Figures", "", "| figure | unit | better | meaning |", "|---|---|---|---|"]
    for name in kinds:
        kind = FIGURE_KINDS[name]
        shown, meaning = f"`{name}`", kind.meaning
        if kind.arguments:  # a `|` would split the table cell, so the choices are listed in words
            shown, meaning = f"`{name}.<argument>`", f"{meaning}; argument one of {', '.join(kind.arguments)}"
        lines.append(f"| {shown} | {kind.unit} | {'higher' if kind.higher_is_better else 'lower'} | {meaning} |")
    lines += ["", "### Cases", "", "| case | what | source | scenario |", "|---|---|---|---|"]
    for name in dict.fromkeys(r.case for r in validation.rows):
        case = titles[name]
        lines.append(f"| {name} | {case.title} | {case.source} | `scenarios/validation/{case.scenario}` |")
    return "\n".join(lines) + "\n"


def accuracy_sentence(validation: Validation) -> str:
    """What the validation means for a user, in one paragraph of the README's first screen: the measured errors, and
    whether comparisons between setups are more reliable than absolute times (they are when the speed-ups' median
    error is the smaller)."""
    v = validation
    known, borrowed, _ = v.by_inputs
    sentence = (f"**How accurate is it?** Against {known.time_figures} step and stage times published for real RL "
                f"runs whose response lengths the source also publishes ([docs/validation.md](docs/validation.md)), "
                f"rlsim's median error is {known.median_abs_error_pct:.0f} % (worst "
                f"{known.worst_abs_error_pct:.0f} %); against {borrowed.time_figures} more whose lengths had to be "
                f"borrowed from similar runs, {borrowed.median_abs_error_pct:.0f} %. It names the faster of two "
                f"published setups in {v.winners_correct} of {len(v.pairs)} comparisons, with a median error of "
                f"{v.median_ratio_error_pct:.0f} % on the speed-up.")
    if v.median_ratio_error_pct < v.median_abs_error_pct:
        sentence += (" Trust its ratios between setups more than its absolute times: much of the absolute error comes "
                     "from inputs a source does not publish (response lengths above all), which both setups of a "
                     "comparison share.")
    return sentence


def between_markers(text: str, start: str, end: str) -> str | None:
    """What a page holds between two marker lines (a generated part), or None when it has no such part."""
    head, found, rest = text.partition(start)
    body, closed, _ = rest.partition(end)
    return body.strip() if found and closed else None


def rewrite_between_markers(page: Path, start: str, end: str, body: str) -> bool:
    """Put `body` between the page's two marker lines, keeping everything else; False when the page has none."""
    text = page.read_text()
    if between_markers(text, start, end) is None:
        return False
    head, _, rest = text.partition(start)
    page.write_text(f"{head}{start}\n{body}\n{end}{rest.partition(end)[2]}")
    return True


def write_readme_accuracy(validation: Validation, readme: Path) -> bool:
    """Rewrite the accuracy sentence between README_START and README_END; False when the README has no such place."""
    return rewrite_between_markers(readme, README_START, README_END, accuracy_sentence(validation))


def readme_accuracy(readme: Path) -> str | None:
    """The accuracy sentence the README holds now, or None."""
    return between_markers(readme.read_text(), README_START, README_END)


def write_docs(validation: Validation, manifest: Manifest, markdown: Path) -> list[Path]:
    """Rewrite the generated part of `markdown` (creating the file with only the marker if it is new) and the parity
    plot beside it; returns the paths written."""
    intro = "# Validation against published runs\n\n"
    if markdown.exists():
        intro = markdown.read_text().split(MARKER, 1)[0]
    markdown.parent.mkdir(parents=True, exist_ok=True)
    markdown.write_text(intro.rstrip("\n") + "\n\n" + MARKER + "\n\n" + generated_section(validation, manifest))
    svg = markdown.parent / PARITY_FILE
    svg.write_text(parity_svg(validation.rows))
    return [markdown, svg]
