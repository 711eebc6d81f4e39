"""Fields every importer fills the same way: the model from a Hugging Face id or a local config.json, the GPU
profile, and the workload the frameworks' files do not describe."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from rlsim.errors import Problem, ScenarioError, UnknownName
from rlsim.hardware import HardwareCatalog
from rlsim.importers.mapping import Draft, Reader
from rlsim.models import ModelCatalog
from rlsim.models.hf_config import architecture_from_config, config_file

# Responses of RL math runs spread about as the main component of PolyTrace's verl DAPO fit (σ 0.9, as the V3
# validation scenarios assume); a prompt spreads less. Medians are a quarter of the caps: placeholders to replace.
PLACEHOLDER_SIGMA = {"prompt_tokens": 0.5, "response_tokens": 0.9}


def set_model_field(draft: Draft, field: str, value: Any, origin: str) -> None:
    """`model.<field>` beside the model's name: the `model: <name>` shorthand becomes `model: {name: ...}` first."""
    if "model" in draft.fields:
        name, name_from = draft.fields.pop("model")
        draft.set("model.name", name, name_from)
    draft.set(f"model.{field}", value, origin)


def set_model(draft: Draft, reader: Reader, key: str, base_dir: Path) -> None:
    """`model:` from the framework's model path: a catalog name or Hugging Face id, a local folder whose name is a
    catalog model, or a local config.json (checked now, so an unsupported one fails here, at its key)."""
    written, origin = reader.text(key)
    catalog = ModelCatalog.load()
    for candidate in (written, Path(written.rstrip("/")).name, *_hub_cache_id(written)):
        if candidate in catalog:
            draft.set("model", catalog.canonical(candidate), origin)
            return
    local = config_file(written, base_dir)
    if local.is_file():
        try:
            architecture_from_config(local)
        except ScenarioError as err:
            raise ScenarioError([reader.problem(key, f"the model's config.json ({local}) cannot be read by rlsim"),
                                 *err.problems]) from None
        draft.set("model", str(local.resolve()), origin)
        return
    try:
        catalog.canonical(written)
    except UnknownName as err:
        raise ScenarioError(reader.problem(
            key, f"model {written!r} is neither in rlsim's catalog nor a local folder with a config.json",
            suggestion=err.suggestion, valid="a catalog name or Hugging Face id (rlsim/models/catalog.yaml), or the "
            "path of a model folder holding config.json")) from None


def _hub_cache_id(path: str) -> list[str]:
    """The Hugging Face id of a path inside the hub's cache, `…/models--Qwen--Qwen2-7B-Instruct/snapshots/<hash>` ->
    `Qwen/Qwen2-7B-Instruct` (runs often point model.path at the cache), else nothing."""
    for part in reversed(Path(path).parts):
        if part.startswith("models--") and part.count("--") >= 2:
            return [part.removeprefix("models--").replace("--", "/", 1)]
    return []


def gpu_profile(name: str | None) -> str:
    """The GPU profile the user named with --gpu (the frameworks' files never say which GPU ran)."""
    known = HardwareCatalog.load().gpu_names()
    if name is None:
        raise ScenarioError(Problem("the framework's files do not say which GPU the run used: give --gpu PROFILE",
                                    file="--gpu", valid=", ".join(known)))
    if name not in known:
        raise ScenarioError(Problem(f"unknown GPU profile {name!r}", file="--gpu", valid=", ".join(known)))
    return name


def gpu_memory_gib(name: str) -> float:
    return HardwareCatalog.load().gpu(name).memory_bytes / 2**30


def set_placeholder_workload(draft: Draft, max_prompt: int, max_response: int) -> None:
    draft.notes.append("workload: the framework's files say nothing of prompt and response lengths, which set most of "
                       "a step's time; the lengths below are placeholders (lognormal, median a quarter of the cap). "
                       "Replace them with your run's (docs/workloads.md, `rlsim workload fit`).")
    for field, cap in (("prompt_tokens", max_prompt), ("response_tokens", max_response)):
        draft.set(f"workload.{field}.kind", "lognormal", "placeholder: no lengths in the framework's files")
        draft.set(f"workload.{field}.median_tokens", max(2, cap // 4), f"placeholder: a quarter of the cap, {cap}")
        draft.set(f"workload.{field}.sigma", PLACEHOLDER_SIGMA[field], "placeholder spread")
