"""Errors of simulated against published figures, the paired comparisons, the headline bounds, and their text/JSON.

Error is (simulated − published) / published. The median and worst |error| are taken over the step-time and
stage-time figures (the figures the validation issue bounds); throughputs and shares are shown with their errors too.
A paired comparison's speed-up is contender over baseline for figures where larger is better, baseline over contender
for times; its winner is the side with the better figure.
"""
from __future__ import annotations

import math
import statistics
from dataclasses import asdict, dataclass, field

from rlsim.report.terminal import text_table
from rlsim.validation.cases import Manifest
from rlsim.validation.figures import kind_of

# The bounds the validation issue sets (issue 9, "Acceptance"): targets, not tuned to the results.
MEDIAN_BOUND_PCT = 15.0
WORST_BOUND_PCT = 35.0
RATIO_BOUND_PCT = 20.0
# A published speed-up this close to 1 is a tie (several are read off plots, ±10 %): either winner is right, and only the
# ratio bound applies.
TIE_BAND = 0.05
# A simulated speed-up this close to 1 picks no winner, so it is wrong against a published one: a change that leaves the
# simulation where it was must not count as predicting a gain by a rounding error. Tighter than the published band
# because paired cases share their seed, hence their sampled lengths, so a 1 % difference is the change's own effect.
SIMULATED_TIE_BAND = 0.01


@dataclass(frozen=True)
class FigureRow:
    case: str
    group: str
    figure: str
    unit: str
    published: float | None  # None: the source publishes only a speed-up this figure is part of
    simulated: float
    is_time: bool
    note: str = ""

    @property
    def error_pct(self) -> float | None:
        if self.published is None:
            return None
        return 100.0 * (self.simulated - self.published) / self.published


@dataclass(frozen=True)
class PairRow:
    name: str
    what: str
    baseline: str
    contender: str
    published_speedup: float
    simulated_speedup: float

    @property
    def published_winner(self) -> str:
        return _winner(self.published_speedup, TIE_BAND)

    @property
    def simulated_winner(self) -> str:
        return _winner(self.simulated_speedup, SIMULATED_TIE_BAND)

    @property
    def ratio_error_pct(self) -> float:
        return 100.0 * (self.simulated_speedup - self.published_speedup) / self.published_speedup

    @property
    def winner_correct(self) -> bool:
        if self.published_winner == "tie":
            return abs(self.ratio_error_pct) <= RATIO_BOUND_PCT
        return self.published_winner == self.simulated_winner


def _winner(speedup: float, band: float) -> str:
    return "tie" if abs(speedup - 1.0) < band else ("contender" if speedup > 1 else "baseline")


def _speedup(baseline: float, contender: float, higher_is_better: bool) -> float:
    if baseline <= 0 or contender <= 0:
        return math.nan
    return contender / baseline if higher_is_better else baseline / contender


def compare_pairs(manifest: Manifest, rows: tuple[FigureRow, ...]) -> tuple[PairRow, ...]:
    """The pairs whose two figures were both run."""
    by_key = {(r.case, r.figure): r for r in rows}
    pairs = []
    for pair in manifest.pairs:
        base = by_key.get(tuple(pair.baseline.split(":", 1)))
        cont = by_key.get(tuple(pair.contender.split(":", 1)))
        if base is None or cont is None:
            continue
        high = kind_of(base.figure).higher_is_better
        published = pair.published_speedup
        if published is None:
            assert base.published is not None and cont.published is not None, "load_manifest checks it"
            published = _speedup(base.published, cont.published, high)
        pairs.append(PairRow(pair.name, pair.what, pair.baseline, pair.contender, published,
                             _speedup(base.simulated, cont.simulated, high)))
    return tuple(pairs)


@dataclass(frozen=True)
class GroupErrors:
    """The step- and stage-time errors of one group of cases (V1, V2, …): where the median and the worst come from."""

    group: str
    time_figures: int
    median_abs_error_pct: float
    worst_abs_error_pct: float


