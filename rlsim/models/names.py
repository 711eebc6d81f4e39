"""How people write model names: a family, a size and a release variant (`Qwen3-8B-Instruct`), maybe after a Hugging
Face owner (`Qwen/Qwen3-8B`). Did-you-mean ranks catalog names by these parts, so a near miss finds the same model
rather than the nearest spelling (`Qwen3-8b-Instruct` is Qwen3-8B, not Qwen2.5-7B-Instruct)."""
from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass

from rlsim.loading import closest

# Release suffixes that keep the architecture; chat and it are other spellings of an instruction-tuned release.
_VARIANTS = {"instruct": "instruct", "chat": "instruct", "it": "instruct", "base": "base", "hf": ""}
_RELEASE_DATE = re.compile(r"\d{4}")  # Qwen3-30B-A3B-Instruct-2507: a re-release, same shapes
# A size: 8b, 1.5b, 0.6b, 30b-a3b (MoE total and active), 500m.
_SIZE = re.compile(r"(?:^|-)(\d+(?:\.\d+)?[bm](?:-a\d+(?:\.\d+)?[bm])?)(?=-|$)")


@dataclass(frozen=True)
class NameParts:
    family: str  # lower case without separators: "qwen3", "llama3.1", "deepseekr1distillqwen"
    size: str | None  # "8b", "30b-a3b"; None when the name gives none (DeepSeek-V3)
    variant: str  # "instruct", "base" or ""

    @property
    def billions(self) -> float | None:
        if self.size is None:
            return None
        number = float(re.match(r"[\d.]+", self.size).group())  # type: ignore[union-attr]
        return number / 1000 if self.size.split("-")[0].endswith("m") else number


def name_parts(name: str) -> NameParts:
    """`Qwen/Qwen3-8B-Instruct` -> (qwen3, 8b, instruct)."""
    key = name.strip().lower().rsplit("/", 1)[-1]
    variant = ""
    head, _, last = key.rpartition("-")
    while head and (last in _VARIANTS or _RELEASE_DATE.fullmatch(last)):
        variant = variant or _VARIANTS.get(last, "")
        key = head
        head, _, last = key.rpartition("-")
    sizes = list(_SIZE.finditer(key))
    size = sizes[-1].group(1) if sizes else None
    if sizes:
        key = key[:sizes[-1].start()] + key[sizes[-1].end():]
    return NameParts(re.sub(r"[-_ ]", "", key), size, variant)


def closest_model(name: str, options: Iterable[str]) -> str | None:
    """The catalog name `name` most likely meant: of the same family, the same size first, then the same release
    variant, then the base release, then the nearest size; by spelling when no option shares the family."""
    options = list(options)
    want = name_parts(name)
    same_family = [(name_parts(option), option) for option in options]
    same_family = [(parts, option) for parts, option in same_family if parts.family == want.family]
    if not same_family or want.size is None:
        return closest(name.rsplit("/", 1)[-1], options)

    def rank(item: tuple[NameParts, str]) -> tuple:
        parts, option = item
        distance = (abs(math.log(parts.billions / want.billions))
                    if parts.billions and want.billions else math.inf)
        return (parts.size != want.size, parts.variant != want.variant, parts.variant != "", distance, option)

    return min(same_family, key=rank)[1]
