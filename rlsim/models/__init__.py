"""Model architectures, the catalog of named models, and the sizes derived from them (parameters, FLOPs, KV bytes)."""
from rlsim.models.architecture import MLA, Architecture, MoE
from rlsim.models.catalog import (
    SHIPPED_CATALOG,
    CatalogAlias,
    CatalogFile,
    CatalogModel,
    ModelCatalog,
    PublishedParams,
)
from rlsim.models.spec import GemmShape, LayerKind, ModelSpec, Weight

__all__ = [
    "MLA",
    "SHIPPED_CATALOG",
    "Architecture",
    "CatalogAlias",
    "CatalogFile",
    "CatalogModel",
    "GemmShape",
    "LayerKind",
    "ModelCatalog",
    "ModelSpec",
    "MoE",
    "PublishedParams",
    "Weight",
]
