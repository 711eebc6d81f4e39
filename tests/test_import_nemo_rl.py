"""`rlsim import nemo-rl`: recipes written here in NeMo-RL's format, with a `defaults:` parent, become scenarios whose
fields equal the recipe's values and that `rlsim check` accepts."""
from __future__ import annotations

from pathlib import Path

import rlsim
from rlsim.cli import main

PARENT = """\
grpo:
  num_prompts_per_step: 32
  num_generations_per_prompt: 16
  async_grpo:
    enabled: false
    max_trajectory_age_steps: 1
loss_fn:
  reference_policy_kl_penalty: 0.01
policy:
  model_name: Qwen/Qwen2.5-1.5B
  train_global_batch_size: 512
  train_micro_batch_size: 4
  logprob_batch_size: ${policy.train_micro_batch_size}
  max_total_sequence_length: 1024
  dtensor_cfg:
    enabled: true
    tensor_parallel_size: 1
  megatron_cfg:
    enabled: false
    tensor_model_parallel_size: 1
  sequence_packing:
    enabled: true
    train_mb_tokens: ${mul:${policy.max_total_sequence_length}, ${policy.train_micro_batch_size}}
    logprob_mb_tokens: ${mul:${policy.max_total_sequence_length}, ${policy.logprob_batch_size}}
  generation:
    backend: vllm
    max_new_tokens: ${policy.max_total_sequence_length}
    vllm_cfg:
      tensor_parallel_size: 1
      gpu_memory_utilization: 0.6
      max_model_len: ${policy.max_total_sequence_length}
    colocated:
      enabled: true
logger:
  wandb_enabled: false
cluster:
  gpus_per_node: 8
  num_nodes: 1
"""


def _import(tmp_path: Path, recipe: str, gpu: str = "h100-sxm") -> tuple[int, Path]:
    (tmp_path / "configs" / "recipes").mkdir(parents=True)
    (tmp_path / "configs" / "grpo_base.yaml").write_text(PARENT)
    path = tmp_path / "configs" / "recipes" / "recipe.yaml"
    path.write_text(recipe)
    out = tmp_path / "out.yaml"
    return main(["import", "nemo-rl", str(path), "--gpu", gpu, "--out", str(out)]), out


def test_a_recipe_with_a_defaults_parent(tmp_path, capsys):
    recipe = """\
defaults: ../grpo_base.yaml
policy:
  model_name: Qwen/Qwen2.5-7B
  max_total_sequence_length: 4096
  dtensor_cfg:
    activation_checkpointing: true
  generation:
    vllm_cfg:
      tensor_parallel_size: 2
cluster:
  num_nodes: 2
custom_feature:
  knob: 3
"""
    code, out = _import(tmp_path, recipe)
    assert code == 0
    s = rlsim.load_scenario(out)
    assert s.model.name == "Qwen2.5-7B" and s.cluster.pools[0].nodes == 2
    a = s.algorithm
    assert (a.prompts_per_step, a.samples_per_prompt, a.mini_batches, a.ref_model) == (32, 16, 1, True)
    assert (a.max_response_tokens, a.max_sequence_tokens) == (4096, 4096)
    assert (s.placement.mode, s.placement.rollout.gpus, s.placement.rollout.tp) == ("colocated", 16, 2)
    assert (s.placement.rollout.max_num_seqs, s.placement.rollout.sleep_level) == (1024, 1)
    t = s.placement.training
    assert (t.backend, t.activation_recompute, t.micro_batch_tokens, t.reference_weights) == ("fsdp2", "full", 16384,
                                                                                             "swap")
    assert s.schedule.mode == "sync"
    text = out.read_text()
    assert "# policy.generation.vllm_cfg.tensor_parallel_size=2 (recipe.yaml line 9)" in text
    assert "(grpo_base.yaml line 2)" in text
    err = capsys.readouterr().err
    assert "custom_feature.knob" in err and "custom_feature.knob" in text
    assert "logger.wandb_enabled" in err
    assert main(["check", str(out)]) == 0


