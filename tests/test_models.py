"""The model catalog and derived sizes, checked against published counts, the reference KV column and theory."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

import rlsim.models
from rlsim.errors import ScenarioError, UnknownName
from rlsim.models import SHIPPED_CATALOG, Architecture, ModelCatalog, ModelSpec

KIB = 1024

# The "KV/token bf16" column of the project reference (hardware-and-costs.md, section 5), in KiB.
REFERENCE_KV_KIB = {
    "Qwen2.5-0.5B": 12,
    "Qwen2.5-1.5B": 28,
    "Qwen2.5-3B": 36,
    "Qwen2.5-7B": 56,
    "Qwen2.5-14B": 192,
    "Qwen2.5-32B": 256,
    "Qwen2.5-72B": 320,
    "Qwen3-0.6B": 112,
    "Qwen3-1.7B": 112,
    "Qwen3-4B": 144,
    "Qwen3-8B": 144,
    "Qwen3-14B": 160,
    "Qwen3-32B": 256,
    "Qwen3-30B-A3B": 96,
    "Qwen3-235B-A22B": 188,
    "Llama-3.1-8B": 128,
    "Llama-3.1-70B": 320,
    "Llama-3.1-405B": 504,
    "DeepSeek-V3": 68.6,
}

# Which derived property each published figure is compared with.
PUBLISHED_VS_DERIVED = {
    "total_billion": "total_params",
    "active_billion": "active_params",
    "non_embedding_billion": "non_embedding_params",
    "active_without_input_embedding_billion": "active_params_without_input_embedding",
}


@pytest.fixture(scope="module")
def catalog() -> ModelCatalog:
    return ModelCatalog.load()


def tiny_architecture(**changes) -> dict:
    fields = dict(
        hidden_size=8,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        intermediate_size=16,
        vocab_size=10,
        tie_word_embeddings=True,
    )
    fields.update(changes)
    return fields


# ---- published parameter counts (acceptance criterion: within 1%) ----------------------------------------------


def test_derived_parameter_counts_are_within_one_percent_of_published(catalog):
    rows, failures, checked = [], [], set()
    for name in catalog.model_names():
        published = catalog.entry(name).published_params
        if published is None:
            continue
        spec = catalog.spec(name)
        for field, prop in PUBLISHED_VS_DERIVED.items():
            figure = getattr(published, field)
            if figure is None:
                continue
            derived = getattr(spec, prop) / 1e9
            error = derived / figure - 1
            ok = abs(error) <= 0.01
            checked.add(name)
            rows.append(f"{name:18} {prop:38} {derived:10.3f} {figure:10.3f} {error:+8.2%} {'' if ok else '  <-- off'}")
            if not ok:
                failures.append(name)
    table = "\n".join([f"{'model':18} {'derived property':38} {'derived B':>10} {'published':>10} {'error':>8}", *rows])
    assert not failures, f"derived counts off by more than 1% for {sorted(set(failures))}:\n{table}"
    assert checked >= set(REFERENCE_KV_KIB)  # every model of the reference table was checked


def test_every_reference_table_model_has_a_published_count(catalog):
    for name in REFERENCE_KV_KIB:
        assert catalog.entry(name).published_params is not None, name
    for name in ("Qwen3-30B-A3B", "Qwen3-235B-A22B", "DeepSeek-V3"):
        assert catalog.entry(name).published_params.active_billion is not None, name


def test_dense_models_have_every_parameter_active(catalog):
    for name in catalog.model_names():
        spec = catalog.spec(name)
        if spec.architecture.moe is None:
            assert spec.active_params == spec.total_params, name


def test_moe_inactive_parameters_are_the_unrouted_experts(catalog):
    for name in ("Qwen3-30B-A3B", "Qwen3-235B-A22B", "DeepSeek-V3"):
        spec = catalog.spec(name)
        arch, moe = spec.architecture, spec.architecture.moe
        expert = 3 * arch.hidden_size * moe.moe_intermediate_size
        unrouted = spec.layer_count("moe") * (moe.num_experts - moe.num_experts_per_tok) * expert
        assert spec.total_params - spec.active_params == unrouted, name


def test_experts_touched_by_a_batch_follow_even_routing(catalog):
    moe = catalog.spec("Qwen3-30B-A3B").architecture.moe  # 128 experts, top-8
    assert moe.experts_touched(0) == 0
    assert moe.experts_touched(1) == pytest.approx(8)  # one token: its own top-k
    # Ten tokens route 80 times but, drawing 8 of 128 each, meet about 61 distinct experts, not 80.
    assert moe.experts_touched(10) == pytest.approx(128 * (1 - (120 / 128) ** 10))
    assert 60 < moe.experts_touched(10) < 62
    assert moe.experts_touched(256) == pytest.approx(128, rel=1e-6)
    counts = [moe.experts_touched(t) for t in range(0, 300, 7)]
    assert counts == sorted(counts) and all(c <= 128 for c in counts)


def test_experts_touched_match_a_sampled_router(catalog):
    # The closed form against routing drawn at random: 2,000 batches of 10 tokens, each picking 8 of 128 experts.
    rng = np.random.default_rng(0)
    moe = catalog.spec("Qwen3-30B-A3B").architecture.moe
    distinct = [
        len({int(e) for _ in range(10) for e in rng.choice(moe.num_experts, moe.num_experts_per_tok, replace=False)})
        for _ in range(2000)
    ]
    assert np.mean(distinct) == pytest.approx(moe.experts_touched(10), rel=0.01)


def test_deepseek_v3_layout(catalog):
    spec = catalog.spec("DeepSeek-V3")
    assert spec.layer_kinds == ("dense",) * 3 + ("moe",) * 58
    attention = spec.layer_params("dense")
    assert attention["self_attn.q_b_proj"] == 1536 * 128 * (128 + 64)
    assert attention["self_attn.kv_a_proj_with_mqa"] == 7168 * (512 + 64)
    assert attention["self_attn.kv_b_proj"] == 512 * 128 * (128 + 128)
    assert attention["self_attn.o_proj"] == 128 * 128 * 7168
    moe = spec.layer_params("moe")
    assert moe["mlp.gate"] == 7168 * 256
    assert moe["mlp.experts.down_proj"] == 256 * 2048 * 7168
    assert moe["mlp.shared_experts.up_proj"] == 7168 * 2048


def test_qwen_biases_and_qk_norm_are_counted(catalog):
    qwen25 = catalog.spec("Qwen2.5-7B").layer_params("dense")
    assert qwen25["self_attn.q_proj.bias"] == 3584
    assert qwen25["self_attn.k_proj.bias"] == qwen25["self_attn.v_proj.bias"] == 4 * 128
    assert "self_attn.q_norm" not in qwen25
    qwen3 = catalog.spec("Qwen3-0.6B").layer_params("dense")
    assert qwen3["self_attn.q_norm"] == qwen3["self_attn.k_norm"] == 128
    assert qwen3["self_attn.q_proj"] == 1024 * 16 * 128  # explicit head_dim, not hidden / heads
    assert not any(name.endswith(".bias") for name in qwen3)


def test_total_is_the_sum_of_every_tensor(catalog):
    for name in catalog.model_names():
        spec = catalog.spec(name)
        layers = sum(sum(spec.layer_params(kind).values()) for kind in spec.layer_kinds)
        head = 0 if spec.architecture.tie_word_embeddings else spec.vocab_matrix_params
        assert spec.total_params == layers + spec.vocab_matrix_params + head + spec.architecture.hidden_size, name


# ---- KV-cache bytes ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(REFERENCE_KV_KIB))
def test_kv_bytes_per_token_match_formula_and_reference_column(catalog, name):
    spec = catalog.spec(name)
    arch = spec.architecture
    if arch.mla is not None:
        expected = arch.num_hidden_layers * (arch.mla.kv_lora_rank + arch.mla.qk_rope_head_dim) * 2
    else:
        head_dim = arch.head_dim or arch.hidden_size // arch.num_attention_heads
        expected = 2 * arch.num_hidden_layers * arch.num_key_value_heads * head_dim * 2
    assert spec.kv_bytes_per_token == expected
    assert spec.kv_bytes_per_token / KIB == pytest.approx(REFERENCE_KV_KIB[name], abs=0.05)


def test_kv_and_weight_bytes_follow_the_dtype(catalog):
    bf16 = catalog.spec("Qwen2.5-7B")
    fp8 = catalog.spec("Qwen2.5-7B", dtype_bytes=1)
    fp8_kv_only = catalog.spec("Qwen2.5-7B", kv_dtype_bytes=1)
    assert bf16.weight_bytes == 2 * bf16.total_params
    assert fp8.weight_bytes == bf16.total_params
    assert fp8.kv_bytes_per_token == fp8_kv_only.kv_bytes_per_token == bf16.kv_bytes_per_token / 2
    assert fp8_kv_only.weight_bytes == bf16.weight_bytes


# ---- FLOPs -------------------------------------------------------------------------------------------------------


def test_llama_8b_flops_per_token_by_hand(catalog):
    spec = catalog.spec("Llama-3.1-8B")
    per_layer = 4096 * 4096 * 2 + 4096 * 1024 * 2 + 3 * 4096 * 14336
    matmul = 32 * per_layer + 128256 * 4096
    assert spec.active_matmul_params == matmul
    assert spec.forward_flops_per_token(0) == 2 * matmul + 4 * 32 * 32 * 128
    assert spec.lm_head_flops_per_token == 2 * 128256 * 4096


@pytest.mark.parametrize("name", ["Qwen2.5-0.5B", "Qwen2.5-7B", "Qwen3-30B-A3B", "Llama-3.1-70B", "DeepSeek-V3"])
def test_flops_per_token_at_zero_context_is_twice_the_active_weights(catalog, name):
    spec = catalog.spec(name)
    # 2 FLOPs per active weight a token multiplies: everything active except the embedding lookup, norms and biases.
    assert spec.forward_flops_per_token(0) == pytest.approx(2 * spec.active_params_without_input_embedding, rel=2e-3)
    # With tied embeddings the output head is the embedding matrix, so this is 2·active_params outright.
    if spec.architecture.tie_word_embeddings:
        assert spec.forward_flops_per_token(0) == pytest.approx(2 * spec.active_params, rel=2e-3)


@pytest.mark.parametrize("name", ["Qwen3-8B", "Qwen3-235B-A22B", "DeepSeek-V3"])
def test_attention_term_grows_linearly_with_context(catalog, name):
    spec = catalog.spec(name)
    arch = spec.architecture
    if arch.mla is not None:
        per_key = 2 * arch.num_hidden_layers * arch.num_attention_heads * (128 + 64 + 128)
    else:
        per_key = 2 * 2 * arch.num_hidden_layers * arch.num_attention_heads * arch.head_dim
    assert spec.attention_flops_per_context_token == per_key
    base = spec.forward_flops_per_token(0)
    for context in (1, 1000, 32768, 1234.5):
        assert spec.forward_flops_per_token(context) - base == pytest.approx(per_key * context, rel=1e-12)


@pytest.mark.parametrize("name", ["Qwen2.5-1.5B", "Qwen3-30B-A3B", "DeepSeek-V3"])
@pytest.mark.parametrize("length", [1, 2, 7, 100, 1000])
@pytest.mark.parametrize("prefix", [0, 513])
def test_sequence_flops_closed_form_equals_the_sum_over_tokens(catalog, name, length, prefix):
    spec = catalog.spec(name)
    looped = sum(spec.forward_flops_per_token(prefix + i) for i in range(length))
    assert spec.forward_flops(length, context_tokens=prefix) == pytest.approx(looped, rel=1e-12)


def test_sequence_flops_match_the_reference_prefill_formula(catalog):
    # Reference: FLOPs ≈ 2·N_active·T + 2·L·d_attn·T² for a causal sequence (d_attn = heads · head_dim).
    spec = catalog.spec("Qwen2.5-7B")
    arch = spec.architecture
    tokens = 32768
    approx = 2 * spec.active_matmul_params * tokens + 2 * arch.num_hidden_layers * 28 * 128 * tokens**2
    assert spec.forward_flops(tokens) == pytest.approx(approx, rel=1e-4)


def test_flops_reject_negative_lengths(catalog):
    spec = catalog.spec("Qwen3-8B")
    with pytest.raises(ValueError):
        spec.forward_flops_per_token(-1)
    with pytest.raises(ValueError):
        spec.forward_flops(-5)
    assert spec.forward_flops(0) == 0


# ---- lookup ------------------------------------------------------------------------------------------------------


def test_names_match_case_insensitively(catalog):
    spec = catalog.spec("  qwen3-30b-a3b ")
    assert spec.name == "Qwen3-30B-A3B"
    assert "LLAMA-3.1-8B" in catalog
    assert "Llama-4" not in catalog


@pytest.mark.parametrize(
    ("alias", "base"),
    [
        ("Qwen2.5-Math-7B", "Qwen2.5-7B"),
        ("DeepSeek-R1-Distill-Qwen-7B", "Qwen2.5-7B"),
        ("R1-Distill-Qwen-7B", "Qwen2.5-7B"),
        ("deepseek-r1-distill-qwen-14b", "Qwen2.5-14B"),
        ("R1-Distill-Qwen-32B", "Qwen2.5-32B"),
        ("R1-Distill-Qwen-1.5B", "DeepSeek-R1-Distill-Qwen-1.5B"),
        ("Qwen3-30B-A3B-Base", "Qwen3-30B-A3B"),
        ("Qwen2.5-7B-Instruct", "Qwen2.5-7B"),
        ("DeepSeek-R1", "DeepSeek-V3"),
    ],
)
def test_aliases_resolve_to_their_base_architecture(catalog, alias, base):
    assert catalog.resolve(alias) == base
    spec = catalog.spec(alias)
    assert spec.name.lower() == alias.lower()
    assert spec.architecture == catalog.spec(base).architecture


def test_qwen2_7b_instruct_has_qwen2_5_7b_shapes(catalog):
    # Its own entry, from its own config.json; verl's critic of it logs 7.07B parameters without the output head.
    qwen2, qwen25 = catalog.spec("Qwen/Qwen2-7B-Instruct"), catalog.spec("Qwen2.5-7B")
    assert qwen2.name == "Qwen2-7B-Instruct"
    assert qwen2.architecture == qwen25.architecture
    assert (qwen2.total_params - 3584 * 152064) / 1e9 == pytest.approx(7.07, abs=0.005)


def test_r1_distill_qwen_1_5b_unties_the_output_head(catalog):
    distill, base = catalog.spec("R1-Distill-Qwen-1.5B"), catalog.spec("Qwen2.5-1.5B")
    assert base.architecture.tie_word_embeddings and not distill.architecture.tie_word_embeddings
    assert distill.total_params == base.total_params + 151936 * 1536
    assert distill.non_embedding_params == base.non_embedding_params


def test_unknown_name_suggests_the_closest(catalog):
    with pytest.raises(UnknownName) as caught:
        catalog.spec("qwen2.5-7")
    error = caught.value
    assert error.kind == "model"
    assert error.suggestion == "Qwen2.5-7B"
    assert "Qwen2.5-7B" in error.known and "R1-Distill-Qwen-7B" in error.known
    with pytest.raises(UnknownName) as caught:
        catalog.spec("GPT-5")
    assert caught.value.suggestion is None


def test_names_cover_models_and_aliases(catalog):
    names = catalog.names()
    assert set(catalog.model_names()) < set(names)
    assert len({name.lower() for name in names}) == len(names)
    for name in names:
        catalog.spec(name)
        assert catalog.entry(name).source


def test_every_published_count_names_its_source(catalog):
    for name in catalog.model_names():
        entry = catalog.entry(name)
        assert entry.source.strip(), name
        if entry.published_params is not None:
            assert entry.published_params.source.strip(), name


def test_catalog_ships_inside_the_package():
    assert SHIPPED_CATALOG.parent == Path(rlsim.models.__file__).parent
    assert SHIPPED_CATALOG.is_file()


# ---- inline and invalid architectures ------------------------------------------------------------------------------


def test_inline_architecture_counts_by_hand():
    spec = ModelSpec.from_architecture("tiny", tiny_architecture())
    # per layer: q 8·8, k 8·4, v 8·4, o 8·8, SwiGLU 3·8·16, two norms 2·8; tied 10·8 embedding; final norm 8
    per_layer = 64 + 32 + 32 + 64 + 384 + 16
    assert spec.total_params == 2 * per_layer + 80 + 8
    assert spec.kv_bytes_per_token == 2 * 2 * 1 * 4 * 2
    assert spec.forward_flops_per_token(0) == 2 * (2 * (64 + 32 + 32 + 64 + 384) + 80) + 2 * 2 * 2 * 2 * 4
    assert ModelSpec.from_architecture("tiny", Architecture(**tiny_architecture())) == spec


def test_inline_moe_with_mla_and_full_rank_queries():
    arch = tiny_architecture(
        num_key_value_heads=2,
        moe=dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=4, n_shared_experts=1),
        mla=dict(kv_lora_rank=4, qk_nope_head_dim=2, qk_rope_head_dim=2, v_head_dim=2),
    )
    spec = ModelSpec.from_architecture("tiny-mla", arch)
    weights = spec.layer_params("moe")
    assert weights["self_attn.q_proj"] == 8 * 2 * (2 + 2)
    assert "self_attn.q_a_proj" not in weights
    assert spec.kv_bytes_per_token == 2 * (4 + 2) * 2
    assert spec.total_params - spec.active_params == 2 * (4 - 2) * 3 * 8 * 4


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (dict(num_attention_heads=6, num_key_value_heads=4), "multiple of num_key_value_heads"),
        (dict(moe=dict(num_experts=4, num_experts_per_tok=5, moe_intermediate_size=4)), "exceeds num_experts"),
        (
            dict(moe=dict(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=4, first_k_dense_replace=2)),
            "no MoE layer",
        ),
        (
            dict(
                attention_bias=True,
                mla=dict(kv_lora_rank=4, qk_nope_head_dim=2, qk_rope_head_dim=2, v_head_dim=2),
            ),
            "not modelled",
        ),
        (dict(hidden_size=9, num_attention_heads=2), "head_dim is required"),
        (dict(hidden_size=True), "valid integer"),
        (dict(num_experts=4), "Extra inputs"),
    ],
)
def test_invalid_architectures_are_rejected(changes, message):
    with pytest.raises(ValidationError, match=message):
        ModelSpec.from_architecture("bad", tiny_architecture(**changes))


def test_spec_is_frozen_and_hashable(catalog):
    spec = catalog.spec("Qwen3-8B")
    with pytest.raises(ValidationError):
        spec.dtype_bytes = 1
    assert hash(spec) == hash(catalog.spec("qwen3-8b"))
    with pytest.raises(ValueError, match="no MoE layers"):
        spec.layer_params("moe")


# ---- malformed catalogs ------------------------------------------------------------------------------------------


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "catalog.yaml"
    path.write_text(text, encoding="utf-8")
    return path


GOOD_ENTRY = """\
models:
  Tiny:
    source: test
    architecture:
      hidden_size: 8
      num_hidden_layers: 2
      num_attention_heads: 2
      num_key_value_heads: 1
      intermediate_size: 16
      vocab_size: 10
