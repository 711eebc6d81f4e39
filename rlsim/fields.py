"""Field types shared by every input schema: strict numbers (YAML `true` is not a count), the frozen, closed base model,
and names of registered policies (`Registered`)."""
from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, GetCoreSchemaHandler, GetJsonSchemaHandler, Strict
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, PydanticCustomError, core_schema

from rlsim.errors import UnknownName
from rlsim.registry import Registry


class Frozen(BaseModel):
    """Base of every input model: unknown keys are errors and a validated value never changes."""

    model_config = ConfigDict(extra="forbid", frozen=True)


PositiveInt = Annotated[int, Strict(), Field(gt=0)]
NonNegativeInt = Annotated[int, Strict(), Field(ge=0)]
PositiveFloat = Annotated[float, Strict(), Field(gt=0)]
NonNegativeFloat = Annotated[float, Strict(), Field(ge=0)]
Fraction = Annotated[float, Strict(), Field(gt=0, le=1)]
Probability = Annotated[float, Strict(), Field(ge=0, le=1)]
Flag = Annotated[bool, Strict()]


class Registered:
    """Field metadata for a name of a registered policy, `Annotated[str, Registered(LOAD_BALANCERS)]`: the allowed
    values are the registry's names when a scenario is validated (so a policy is added by registering it, never in the
    schema), and the JSON Schema lists them as the field's enum."""

    def __init__(self, registry: Registry[Any]):
        self.registry = registry

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        return core_schema.no_info_after_validator_function(self._check, handler(source))

    def __get_pydantic_json_schema__(self, schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        return {**handler(schema), "enum": self.registry.names()}

    def _check(self, name: str) -> str:
        try:
            self.registry[name]
        except UnknownName as err:
            raise PydanticCustomError("value_error", "not a known {kind}", {
                "kind": err.kind, "valid": ", ".join(err.known), "suggestion": err.suggestion or ""}) from None
        return name
