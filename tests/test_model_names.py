"""Model names as users type them: Hugging Face ids, a local config.json for a model outside the catalog, and a
did-you-mean that finds the same family and size."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlsim.config import load_scenario, parse_scenario
from rlsim.errors import ScenarioError, UnknownName
from rlsim.loading import validate_document
from rlsim.models import SHIPPED_CATALOG, CatalogFile, ModelCatalog
from rlsim.models.hf_config import architecture_from_config
from rlsim.models.names import NameParts, closest_model, name_parts
from rlsim.yamlsource import read_yaml
from tests.scenario_text import VALID

CATALOG = ModelCatalog.load()

# Published config.json files, trimmed of keys rlsim does not read (rope, dropout, token ids).
QWEN3_30B_A3B = {
    "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "attention_bias": False,
    "decoder_sparse_step": 1, "head_dim": 128, "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 6144,
    "mlp_only_layers": [], "moe_intermediate_size": 768, "num_attention_heads": 32, "num_experts": 128,
    "num_experts_per_tok": 8, "num_hidden_layers": 48, "num_key_value_heads": 4, "tie_word_embeddings": False,
    "vocab_size": 151936,
}
QWEN25_7B = {
    "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_act": "silu", "hidden_size": 3584,
    "intermediate_size": 18944, "num_attention_heads": 28, "num_hidden_layers": 28, "num_key_value_heads": 4,
    "tie_word_embeddings": False, "vocab_size": 152064,
}
DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "first_k_dense_replace": 3,
    "hidden_act": "silu", "hidden_size": 7168, "intermediate_size": 18432, "kv_lora_rank": 512,
    "moe_intermediate_size": 2048, "moe_layer_freq": 1, "n_routed_experts": 256, "n_shared_experts": 1,
    "num_attention_heads": 128, "num_experts_per_tok": 8, "num_hidden_layers": 61, "num_key_value_heads": 128,
    "q_lora_rank": 1536, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "tie_word_embeddings": False,
    "v_head_dim": 128, "vocab_size": 129280,
}


def write_config(folder: Path, config: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "config.json"
    path.write_text(json.dumps(config, indent=2))
    return path


def scenario_file(tmp_path: Path, model: str) -> Path:
    path = tmp_path / "scenario.yaml"
    path.write_text(VALID.replace("model: Qwen2.5-7B", f"model: {model}"))
    return path


# ---- Hugging Face ids --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("hf_id", "name"), [
    ("Qwen/Qwen3-8B", "Qwen3-8B"),
    ("qwen/qwen3-8b", "Qwen3-8B"),
    ("Qwen/Qwen2.5-7B-Instruct", "Qwen2.5-7B-Instruct"),
    ("deepseek-ai/DeepSeek-R1-Distill-Qwen-7B", "DeepSeek-R1-Distill-Qwen-7B"),
    ("meta-llama/Llama-3.1-8B", "Llama-3.1-8B"),
    ("unsloth/Qwen3-8B", "Qwen3-8B"),  # a re-upload under another owner keeps the shapes its name says
])
def test_hugging_face_ids_resolve_to_the_catalog_entry(hf_id, name):
    assert CATALOG.canonical(hf_id) == name
    assert CATALOG.spec(hf_id).architecture == CATALOG.spec(name).architecture


@pytest.mark.parametrize("name", ["Qwen/Qwen3-8B-Instruct", "a/b/Qwen3-8B", "Qwen/", "/Qwen3-8B"])
def test_ids_that_name_no_catalog_model_are_unknown(name):
    with pytest.raises(UnknownName):
        CATALOG.canonical(name)


def test_every_hf_id_is_the_repository_its_source_cites():
    shipped = validate_document(CatalogFile, read_yaml(SHIPPED_CATALOG))
    for name, entry in [*shipped.models.items(), *shipped.aliases.items()]:
        if entry.hf_id is not None:
            assert f"Hugging Face {entry.hf_id} config.json" in entry.source, name
        else:
            assert "Hugging Face" not in entry.source, f"{name} cites a repository but has no hf_id"
    assert shipped.models["Qwen3-8B"].hf_id == "Qwen/Qwen3-8B"


def test_a_scenario_and_a_set_may_name_the_model_by_hf_id(tmp_path):
    scenario = load_scenario(scenario_file(tmp_path, "Qwen/Qwen3-8B"))
    assert scenario.model.name == "Qwen3-8B"
    assert scenario.model.architecture == CATALOG.spec("Qwen3-8B").architecture
    assert load_scenario(scenario_file(tmp_path, "Qwen2.5-7B"), {"model": "Qwen/Qwen3-8B"}) == scenario


# ---- a local config.json -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("config", "name"), [(QWEN3_30B_A3B, "Qwen3-30B-A3B"), (QWEN25_7B, "Qwen2.5-7B"),
                                              (DEEPSEEK_V3, "DeepSeek-V3")])
def test_a_published_config_json_gives_the_catalog_architecture(tmp_path, config, name):
    assert architecture_from_config(write_config(tmp_path, config)) == CATALOG.spec(name).architecture


def test_mixtral_experts_are_full_width_and_qwen2_moe_shared_experts_count_in_routed_widths(tmp_path):
    mixtral = {"model_type": "mixtral", "hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32,
               "num_key_value_heads": 8, "intermediate_size": 14336, "vocab_size": 32000, "num_local_experts": 8,
               "num_experts_per_tok": 2}
    moe = architecture_from_config(write_config(tmp_path / "mixtral", mixtral)).moe
    assert (moe.num_experts, moe.num_experts_per_tok, moe.moe_intermediate_size) == (8, 2, 14336)
    qwen2_moe = {**mixtral, "model_type": "qwen2_moe", "num_experts": 60, "num_experts_per_tok": 4,
                 "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632}
    del qwen2_moe["num_local_experts"]
    arch = architecture_from_config(write_config(tmp_path / "qwen2_moe", qwen2_moe))
    assert arch.moe.n_shared_experts == 4 and arch.attention_bias


@pytest.mark.parametrize("model", ["./my-model", "./my-model/config.json", "my-model"])
def test_a_scenario_names_a_config_json_relative_to_its_folder(tmp_path, model):
    write_config(tmp_path / "my-model", QWEN3_30B_A3B)
    scenario = load_scenario(scenario_file(tmp_path, model))
    assert scenario.model.architecture == CATALOG.spec("Qwen3-30B-A3B").architecture
    assert scenario.model.name == model


def test_a_missing_config_json_names_the_path_it_looked_at(tmp_path):
    with pytest.raises(ScenarioError) as err:
        load_scenario(scenario_file(tmp_path, "./nowhere"))
    assert err.value.line == 8 and err.value.path == "model"
    assert f"no Hugging Face config.json at {tmp_path / 'nowhere'}" in err.value.first.message


@pytest.mark.parametrize(("change", "key", "message"), [
    ({"hidden_size": None}, "hidden_size", "required key 'hidden_size' is missing"),
    ({"num_attention_heads": "many"}, "num_attention_heads", "Input should be a valid integer"),
    ({"num_experts_per_tok": None}, "num_experts", r"num_experts_per_tok \(the top-k\) is missing"),
    ({"num_experts": 0, "n_routed_experts": 4, "num_experts_per_tok": 8}, "n_routed_experts",
     r"num_experts_per_tok \(8\) exceeds num_experts \(4\)"),
    ({"mlp_only_layers": [0]}, "mlp_only_layers", "dense layers between MoE layers are not modelled"),
    ({"hidden_act": "relu"}, "hidden_act", "activation 'relu' is not modelled"),
])
def test_a_bad_config_json_names_the_file_and_the_key(tmp_path, change, key, message):
    config = {k: v for k, v in {**QWEN3_30B_A3B, **change}.items() if v is not None}
    path = write_config(tmp_path / "m", config)
    with pytest.raises(ScenarioError, match=message) as err:
        load_scenario(scenario_file(tmp_path, "./m"))
    assert err.value.file == str(path) and err.value.path == key and err.value.line is not None


def test_a_config_json_that_is_not_json_is_reported_with_its_line(tmp_path):
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "config.json").write_text('{\n  "hidden_size": 8,\n  "oops"\n')
    with pytest.raises(ScenarioError) as err:
        load_scenario(scenario_file(tmp_path, "./m"))
    assert err.value.file == str(tmp_path / "m" / "config.json") and err.value.line is not None


def test_a_catalog_name_wins_over_a_folder_of_the_same_name(tmp_path):
    write_config(tmp_path / "Qwen" / "Qwen3-8B", QWEN25_7B)
    assert load_scenario(scenario_file(tmp_path, "Qwen/Qwen3-8B")).model.name == "Qwen3-8B"
    assert parse_scenario(VALID.replace("model: Qwen2.5-7B", "model: ./Qwen/Qwen3-8B"),
                          base_dir=tmp_path).model.architecture == CATALOG.spec("Qwen2.5-7B").architecture


# ---- did-you-mean --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("typed", "meant"), [
    ("Qwen3-8b-Instruct", "Qwen3-8B"),
    ("Qwen/Qwen3-8B-Instruct", "Qwen3-8B"),
    ("qwen3-7b", "Qwen3-8B"),  # same family, nearest size
    ("Qwen2.5-7B-Chat", "Qwen2.5-7B-Instruct"),  # chat is an instruct release
    ("Llama3.1-8B-it", "Llama-3.1-8B-Instruct"),
    ("Qwen3-30B-A3B-Instruct-2507", "Qwen3-30B-A3B"),
    ("Qwen3-32B-Base", "Qwen3-32B"),  # no base release in the catalog: the release itself
    ("qwen2.5-7", "Qwen2.5-7B"),  # no size: by spelling
])
def test_did_you_mean_prefers_the_same_family_and_size(typed, meant):
    assert closest_model(typed, CATALOG.names()) == meant
    with pytest.raises(UnknownName) as err:
        CATALOG.canonical(typed)
    assert err.value.suggestion == meant


@pytest.mark.parametrize("typed", ["GPT-5", "Mistral-7B"])
def test_did_you_mean_stays_quiet_for_another_family(typed):
    assert closest_model(typed, CATALOG.names()) is None


def test_name_parts():
    assert name_parts("Qwen/Qwen3-30B-A3B-Base") == NameParts("qwen3", "30b-a3b", "base")
    assert name_parts("DeepSeek-R1-Distill-Qwen-1.5B").size == "1.5b"
    assert name_parts("DeepSeek-V3").size is None


def test_an_unknown_model_in_a_scenario_suggests_the_same_family_and_size(tmp_path):
    with pytest.raises(ScenarioError) as err:
        load_scenario(scenario_file(tmp_path, "Qwen3-8b-Instruct"))
    assert err.value.line == 8 and err.value.suggestion == "Qwen3-8B"
