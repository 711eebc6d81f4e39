"""verl → rlsim: the keys `rlsim import verl` reads, their defaults, and the conversion. Conventions follow the
validation scenarios hand-translated from verl runs (scenarios/validation/v1-*, v2-*, v9-*, v10-*)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from rlsim.errors import ScenarioError
from rlsim.importers.common import set_model, set_model_field, set_placeholder_workload
from rlsim.importers.mapping import Draft, KeyRule, Reader
from rlsim.importers.script import read_script
from rlsim.importers.settings import Settings, override, read_config

PPO = "verl's ppo_trainer.yaml"
MEGATRON = "verl's ppo_megatron_trainer.yaml"
FULLY_ASYNC = "verl's fully_async_ppo_trainer.yaml"
ONE_STEP_OFF = "verl's one_step_off_ppo_trainer.yaml"
ACTOR = "actor_rollout_ref.actor"
ROLLOUT = "actor_rollout_ref.rollout"
MODEL = "actor_rollout_ref.model"
# The trainer modules a launch script may run: verl's own and its recipes'.
MODULES = ("verl.", "recipe.")

# verl's defaults for the keys below, as verl/trainer/config/_generated_ppo_trainer.yaml and
# _generated_ppo_megatron_trainer.yaml (the resolved ppo_trainer.yaml and ppo_megatron_trainer.yaml) and
# verl/experimental/{fully_async_policy,one_step_off_policy}/config/*.yaml set them at verl commit b178a3c (2026-01-29).
DEFAULTS: dict[str, tuple[Any, str]] = {
    "data.train_batch_size": (1024, PPO),
    "data.max_prompt_length": (512, PPO),
    "data.max_response_length": (512, PPO),
    "algorithm.adv_estimator": ("gae", PPO),
    "algorithm.use_kl_in_reward": (False, PPO),
    "algorithm.filter_groups.enable": (False, "verl's algorithm/filter_groups.yaml"),
    "trainer.nnodes": (1, PPO),
    "trainer.n_gpus_per_node": (8, PPO),
    "actor_rollout_ref.hybrid_engine": (True, PPO),
    f"{MODEL}.path": ("~/models/deepseek-llm-7b-chat", PPO),
    f"{MODEL}.use_remove_padding": (True, PPO),
    f"{MODEL}.enable_gradient_checkpointing": (True, PPO),
    f"{ACTOR}.strategy": ("fsdp", PPO),
    f"{ACTOR}.ppo_mini_batch_size": (256, PPO),
    f"{ACTOR}.ppo_epochs": (1, PPO),
    f"{ACTOR}.use_kl_loss": (False, PPO),
    f"{ACTOR}.clip_ratio_low": (0.2, PPO),
    f"{ACTOR}.clip_ratio_high": (0.2, PPO),
    f"{ACTOR}.use_dynamic_bsz": (False, PPO),
    f"{ACTOR}.ppo_max_token_len_per_gpu": (16384, PPO),
    f"{ACTOR}.ppo_micro_batch_size_per_gpu": (None, PPO),
    f"{ACTOR}.ulysses_sequence_parallel_size": (1, PPO),
    f"{ACTOR}.use_rollout_log_probs": (False, PPO),
    f"{ACTOR}.fsdp_config.param_offload": (False, PPO),
    f"{ACTOR}.fsdp_config.optimizer_offload": (False, PPO),
    f"{ACTOR}.megatron.tensor_model_parallel_size": (1, MEGATRON),
    f"{ACTOR}.megatron.pipeline_model_parallel_size": (1, MEGATRON),
    f"{ACTOR}.megatron.virtual_pipeline_model_parallel_size": (None, MEGATRON),
    f"{ACTOR}.megatron.context_parallel_size": (1, MEGATRON),
    f"{ACTOR}.megatron.expert_model_parallel_size": (1, MEGATRON),
    f"{ACTOR}.megatron.use_distributed_optimizer": (True, MEGATRON),
    f"{ACTOR}.megatron.param_offload": (False, MEGATRON),
    f"{ACTOR}.megatron.optimizer_offload": (False, MEGATRON),
    f"{ACTOR}.megatron.override_transformer_config.recompute_granularity": (None, MEGATRON),
    # Not in the trainer config: verl/utils/megatron_utils.py builds Megatron's DDP config with it off, and
    # override_ddp_config ({} by default) may turn it on.
    f"{ACTOR}.megatron.override_ddp_config.overlap_grad_reduce": (False, "verl/utils/megatron_utils.py's DDP config"),
    "actor_rollout_ref.ref.megatron.param_offload": (
        "${oc.select:actor_rollout_ref.actor.megatron.param_offload,False}", MEGATRON),
    f"{ROLLOUT}.name": ("???", PPO),
    f"{ROLLOUT}.n": (1, PPO),
    f"{ROLLOUT}.tensor_model_parallel_size": (2, PPO),
    f"{ROLLOUT}.expert_parallel_size": (1, PPO),
    f"{ROLLOUT}.gpu_memory_utilization": (0.5, PPO),
    f"{ROLLOUT}.max_num_seqs": (256, PPO),
    f"{ROLLOUT}.max_num_batched_tokens": (8192, PPO),
    f"{ROLLOUT}.max_model_len": (None, PPO),
    f"{ROLLOUT}.enforce_eager": (False, PPO),
    f"{ROLLOUT}.micro_batch_size": (None, PPO),
    f"{ROLLOUT}.quantization": (None, PPO),
    f"{ROLLOUT}.use_block_quant_rollout": (None, PPO),
    f"{ROLLOUT}.engine_kwargs.vllm.kv_cache_dtype": (None, PPO),
    f"{ROLLOUT}.engine_kwargs.sglang.kv_cache_dtype": (None, PPO),
    f"{MODEL}.lora_rank": (0, PPO),
    f"{ROLLOUT}.log_prob_max_token_len_per_gpu": (
        "${oc.select:actor_rollout_ref.actor.ppo_max_token_len_per_gpu,16384}", PPO),
    f"{ROLLOUT}.log_prob_micro_batch_size_per_gpu": (None, PPO),
    "reward_model.enable": (False, PPO),
    "reward_model.model.path": ("~/models/FsfairX-LLaMA3-RM-v0.1", PPO),
    "reward_model.enable_resource_pool": (False, PPO),
    "reward_model.nnodes": (0, PPO),
    "reward_model.n_gpus_per_node": (8, PPO),
    "reward_model.reward_manager": ("naive", PPO),
    "reward_model.sandbox_fusion.url": (None, PPO),
    "reward_model.sandbox_fusion.max_concurrent": (64, PPO),
    "rollout.nnodes": (1, FULLY_ASYNC),
    "rollout.n_gpus_per_node": (8, FULLY_ASYNC),
    "async_training.staleness_threshold": (0.1, FULLY_ASYNC),
    "async_training.trigger_parameter_sync_step": (4, FULLY_ASYNC),
    "async_training.require_batches": (1, FULLY_ASYNC),
    "async_training.partial_rollout": (True, FULLY_ASYNC),
    "async_training.use_rollout_log_probs": (True, FULLY_ASYNC),
}

RULES: tuple[KeyRule, ...] = (
    KeyRule(f"{MODEL}.path", "model", "catalog name from the Hugging Face id or the folder's name; else the folder's "
            "config.json"),
    KeyRule("trainer.nnodes", "cluster.pools[0].nodes", "training nodes; split pools add rollout.nnodes"),
    KeyRule("trainer.n_gpus_per_node", "cluster.pools[0].gpus_per_node", "GPUs per node"),
    KeyRule("algorithm.adv_estimator", "algorithm.name, algorithm.critic",
            "gae → ppo (critic on); reinforce_plus_plus*, remax → reinforce; grpo and other group estimators → grpo"),
    KeyRule("algorithm.filter_groups.enable", "algorithm.name, algorithm.dynamic_sampling",
            "DAPO's dynamic sampling: true makes the algorithm dapo"),
    KeyRule(f"{ACTOR}.clip_ratio_low", "algorithm.name", "with clip_ratio_high: clip-higher (high > low) is DAPO's"),
    KeyRule(f"{ACTOR}.clip_ratio_high", "algorithm.name", "with clip_ratio_low: clip-higher (high > low) is DAPO's"),
    KeyRule("data.train_batch_size", "algorithm.prompts_per_step",
            "prompts per step (fully async: ppo_mini_batch_size × require_batches × trigger_parameter_sync_step)"),
    KeyRule(f"{ROLLOUT}.n", "algorithm.samples_per_prompt", "as is"),
    KeyRule(f"{ACTOR}.ppo_mini_batch_size", "algorithm.mini_batches",
            "train_batch_size / ppo_mini_batch_size (both in prompts); must divide"),
    KeyRule(f"{ACTOR}.ppo_epochs", "algorithm.ppo_epochs", "as is"),
    KeyRule(f"{ACTOR}.use_kl_loss", "algorithm.ref_model", "either of use_kl_loss, use_kl_in_reward runs the reference"),
    KeyRule("algorithm.use_kl_in_reward", "algorithm.ref_model", "either of use_kl_loss, use_kl_in_reward runs the "
            "reference"),
    KeyRule(f"{ACTOR}.use_rollout_log_probs", "algorithm.recompute_old_log_prob", "true: no old_log_prob pass"),
    KeyRule("data.max_prompt_length", "algorithm.max_prompt_tokens", "as is"),
    KeyRule("data.max_response_length", "algorithm.max_response_tokens", "as is"),
    KeyRule(f"{ROLLOUT}.max_model_len", "algorithm.max_sequence_tokens", "as is, when set"),
    KeyRule("actor_rollout_ref.hybrid_engine", "placement.mode",
            "true → colocated; false (split pools) → disaggregated"),
    KeyRule("rollout.nnodes", "placement.rollout.gpus", "split pools: rollout.nnodes × rollout.n_gpus_per_node"),
    KeyRule("rollout.n_gpus_per_node", "placement.rollout.gpus", "split pools: rollout GPUs per node"),
    KeyRule(f"{ROLLOUT}.name", "placement.rollout.engine", "vllm, sglang, or hf (verl's HFRollout: tp 1, prompts "
            "padded to data.max_prompt_length)"),
    KeyRule(f"{ROLLOUT}.micro_batch_size", "placement.rollout.max_num_seqs",
            "hf: prompts per generate() call × rollout.n (default: each GPU's share of the batch)"),
    KeyRule(f"{ROLLOUT}.tensor_model_parallel_size", "placement.rollout.tp", "as is"),
    KeyRule(f"{ROLLOUT}.expert_parallel_size", "placement.rollout.ep", "as is"),
    KeyRule(f"{ROLLOUT}.gpu_memory_utilization", "placement.rollout.gpu_memory_utilization", "as is"),
    KeyRule(f"{ROLLOUT}.max_num_seqs", "placement.rollout.max_num_seqs", "as is"),
    KeyRule(f"{ROLLOUT}.max_num_batched_tokens", "placement.rollout.max_num_batched_tokens", "as is"),
    KeyRule(f"{ROLLOUT}.enforce_eager", "placement.rollout.cuda_graphs", "negated"),
    KeyRule(f"{ROLLOUT}.quantization", "model.dtype", "true or fp8 → fp8 (verl's FP8 rollout, 128x128 weight blocks)"),
    KeyRule(f"{ROLLOUT}.use_block_quant_rollout", "model.dtype", "read with quantization: rlsim prices the FP8 "
            "scaling schemes alike (their scale bytes are under 0.1 % of the weights)"),
    KeyRule(f"{ROLLOUT}.engine_kwargs.vllm.kv_cache_dtype", "placement.rollout.kv_cache_dtype",
            "fp8, fp8_e4m3, fp8_e5m2 → fp8; auto as is"),
    KeyRule(f"{ROLLOUT}.engine_kwargs.sglang.kv_cache_dtype", "placement.rollout.kv_cache_dtype",
            "fp8, fp8_e4m3, fp8_e5m2 → fp8; auto as is"),
    KeyRule(f"{MODEL}.lora_rank", "placement.training.lora_rank", "as is (0: full training)"),
    KeyRule(f"{ACTOR}.strategy", "placement.training.backend", "fsdp, fsdp2 or megatron; FSDP shards fully "
            "(zero_stage 3)"),
    KeyRule(f"{ACTOR}.ulysses_sequence_parallel_size", "placement.training.cp", "FSDP's Ulysses sequence parallelism"),
    KeyRule(f"{ACTOR}.megatron.tensor_model_parallel_size", "placement.training.tp", "Megatron"),
    KeyRule(f"{ACTOR}.megatron.pipeline_model_parallel_size", "placement.training.pp", "Megatron"),
    KeyRule(f"{ACTOR}.megatron.virtual_pipeline_model_parallel_size", "placement.training.virtual_pipeline_stages",
            "Megatron, when set"),
    KeyRule(f"{ACTOR}.megatron.context_parallel_size", "placement.training.cp", "Megatron"),
    KeyRule(f"{ACTOR}.megatron.expert_model_parallel_size", "placement.training.ep", "Megatron"),
    KeyRule(f"{ACTOR}.megatron.use_distributed_optimizer", "placement.training.zero_stage",
            "Megatron: true → 1 (optimizer sharded), false → 0"),
    KeyRule(f"{ACTOR}.megatron.override_ddp_config.overlap_grad_reduce", "placement.training.overlap_grad_reduce",
            "Megatron: as is (verl leaves it off: gradients reduced after the backward pass)"),
    KeyRule(f"{ACTOR}.fsdp_config.param_offload", "placement.training.offload_while_generating.weights, "
            "offload_weights_per_call", "the weights leave the GPU between worker calls (V10)"),
    KeyRule(f"{ACTOR}.fsdp_config.optimizer_offload", "placement.training.offload_while_generating.optimizer",
            "as is"),
    KeyRule(f"{ACTOR}.megatron.param_offload", "placement.training.offload_while_generating.weights, "
            "offload_weights_per_call", "Megatron, as FSDP's"),
    KeyRule(f"{ACTOR}.megatron.optimizer_offload", "placement.training.offload_while_generating.optimizer",
            "Megatron"),
    KeyRule("actor_rollout_ref.ref.megatron.param_offload", "placement.training.reference_weights",
            "Megatron: true → host, else resident (FSDP's reference is always host-offloaded: V10)"),
    KeyRule(f"{ACTOR}.use_dynamic_bsz", "placement.training.micro_batch_tokens",
            "true: micro-batches of ppo_max_token_len_per_gpu tokens; false: ppo_micro_batch_size_per_gpu × "
            "(max prompt + max response)"),
    KeyRule(f"{ACTOR}.ppo_max_token_len_per_gpu", "placement.training.micro_batch_tokens", "with use_dynamic_bsz"),
    KeyRule(f"{ACTOR}.ppo_micro_batch_size_per_gpu", "placement.training.micro_batch_tokens",
            "without use_dynamic_bsz: sequences × the longest prompt + response"),
    KeyRule(f"{ROLLOUT}.log_prob_max_token_len_per_gpu", "placement.training.logprob_micro_batch_tokens",
            "with use_dynamic_bsz"),
    KeyRule(f"{ROLLOUT}.log_prob_micro_batch_size_per_gpu", "placement.training.logprob_micro_batch_tokens",
            "without use_dynamic_bsz: sequences × the longest prompt + response"),
    KeyRule(f"{MODEL}.use_remove_padding", "placement.training.sequence_packing", "as is"),
    KeyRule(f"{MODEL}.enable_gradient_checkpointing", "placement.training.activation_recompute",
            "FSDP: true → full, false → none"),
    KeyRule(f"{ACTOR}.megatron.override_transformer_config.recompute_granularity",
            "placement.training.activation_recompute", "Megatron: full or selective; unset → none (V10)"),
    KeyRule("async_training.staleness_threshold", "schedule.max_staleness", "fully async: as is (V1)"),
    KeyRule("async_training.trigger_parameter_sync_step", "algorithm.mini_batches, schedule.weight_sync."
            "every_updates", "fully async: a step is one parameter sync of require_batches × this many updates (V1)"),
    KeyRule("async_training.require_batches", "schedule.fetch_mini_batches", "fully async: as is (V1)"),
    KeyRule("async_training.partial_rollout", "schedule.partial_rollout.mode", "fully async: true → interrupt (V1)"),
    KeyRule("async_training.use_rollout_log_probs", "algorithm.recompute_old_log_prob",
            "fully async: true → false (no old_log_prob pass: V1)"),
    KeyRule("reward_model.enable", "workload.reward.kind", "true → reward_model"),
    KeyRule("reward_model.model.path", "workload.reward.model", "catalog name, as the policy's"),
    KeyRule("reward_model.enable_resource_pool", "placement.reward_model.gpus",
            "true: the reward model's own GPUs, reward_model.nnodes × n_gpus_per_node"),
    KeyRule("reward_model.nnodes", "placement.reward_model.gpus", "with enable_resource_pool"),
    KeyRule("reward_model.n_gpus_per_node", "placement.reward_model.gpus", "with enable_resource_pool"),
    KeyRule("reward_model.reward_manager", "workload.reward.workers",
            "naive, dapo: one response at a time → 1 worker (V10)"),
    KeyRule("reward_model.sandbox_fusion.url", "workload.reward.kind", "set → sandbox"),
    KeyRule("reward_model.sandbox_fusion.max_concurrent", "workload.reward.concurrency", "sandbox"),
)

# Settings that do not change how long a step takes (shell-style patterns over dotted keys).
IGNORED: tuple[str, ...] = (
    "trainer.logger", "trainer.project_name", "trainer.experiment_name", "trainer.save_freq", "trainer.test_freq",
    "trainer.total_epochs", "trainer.total_training_steps", "trainer.default_local_dir", "trainer.default_hdfs_dir",
    "trainer.resume_mode", "trainer.resume_from_path", "trainer.val_before_train", "trainer.val_only",
    "trainer.log_val_generations", "trainer.max_*_ckpt_to_keep", "trainer.del_local_ckpt_after_load", "trainer.device",
    "trainer.rollout_data_dir", "trainer.validation_data_dir", "trainer.critic_warmup", "trainer.balance_batch",
    "*.optim.*", "*.lr", "*seed*", "*profiler*", "*.checkpoint.*", "*checkpoint*", "hydra.*",
    "data.train_files", "data.val_files", "data.val_batch_size", "data.prompt_key", "data.reward_fn_key",
    "data.truncation", "data.filter_overlong_prompts*", "data.return_raw_chat", "data.shuffle", "data.dataloader_num_workers",
    "data.tokenizer", "data.image_key", "data.video_key", "data.trust_remote_code", "data.custom_cls.*",
    "*.val_kwargs.*", "*.temperature", "*.top_p", "*.top_k", "*.do_sample", "*.entropy_coeff", "*.grad_clip",
    "*.clip_ratio", "*.clip_ratio_c", "*.kl_loss_coef", "*.kl_loss_type", "algorithm.kl_ctrl.*", "algorithm.kl_penalty",
    "algorithm.gamma", "algorithm.lam", "algorithm.norm_adv_by_std_in_grpo", "*.loss_agg_mode", "*.policy_loss.*",
    "custom_reward_function.*", "*.trust_remote_code", "*.external_lib", "*.tokenizer_path", "*.override_config.*",
    "ray_kwargs.*", "ray_init.*", "rollout.total_rollout_steps", "rollout.total_epochs", "rollout.test_freq",
    "*.shuffle", "*.log_val_generations", "*.nccl_timeout",
)


def read_inputs(paths: list[Path]) -> tuple[Settings, str, str, list[str]]:
    """Settings from config YAMLs and launch scripts, later files overriding earlier ones; the trainer module the
    script runs and the config it names ('' for configs only); notes on defaults files not found."""
    settings: Settings = {}
    module = config_name = ""
    notes: list[str] = []
    for path in paths:
        if path.suffix in (".yaml", ".yml"):
            settings.update(read_config(path, notes))
            continue
        command = read_script(path, MODULES)
        module = command.module
        options = {"--config-path": "", "--config-name": ""}
        words = command.words
        for i, word in enumerate(words):
            name, equals, value = word.text.partition("=")
            if name in options:
                options[name] = value if equals else (words[i + 1].text if i + 1 < len(words) else "")
        config_name = options["--config-name"] or config_name
        config = _script_config(path, options["--config-path"], options["--config-name"], notes)
        if config is not None:
            settings.update(read_config(config, notes))
        skip_next = False
        for word in words:
            if skip_next:
                skip_next = False
                continue
            if word.text in options:
                skip_next = True
                continue
            if word.text.startswith("-") or "=" not in word.text:
                if word.text and word.text.split("=")[0] not in options:
                    notes.append(f"{path.name} line {word.line}: argument {word.text!r} is not a key=value override")
                continue
            key, setting = override(word.text, str(path), word.line)
            settings[key] = setting
    return settings, module, config_name, notes


def _script_config(script: Path, folder: str, name: str, notes: list[str]) -> Path | None:
    if not name:
        return None
    for base in (script.parent / folder, script.parent):
        for candidate in (base / name, base / f"{name}.yaml"):
            if candidate.is_file():
                return candidate
    notes.append(f"--config-name {name} is not a local file: its values are verl's defaults")
    return None


def defaults_for(config_name: str) -> dict[str, tuple[Any, str]]:
    """verl's defaults for a run of the trainer config `config_name` (ppo_megatron_trainer's actors are Megatron)."""
    if "megatron" in config_name:
        return {**DEFAULTS, f"{ACTOR}.strategy": ("megatron", MEGATRON)}
    return DEFAULTS


def build(reader: Reader, module: str, gpu: str, base_dir: Path) -> Draft:
    draft = Draft()
    fully_async = "fully_async" in module or any(k.startswith("async_training.") for k in reader.settings)
    one_step_off = "one_step_off" in module
    hybrid = reader.get("actor_rollout_ref.hybrid_engine").value
    _cluster(draft, reader, gpu, split=fully_async or one_step_off or not hybrid)
    set_model(draft, reader, f"{MODEL}.path", base_dir)
    _algorithm(draft, reader, fully_async)
    set_placeholder_workload(draft, draft.value("algorithm.max_prompt_tokens"),
                             draft.value("algorithm.max_response_tokens"))
    _reward(draft, reader)
    _rollout(draft, reader)
    _training(draft, reader)
    _schedule(draft, reader, fully_async, one_step_off)
    return draft


def _cluster(draft: Draft, reader: Reader, gpu: str, split: bool) -> None:
    nodes, nodes_from = reader.integer("trainer.nnodes")
    per_node, per_node_from = reader.integer("trainer.n_gpus_per_node")
    draft.set("cluster.pools[0].name", "main", "one pool")
    draft.set("cluster.pools[0].gpu", gpu, "--gpu (verl's files do not name the GPU)")
    if not split:
        draft.set("cluster.pools[0].nodes", nodes, nodes_from)
        draft.set("cluster.pools[0].gpus_per_node", per_node, per_node_from)
        draft.set("placement.mode", "colocated", reader.get("actor_rollout_ref.hybrid_engine").origin)
        draft.set("placement.rollout.gpus", nodes * per_node, "colocated: every GPU (trainer.nnodes × n_gpus_per_node)")
        return
    rollout_nodes, rollout_nodes_from = reader.integer("rollout.nnodes")
    rollout_per_node, rollout_per_node_from = reader.integer("rollout.n_gpus_per_node")
    draft.set("placement.mode", "disaggregated", "split pools: the trainer's and the rollout's")
    if rollout_per_node != per_node:
        # Nodes of two sizes: a pool each, as verl's resource pools are.
        draft.set("cluster.pools[0].name", "train", "verl's trainer pool")
        draft.set("cluster.pools[0].nodes", nodes, nodes_from)
        draft.set("cluster.pools[0].gpus_per_node", per_node, per_node_from)
        draft.set("cluster.pools[1].name", "rollout", "verl's rollout pool")
        draft.set("cluster.pools[1].gpu", gpu, "--gpu")
        draft.set("cluster.pools[1].nodes", rollout_nodes, rollout_nodes_from)
        draft.set("cluster.pools[1].gpus_per_node", rollout_per_node, rollout_per_node_from)
        draft.set("placement.rollout.pool", "rollout", "verl's rollout pool")
        draft.set("placement.rollout.gpus", rollout_nodes * rollout_per_node, "rollout.nnodes × rollout.n_gpus_per_node")
        draft.set("placement.training.pool", "train", "verl's trainer pool")
        draft.set("placement.training.gpus", nodes * per_node, "trainer.nnodes × trainer.n_gpus_per_node")
        return
    draft.set("cluster.pools[0].nodes", nodes + rollout_nodes, f"trainer.nnodes + rollout.nnodes ({nodes_from}; "
              f"{rollout_nodes_from})")
    draft.set("cluster.pools[0].gpus_per_node", per_node, per_node_from)
    draft.set("placement.rollout.gpus", rollout_nodes * rollout_per_node,
              f"rollout.nnodes × rollout.n_gpus_per_node ({rollout_per_node_from})")
    draft.set("placement.training.gpus", nodes * per_node, f"trainer.nnodes × trainer.n_gpus_per_node ({nodes_from})")


_ESTIMATORS = {"gae": "ppo", "reinforce_plus_plus": "reinforce", "reinforce_plus_plus_baseline": "reinforce",
               "remax": "reinforce"}
_GROUP_ESTIMATORS = ("grpo", "rloo", "opo", "gpg", "grpo_passk", "drgrpo", "grpo_vectorized", "gspo", "optimal_token_"
                     "baseline", "tir_optimal_token_baseline", "rloo_vectorized", "gdpo")


def _algorithm(draft: Draft, reader: Reader, fully_async: bool) -> None:
    estimator, estimator_from = reader.text("algorithm.adv_estimator")
    if estimator not in _ESTIMATORS and estimator not in _GROUP_ESTIMATORS:
        raise ScenarioError(reader.problem("algorithm.adv_estimator", f"unknown advantage estimator {estimator!r}",
                                           valid=", ".join([*_ESTIMATORS, *_GROUP_ESTIMATORS])))
    filter_groups, filter_from = reader.flag("algorithm.filter_groups.enable")
    low, _ = reader.number(f"{ACTOR}.clip_ratio_low")
    high, high_from = reader.number(f"{ACTOR}.clip_ratio_high")
    name = _ESTIMATORS.get(estimator, "grpo")
    why = estimator_from
    if name == "grpo" and (filter_groups or high > low):
        name, why = "dapo", filter_from if filter_groups else f"clip-higher: {high_from}"
    draft.set("algorithm.name", name, why)
    n, n_from = reader.integer(f"{ROLLOUT}.n")
    mini, mini_from = reader.integer(f"{ACTOR}.ppo_mini_batch_size")
    if fully_async:
        require, require_from = reader.integer("async_training.require_batches")
        trigger, trigger_from = reader.integer("async_training.trigger_parameter_sync_step")
        reader.get("data.train_batch_size")  # 0 in fully async runs: the rollouter streams
        draft.set("algorithm.prompts_per_step", mini * require * trigger,
                  f"one parameter sync: ppo_mini_batch_size {mini} × require_batches {require} × "
                  f"trigger_parameter_sync_step {trigger} (V1)")
        draft.set("algorithm.samples_per_prompt", n, n_from)
        draft.set("algorithm.mini_batches", require * trigger, f"{require_from}; {trigger_from}")
    else:
        batch, batch_from = reader.integer("data.train_batch_size")
        if batch % mini:
            raise ScenarioError(reader.problem(f"{ACTOR}.ppo_mini_batch_size", f"{mini} does not divide "
                                               f"data.train_batch_size {batch}", valid="a divisor of the batch"))
        draft.set("algorithm.prompts_per_step", batch, batch_from)
        draft.set("algorithm.samples_per_prompt", n, n_from)
        draft.set("algorithm.mini_batches", batch // mini, f"train_batch_size / ppo_mini_batch_size ({mini_from})")
    epochs, epochs_from = reader.integer(f"{ACTOR}.ppo_epochs")
    draft.set("algorithm.ppo_epochs", epochs, epochs_from)
    kl_loss, kl_loss_from = reader.flag(f"{ACTOR}.use_kl_loss")
    kl_reward, kl_reward_from = reader.flag("algorithm.use_kl_in_reward")
    draft.set("algorithm.ref_model", kl_loss or kl_reward, f"{kl_loss_from}; {kl_reward_from}")
    draft.set("algorithm.critic", estimator == "gae", estimator_from)
    draft.set("algorithm.dynamic_sampling", filter_groups, filter_from)
    if fully_async:
        reuse, reuse_from = reader.flag("async_training.use_rollout_log_probs")
    else:
        reuse, reuse_from = reader.flag(f"{ACTOR}.use_rollout_log_probs")
    draft.set("algorithm.recompute_old_log_prob", not reuse, reuse_from)
    for key, field in (("data.max_prompt_length", "max_prompt_tokens"), ("data.max_response_length",
                                                                          "max_response_tokens")):
        value, origin = reader.integer(key)
        draft.set(f"algorithm.{field}", value, origin)
    model_len = reader.get(f"{ROLLOUT}.max_model_len")
    if model_len.value is not None:
        value, origin = reader.integer(f"{ROLLOUT}.max_model_len")
        draft.set("algorithm.max_sequence_tokens", value, origin)


def _reward(draft: Draft, reader: Reader) -> None:
    enabled, enabled_from = reader.flag("reward_model.enable")
    sandbox = reader.get("reward_model.sandbox_fusion.url")
    manager = reader.get("reward_model.reward_manager")
    if enabled:
        path, path_from = reader.text("reward_model.model.path")
        judge = Draft()
        set_model(judge, reader, "reward_model.model.path", Path.cwd())
        draft.set("workload.reward.kind", "reward_model", enabled_from)
        draft.set("workload.reward.model", judge.value("model"), path_from)
        own, own_from = reader.flag("reward_model.enable_resource_pool")
        if own:
            nodes, _ = reader.integer("reward_model.nnodes")
            per_node, _ = reader.integer("reward_model.n_gpus_per_node")
            draft.set("placement.reward_model.gpus", nodes * per_node, f"reward_model.nnodes × n_gpus_per_node "
                      f"({own_from})")
        else:
            draft.notes.append("reward model: verl runs it on the training GPUs between stages; rlsim gives it GPUs "
                               "of its own, so placement.reward_model.gpus is set to 1 — check the plan's figures")
            draft.set("placement.reward_model.gpus", 1, "assumed: verl shares the training GPUs (see the notes above)")
    elif sandbox.value:
        concurrency, concurrency_from = reader.integer("reward_model.sandbox_fusion.max_concurrent")
        draft.set("workload.reward.kind", "sandbox", sandbox.origin)
        draft.set("workload.reward.median_latency_s", 1.0, "assumed: verl's files do not give the sandbox's latency")
        draft.set("workload.reward.concurrency", concurrency, concurrency_from)
        draft.notes.append("reward: the sandbox's latency is not in verl's files; 1 s per execution is assumed")
    else:
        draft.set("workload.reward.kind", "rule", "no reward model, no sandbox: verl's rule-based reward function")
        if manager.value in ("naive", "dapo"):
            draft.set("workload.reward.workers", 1, f"{manager.origin}: one response at a time (V10)")


def _rollout(draft: Draft, reader: Reader) -> None:
    engine, engine_from = reader.text(f"{ROLLOUT}.name")
    if engine == "hf":
        _hf_rollout(draft, reader, engine_from)
        return
    if engine not in ("vllm", "sglang"):
        raise ScenarioError(reader.problem(f"{ROLLOUT}.name", f"rlsim models vLLM, SGLang and Hugging Face generate() "
                                           f"engines, not {engine!r}", valid="vllm, sglang, hf"))
    draft.set("placement.rollout.engine", engine, engine_from)
    for key, field in (("tensor_model_parallel_size", "tp"), ("expert_parallel_size", "ep"),
                       ("max_num_seqs", "max_num_seqs"), ("max_num_batched_tokens", "max_num_batched_tokens")):
        value, origin = reader.integer(f"{ROLLOUT}.{key}")
        draft.set(f"placement.rollout.{field}", value, origin)
    memory, memory_from = reader.number(f"{ROLLOUT}.gpu_memory_utilization")
    draft.set("placement.rollout.gpu_memory_utilization", memory, memory_from)
    eager, eager_from = reader.flag(f"{ROLLOUT}.enforce_eager")
    draft.set("placement.rollout.cuda_graphs", not eager, eager_from)
    quantization = reader.get(f"{ROLLOUT}.quantization")
    if quantization.value not in (None, False, "", "none", "null"):
        if quantization.value not in (True, "fp8"):
            raise ScenarioError(reader.problem(f"{ROLLOUT}.quantization", "rlsim models FP8 rollout quantization",
                                               valid="true or fp8 (or unset)"))
        reader.get(f"{ROLLOUT}.use_block_quant_rollout")  # the scheme: priced alike
        set_model_field(draft, "dtype", "fp8", quantization.origin)
    key = f"{ROLLOUT}.engine_kwargs.{engine}.kv_cache_dtype"
    kv = reader.get(key)
    if kv.value not in (None, "auto"):
        if not (isinstance(kv.value, str) and kv.value.startswith("fp8")):
            raise ScenarioError(reader.problem(key, "rlsim models 16-bit and FP8 KV caches",
                                               valid="auto, fp8, fp8_e4m3, fp8_e5m2"))
        draft.set("placement.rollout.kv_cache_dtype", "fp8", kv.origin)


def _hf_rollout(draft: Draft, reader: Reader, engine_from: str) -> None:
    """verl's HFRollout (verl/workers/rollout/hf_rollout.py): every training rank calls generate() on its own GPU over
    its share of the prompts, micro_batch_size prompts at a time (default: the whole share), each with n return
    sequences, the prompts left-padded to data.max_prompt_length by verl's dataset."""
    at = "placement.rollout"
    draft.set(f"{at}.engine", "hf", engine_from)
    draft.set(f"{at}.tp", 1, "verl's HFRollout generates on each training GPU alone")
    draft.set(f"{at}.pad_prompts", "max_prompt_tokens", "verl's dataset left-pads prompts to data.max_prompt_length")
    samples = draft.value("algorithm.samples_per_prompt")
    micro = reader.get(f"{ROLLOUT}.micro_batch_size")
    if micro.value is not None:
        prompts, prompts_from = reader.integer(f"{ROLLOUT}.micro_batch_size")
        draft.set(f"{at}.max_num_seqs", prompts * samples, f"{prompts_from} prompts × rollout.n per generate() call")
    else:
        share = -(-draft.value("algorithm.prompts_per_step") // draft.value(f"{at}.gpus"))
        draft.set(f"{at}.max_num_seqs", share * samples, f"{micro.origin}: each GPU's share of the prompts "
                  "(train_batch_size / GPUs) × rollout.n in one generate() call")
    memory, memory_from = reader.number(f"{ROLLOUT}.gpu_memory_utilization")
    draft.set(f"{at}.gpu_memory_utilization", memory, memory_from)


def _training(draft: Draft, reader: Reader) -> None:
    strategy, strategy_from = reader.text(f"{ACTOR}.strategy")
    if strategy not in ("fsdp", "fsdp2", "megatron"):
        raise ScenarioError(reader.problem(f"{ACTOR}.strategy", f"unknown training strategy {strategy!r}",
                                           valid="fsdp, fsdp2, megatron"))
    at = "placement.training"
    draft.set(f"{at}.backend", strategy, strategy_from)
    if strategy == "megatron":
        for key, field in (("tensor_model_parallel_size", "tp"), ("pipeline_model_parallel_size", "pp"),
                           ("context_parallel_size", "cp"), ("expert_model_parallel_size", "ep")):
            value, origin = reader.integer(f"{ACTOR}.megatron.{key}")
            draft.set(f"{at}.{field}", value, origin)
        if reader.get(f"{ACTOR}.megatron.virtual_pipeline_model_parallel_size").value is not None:
            value, origin = reader.integer(f"{ACTOR}.megatron.virtual_pipeline_model_parallel_size")
            draft.set(f"{at}.virtual_pipeline_stages", value, origin)
        distributed, distributed_from = reader.flag(f"{ACTOR}.megatron.use_distributed_optimizer")
        draft.set(f"{at}.zero_stage", 1 if distributed else 0, distributed_from)
        overlap, overlap_from = reader.flag(f"{ACTOR}.megatron.override_ddp_config.overlap_grad_reduce")
        draft.set(f"{at}.overlap_grad_reduce", overlap, overlap_from)
        recompute = reader.get(f"{ACTOR}.megatron.override_transformer_config.recompute_granularity")
        granularity = recompute.value if recompute.value in ("full", "selective") else "none"
        draft.set(f"{at}.activation_recompute", granularity, recompute.origin)
        draft.set(f"{at}.logprob_kernel", "fp32_vocab_parallel", "verl's Megatron workers: Megatron-Core's "
                  "vocab-parallel cross-entropy (V10)")
        weights, weights_from = reader.flag(f"{ACTOR}.megatron.param_offload")
        optimizer, optimizer_from = reader.flag(f"{ACTOR}.megatron.optimizer_offload")
        ref_host, ref_from = reader.flag("actor_rollout_ref.ref.megatron.param_offload")
        reference = ("host" if ref_host else "resident", ref_from)
    else:
        cp, cp_from = reader.integer(f"{ACTOR}.ulysses_sequence_parallel_size")
        draft.set(f"{at}.cp", cp, cp_from)
        draft.set(f"{at}.zero_stage", 3, "verl's FSDP shards parameters, gradients and optimizer state")
        checkpointing, checkpointing_from = reader.flag(f"{MODEL}.enable_gradient_checkpointing")
        draft.set(f"{at}.activation_recompute", "full" if checkpointing else "none", checkpointing_from)
        weights, weights_from = reader.flag(f"{ACTOR}.fsdp_config.param_offload")
        optimizer, optimizer_from = reader.flag(f"{ACTOR}.fsdp_config.optimizer_offload")
        reference = ("host", "verl's FSDP worker always offloads the reference's parameters (V10)")
    if draft.value("placement.mode") == "colocated":
        draft.set(f"{at}.offload_while_generating.weights", weights, weights_from)
        draft.set(f"{at}.offload_while_generating.optimizer", optimizer, optimizer_from)
        draft.set(f"{at}.offload_weights_per_call", weights, weights_from)
    else:
        draft.set(f"{at}.offload_params", weights, weights_from)
        draft.set(f"{at}.offload_optimizer", optimizer, optimizer_from)
    if draft.value("algorithm.ref_model"):
        draft.set(f"{at}.reference_weights", *reference)
    packing, packing_from = reader.flag(f"{MODEL}.use_remove_padding")
    draft.set(f"{at}.sequence_packing", packing, packing_from)
    rank, rank_from = reader.integer(f"{MODEL}.lora_rank", minimum=0)
    if rank:
        draft.set(f"{at}.lora_rank", rank, rank_from)
    dynamic, dynamic_from = reader.flag(f"{ACTOR}.use_dynamic_bsz")
    longest = draft.value("algorithm.max_prompt_tokens") + draft.value("algorithm.max_response_tokens")
    for field, tokens_key, sequences_key in (
            ("micro_batch_tokens", f"{ACTOR}.ppo_max_token_len_per_gpu", f"{ACTOR}.ppo_micro_batch_size_per_gpu"),
            ("logprob_micro_batch_tokens", f"{ROLLOUT}.log_prob_max_token_len_per_gpu",
             f"{ROLLOUT}.log_prob_micro_batch_size_per_gpu")):
        if dynamic:
            tokens, tokens_from = reader.integer(tokens_key)
            draft.set(f"{at}.{field}", tokens, f"{tokens_from}, use_dynamic_bsz ({dynamic_from})")
        elif reader.get(sequences_key).value is not None:
            sequences, sequences_from = reader.integer(sequences_key)
            draft.set(f"{at}.{field}", sequences * longest, f"{sequences_from} sequences × the longest prompt + "
                      f"response, {longest} (rlsim packs by tokens)")


def _schedule(draft: Draft, reader: Reader, fully_async: bool, one_step_off: bool) -> None:
    draft.set("placement.concurrent_stages", "none", "verl's trainer waits for each worker group's call in turn "
              "(single_controller's register blocks by default)")
    if draft.value("placement.training.backend") == "megatron":
        draft.set("schedule.weight_sync.method", "per_tensor", "verl's Megatron workers export tensor by tensor (V10)")
    if fully_async:
        staleness, staleness_from = reader.number("async_training.staleness_threshold")
        require, require_from = reader.integer("async_training.require_batches")
        partial, partial_from = reader.flag("async_training.partial_rollout")
        draft.set("schedule.mode", "async", "verl's fully_async_policy")
        draft.set("schedule.max_staleness", staleness, staleness_from)
        draft.set("schedule.streaming", True, "fully async: the trainer takes mini-batches as they complete (V1)")
        draft.set("schedule.fetch_mini_batches", require, require_from)
        draft.set("schedule.partial_rollout.mode", "interrupt" if partial else "off", partial_from)
        draft.set("schedule.weight_sync.method", "per_tensor", "fully async: tensor by tensor (V1)")
        draft.set("schedule.weight_sync.every_updates", draft.value("algorithm.mini_batches"),
                  reader.get("async_training.trigger_parameter_sync_step").origin)
    elif one_step_off:
        draft.set("schedule.mode", "one_step_off", "verl's one_step_off_policy")
    else:
        draft.set("schedule.mode", "sync", "verl's main_ppo trainer")

