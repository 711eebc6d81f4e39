"""The validation manifest (scenarios/validation/cases.yaml): each case's scenario, how it is run, the figures its
source publishes, and which pairs of figures form a paired comparison (who wins, by how much).

Bad input raises ScenarioError naming the manifest, the line and the field, as scenario files do.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from rlsim.config import load_scenario
from rlsim.errors import Problem, ScenarioError
from rlsim.fields import Frozen, NonNegativeInt, PositiveFloat, PositiveInt
from rlsim.loading import closest, validate_document
from rlsim.shipped import shipped
from rlsim.validation.figures import check_name, kind_of, valid_names
from rlsim.yamlsource import YamlDocument, dotted, read_yaml

# The manifest shipped with rlsim (in a wheel or a source checkout); `rlsim validate --cases-file FILE` reads another.
DEFAULT_MANIFEST = shipped("validation/cases.yaml", "scenarios/validation/cases.yaml")
CASE_NAME = r"^[a-z0-9][a-z0-9.\-]*$"
# Cases measure two steps after the fill (rlsim.config.run_length): published figures are long-run means.
MEASURED_STEPS = 2
OVERRIDE_PREFIX = "--set "  # how the scenario loader names a problem in an override (rlsim.yamlsource)


# Whether a case's response lengths are the timed run's own (published, or irrelevant to its figures) or borrowed from
# a trace of a similar run: the error of a borrowed-input figure mixes the model's error with the trace's.
Inputs = Literal["known", "borrowed"]


class PublishedFigure(Frozen):
    figure: str = Field(description="what is compared, e.g. step_s, stage_s.gen, tokens_per_s")
    published: PositiveFloat | None = Field(
        description="the value the source reports, in the figure's unit; null when the source publishes only a "
        "speed-up, given by a pair's published_speedup")
    note: str = ""

    @field_validator("figure")
    @classmethod
    def _known(cls, name: str) -> str:
        why = check_name(name)
        if why:
            raise ValueError(f"{why}; figures: {valid_names()}")
        return name


class Case(Frozen):
    name: str = Field(pattern=CASE_NAME)
    group: str = Field(pattern=r"^V[0-9]+$", description="the section of shared/validation/cases.md, e.g. V1")
    inputs: Inputs = Field(
        description="known: the source publishes the run's response lengths, or its figures do not depend on them; "
        "borrowed: the lengths come from a trace of a similar run")
    title: str
    source: str
    scenario: str = Field(description="scenario file, relative to the manifest")
    set: dict[str, Any] = Field(default_factory=dict, description="dotted-path overrides, as `rlsim run --set`")
    steps: PositiveInt | None = Field(None, description="run.steps for this case; default: the scenario's")
    warmup_steps: NonNegativeInt | None = Field(None, description="run.warmup_steps; default: the scenario's")
    figures: list[PublishedFigure] = Field(min_length=1)

    @property
    def overrides(self) -> dict[str, Any]:
        run = {f"run.{k}": v for k, v in (("steps", self.steps), ("warmup_steps", self.warmup_steps)) if v is not None}
        return {**self.set, **run}


class Pair(Frozen):
    """Two published figures compared as a speed-up: contender over baseline (inverted for times)."""

    name: str = Field(pattern=CASE_NAME)
    what: str
    baseline: str = Field(description="CASE:FIGURE")
    contender: str = Field(description="CASE:FIGURE")
    published_speedup: PositiveFloat | None = Field(
        None, description="the speed-up the source reports, when it does not publish both figures")


class Manifest(Frozen):
    cases: list[Case] = Field(min_length=1)
    pairs: list[Pair] = Field(default_factory=list)

    @model_validator(mode="after")
    def _unique_names(self) -> Manifest:
        for kind, names in (("case", [c.name for c in self.cases]), ("pair", [p.name for p in self.pairs])):
            repeated = sorted({n for n in names if names.count(n) > 1})
            if repeated:
                raise ValueError(f"{kind} names must be unique; repeated: {', '.join(repeated)}")
        return self

    def case(self, name: str) -> Case:
        return next(c for c in self.cases if c.name == name)


def load_manifest(path: str | Path = DEFAULT_MANIFEST) -> Manifest:
    """Read and check a manifest: figures known, scenario files present, every pair naming published figures."""
    doc = read_yaml(path)
    manifest = validate_document(Manifest, doc)
    base = Path(path).resolve().parent
    problems = _missing_scenarios(manifest, doc, base) + _bad_pairs(manifest, doc)
    if not problems:
        problems = _bad_scenarios(manifest, doc, base)
    if problems:
        raise ScenarioError(problems)
    return manifest


def scenario_path(manifest_path: str | Path, case: Case) -> Path:
    return Path(manifest_path).resolve().parent / case.scenario


def _missing_scenarios(manifest: Manifest, doc: YamlDocument, base: Path) -> list[Problem]:
    return [doc.problem(("cases", i, "scenario"), f"no scenario file {case.scenario!r} next to the manifest",
                        value=case.scenario, valid="a path relative to the manifest's folder")
            for i, case in enumerate(manifest.cases) if not (base / case.scenario).is_file()]


def _bad_scenarios(manifest: Manifest, doc: YamlDocument, base: Path) -> list[Problem]:
    """Each case's scenario with its overrides, validated now so a bad override is reported at its line in the
    manifest (the scenario loader would name it `--set PATH=VALUE`, as if it came from the command line)."""
    problems = []
    for i, case in enumerate(manifest.cases):
        try:
            load_scenario(base / case.scenario, case.overrides)
        except ScenarioError as err:
            problems += [_in_manifest(replace(p, message=f"{p.message} (validation case {case.name!r})"), doc, i)
                         for p in err.problems]
    return problems


def _in_manifest(problem: Problem, doc: YamlDocument, index: int) -> Problem:
    file = problem.file or ""
    if not file.startswith(OVERRIDE_PREFIX):
        return problem
    key = file[len(OVERRIDE_PREFIX):].partition("=")[0]
    field = ("cases", index, key.removeprefix("run.")) if key in ("run.steps", "run.warmup_steps") else (
        "cases", index, "set", key)
    return replace(problem, file=doc.file, line=doc.line_of(field), path=f"{dotted(field)}: {problem.path}".rstrip(": "))


def _bad_pairs(manifest: Manifest, doc: YamlDocument) -> list[Problem]:
    published = {(c.name, f.figure): f.published for c in manifest.cases for f in c.figures}
    cases = [c.name for c in manifest.cases]
    problems = []
    for i, pair in enumerate(manifest.pairs):
        sides = [tuple(getattr(pair, side).partition(":")[::2]) for side in ("baseline", "contender")]
        if all(s in published for s in sides):
            if kind_of(sides[0][1]).higher_is_better != kind_of(sides[1][1]).higher_is_better:
                problems.append(doc.problem(("pairs", i), "a pair compares two figures of the same direction",
                                            valid="two times, or two throughputs"))
            if pair.published_speedup is None and None in (published[sides[0]], published[sides[1]]):
                problems.append(doc.problem(("pairs", i), "a figure of this pair has no published value, so the "
                                            "pair needs published_speedup", valid="published_speedup: <ratio>"))
        for side in ("baseline", "contender"):
            case, _, figure = getattr(pair, side).partition(":")
            if (case, figure) in published:
                continue
            if case not in cases:
                problems.append(doc.problem(("pairs", i, side), f"no case named {case!r}", value=getattr(pair, side),
                                            suggestion=closest(case, cases), valid="CASE:FIGURE of a case above"))
            else:
                figures = [f.figure for f in manifest.case(case).figures]
                problems.append(doc.problem(("pairs", i, side), f"case {case!r} publishes no figure {figure!r}",
                                            value=getattr(pair, side), suggestion=closest(figure, figures),
                                            valid=", ".join(figures)))
    return problems
