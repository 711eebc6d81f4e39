"""Field types shared by every input schema: strict numbers (YAML `true` is not a count) and the frozen, closed base model."""
from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, Strict


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
