"""NeMo-RL → rlsim: the keys `rlsim import nemo-rl` reads, their defaults, and the conversion. Conventions follow
the validation scenarios hand-translated from NeMo-RL recipes (scenarios/validation/v3-*)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from rlsim.errors import ScenarioError
from rlsim.importers.common import gpu_memory_gib, set_model, set_model_field, set_placeholder_workload
from rlsim.importers.mapping import Draft, KeyRule, Reader
from rlsim.importers.settings import Settings, read_config

BASE = "NeMo-RL's grpo_math_1B.yaml"
GEN = "policy.generation"
VLLM = "policy.generation.vllm_cfg"
MEGATRON = "policy.megatron_cfg"
DTENSOR = "policy.dtensor_cfg"
ASYNC = "grpo.async_grpo"
OLD_ASYNC = "async_grpo"  # NeMo-RL releases before async GRPO moved under grpo:
# vLLM's batch limits when the recipe does not set them (V3): vllm.LLM on a GPU of 70 GiB or more other than an A100
# (EngineArgs.get_batch_defaults), vllm.LLM elsewhere, and AsyncLLM (SchedulerConfig's own defaults).
LLM_LARGE_GPU_LIMITS = (1024, 16384)
LLM_LIMITS = (256, 8192)
ASYNC_LLM_LIMITS = (128, 2048)
# NeMo-RL's refit bucket: NRL_REFIT_BUFFER_MEMORY_RATIO 0.02 of the GPU's memory, at most 5 GiB (V3).
REFIT_BUFFER_RATIO = 0.02
REFIT_BUFFER_MAX_MIB = 5 * 1024

# The defaults of examples/configs/grpo_math_1B.yaml at NVIDIA-NeMo/RL commit 7ea279a, for the keys below.
DEFAULTS: dict[str, tuple[Any, str]] = {key: (value, BASE) for key, value in {
    "grpo.num_prompts_per_step": 32,
    "grpo.num_generations_per_prompt": 16,
    "grpo.use_dynamic_sampling": False,
    "grpo.adv_estimator.name": "grpo",
    f"{ASYNC}.enabled": False,
    f"{ASYNC}.max_trajectory_age_steps": 1,
    f"{ASYNC}.in_flight_weight_updates": False,
    f"{ASYNC}.recompute_kv_cache_after_weight_updates": False,
    "loss_fn.reference_policy_kl_penalty": 0.01,
    "policy.model_name": "Qwen/Qwen2.5-1.5B",
    "policy.train_global_batch_size": 512,
    "policy.train_micro_batch_size": 4,
    "policy.logprob_batch_size": "${policy.train_micro_batch_size}",
    "policy.max_total_sequence_length": 512,
    f"{DTENSOR}.enabled": True,
    f"{DTENSOR}.cpu_offload": False,
    f"{DTENSOR}.activation_checkpointing": False,
    f"{DTENSOR}.tensor_parallel_size": 1,
    f"{DTENSOR}.context_parallel_size": 1,
    f"{MEGATRON}.enabled": False,
    f"{MEGATRON}.activation_checkpointing": False,
    f"{MEGATRON}.recompute_granularity": "full",
    f"{MEGATRON}.tensor_model_parallel_size": 1,
    f"{MEGATRON}.pipeline_model_parallel_size": 1,
    f"{MEGATRON}.context_parallel_size": 1,
    f"{MEGATRON}.expert_model_parallel_size": 1,
    f"{MEGATRON}.optimizer.use_distributed_optimizer": True,
    f"{MEGATRON}.optimizer.optimizer_cpu_offload": False,
    f"{MEGATRON}.distributed_data_parallel_config.overlap_grad_reduce": True,
    "policy.dynamic_batching.enabled": False,
    "policy.dynamic_batching.train_mb_tokens": "${mul:${policy.max_total_sequence_length}, ${policy.train_micro_batch_size}}",
    "policy.dynamic_batching.logprob_mb_tokens": "${mul:${policy.max_total_sequence_length}, ${policy.logprob_batch_size}}",
    "policy.sequence_packing.enabled": True,
    "policy.sequence_packing.train_mb_tokens": "${mul:${policy.max_total_sequence_length}, ${policy.train_micro_batch_size}}",
    "policy.sequence_packing.logprob_mb_tokens": "${mul:${policy.max_total_sequence_length}, ${policy.logprob_batch_size}}",
    f"{GEN}.backend": "vllm",
    f"{GEN}.max_new_tokens": "${policy.max_total_sequence_length}",
    f"{VLLM}.async_engine": False,
    f"{VLLM}.tensor_parallel_size": 1,
    f"{VLLM}.expert_parallel_size": 1,
    f"{VLLM}.gpu_memory_utilization": 0.6,
    f"{VLLM}.max_model_len": "${policy.max_total_sequence_length}",
    f"{VLLM}.enforce_eager": False,
    f"{VLLM}.precision": "bfloat16",
    f"{MEGATRON}.fp8_cfg.enabled": False,
    f"{GEN}.vllm_kwargs.max_num_seqs": None,
    f"{GEN}.vllm_kwargs.max_num_batched_tokens": None,
    f"{GEN}.colocated.enabled": True,
    f"{GEN}.colocated.resources.gpus_per_node": None,
    f"{GEN}.colocated.resources.num_nodes": None,
    "data.max_input_seq_length": "${policy.max_total_sequence_length}",
    "env.math.num_workers": 8,
    "cluster.gpus_per_node": 1,
    "cluster.num_nodes": 1,
}.items()}
for _key in ("enabled", "max_trajectory_age_steps", "in_flight_weight_updates", "recompute_kv_cache_after_weight_updates"):
    DEFAULTS[f"{OLD_ASYNC}.{_key}"] = (f"${{{ASYNC}.{_key}}}", BASE)

RULES: tuple[KeyRule, ...] = (
    KeyRule("policy.model_name", "model", "catalog name from the Hugging Face id; else a local folder's config.json"),
    KeyRule("cluster.num_nodes", "cluster.pools[0].nodes", "as is"),
    KeyRule("cluster.gpus_per_node", "cluster.pools[0].gpus_per_node", "as is"),
    KeyRule("grpo.adv_estimator.name", "algorithm.name", "grpo → grpo; reinforce_plus_plus → reinforce"),
    KeyRule("grpo.use_dynamic_sampling", "algorithm.name, algorithm.dynamic_sampling", "true → dapo"),
    KeyRule("grpo.num_prompts_per_step", "algorithm.prompts_per_step", "as is"),
    KeyRule("grpo.num_generations_per_prompt", "algorithm.samples_per_prompt", "as is"),
    KeyRule("policy.train_global_batch_size", "algorithm.mini_batches",
            "num_prompts_per_step × num_generations_per_prompt / train_global_batch_size; must divide"),
    KeyRule("loss_fn.reference_policy_kl_penalty", "algorithm.ref_model", "> 0 runs the reference (grpo.py's "
            "init_reference_model)"),
    KeyRule("data.max_input_seq_length", "algorithm.max_prompt_tokens", "as is"),
    KeyRule(f"{GEN}.max_new_tokens", "algorithm.max_response_tokens", "as is"),
    KeyRule(f"{VLLM}.max_model_len", "algorithm.max_sequence_tokens", "as is: a response also stops at prompt + "
            "response = max_model_len (V3)"),
    KeyRule("policy.max_total_sequence_length", "(through the keys that default to it)", "the default of "
            "max_new_tokens, max_model_len, max_input_seq_length and the micro-batch tokens"),
    KeyRule(f"{GEN}.backend", "placement.rollout.engine", "vllm only"),
    KeyRule(f"{VLLM}.tensor_parallel_size", "placement.rollout.tp", "as is"),
    KeyRule(f"{VLLM}.expert_parallel_size", "placement.rollout.ep", "as is"),
    KeyRule(f"{VLLM}.gpu_memory_utilization", "placement.rollout.gpu_memory_utilization", "as is"),
    KeyRule(f"{VLLM}.enforce_eager", "placement.rollout.cuda_graphs", "negated"),
    KeyRule(f"{VLLM}.precision", "model.dtype", "fp8 → fp8 (DeepSeek-style 128x128 blocks); bfloat16 as the default"),
    KeyRule(f"{VLLM}.async_engine", "placement.rollout.max_num_seqs, max_num_batched_tokens",
            "vLLM's defaults for the engine class: AsyncLLM 128 and 2,048; vllm.LLM 1,024 and 16,384 on a GPU of "
            "70 GiB or more other than an A100, else 256 and 8,192 (V3)"),
    KeyRule(f"{GEN}.vllm_kwargs.max_num_seqs", "placement.rollout.max_num_seqs", "as is, when set"),
    KeyRule(f"{GEN}.vllm_kwargs.max_num_batched_tokens", "placement.rollout.max_num_batched_tokens",
            "as is, when set"),
    KeyRule(f"{GEN}.colocated.enabled", "placement.mode", "true → colocated, false → disaggregated"),
    KeyRule(f"{GEN}.colocated.resources.num_nodes", "placement.rollout.gpus",
            "not colocated: num_nodes × (resources.gpus_per_node or cluster.gpus_per_node); the rest train"),
    KeyRule(f"{GEN}.colocated.resources.gpus_per_node", "placement.rollout.gpus",
            "not colocated, on one node (or per node with num_nodes)"),
    KeyRule(f"{MEGATRON}.enabled", "placement.training.backend", "true → megatron, else the DTensor worker → fsdp2"),
    KeyRule(f"{MEGATRON}.tensor_model_parallel_size", "placement.training.tp", "Megatron"),
    KeyRule(f"{MEGATRON}.pipeline_model_parallel_size", "placement.training.pp", "Megatron"),
    KeyRule(f"{MEGATRON}.context_parallel_size", "placement.training.cp", "Megatron"),
    KeyRule(f"{MEGATRON}.expert_model_parallel_size", "placement.training.ep", "Megatron"),
    KeyRule(f"{MEGATRON}.optimizer.use_distributed_optimizer", "placement.training.zero_stage",
            "Megatron: true → 1, false → 0"),
    KeyRule(f"{MEGATRON}.optimizer.optimizer_cpu_offload", "placement.training.offload_optimizer", "Megatron"),
    KeyRule(f"{MEGATRON}.distributed_data_parallel_config.overlap_grad_reduce",
            "placement.training.overlap_grad_reduce", "Megatron: as is"),
    KeyRule(f"{MEGATRON}.fp8_cfg.enabled", "placement.training.precision", "true → fp8 (Transformer Engine)"),
    KeyRule(f"{MEGATRON}.activation_checkpointing", "placement.training.activation_recompute",
            "Megatron: true → recompute_granularity (full or selective), false → none"),
    KeyRule(f"{MEGATRON}.recompute_granularity", "placement.training.activation_recompute",
            "Megatron, with activation_checkpointing"),
    KeyRule(f"{DTENSOR}.enabled", "placement.training.backend", "DTensor (FSDP2) worker, when Megatron is off"),
    KeyRule(f"{DTENSOR}.tensor_parallel_size", "placement.training.tp", "DTensor"),
    KeyRule(f"{DTENSOR}.context_parallel_size", "placement.training.cp", "DTensor"),
    KeyRule(f"{DTENSOR}.activation_checkpointing", "placement.training.activation_recompute",
            "DTensor: true → full, false → none"),
    KeyRule(f"{DTENSOR}.cpu_offload", "placement.training.offload_params, offload_optimizer", "DTensor"),
    KeyRule("policy.sequence_packing.enabled", "placement.training.sequence_packing", "as is"),
    KeyRule("policy.sequence_packing.train_mb_tokens", "placement.training.micro_batch_tokens",
            "with sequence packing: / cp"),
    KeyRule("policy.sequence_packing.logprob_mb_tokens", "placement.training.logprob_micro_batch_tokens",
            "with sequence packing: / cp"),
    KeyRule("policy.dynamic_batching.enabled", "placement.training.micro_batch_tokens",
            "without packing: dynamic batches of train_mb_tokens"),
    KeyRule("policy.dynamic_batching.train_mb_tokens", "placement.training.micro_batch_tokens",
            "with dynamic batching: / cp"),
    KeyRule("policy.dynamic_batching.logprob_mb_tokens", "placement.training.logprob_micro_batch_tokens",
            "with dynamic batching: / cp"),
    KeyRule("policy.train_micro_batch_size", "placement.training.micro_batch_tokens",
            "neither packing nor dynamic batching: sequences × max_total_sequence_length"),
    KeyRule("policy.logprob_batch_size", "placement.training.logprob_micro_batch_tokens",
            "neither packing nor dynamic batching: sequences × max_total_sequence_length"),
    *(KeyRule(f"{prefix}.enabled", "schedule.mode", "true → async") for prefix in (ASYNC, OLD_ASYNC)),
    *(KeyRule(f"{prefix}.max_trajectory_age_steps", "schedule.max_staleness", "as is (V3)")
      for prefix in (ASYNC, OLD_ASYNC)),
    *(KeyRule(f"{prefix}.in_flight_weight_updates", "schedule.partial_rollout.mode", "true → in_flight (V3)")
      for prefix in (ASYNC, OLD_ASYNC)),
    *(KeyRule(f"{prefix}.recompute_kv_cache_after_weight_updates", "schedule.partial_rollout.mode",
              "with in-flight updates: true → interrupt (the KV cache is recomputed)") for prefix in (ASYNC, OLD_ASYNC)),
    KeyRule("env.math.num_workers", "workload.reward.workers", "the math environment's rule-based verifiers"),
)

IGNORED: tuple[str, ...] = (
    "logger.*", "checkpointing.*", "*seed*", "*.optimizer.*", "*.scheduler*", "policy.optimizer", "policy.scheduler",
    "policy.tokenizer.*", "data.dataset_name", "data.train.*", "data.validation*", "data.default.*", "data.prompt_file",
    "data.system_prompt_file", "data.shuffle", "data.num_workers", "grpo.max_num_steps", "grpo.max_num_epochs",
    "grpo.val_*", "grpo.max_val_samples", "grpo.normalize_rewards", "grpo.use_leave_one_out_baseline",
    "grpo.adv_estimator.normalize_rewards", "grpo.adv_estimator.use_leave_one_out_baseline",
    "grpo.adv_estimator.minus_baseline", "grpo.overlong_filtering", "grpo.reward_shaping.*", "grpo.reward_scaling.*",
    "loss_fn.ratio_clip*", "loss_fn.reference_policy_kl_type", "loss_fn.kl_*", "loss_fn.use_importance_sampling_correction",
    "loss_fn.token_level_loss", "loss_fn.truncated_importance_sampling*", "loss_fn.sequence_level_importance_ratios",
    "policy.max_grad_norm", "*.temperature", "*.top_p", "*.top_k", "*.stop_token_ids", "*.stop_strings",
    "policy.precision", "policy.make_sequence_length_divisible_by", "cluster.master_port*", "*.port_range*",
    "*.use_tqdm", "*.enable_vllm_metrics_logger", "*.vllm_metrics_logger_interval", "env.math.math_verify_impl",
    "policy.hf_config_overrides", "*.env_vars",
)


def read_recipe(path: Path, notes: list[str]) -> Settings:
    if path.suffix not in (".yaml", ".yml"):
        notes.append(f"{path.name} is read as YAML")
    return read_config(path, notes)


def build(reader: Reader, gpu: str, base_dir: Path) -> Draft:
    draft = Draft()
    _cluster(draft, reader, gpu)
    set_model(draft, reader, "policy.model_name", base_dir)
    _algorithm(draft, reader)
    set_placeholder_workload(draft, draft.value("algorithm.max_prompt_tokens"),
                             draft.value("algorithm.max_response_tokens"))
    workers, workers_from = reader.integer("env.math.num_workers")
    draft.set("workload.reward.kind", "rule", "NeMo-RL's math environment (hf_math_verify)")
    draft.set("workload.reward.workers", workers, workers_from)
    _rollout(draft, reader, gpu)
    _training(draft, reader)
    _schedule(draft, reader, gpu)
    return draft


def _cluster(draft: Draft, reader: Reader, gpu: str) -> None:
    nodes, nodes_from = reader.integer("cluster.num_nodes")
    per_node, per_node_from = reader.integer("cluster.gpus_per_node")
    draft.set("cluster.pools[0].name", "main", "one pool")
    draft.set("cluster.pools[0].gpu", gpu, "--gpu (NeMo-RL's recipes do not name the GPU)")
    draft.set("cluster.pools[0].nodes", nodes, nodes_from)
    draft.set("cluster.pools[0].gpus_per_node", per_node, per_node_from)
    colocated, colocated_from = reader.flag(f"{GEN}.colocated.enabled")
    if colocated:
        draft.set("placement.mode", "colocated", colocated_from)
        draft.set("placement.rollout.gpus", nodes * per_node, "colocated: every GPU (num_nodes × gpus_per_node)")
        return
    generation_nodes = reader.get(f"{GEN}.colocated.resources.num_nodes")
    generation_per_node = reader.get(f"{GEN}.colocated.resources.gpus_per_node")
    if generation_nodes.value is not None:
        count, count_from = reader.integer(f"{GEN}.colocated.resources.num_nodes")
        each = per_node
        if generation_per_node.value is not None:
            each, _ = reader.integer(f"{GEN}.colocated.resources.gpus_per_node")
        rollout, rollout_from = count * each, f"{count_from} × {each} GPUs per node"
    elif generation_per_node.value is not None:
        rollout, rollout_from = reader.integer(f"{GEN}.colocated.resources.gpus_per_node")
    else:
        raise ScenarioError(reader.problem(f"{GEN}.colocated.enabled", "generation is not colocated, but "
                                           "colocated.resources gives it no GPUs (num_nodes or gpus_per_node)"))
    if rollout >= nodes * per_node:
        raise ScenarioError(reader.problem(f"{GEN}.colocated.resources.num_nodes", f"generation takes {rollout} of "
                                           f"the cluster's {nodes * per_node} GPUs, leaving none to train"))
    draft.set("placement.mode", "disaggregated", colocated_from)
    draft.set("placement.rollout.gpus", rollout, rollout_from)
    draft.set("placement.training.gpus", nodes * per_node - rollout, "the cluster's other GPUs")


def _algorithm(draft: Draft, reader: Reader) -> None:
    estimator, estimator_from = reader.text("grpo.adv_estimator.name")
    names = {"grpo": "grpo", "reinforce_plus_plus": "reinforce"}
    if estimator not in names:
        raise ScenarioError(reader.problem("grpo.adv_estimator.name", f"unknown advantage estimator {estimator!r}",
                                           valid=", ".join(names)))
    dynamic, dynamic_from = reader.flag("grpo.use_dynamic_sampling")
    draft.set("algorithm.name", "dapo" if dynamic and estimator == "grpo" else names[estimator],
              dynamic_from if dynamic else estimator_from)
    prompts, prompts_from = reader.integer("grpo.num_prompts_per_step")
    n, n_from = reader.integer("grpo.num_generations_per_prompt")
    batch, batch_from = reader.integer("policy.train_global_batch_size")
    if (prompts * n) % batch:
        raise ScenarioError(reader.problem("policy.train_global_batch_size", f"{batch} does not divide the step's "
                                           f"{prompts * n} samples", valid="a divisor of num_prompts_per_step × "
                                           "num_generations_per_prompt"))
    draft.set("algorithm.prompts_per_step", prompts, prompts_from)
    draft.set("algorithm.samples_per_prompt", n, n_from)
    draft.set("algorithm.mini_batches", prompts * n // batch, f"samples per step / train_global_batch_size "
              f"({batch_from})")
    penalty, penalty_from = reader.number("loss_fn.reference_policy_kl_penalty")
    draft.set("algorithm.ref_model", penalty > 0, penalty_from)
    draft.set("algorithm.critic", False, "NeMo-RL's GRPO has no critic")
    draft.set("algorithm.dynamic_sampling", dynamic, dynamic_from)
    response, response_from = reader.integer(f"{GEN}.max_new_tokens")
    model_len, model_len_from = reader.integer(f"{VLLM}.max_model_len")
    prompt, prompt_from = reader.integer("data.max_input_seq_length")
    if prompt >= model_len:
        # NeMo-RL's default: prompts may fill the engine's whole length, which would leave nothing to generate.
        prompt, prompt_from = model_len // 2, f"assumed half of max_model_len: {prompt_from} leaves no room to generate"
    draft.set("algorithm.max_prompt_tokens", prompt, prompt_from)
    draft.set("algorithm.max_response_tokens", response, response_from)
    draft.set("algorithm.max_sequence_tokens", model_len, model_len_from)


def _rollout(draft: Draft, reader: Reader, gpu: str) -> None:
    backend, backend_from = reader.text(f"{GEN}.backend")
    if backend != "vllm":
        raise ScenarioError(reader.problem(f"{GEN}.backend", f"rlsim models vLLM generation, not {backend!r}",
                                           valid="vllm"))
    at = "placement.rollout"
    draft.set(f"{at}.engine", "vllm", backend_from)
    for key, field in (("tensor_parallel_size", "tp"), ("expert_parallel_size", "ep")):
        value, origin = reader.integer(f"{VLLM}.{key}")
        draft.set(f"{at}.{field}", value, origin)
    memory, memory_from = reader.number(f"{VLLM}.gpu_memory_utilization")
    draft.set(f"{at}.gpu_memory_utilization", memory, memory_from)
    eager, eager_from = reader.flag(f"{VLLM}.enforce_eager")
    draft.set(f"{at}.cuda_graphs", not eager, eager_from)
    precision, precision_from = reader.text(f"{VLLM}.precision")
    if precision == "fp8":
        set_model_field(draft, "dtype", "fp8", precision_from)
    elif precision not in ("bfloat16", "bf16"):
        raise ScenarioError(reader.problem(f"{VLLM}.precision", f"rlsim models bfloat16 and fp8 generation, not "
                                           f"{precision!r}", valid="bfloat16, fp8"))
    asynchronous, engine_from = reader.flag(f"{VLLM}.async_engine")
    large = gpu_memory_gib(gpu) >= 70 and not gpu.startswith("a100")
    limits = ASYNC_LLM_LIMITS if asynchronous else LLM_LARGE_GPU_LIMITS if large else LLM_LIMITS
    engine = "AsyncLLM" if asynchronous else "vllm.LLM"
    for index, field in enumerate(("max_num_seqs", "max_num_batched_tokens")):
        if reader.get(f"{GEN}.vllm_kwargs.{field}").value is not None:
            value, origin = reader.integer(f"{GEN}.vllm_kwargs.{field}")
            draft.set(f"{at}.{field}", value, origin)
        else:
            draft.set(f"{at}.{field}", limits[index], f"vLLM's default for {engine} on {gpu} ({engine_from}; V3)")
    if draft.value("placement.mode") == "colocated":
        draft.set(f"{at}.sleep_level", 1, "NeMo-RL sleeps its vLLM engines at level 1 (V3)")


def _training(draft: Draft, reader: Reader) -> None:
    at = "placement.training"
    megatron, megatron_from = reader.flag(f"{MEGATRON}.enabled")
    if megatron:
        draft.set(f"{at}.backend", "megatron", megatron_from)
        for key, field in (("tensor_model_parallel_size", "tp"), ("pipeline_model_parallel_size", "pp"),
                           ("context_parallel_size", "cp"), ("expert_model_parallel_size", "ep")):
            value, origin = reader.integer(f"{MEGATRON}.{key}")
            draft.set(f"{at}.{field}", value, origin)
        distributed, distributed_from = reader.flag(f"{MEGATRON}.optimizer.use_distributed_optimizer")
        draft.set(f"{at}.zero_stage", 1 if distributed else 0, distributed_from)
        overlap, overlap_from = reader.flag(f"{MEGATRON}.distributed_data_parallel_config.overlap_grad_reduce")
        draft.set(f"{at}.overlap_grad_reduce", overlap, overlap_from)
        checkpointing, checkpointing_from = reader.flag(f"{MEGATRON}.activation_checkpointing")
        granularity = reader.get(f"{MEGATRON}.recompute_granularity").value if checkpointing else "none"
        draft.set(f"{at}.activation_recompute", granularity if granularity in ("full", "selective") else "full",
                  checkpointing_from) if checkpointing else draft.set(f"{at}.activation_recompute", "none",
                                                                      checkpointing_from)
        cpu_optimizer, cpu_optimizer_from = reader.flag(f"{MEGATRON}.optimizer.optimizer_cpu_offload")
        draft.set(f"{at}.offload_optimizer", cpu_optimizer, cpu_optimizer_from)
        draft.set(f"{at}.pp_pads_micro_batches", True, "NeMo-RL pads a rank's packed micro-batches to its longest "
                  "under pipeline parallelism (V3)")
        fp8, fp8_from = reader.flag(f"{MEGATRON}.fp8_cfg.enabled")
        if fp8:
            draft.set(f"{at}.precision", "fp8", fp8_from)
        host = {"optimizer": "pageable"}
    else:
        draft.set(f"{at}.backend", "fsdp2", reader.get(f"{DTENSOR}.enabled").origin)
        for key, field in (("tensor_parallel_size", "tp"), ("context_parallel_size", "cp")):
            value, origin = reader.integer(f"{DTENSOR}.{key}")
            draft.set(f"{at}.{field}", value, origin)
        draft.set(f"{at}.zero_stage", 3, "the DTensor worker shards fully (FSDP2)")
        checkpointing, checkpointing_from = reader.flag(f"{DTENSOR}.activation_checkpointing")
        draft.set(f"{at}.activation_recompute", "full" if checkpointing else "none", checkpointing_from)
        offload, offload_from = reader.flag(f"{DTENSOR}.cpu_offload")
        draft.set(f"{at}.offload_params", offload, offload_from)
        draft.set(f"{at}.offload_optimizer", offload, offload_from)
        host = {"weights": "pageable", "optimizer": "pageable"}
    draft.set(f"{at}.logprob_kernel", "fp32_unfused", "NeMo-RL's DistributedLogprob: fp32, op by op (V3)")
    if draft.value("placement.mode") == "colocated":
        draft.set(f"{at}.offload_while_generating", True, "colocated NeMo-RL offloads weights and optimizer state "
                  "before generation (V3)")
        lives_on_host = {"weights": draft.fields.get(f"{at}.offload_params", (False,))[0],
                         "optimizer": draft.value(f"{at}.offload_optimizer")}
        for kind, memory in host.items():
            if not lives_on_host[kind]:
                draft.set(f"{at}.offload_host_memory.{kind}", memory, "NeMo-RL copies it with .to('cpu') (V3)")
    if draft.value("algorithm.ref_model"):
        draft.set(f"{at}.reference_weights", "swap", "NeMo-RL swaps the reference's weights in from the host (V3)")
    _micro_batches(draft, reader, draft.value(f"{at}.cp"))


def _micro_batches(draft: Draft, reader: Reader, cp: int) -> None:
    at = "placement.training"
    packing, packing_from = reader.flag("policy.sequence_packing.enabled")
    dynamic, dynamic_from = reader.flag("policy.dynamic_batching.enabled")
    draft.set(f"{at}.sequence_packing", packing, packing_from)
    if packing or dynamic:
        group = "policy.sequence_packing" if packing else "policy.dynamic_batching"
        for field, key in (("micro_batch_tokens", "train_mb_tokens"), ("logprob_micro_batch_tokens",
                                                                        "logprob_mb_tokens")):
            tokens, tokens_from = reader.integer(f"{group}.{key}")
            draft.set(f"{at}.{field}", max(1, tokens // cp), f"{tokens_from}" + (f" / cp {cp}" if cp > 1 else ""))
        return
    longest, _ = reader.integer("policy.max_total_sequence_length")
    for field, key in (("micro_batch_tokens", "policy.train_micro_batch_size"),
                       ("logprob_micro_batch_tokens", "policy.logprob_batch_size")):
        sequences, sequences_from = reader.integer(key)
        draft.set(f"{at}.{field}", sequences * longest, f"{sequences_from} × max_total_sequence_length "
                  f"{longest} ({dynamic_from})")


def _async_key(reader: Reader, name: str) -> str:
    """The async GRPO key the recipe sets: under grpo: (current NeMo-RL) or at the top (older releases)."""
    old = f"{OLD_ASYNC}.{name}"
    return old if reader.is_set(old) and not reader.is_set(f"{ASYNC}.{name}") else f"{ASYNC}.{name}"


def _schedule(draft: Draft, reader: Reader, gpu: str) -> None:
    enabled, enabled_from = reader.flag(_async_key(reader, "enabled"))
    colocated = draft.value("placement.mode") == "colocated"
    if colocated:
        if draft.value("placement.training.backend") == "megatron":
            draft.set("schedule.weight_sync.method", "per_tensor", "colocated refit exports tensor by tensor (V3)")
    else:
        bucket = min(REFIT_BUFFER_MAX_MIB, int(REFIT_BUFFER_RATIO * gpu_memory_gib(gpu) * 1024))
        draft.set("schedule.weight_sync.method", "nccl_broadcast", "NeMo-RL's refit broadcasts bucket by bucket (V3)")
        draft.set("schedule.weight_sync.bucket_mib", bucket, f"NRL_REFIT_BUFFER_MEMORY_RATIO 0.02 of {gpu}'s memory, "
                  "at most 5 GiB (V3)")
    if not enabled:
        draft.set("schedule.mode", "sync", enabled_from)
        return
    age, age_from = reader.integer(_async_key(reader, "max_trajectory_age_steps"))
    in_flight, in_flight_from = reader.flag(_async_key(reader, "in_flight_weight_updates"))
    recompute, recompute_from = reader.flag(_async_key(reader, "recompute_kv_cache_after_weight_updates"))
    draft.set("schedule.mode", "async", enabled_from)
    draft.set("schedule.max_staleness", age, age_from)
    mode = ("interrupt" if recompute else "in_flight") if in_flight else "off"
    draft.set("schedule.partial_rollout.mode", mode, recompute_from if in_flight and recompute else in_flight_from)
