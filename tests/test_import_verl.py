"""`rlsim import verl`: launch scripts and configs written here in verl's formats become scenarios whose fields equal
the source's values, that `rlsim check` accepts, with every unmapped key named and every field's source noted."""
from __future__ import annotations

from pathlib import Path

import pytest

import rlsim
from rlsim.cli import main

GRPO_SCRIPT = """\
#!/usr/bin/env bash
set -x
MODEL=${MODEL:-Qwen/Qwen2.5-7B-Instruct}
max_prompt_length=$((512 * 2))
export GEN_TP=4
python3 -m verl.trainer.main_ppo \\
    algorithm.adv_estimator=grpo \\
    data.train_batch_size=512 \\
    data.max_prompt_length=${max_prompt_length} \\
    data.max_response_length=$((1024 * 3)) \\
    actor_rollout_ref.model.path="$MODEL" \\
    actor_rollout_ref.actor.ppo_mini_batch_size=128 \\
    actor_rollout_ref.actor.use_dynamic_bsz=True \\
    actor_rollout_ref.actor.ppo_max_token_len_per_gpu=24000 \\
    actor_rollout_ref.actor.use_kl_loss=True \\
    actor_rollout_ref.rollout.name=vllm \\
    actor_rollout_ref.rollout.tensor_model_parallel_size=${GEN_TP} \\
    actor_rollout_ref.rollout.gpu_memory_utilization=0.7 \\
    actor_rollout_ref.rollout.enforce_eager=True \\
    actor_rollout_ref.rollout.n=8 \\
    +actor_rollout_ref.rollout.max_num_seqs=512 \\
    trainer.logger='["console","wandb"]' \\
    trainer.project_name=demo \\
    critic.ppo_micro_batch_size_per_gpu=4 \\
    trainer.n_gpus_per_node=8 \\
    trainer.nnodes=2 $@
"""


def _import(tmp_path: Path, *files: tuple[str, str], gpu: str = "h100-sxm") -> tuple[int, Path]:
    paths = []
    for name, text in files:
        (tmp_path / name).write_text(text)
        paths.append(str(tmp_path / name))
    out = tmp_path / "out.yaml"
    return main(["import", "verl", *paths, "--gpu", gpu, "--out", str(out)]), out


def test_a_grpo_script_with_overrides_maps_its_fields(tmp_path, capsys):
    code, out = _import(tmp_path, ("run.sh", GRPO_SCRIPT))
    assert code == 0
    s = rlsim.load_scenario(out)
    assert (s.model.name, s.algorithm.name) == ("Qwen2.5-7B-Instruct", "grpo")
    assert (s.algorithm.prompts_per_step, s.algorithm.samples_per_prompt, s.algorithm.mini_batches) == (512, 8, 4)
    assert (s.algorithm.max_prompt_tokens, s.algorithm.max_response_tokens) == (1024, 3072)
    assert s.algorithm.ref_model and not s.algorithm.critic
    assert s.cluster.pools[0].nodes == 2 and s.cluster.pools[0].gpu == "h100-sxm"
    assert (s.placement.mode, s.placement.rollout.gpus, s.placement.rollout.tp) == ("colocated", 16, 4)
    assert (s.placement.rollout.gpu_memory_utilization, s.placement.rollout.max_num_seqs) == (0.7, 512)
    assert s.placement.rollout.cuda_graphs is False
    assert s.placement.training.micro_batch_tokens == 24000
    assert s.schedule.mode == "sync"
    text = out.read_text()
    assert "# actor_rollout_ref.rollout.tensor_model_parallel_size=4 (run.sh line 17)" in text
    assert "# default of verl's ppo_trainer.yaml" in text
    err = capsys.readouterr().err
    assert "critic.ppo_micro_batch_size_per_gpu" in err and "critic.ppo_micro_batch_size_per_gpu" in text
    assert "trainer.project_name" in err  # ignored, by name
    assert main(["check", str(out)]) == 0