"""


def test_a_catalog_file_of_the_same_shape_loads(tmp_path):
    catalog = ModelCatalog.load(write(tmp_path, GOOD_ENTRY + "aliases:\n  tiny-chat: {model: tiny, source: test}\n"))
    assert catalog.names() == ("Tiny", "tiny-chat")
    assert catalog.spec("TINY-CHAT").architecture == catalog.spec("Tiny").architecture


def test_malformed_catalog_names_file_and_line(tmp_path):
    path = write(tmp_path, GOOD_ENTRY.replace("num_key_value_heads: 1", "num_key_value_heads: 3"))
    with pytest.raises(ScenarioError) as caught:
        ModelCatalog.load(path)
    assert caught.value.file == str(path)
    assert caught.value.line == 4  # the architecture mapping the cross-field check belongs to
    path = write(tmp_path, GOOD_ENTRY.replace("vocab_size: 10", "vocab_size: ten"))
    with pytest.raises(ScenarioError) as caught:
        ModelCatalog.load(path)
    assert caught.value.line == 10
    assert caught.value.path == "models.Tiny.architecture.vocab_size"


def test_alias_to_a_missing_model_names_its_line(tmp_path):
    path = write(tmp_path, GOOD_ENTRY + "aliases:\n  other:\n    model: Tinny\n    source: test\n")
    with pytest.raises(ScenarioError) as caught:
        ModelCatalog.load(path)
    assert caught.value.line == 13
    assert caught.value.suggestion == "Tiny"


def test_names_colliding_in_case_are_rejected(tmp_path):
    path = write(tmp_path, GOOD_ENTRY + "aliases:\n  TINY: {model: Tiny, source: test}\n")
    with pytest.raises(ScenarioError, match="already a catalog name"):
        ModelCatalog.load(path)


# ---- properties over random architectures --------------------------------------------------------------------------


@st.composite
def architectures(draw) -> Architecture:
    kv_heads = draw(st.integers(1, 4))
    heads = kv_heads * draw(st.integers(1, 4))
    layers = draw(st.integers(1, 6))
    fields = dict(
        hidden_size=draw(st.integers(1, 64)),
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=draw(st.integers(1, 32)),
        intermediate_size=draw(st.integers(1, 128)),
        vocab_size=draw(st.integers(1, 1000)),
        tie_word_embeddings=draw(st.booleans()),
    )
    if draw(st.booleans()):
        experts = draw(st.integers(1, 16))
        fields["moe"] = dict(
            num_experts=experts,
            num_experts_per_tok=draw(st.integers(1, experts)),
            moe_intermediate_size=draw(st.integers(1, 32)),
            n_shared_experts=draw(st.integers(0, 2)),
            first_k_dense_replace=draw(st.integers(0, layers - 1)),
        )
    if draw(st.booleans()):
        fields["mla"] = dict(
            q_lora_rank=draw(st.none() | st.integers(1, 32)),
            kv_lora_rank=draw(st.integers(1, 32)),
            qk_nope_head_dim=draw(st.integers(1, 16)),
            qk_rope_head_dim=draw(st.integers(1, 16)),
            v_head_dim=draw(st.integers(1, 16)),
        )
    else:
        fields["attention_bias"] = draw(st.booleans())
        fields["qk_norm"] = draw(st.booleans())
    return Architecture(**fields)


@settings(max_examples=200, deadline=None)
@given(arch=architectures(), length=st.integers(0, 40), prefix=st.integers(0, 100))
def test_derived_sizes_are_consistent_for_any_architecture(arch, length, prefix):
    spec = ModelSpec.from_architecture("random", arch)
    assert spec.active_params <= spec.total_params
    assert spec.active_params_without_input_embedding <= spec.active_params
    assert spec.active_matmul_params <= spec.active_params_without_input_embedding
    looped = sum(spec.forward_flops_per_token(prefix + i) for i in range(length))
    assert math.isclose(spec.forward_flops(length, prefix), looped, rel_tol=1e-12, abs_tol=1e-9)
    assert spec.forward_flops_per_token(0) == 2 * spec.active_matmul_params + spec.attention_flops_per_context_token
