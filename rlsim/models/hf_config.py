"""An Architecture from a Hugging Face config.json on disk, for a model outside the catalog (`model: ./my-model/` or
`model: ./my-model/config.json`). Nothing is downloaded: the file must be there."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from rlsim.errors import Problem, ScenarioError
from rlsim.loading import validate_document
from rlsim.models.architecture import Architecture
from rlsim.yamlsource import YamlDocument, dotted, read_yaml

CONFIG = "config.json"
REQUIRED = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size")
# Model types whose modeling code hard-codes what their config.json leaves out (as the catalog's header explains).
_QKV_BIAS = {"qwen2", "qwen2_moe"}
_QK_NORM = {"qwen3", "qwen3_moe"}
_EXPERTS = ("num_experts", "num_local_experts", "n_routed_experts")  # Qwen-MoE, Mixtral, DeepSeek
_MLA = ("q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")


def looks_like_path(name: str) -> bool:
    """Whether a model name is written as a path (./x, ../x, /x, ~/x or *.json) rather than a catalog name or id."""
    return name.startswith(("./", "../", "/", "~/")) or name.endswith(".json")


def config_file(name: str, base_dir: Path) -> Path:
    """The config.json a model path names: the file itself, or the one inside the folder (relative to `base_dir`)."""
    path = Path(name).expanduser()
    path = path if path.is_absolute() else base_dir / path
    return path / CONFIG if path.is_dir() else path


def architecture_from_config(path: Path) -> Architecture:
    """Read config.json's shapes into an Architecture; a missing or invalid key raises ScenarioError naming the file,
    its line and the key."""
    doc = read_yaml(path)  # JSON is YAML, and this keeps the line of every key
    if not isinstance(doc.data, dict):
        raise ScenarioError(Problem("expected a JSON object of model settings", file=str(path), line=1))
    missing = [key for key in REQUIRED if key not in doc.data]
    if missing:
        raise ScenarioError([Problem(f"required key {key!r} is missing", path=key, file=str(path), line=1,
                                     valid="a Hugging Face config.json of a decoder-only transformer "
                                     f"(keys {', '.join(REQUIRED)})") for key in missing])
    reader = _Reader(doc)
    reader.read()
    # Validate in the architecture's shape, reporting each problem at the config.json key it came from.
    lines = {field: doc.line_of((key,)) or 1 for field, key in reader.origin.items()}
    try:
        return validate_document(Architecture, YamlDocument(data=reader.fields, file=doc.file, lines=lines))
    except ScenarioError as err:
        keys = {dotted(field): key for field, key in reader.origin.items()}
        raise ScenarioError([replace(p, path=keys.get(p.path, p.path)) for p in err.problems]) from None


class _Reader:
    """Builds the Architecture's fields from config.json, remembering the key each came from."""

    def __init__(self, doc: YamlDocument):
        self.doc = doc
        self.config: dict[str, Any] = doc.data
        self.fields: dict[str, Any] = {}
        self.origin: dict[tuple[str, ...], str] = {}

    def take(self, field: tuple[str, ...], key: str) -> None:
        target = self.fields
        for part in field[:-1]:
            target = target.setdefault(part, {})
        target[field[-1]] = self.config[key]
        self.origin[field] = key

    def fail(self, key: str, message: str, **details: Any) -> ScenarioError:
        return ScenarioError(Problem(message, path=key, file=self.doc.file, line=self.doc.line_of((key,)), **details))

    def read(self) -> None:
        config = self.config
        for key in (*REQUIRED, "num_key_value_heads", "head_dim", "tie_word_embeddings", "attention_bias"):
            if config.get(key) is not None:
                self.take((key,), key)
        # Without the key, transformers gives every head its own K and V; the model classes rlsim knows (Llama, Qwen,
        # DeepSeek) leave the output head untied, which is Architecture's default.
        self.fields.setdefault("num_key_value_heads", config["num_attention_heads"])
        model_type = config.get("model_type")
        if model_type in _QKV_BIAS:
            self.fields.setdefault("attention_bias", True)
        if model_type in _QK_NORM:
            self.fields["qk_norm"] = True
        if "hidden_act" in config:
            self.fields["hidden_act"] = self.activation(config["hidden_act"])
        if any(config.get(key) for key in _EXPERTS):
            self.read_moe()
        if config.get("kv_lora_rank") is not None:
            for key in _MLA:
                if key in config:
                    self.take(("mla", key), key)

    def activation(self, value: Any) -> str:
        # The FFN costs the same for every gelu approximation.
        if value in ("silu", "swish"):
            return "silu"
        if isinstance(value, str) and value.startswith("gelu"):
            return "gelu"
        raise self.fail("hidden_act", f"activation {value!r} is not modelled", value=value, valid="silu, swish or gelu*")

    def read_moe(self) -> None:
        """The routed-expert settings under their several config.json names (Qwen-MoE, Mixtral, DeepSeek)."""
        config = self.config
        experts = next(key for key in _EXPERTS if config.get(key))
        self.take(("moe", "num_experts"), experts)
        self.origin[("moe",)] = experts  # where a check across the expert settings is reported
        if "num_experts_per_tok" not in config:
            raise self.fail(experts, f"{experts} is set but num_experts_per_tok (the top-k) is missing")
        self.take(("moe", "num_experts_per_tok"), "num_experts_per_tok")
        # Mixtral's experts are full FFNs of intermediate_size; Qwen-MoE and DeepSeek give the expert width apart.
        self.take(("moe", "moe_intermediate_size"),
                  "moe_intermediate_size" if "moe_intermediate_size" in config else "intermediate_size")
        if config.get("n_shared_experts"):
            self.take(("moe", "n_shared_experts"), "n_shared_experts")
        elif config.get("shared_expert_intermediate_size"):
            # Qwen2-MoE's one shared expert is several routed experts wide: count it as that many.
            width, expert = config["shared_expert_intermediate_size"], self.fields["moe"]["moe_intermediate_size"]
            if not (isinstance(width, int) and isinstance(expert, int) and expert > 0 and width % expert == 0):
                raise self.fail("shared_expert_intermediate_size", "a shared expert whose width is not a whole number "
                                "of routed experts' (moe_intermediate_size) is not modelled", value=width)
            self.fields["moe"]["n_shared_experts"] = width // expert
        if config.get("first_k_dense_replace"):
            self.take(("moe", "first_k_dense_replace"), "first_k_dense_replace")
        for key, sparse in (("decoder_sparse_step", config.get("decoder_sparse_step", 1) == 1),
                            ("mlp_only_layers", not config.get("mlp_only_layers"))):
            if not sparse:
                raise self.fail(key, "dense layers between MoE layers are not modelled (only leading ones: "
                                "first_k_dense_replace)", value=config[key],
                                valid="decoder_sparse_step 1 and no mlp_only_layers")
