"""Field types shared by every input schema: strict numbers (YAML `true` is not a count), the frozen, closed base model,
names of registered policies (`Registered`) and registered variants with parameters (`Variants`)."""
from __future__ import annotations

import operator
from functools import cache, reduce
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, GetCoreSchemaHandler, GetJsonSchemaHandler, Strict, TypeAdapter
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, PydanticCustomError, core_schema

from rlsim.errors import UnknownName
from rlsim.registry import Registry


class Frozen(BaseModel):
    """Base of every input model: unknown keys are errors and a validated value never changes."""

    model_config = ConfigDict(extra="forbid", frozen=True)


# No count an RL run has (GPUs, prompts, tokens, steps, workers) comes near a billion; a larger one is a typo or a
# probe, and unbounded it would overflow numpy's integers or be allocated before any other check could refuse it.
MAX_COUNT = 10**9
PositiveInt = Annotated[int, Strict(), Field(gt=0, le=MAX_COUNT)]
NonNegativeInt = Annotated[int, Strict(), Field(ge=0, le=MAX_COUNT)]
Seed = Annotated[int, Strict(), Field(ge=0, lt=2**63)]
# Every float an input gives is finite: YAML's .inf and .nan would validate against a bound (NaN compares false, inf
# passes `gt=0`) and then crash or hang the simulator far from the file. A field where "no limit" means something says
# so with its own type (`UnboundedFloat`) and its handling.
FiniteFloat = Annotated[float, Strict(), Field(allow_inf_nan=False)]
PositiveFloat = Annotated[float, Strict(), Field(gt=0, allow_inf_nan=False)]
NonNegativeFloat = Annotated[float, Strict(), Field(ge=0, allow_inf_nan=False)]
Fraction = Annotated[float, Strict(), Field(gt=0, le=1, allow_inf_nan=False)]
Probability = Annotated[float, Strict(), Field(ge=0, le=1, allow_inf_nan=False)]
# The spread of a lognormal (σ of the log): PolyTrace's fits stay under 2.5, and past 10 the mean is e^50 times the
# median, beyond what any length or latency (or a float's moments) can mean.
LogSpread = Annotated[float, Strict(), Field(gt=0, le=10, allow_inf_nan=False)]
# Every hardware quantity in its field's unit (TFLOPS, GiB, TB/s, GB/s, µs, W, a factor) lies far inside these
# bounds; past them the cost models' arithmetic leaves a float's range (1e300 TFLOPS prices a kernel at 0 s, and a
# step's time becomes NaN) long before any check could say which number was wrong.
HardwareQuantity = Annotated[float, Strict(), Field(ge=1e-6, le=1e7, allow_inf_nan=False)]
HardwareAmount = Annotated[float, Strict(), Field(ge=0, le=1e7, allow_inf_nan=False)]
# A non-negative bound where .inf means "unbounded" (the field's docs say how it is resolved); NaN is refused.
UnboundedFloat = Annotated[float, Strict(), Field(ge=0)]
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


class Variants:
    """Field metadata for a kind whose variants carry parameters, `Annotated[LengthParams, Variants(LENGTH_MODELS)]`:
    the field is the tagged union (by `kind`) of the parameter classes registered under the registry's names
    (each entry's `params`), plus any in `also`, as they are when a scenario is validated. So a variant is added by
    registering it, never in the schema; its errors, JSON Schema and dumps are those of the union written out."""

    def __init__(self, registry: Registry[Any], *, also: tuple[type[BaseModel], ...] = ()):
        self.registry = registry
        self.also = also

    def members(self) -> tuple[type[BaseModel], ...]:
        return (*(self.registry[name].params for name in self.registry.names()), *self.also)

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        return core_schema.with_info_plain_validator_function(self._validate)

    def __get_pydantic_json_schema__(self, schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        return handler(_tagged_union(self.members()).core_schema)

    def _validate(self, value: Any, info: core_schema.ValidationInfo) -> Any:
        # The union's own errors (an unknown kind, a bad parameter at its path) become the scenario's.
        return _tagged_union(self.members()).validate_python(value, context=info.context)


@cache
def _tagged_union(members: tuple[type[BaseModel], ...]) -> TypeAdapter[Any]:
    return TypeAdapter(Annotated[reduce(operator.or_, members), Field(discriminator="kind")])