def test_a_ppo_config_with_critic_and_fsdp_offload(tmp_path):
    config = """\
data:
  train_batch_size: 256
  max_prompt_length: 512
  max_response_length: 1024
algorithm:
  adv_estimator: gae
actor_rollout_ref:
  model:
    path: ~/models/Qwen2-7B-Instruct
    enable_gradient_checkpointing: false
  actor:
    strategy: fsdp2
    ppo_mini_batch_size: 64
    ppo_micro_batch_size_per_gpu: 4
    ulysses_sequence_parallel_size: 2
    fsdp_config:
      param_offload: true
      optimizer_offload: true
  rollout:
    name: sglang
    tensor_model_parallel_size: 2
critic:
  optim:
    lr: 1e-5
trainer:
  nnodes: 1
  n_gpus_per_node: 8
"""
    code, out = _import(tmp_path, ("ppo.yaml", config))
    assert code == 0
    s = rlsim.load_scenario(out)
    assert (s.algorithm.name, s.algorithm.critic, s.algorithm.ref_model) == ("ppo", True, False)
    assert (s.algorithm.prompts_per_step, s.algorithm.mini_batches) == (256, 4)
    t = s.placement.training
    assert (t.backend, t.cp, t.activation_recompute) == ("fsdp2", 2, "none")
    assert t.offload_weights_per_call and t.requested_while_generating.weights and t.requested_while_generating.optimizer
    assert t.micro_batch_tokens == 4 * 1536
    assert s.placement.rollout.engine == "sglang"
    assert "# actor_rollout_ref.actor.strategy=fsdp2 (ppo.yaml line 12)" in out.read_text()


def test_a_dapo_style_config_with_megatron(tmp_path):
    config = """\
algorithm:
  adv_estimator: grpo
  filter_groups:
    enable: true
data: {train_batch_size: 128, max_prompt_length: 2048, max_response_length: 8192}
actor_rollout_ref:
  model: {path: Qwen/Qwen2.5-32B}
  actor:
    strategy: megatron
    ppo_mini_batch_size: 32
    clip_ratio_low: 0.2
    clip_ratio_high: 0.28
    megatron:
      tensor_model_parallel_size: 4
      pipeline_model_parallel_size: 2
      context_parallel_size: 2
  rollout: {name: vllm, n: 16, tensor_model_parallel_size: 4}
trainer: {nnodes: 4, n_gpus_per_node: 8}
"""
    code, out = _import(tmp_path, ("dapo.yaml", config))
    assert code == 0
    s = rlsim.load_scenario(out)
    assert (s.algorithm.name, s.algorithm.dynamic_sampling, s.algorithm.ref_model) == ("dapo", True, False)
    t = s.placement.training
    assert (t.backend, t.tp, t.pp, t.cp, t.zero_stage) == ("megatron", 4, 2, 2, 1)
    assert t.logprob_kernel == "fp32_vocab_parallel" and s.schedule.weight_sync.method == "per_tensor"
    # verl reduces Megatron's gradients after the backward pass unless override_ddp_config says otherwise.
    assert t.overlap_grad_reduce is False
    overlapped = config.replace("      context_parallel_size: 2\n", "      context_parallel_size: 2\n"
                                "      override_ddp_config: {overlap_grad_reduce: true}\n")
    code, out = _import(tmp_path, ("dapo-overlapped.yaml", overlapped))
    assert code == 0 and rlsim.load_scenario(out).placement.training.overlap_grad_reduce is True


ONE_STEP_OFF = """\
NNODES_ROLLOUT=1
python3 -m verl.experimental.one_step_off_policy.main_ppo \\
    algorithm.adv_estimator=grpo \\
    data.train_batch_size=64 \\
    actor_rollout_ref.model.path=Qwen/Qwen2.5-Math-7B \\
    actor_rollout_ref.actor.ppo_mini_batch_size=16 \\
    actor_rollout_ref.hybrid_engine=False \\
    actor_rollout_ref.rollout.name=vllm \\
    actor_rollout_ref.rollout.n=4 \\
    trainer.nnodes=1 trainer.n_gpus_per_node=8 \\
    rollout.nnodes=${NNODES_ROLLOUT} rollout.n_gpus_per_node=8
"""

