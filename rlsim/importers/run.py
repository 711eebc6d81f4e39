"""Import a run: read the framework's files, map them, and write the scenario once it passes `rlsim check`."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rlsim.errors import Problem, ScenarioError
from rlsim.importers import nemo_rl, verl
from rlsim.importers.common import gpu_profile
from rlsim.importers.mapping import Draft, Reader
from rlsim.importers.writer import render, write_checked


@dataclass(frozen=True)
class Imported:
    out: Path
    draft: Draft


def import_verl(paths: list[Path], gpu: str | None, out: Path) -> Imported:
    """A scenario from verl config YAMLs and/or launch scripts (later files override earlier ones)."""
    if not paths:
        raise ScenarioError(Problem("give a verl config YAML or launch script"))
    settings, module, config_name, notes = verl.read_inputs(paths)
    reader = Reader(settings, verl.RULES, verl.defaults_for(config_name))
    draft = verl.build(reader, module, gpu_profile(gpu), paths[0].resolve().parent)
    return _finish(draft, reader, verl.IGNORED, notes, f"verl: {', '.join(p.name for p in paths)}", out)


def import_nemo_rl(path: Path, gpu: str | None, out: Path) -> Imported:
    """A scenario from a NeMo-RL recipe, its `defaults:` parents merged under it."""
    notes: list[str] = []
    settings = nemo_rl.read_recipe(path, notes)
    reader = Reader(settings, nemo_rl.RULES, nemo_rl.DEFAULTS)
    draft = nemo_rl.build(reader, gpu_profile(gpu), path.resolve().parent)
    return _finish(draft, reader, nemo_rl.IGNORED, notes, f"NeMo-RL: {path.name}", out)


def _finish(draft: Draft, reader: Reader, ignored: tuple[str, ...], notes: list[str], source: str,
            out: Path) -> Imported:
    draft.unmapped, draft.ignored = reader.leftover(ignored)
    draft.notes[:0] = notes
    draft.set("name", out.stem, "the output file's name")
    draft.fields = {"name": draft.fields.pop("name"), **draft.fields}
    text = render(draft, f"Imported by `rlsim import` from {source}. Each field's comment says where it came from.")
    write_checked(text, out)
    return Imported(out=out, draft=draft)
