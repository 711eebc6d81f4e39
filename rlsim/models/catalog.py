"""The model catalog: named architectures with their sources, looked up case-insensitively by name or Hugging Face id,
aliases resolved."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from types import MappingProxyType

from pydantic import Field

from rlsim.errors import ScenarioError, UnknownName
from rlsim.fields import Frozen, PositiveFloat
from rlsim.loading import closest, validate_document
from rlsim.models.architecture import Architecture
from rlsim.models.names import closest_model
from rlsim.models.spec import ModelSpec
from rlsim.yamlsource import PathKey, dotted, read_yaml

SHIPPED_CATALOG = Path(__file__).with_name("catalog.yaml")


class PublishedParams(Frozen):
    """Parameter counts as published, in billions.

    Only tests read them: they check the derived counts, never replace them.
    """

    total_billion: PositiveFloat
    active_billion: PositiveFloat | None = Field(
        None, description="MoE active parameters, counting the token embedding (ModelSpec.active_params)"
    )
    non_embedding_billion: PositiveFloat | None = Field(
        None, description="total without the token embedding and untied output head (ModelSpec.non_embedding_params)"
    )
    active_without_input_embedding_billion: PositiveFloat | None = Field(
        None,
        description="active parameters without the embedding lookup (ModelSpec.active_params_without_input_embedding)",
    )
    source: str


HF_ID = Field(None, pattern=r"^[\w.-]+/[\w.-]+$", description="the Hugging Face id, owner/name (e.g. Qwen/Qwen3-8B)")


class CatalogModel(Frozen):
    """One architecture in the catalog."""

    source: str = Field(description="where the architecture's numbers come from (usually the config.json)")
    hf_id: str | None = HF_ID
    architecture: Architecture
    published_params: PublishedParams | None = None


class CatalogAlias(Frozen):
    """Another name for a catalog model with the same architecture (a fine-tune, an instruct or distilled variant)."""

    model: str
    hf_id: str | None = HF_ID
    source: str


class CatalogFile(Frozen):
    """The shape of catalog.yaml."""

    models: dict[str, CatalogModel]
    aliases: dict[str, CatalogAlias] = Field(default_factory=dict)


class ModelCatalog:
    """The models scenarios can name, by catalog name or Hugging Face id (`Qwen/Qwen3-8B`), case-insensitively; an
    alias gives its target's architecture.

    Build one with `load()` and hold it; it never changes after construction.
    """

    __slots__ = ("_file", "_index")

    def __init__(self, catalog: CatalogFile):
        problems = _inconsistencies(catalog)
        if problems:
            raise ValueError("; ".join(f"{dotted(path)}: {message}" for path, message, _ in problems))
        self._file = catalog
        self._index = MappingProxyType({key: name for name, key in _keys(catalog)})

    @classmethod
    def load(cls, path: str | Path | None = None) -> ModelCatalog:
        """Read a catalog file (the one shipped with rlsim by default); a malformed file raises ScenarioError."""
        path = Path(SHIPPED_CATALOG if path is None else path)
        stat = path.stat() if path.exists() else None
        return _load_version(cls, path, stat.st_mtime_ns if stat else 0, stat.st_size if stat else 0)

    def names(self) -> tuple[str, ...]:
        """Every name `spec` accepts, as the catalog spells them: models first, then aliases."""
        return (*self._file.models, *self._file.aliases)

    def model_names(self) -> tuple[str, ...]:
        """The catalog's own architectures, without aliases."""
        return tuple(self._file.models)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and _key(name) in self._index

    def canonical(self, name: str) -> str:
        """The catalog's spelling of `name` (a name or a Hugging Face id); raises UnknownName with a did-you-mean when
        nothing matches. `owner/Name` whose Name is a catalog name is that model: a re-upload keeps its shapes."""
        found = self._index.get(_key(name))
        owner, slash, rest = name.strip().partition("/")
        if found is None and slash and owner and "/" not in rest:
            found = self._index.get(_key(rest))
        if found is None:
            known = self.names()
            raise UnknownName("model", name, list(known), closest_model(name, known))
        return found

    def resolve(self, name: str) -> str:
        """The model `name` stands for (itself, or an alias's target)."""
        found = self.canonical(name)
        alias = self._file.aliases.get(found)
        return found if alias is None else self._index[_key(alias.model)]

    def entry(self, name: str) -> CatalogModel:
        """The catalog entry `name` resolves to: architecture, source and published counts."""
        return self._file.models[self.resolve(name)]

    def spec(self, name: str, dtype_bytes: float = 2.0, kv_dtype_bytes: float | None = None) -> ModelSpec:
        """The ModelSpec for a catalog name, named as the catalog spells it (an alias keeps its own name)."""
        return ModelSpec(
            name=self.canonical(name),
            architecture=self.entry(name).architecture,
            dtype_bytes=dtype_bytes,
            kv_dtype_bytes=kv_dtype_bytes,
        )


def _keys(catalog: CatalogFile) -> list[tuple[str, str]]:
    """(name, lookup key) for every catalog name and Hugging Face id, models first."""
    entries = [*catalog.models.items(), *catalog.aliases.items()]
    return ([(name, _key(name)) for name, _ in entries]
            + [(name, _key(entry.hf_id)) for name, entry in entries if entry.hf_id is not None])


def _inconsistencies(catalog: CatalogFile) -> list[tuple[PathKey, str, str | None]]:
    """Names or Hugging Face ids that collide case-insensitively and aliases whose target is not a model:
    (path, message, suggestion)."""
    problems: list[tuple[PathKey, str, str | None]] = []
    seen: dict[str, str] = {}
    for name, key in _keys(catalog):
        if key in seen:
            section = "models" if name in catalog.models else "aliases"
            problems.append(((section, name), f"{key!r} is already a catalog name or id ({seen[key]!r})", None))
        else:
            seen[key] = name
    models = {_key(name) for name in catalog.models}
    for name, alias in catalog.aliases.items():
        if _key(alias.model) not in models:
            problems.append(
                (
                    ("aliases", name, "model"),
                    f"alias target {alias.model!r} is not a model in this catalog",
                    closest(alias.model, catalog.models),
                )
            )
    return problems


def _key(name: str) -> str:
    return name.strip().lower()


@lru_cache(maxsize=16)
def _load_version(cls: type[ModelCatalog], path: Path, mtime_ns: int, size: int) -> ModelCatalog:
    """One version of a catalog file, parsed once (keyed by modification time and size, so an edit is re-read).
    A ModelCatalog is immutable, so sharing it is safe."""
    doc = read_yaml(path)
    catalog = validate_document(CatalogFile, doc)
    problems = _inconsistencies(catalog)
    if problems:
        raise ScenarioError([doc.problem(where, message, suggestion=suggestion) for where, message, suggestion in problems])
    return cls(catalog)