def test_a_megatron_recipe(tmp_path):
    recipe = """\
defaults: ../grpo_base.yaml
grpo: {num_prompts_per_step: 64, num_generations_per_prompt: 32}
policy:
  model_name: meta-llama/Llama-3.1-8B-Instruct
  max_total_sequence_length: 4096
  train_micro_batch_size: 1
  logprob_batch_size: 2
  dtensor_cfg: {enabled: false}
  megatron_cfg:
    enabled: true
    pipeline_model_parallel_size: 2
    activation_checkpointing: true
cluster: {num_nodes: 2}
"""
    code, out = _import(tmp_path, recipe)
    assert code == 0
    s = rlsim.load_scenario(out)
    t = s.placement.training
    assert (t.backend, t.pp, t.zero_stage, t.activation_recompute) == ("megatron", 2, 1, "full")
    assert (t.micro_batch_tokens, t.logprob_micro_batch_tokens) == (4096, 8192)  # as V3's Llama-3.1-8B row
    assert t.pp_pads_micro_batches and t.offload_host_memory.optimizer == "pageable"
    assert t.overlap_grad_reduce is True  # grpo_math_1B.yaml's distributed_data_parallel_config
    assert s.algorithm.mini_batches == 4 and s.schedule.weight_sync.method == "per_tensor"


def test_an_async_recipe(tmp_path):
    recipe = """\
defaults: ../grpo_base.yaml
grpo:
  async_grpo:
    enabled: true
    max_trajectory_age_steps: 2
    in_flight_weight_updates: true
policy:
  model_name: Qwen/Qwen2.5-7B
  generation:
    vllm_cfg: {async_engine: true}
    colocated:
      enabled: false
      resources: {num_nodes: 1}
cluster: {num_nodes: 2}
"""
    code, out = _import(tmp_path, recipe)
    assert code == 0
    s = rlsim.load_scenario(out)
    assert (s.schedule.mode, s.schedule.max_staleness, s.schedule.partial_rollout.mode) == ("async", 2, "in_flight")
    assert (s.placement.mode, s.placement.rollout.gpus, s.placement.training.gpus) == ("disaggregated", 8, 8)
    assert (s.placement.rollout.max_num_seqs, s.placement.rollout.max_num_batched_tokens) == (128, 2048)
    assert s.schedule.weight_sync.method == "nccl_broadcast" and s.schedule.weight_sync.bucket_mib == 1638


def test_a_wrong_type_exits_2_naming_file_line_and_key(tmp_path, capsys):
    code, out = _import(tmp_path, "defaults: ../grpo_base.yaml\ngrpo:\n  num_prompts_per_step: many\n")
    err = capsys.readouterr().err
    assert code == 2 and "recipe.yaml:3: grpo.num_prompts_per_step" in err and "Traceback" not in err
    assert not out.exists()


def test_a_parent_that_is_not_a_local_file_is_reported_and_defaults_used(tmp_path, capsys):
    code, out = _import(tmp_path, "defaults: ../nowhere.yaml\n")
    assert code == 0 and "nowhere.yaml" in capsys.readouterr().err
    assert rlsim.load_scenario(out).algorithm.prompts_per_step == 32  # grpo_math_1B.yaml's default


def test_an_fp8_recipe_maps_fp8_generation_and_training(tmp_path):
    """NeMo-RL's grpo_math_8B_megatron_fp8.yaml: vllm_cfg.precision fp8 and megatron_cfg.fp8_cfg.enabled."""
    recipe = """\
defaults: ../grpo_base.yaml
policy:
  model_name: meta-llama/Llama-3.1-8B-Instruct
  max_total_sequence_length: 4096
  dtensor_cfg: {enabled: false}
  generation: {vllm_cfg: {precision: fp8, use_deep_gemm: true, gpu_memory_utilization: 0.5}}
  megatron_cfg:
    enabled: true
    pipeline_model_parallel_size: 2
    fp8_cfg: {enabled: true, fp8: e4m3, fp8_recipe: blockwise, fp8_param: false}
cluster: {num_nodes: 1}
"""
    code, out = _import(tmp_path, recipe)
    assert code == 0
    s = rlsim.load_scenario(out)
    assert (s.model.name, s.model.dtype) == ("Llama-3.1-8B-Instruct", "fp8")
    assert s.placement.training.precision == "fp8"
    text = out.read_text()
    assert "policy.generation.vllm_cfg.precision" in text and "fp8_cfg.enabled" in text