FULLY_ASYNC = """\
python -m verl.experimental.fully_async_policy.fully_async_main \\
    data.train_batch_size=0 \\
    data.max_prompt_length=1024 data.max_response_length=4096 \\
    actor_rollout_ref.model.path=Qwen/Qwen2.5-Math-7B \\
    actor_rollout_ref.actor.strategy=fsdp2 \\
    actor_rollout_ref.actor.ppo_mini_batch_size=32 \\
    actor_rollout_ref.hybrid_engine=False \\
    actor_rollout_ref.rollout.name=vllm actor_rollout_ref.rollout.n=16 \\
    actor_rollout_ref.rollout.tensor_model_parallel_size=4 \\
    trainer.nnodes=2 trainer.n_gpus_per_node=8 rollout.nnodes=2 rollout.n_gpus_per_node=8 \\
    async_training.staleness_threshold=0.5 \\
    async_training.trigger_parameter_sync_step=4 \\
    async_training.require_batches=4 \\
    async_training.partial_rollout=True
"""


def test_one_step_off_splits_the_pools(tmp_path):
    code, out = _import(tmp_path, ("off.sh", ONE_STEP_OFF))
    assert code == 0
    s = rlsim.load_scenario(out)
    assert (s.schedule.mode, s.placement.mode) == ("one_step_off", "disaggregated")
    assert (s.placement.rollout.gpus, s.placement.training.gpus, s.cluster.pools[0].nodes) == (8, 8, 2)


def test_fully_async_maps_staleness_and_the_sync_step_as_v1_does(tmp_path):
    code, out = _import(tmp_path, ("async.sh", FULLY_ASYNC))
    assert code == 0
    s = rlsim.load_scenario(out)
    assert (s.schedule.mode, s.schedule.max_staleness, s.schedule.fetch_mini_batches) == ("async", 0.5, 4)
    assert (s.algorithm.prompts_per_step, s.algorithm.mini_batches) == (32 * 4 * 4, 16)
    assert s.schedule.weight_sync.every_updates == 16 and s.schedule.streaming
    assert s.schedule.partial_rollout.mode == "interrupt" and not s.algorithm.recompute_old_log_prob
    assert (s.placement.rollout.gpus, s.placement.training.gpus) == (16, 16)


def test_a_local_defaults_file_is_merged_under_the_config(tmp_path):
    (tmp_path / "base.yaml").write_text("data: {train_batch_size: 64}\nactor_rollout_ref:\n  rollout: {name: vllm}\n"
                                        "  model: {path: Qwen/Qwen2.5-7B}\n  actor: {ppo_mini_batch_size: 16}\n")
    code, out = _import(tmp_path, ("child.yaml", "defaults:\n  - base\n  - _self_\ndata:\n  max_response_length: 2048\n"))
    assert code == 0
    s = rlsim.load_scenario(out)
    assert (s.algorithm.prompts_per_step, s.algorithm.max_response_tokens, s.algorithm.mini_batches) == (64, 2048, 4)
    assert "(base.yaml line 1)" in out.read_text()


@pytest.mark.parametrize("files, where", [
    ((("bad.yaml", "data:\n  train_batch_size: [1\n"),), "bad.yaml:2"),
    ((("typed.yaml", "data:\n  train_batch_size: lots\nactor_rollout_ref: {rollout: {name: vllm}, model: "
       "{path: Qwen/Qwen2.5-7B}}\n"),), "typed.yaml:2: data.train_batch_size"),
    ((("none.sh", "echo hello\n"),), "none.sh: no `python3 -m verl"),
    ((("model.sh", "python3 -m verl.trainer.main_ppo actor_rollout_ref.model.path=acme/Unknown-9B "
       "actor_rollout_ref.rollout.name=vllm\n"),), "model.sh:1: actor_rollout_ref.model.path"),
])
def test_malformed_input_exits_2_naming_file_line_and_key(tmp_path, capsys, files, where):
    code, out = _import(tmp_path, *files)
    err = capsys.readouterr().err
    assert code == 2 and where in err and "Traceback" not in err and not out.exists()


def test_an_unknown_gpu_lists_the_profiles(tmp_path, capsys):
    code, _ = _import(tmp_path, ("run.sh", GRPO_SCRIPT), gpu="h1000")
    err = capsys.readouterr().err
    assert code == 2 and "h100-sxm" in err


def test_a_missing_file_exits_2(tmp_path, capsys):
    assert main(["import", "verl", str(tmp_path / "nope.yaml"), "--gpu", "h100-sxm"]) == 2
    assert "no such file" in capsys.readouterr().err


