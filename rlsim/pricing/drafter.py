"""The drafter of a speculating engine (placement.rollout.speculative) as a model the cost models can price: a
catalog draft model, or the target's shape cut to one decoder layer (an EAGLE or MTP head, which reads the target's
hidden states and shares its vocabulary). n-gram drafts have no model."""
from __future__ import annotations

from rlsim.config.schema import Scenario
from rlsim.models import ModelCatalog, ModelSpec

# An EAGLE / MTP head: one decoder layer of the target's shape (EAGLE-3's draft head and DeepSeek-V3's MTP module are
# one transformer layer each; arXiv 2503.01840, arXiv 2412.19437 §2.2), with the target's output head.
HEAD_LAYERS = 1


def drafter_spec(scenario: Scenario, spec: ModelSpec) -> ModelSpec | None:
    """The draft model of `scenario`'s engines of `spec`, with the same KV-cache element width; None without one."""
    speculative = scenario.placement.rollout.speculative
    if speculative is None or speculative.method == "ngram":
        return None
    if speculative.method == "draft_model":
        assert speculative.draft_model is not None, "the schema requires draft_model for method draft_model"
        draft = ModelCatalog.load().spec(speculative.draft_model)
    else:
        arch = spec.architecture
        changes: dict[str, object] = {"num_hidden_layers": HEAD_LAYERS}
        if arch.moe is not None:
            changes["moe"] = arch.moe.model_copy(update={"first_k_dense_replace": 0})
        draft = ModelSpec.from_architecture(f"{spec.name} {speculative.method} head", arch.model_copy(update=changes))
    return draft.model_copy(update={"kv_dtype_bytes": spec.kv_dtype_bytes})