@dataclass(frozen=True)
class Validation:
    rows: tuple[FigureRow, ...]
    pairs: tuple[PairRow, ...]
    host_seconds: dict[str, float] = field(default_factory=dict)  # per case; not part of the results

    @property
    def time_errors(self) -> list[float]:
        return [abs(r.error_pct) for r in self.rows if r.is_time and r.error_pct is not None]

    @property
    def median_abs_error_pct(self) -> float:
        return statistics.median(self.time_errors) if self.time_errors else 0.0

    @property
    def worst_abs_error_pct(self) -> float:
        return max(self.time_errors, default=0.0)

    @property
    def by_group(self) -> tuple[GroupErrors, ...]:
        """Median and worst |error| of each group's step and stage times, groups in the order of the rows."""
        errors: dict[str, list[float]] = {}
        for r in self.rows:
            if r.is_time and r.error_pct is not None:
                errors.setdefault(r.group, []).append(abs(r.error_pct))
        return tuple(GroupErrors(g, len(e), statistics.median(e), max(e)) for g, e in errors.items())

    @property
    def winners_correct(self) -> int:
        return sum(p.winner_correct for p in self.pairs)

    @property
    def ratios_within(self) -> int:
        return sum(abs(p.ratio_error_pct) <= RATIO_BOUND_PCT for p in self.pairs)

    @property
    def median_ratio_error_pct(self) -> float:
        """Median |error| of the paired speed-ups: how far off rlsim is on one setup against another."""
        return statistics.median(abs(p.ratio_error_pct) for p in self.pairs) if self.pairs else 0.0

    def misses(self) -> list[str]:
        """Each bound the results miss, as a user reads it ('median 27.2% > 15%'); empty when all hold."""
        missed = []
        if self.median_abs_error_pct > MEDIAN_BOUND_PCT:
            missed.append(f"median {self.median_abs_error_pct:.1f}% > {MEDIAN_BOUND_PCT:g}%")
        if self.worst_abs_error_pct > WORST_BOUND_PCT:
            missed.append(f"worst {self.worst_abs_error_pct:.1f}% > {WORST_BOUND_PCT:g}%")
        if self.winners_correct < len(self.pairs):
            missed.append(f"winners right {self.winners_correct}/{len(self.pairs)} < all")
        if self.ratios_within < len(self.pairs):
            missed.append(f"speed-ups within {RATIO_BOUND_PCT:g}% {self.ratios_within}/{len(self.pairs)} < all")
        return missed

    def verdict(self) -> str:
        missed = self.misses()
        return f"misses: {'; '.join(missed)}" if missed else "meets every bound"

    def as_dict(self) -> dict:
        """What `rlsim validate --json` prints (host timing left out, so equal inputs give equal output)."""
        return {
            "rows": [{**asdict(r), "error_pct": r.error_pct} for r in self.rows],
            "pairs": [{**asdict(p), "published_winner": p.published_winner, "simulated_winner": p.simulated_winner,
                       "winner_correct": p.winner_correct, "ratio_error_pct": p.ratio_error_pct} for p in self.pairs],
            "median_abs_error_pct": self.median_abs_error_pct,
            "worst_abs_error_pct": self.worst_abs_error_pct,
            "time_figures": len(self.time_errors),
            "groups": [asdict(g) for g in self.by_group],
            "winners_correct": self.winners_correct,
            "winners_total": len(self.pairs),
            "ratios_within_bound": self.ratios_within,
            "median_ratio_error_pct": self.median_ratio_error_pct,
            "verdict": self.verdict(),
            "bounds_pct": {"median": MEDIAN_BOUND_PCT, "worst": WORST_BOUND_PCT, "ratio": RATIO_BOUND_PCT},
        }

    def text(self) -> str:
        return "\n".join([*figure_table(self.rows), "", *pair_table(self.pairs), "", *group_table(self.by_group), "",
                          summary_line(self), self.verdict()])


def _number(value: float) -> str:
    return f"{value:,.3g}" if abs(value) < 100 else f"{value:,.0f}"


def figure_table(rows: tuple[FigureRow, ...]) -> list[str]:
    cells = [(r.case, f"{r.figure} {r.unit}", "–" if r.published is None else _number(r.published), _number(r.simulated),
              "–" if r.error_pct is None else f"{r.error_pct:+.1f}%", "" if r.is_time else "not bounded")
             for r in rows]
    return [text_table(("case", "figure", "published", "simulated", "error", ""), cells, left=(0, 1, 5))]


def pair_table(pairs: tuple[PairRow, ...]) -> list[str]:
    cells = [(p.name, f"{p.published_speedup:.2f}×", f"{p.simulated_speedup:.2f}×", f"{p.ratio_error_pct:+.1f}%",
              f"{p.published_winner} / {p.simulated_winner} {'ok' if p.winner_correct else 'WRONG'}") for p in pairs]
    return [text_table(("paired comparison", "published", "simulated", "ratio err", "winner (published / simulated)"),
                       cells, left=(0, 4))]


def group_table(groups: tuple[GroupErrors, ...]) -> list[str]:
    cells = [(g.group, g.time_figures, f"{g.median_abs_error_pct:.1f}%", f"{g.worst_abs_error_pct:.1f}%") for g in groups]
    return [text_table(("group", "step/stage times", "median |error|", "worst |error|"), cells)]


def summary_line(v: Validation) -> str:
    return (f"median |error| {v.median_abs_error_pct:.1f}% (bound {MEDIAN_BOUND_PCT:g}%), worst "
            f"{v.worst_abs_error_pct:.1f}% (bound {WORST_BOUND_PCT:g}%) over {len(v.time_errors)} step/stage-time "
            f"figures; winners right {v.winners_correct}/{len(v.pairs)}; speed-ups within {RATIO_BOUND_PCT:g}% "
            f"{v.ratios_within}/{len(v.pairs)}")