def test_the_megatron_trainer_config_makes_megatron_the_default_and_node_sizes_may_differ(tmp_path):
    script = ONE_STEP_OFF.replace("main_ppo \\\n", "main_ppo --config-name='one_step_off_ppo_megatron_trainer.yaml' \\\n"
                                  "    actor_rollout_ref.actor.megatron.tensor_model_parallel_size=2 \\\n")
    script = script.replace("rollout.n_gpus_per_node=8", "rollout.n_gpus_per_node=4")
    code, out = _import(tmp_path, ("megatron.sh", script))
    assert code == 0
    s = rlsim.load_scenario(out)
    assert (s.placement.training.backend, s.placement.training.tp) == ("megatron", 2)
    assert "default of verl's ppo_megatron_trainer.yaml" in out.read_text()
    assert [(p.name, p.nodes, p.gpus_per_node) for p in s.cluster.pools] == [("train", 1, 8), ("rollout", 1, 4)]
    assert (s.placement.rollout.gpus, s.placement.training.gpus) == (4, 8)


def test_a_model_path_in_the_hugging_face_cache_is_the_model_it_holds(tmp_path):
    """Runs often point model.path at the hub cache, `…/models--ORG--NAME/snapshots/<hash>`: that is ORG/NAME."""
    cached = "/data/.cache/huggingface/hub/models--Qwen--Qwen2-7B-Instruct/snapshots/f2826a00ceef68f0f2b946d945ec"
    code, out = _import(tmp_path, ("run.sh", GRPO_SCRIPT.replace('"$MODEL"', cached)))
    assert code == 0
    assert rlsim.load_scenario(out).model.name == "Qwen2-7B-Instruct"


def test_fp8_rollout_an_fp8_kv_cache_and_lora_are_mapped(tmp_path):
    """verl's FP8 rollout (docs/advance/fp8.md), an FP8 KV cache passed to vLLM, and LoRA."""
    extra = ("actor_rollout_ref.rollout.quantization=True actor_rollout_ref.rollout.use_block_quant_rollout=True "
             "+actor_rollout_ref.rollout.engine_kwargs.vllm.kv_cache_dtype=fp8_e4m3 actor_rollout_ref.model.lora_rank=32")
    script = GRPO_SCRIPT.replace("trainer.nnodes=2 $@", f"trainer.nnodes=2 {extra} $@")
    code, out = _import(tmp_path, ("run.sh", script))
    assert code == 0
    s = rlsim.load_scenario(out)
    assert (s.model.name, s.model.dtype) == ("Qwen2.5-7B-Instruct", "fp8")
    assert s.placement.rollout.kv_cache_dtype == "fp8" and s.placement.training.lora_rank == 32


def test_an_unknown_quantization_exits_2_naming_the_key(tmp_path, capsys):
    script = GRPO_SCRIPT.replace("trainer.nnodes=2 $@", "trainer.nnodes=2 actor_rollout_ref.rollout.quantization=int4 $@")
    code, _ = _import(tmp_path, ("run.sh", script))
    assert code == 2
    err = capsys.readouterr().err
    assert "actor_rollout_ref.rollout.quantization" in err and "Traceback" not in err


def test_hf_rollout_maps_to_hf_generate_engines(tmp_path):
    """verl's HFRollout: each training GPU calls generate() on its share of the prompts (or micro_batch_size prompts
    at a time), n sequences each, prompts padded to data.max_prompt_length."""
    script = GRPO_SCRIPT.replace("actor_rollout_ref.rollout.name=vllm", "actor_rollout_ref.rollout.name=hf")
    code, out = _import(tmp_path, ("run.sh", script))
    assert code == 0
    r = rlsim.load_scenario(out).placement.rollout
    assert (r.engine, r.tp, r.pad_prompts, r.max_num_seqs) == ("hf", 1, "max_prompt_tokens", 512 // 16 * 8)
    code, out = _import(tmp_path, ("run.sh", script.replace("trainer.nnodes=2 $@", "trainer.nnodes=2 "
                                                                "+actor_rollout_ref.rollout.micro_batch_size=4 $@")))
    assert code == 0 and rlsim.load_scenario(out).placement.rollout.max_num_seqs == 4 * 8
