"""The scenario: one YAML file describing the cluster, the model, the RL algorithm, the workload, the placement of roles
on GPUs, the schedule and the run length. Field names follow what RL engineers call things in verl, vLLM and Megatron.

Fields left empty (`None`) that depend on hardware (a pool's GPUs per node, its interconnects) or on other sections
(training GPUs of a colocated placement) are filled by `rlsim.config.load_scenario`, which returns a fully resolved,
frozen Scenario; simulation code never sees a `None` default.
"""
from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, PrivateAttr, ValidationInfo, field_validator, model_validator

from rlsim.config.framework import Framework
from rlsim.config.long_run import Checkpoint, Duration, Evaluation, Failures
from rlsim.config.long_tail import LongTailParams
from rlsim.config.workload import Workload
from rlsim.fields import (
    Flag,
    Fraction,
    Frozen,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    Registered,
    Seed,
    UnboundedFloat,
    Variants,
)
from rlsim.models.architecture import Architecture
from rlsim.registry import DP_BALANCERS, LOAD_BALANCERS, LONG_TAIL_REMEDIES, QUEUE_ORDERS, SCHEDULES

POOL_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$"
# The model shape's fields (rlsim/models/architecture.py, Hugging Face config.json names) that carry no description of
# their own, described for the JSON Schema editors show.
ARCHITECTURE_FIELDS = {
    ("Architecture", "hidden_size"): "width of the residual stream (config.json hidden_size)",
    ("Architecture", "num_hidden_layers"): "transformer layers",
    ("Architecture", "num_attention_heads"): "query heads per layer",
    ("Architecture", "num_key_value_heads"): "key/value heads per layer (fewer than query heads: grouped-query attention)",
    ("Architecture", "vocab_size"): "tokens in the vocabulary (rows of the embedding and of the output layer)",
    ("Architecture", "tie_word_embeddings"): "the output layer shares the input embedding's weights",
    ("Architecture", "hidden_act"): "the FFN's activation",
    ("Architecture", "moe"): "mixture-of-experts layers; null for a dense model",
    ("Architecture", "mla"): "multi-head latent attention (DeepSeek-V2/V3); null for standard attention",
    ("MLA", "kv_lora_rank"): "rank of the compressed key/value latent the KV cache holds",
    ("MLA", "qk_nope_head_dim"): "per-head query/key dimensions without rotary embedding",
    ("MLA", "qk_rope_head_dim"): "per-head query/key dimensions with rotary embedding",
    ("MLA", "v_head_dim"): "per-head value dimensions",
}


# The largest clusters built for training hold ~100,000 GPUs in ~25,000 nodes, and the largest scale-up domains 72 GPUs
# (576 announced); a pool past these bounds is a typo, and its topology would be built GPU by GPU.
MAX_POOL_NODES = 100_000
MAX_GPUS_PER_NODE = 1024


class Pool(Frozen):
    """A set of identical nodes. Several pools model heterogeneous clusters (e.g. H20 for rollout, H800 for training)."""

    name: str = Field(
        "main", min_length=1, max_length=64, pattern=POOL_NAME, description="name the placement's `pool:` fields refer to")
    gpu: str = Field(min_length=1, description="hardware profile name, e.g. h100-sxm")
    nodes: int = Field(gt=0, le=MAX_POOL_NODES, strict=True,
                       description="nodes in the pool (verl trainer.nnodes when one pool holds every role)")
    gpus_per_node: int | None = Field(None, gt=0, le=MAX_GPUS_PER_NODE, strict=True,
                                      description="default: the profile's node size")
    intra_node: str | None = Field(None, description="scale-up interconnect; default: the profile's (e.g. nvlink4)")
    inter_node: str | None = Field(None, description="scale-out NIC interconnect; default: the profile's (e.g. ib-ndr)")
    nics_per_node: PositiveInt | None = Field(None, description="default: the profile's")
    price_usd_per_gpu_hour: PositiveFloat | None = Field(None, description="default: the profile's")

    @property
    def gpus(self) -> int:
        if self.gpus_per_node is None:
            raise RuntimeError("pool is not resolved; load scenarios with rlsim.config.load_scenario")
        return self.nodes * self.gpus_per_node


class Cluster(Frozen):
    pools: list[Pool] = Field(
        min_length=1, description="the pools of identical nodes the roles are placed on; several model a heterogeneous cluster")
    profile_dirs: list[str] = Field(
        default_factory=list, description="extra directories of hardware profiles, relative to the scenario file"
    )

    @field_validator("pools")
    @classmethod
    def _unique_names(cls, pools: list[Pool]) -> list[Pool]:
        seen: set[str] = set()
        for pool in pools:
            if pool.name in seen:
                raise ValueError(f"two pools are named {pool.name!r}; pool names must be unique")
            seen.add(pool.name)
        return pools

    def pool(self, name: str) -> Pool:
        for pool in self.pools:
            if pool.name == name:
                return pool
        raise KeyError(name)


class ModelConfig(Frozen):
    """The policy model: a catalog name or Hugging Face id, a local config.json (docs/api.md, "Model names"), or an
    inline architecture (then `name` is only a label)."""

    name: str = Field(
        min_length=1, description="catalog model name or Hugging Face id (Qwen/Qwen3-8B), the path of a config.json "
        "or of its folder, or a label when `architecture` is given")
    architecture: Architecture | None = Field(
        None, description="the model's shape (Hugging Face config.json fields), for a model not in the catalog")
    dtype: Literal["bf16", "fp16", "fp8", "fp4"] = Field(
        "bf16", description="the rollout engines' weights: fp8 quantizes the decoder layers' weights and their input "
        "activations (verl actor_rollout_ref.rollout.quantization with use_block_quant_rollout: 128x128 weight blocks; "
        "vLLM quantization=fp8), fp4 as NVFP4 (Blackwell); on a GPU without tensor cores for the type the weights stay "
        "narrow in memory and are dequantized into 16-bit GEMMs (vLLM's Marlin kernels). Training stays bf16 mixed "
        "precision"
    )

    @model_validator(mode="before")
    @classmethod
    def _name_shorthand(cls, data: Any) -> Any:
        # `model: Qwen2.5-7B` is the common case; expand it to the full form.
        return {"name": data} if isinstance(data, str) else data


class Algorithm(Frozen):
    name: Literal["grpo", "ppo", "dapo", "reinforce"] = Field(
        description="the RL algorithm; it sets the defaults of ref_model, critic and dynamic_sampling (verl chooses the "
        "advantage with algorithm.adv_estimator: grpo, or gae for PPO)")
    prompts_per_step: PositiveInt = Field(
        description="prompts per RL step (verl data.train_batch_size, NeMo-RL grpo.num_prompts_per_step)")
    samples_per_prompt: PositiveInt = Field(
        description="responses generated per prompt (verl actor_rollout_ref.rollout.n, NeMo-RL "
        "grpo.num_generations_per_prompt)")
    mini_batches: PositiveInt = Field(
        1, description="optimizer steps per RL step (verl data.train_batch_size / actor_rollout_ref.actor."
        "ppo_mini_batch_size; NeMo-RL num_prompts_per_step·num_generations_per_prompt / policy.train_global_batch_size)")
    ppo_epochs: int = Field(
        1, gt=0, le=100, strict=True,
        description="passes over each step's batch by the optimizer (verl actor_rollout_ref.actor.ppo_epochs; RL "
        "recipes use 1-4, classic PPO up to ~10)")
    ref_model: Flag = Field(
        description="compute reference log-probs for a KL term (verl runs the reference when actor_rollout_ref.actor."
        "use_kl_loss or algorithm.use_kl_in_reward is set); default: on except for DAPO")
    recompute_old_log_prob: Flag = Field(
        True, description="run the old_log_prob forward pass; false takes the rollout engine's log-probs instead "
        "(verl's use_rollout_log_probs, the fully-async default)")
    critic: Flag = Field(description="train a value model; default: on for PPO only")
    dynamic_sampling: Flag = Field(
        description="drop groups whose rewards are all equal and generate more until the batch is full (DAPO); "
        "default: on for DAPO only")
    max_prompt_tokens: PositiveInt = Field(
        description="longest prompt, in tokens (verl data.max_prompt_length)")
    max_response_tokens: PositiveInt = Field(
        description="longest response in tokens; generation stops there and the sample counts as truncated (verl "
        "data.max_response_length, NeMo-RL policy.generation.max_new_tokens)")
    max_sequence_tokens: PositiveInt | None = Field(
        None, description="longest prompt + response the engine holds (vLLM max_model_len, NeMo-RL "
        "max_total_sequence_length): a response also stops when it reaches this, so a long prompt leaves less room; "
        "default max_prompt_tokens + max_response_tokens")

    @model_validator(mode="before")
    @classmethod
    def _algorithm_defaults(cls, data: Any) -> Any:
        # Which auxiliary models an algorithm needs is part of the algorithm, so the default follows the name.
        if isinstance(data, dict):
            data = dict(data)
            name = data.get("name")
            data.setdefault("critic", name == "ppo")
            data.setdefault("ref_model", name != "dapo")
            data.setdefault("dynamic_sampling", name == "dapo")
        return data

    @property
    def samples_per_step(self) -> int:
        return self.prompts_per_step * self.samples_per_prompt

    @property
    def model_len(self) -> int:
        """The longest sequence (prompt + response) a rollout can reach."""
        both = self.max_prompt_tokens + self.max_response_tokens
        return both if self.max_sequence_tokens is None else min(both, self.max_sequence_tokens)


class SpeculativeDecoding(Frozen):
    """Speculative decoding in the rollout engines (vLLM's speculative_config, SGLang's speculative_algorithm)."""

    method: Literal["ngram", "draft_model", "eagle", "mtp"] = Field(
        description="where drafts come from: ngram (lookups in the prompt and the text so far, or in earlier "
        "responses as RhymeRL's HistoSpec: no GPU time), draft_model (a small model of the same vocabulary, "
        "`draft_model`), eagle or mtp (a one-layer head on the target's hidden states: EAGLE, DeepSeek/MiMo MTP)")
    num_speculative_tokens: int = Field(
        ge=1, le=16, strict=True, description="tokens drafted per sequence per step (vLLM num_speculative_tokens)")
    acceptance_rate: float = Field(
        ge=0.0, lt=1.0, allow_inf_nan=False,
        description="probability that a drafted token is accepted once the ones before it were (α of Leviathan et al. "
        "2023; vLLM reports it as spec_decode acceptance rate): a step then yields (1 − α^(k+1)) / (1 − α) tokens. In RL "
        "it falls as the policy drifts from the drafter unless the drafter is trained alongside")
    draft_model: str | None = Field(
        None, validate_default=True,
        description="method draft_model: the draft model's catalog name or Hugging Face id (e.g. Qwen3-0.6B)")

    @field_validator("draft_model")
    @classmethod
    def _draft_model_when_needed(cls, value: str | None, info: ValidationInfo) -> str | None:
        method = info.data.get("method")
        if method == "draft_model" and value is None:
            raise ValueError("method draft_model needs the draft model's name here")
        if method not in (None, "draft_model") and value is not None:
            raise ValueError(f"method {method} drafts without a draft model; leave draft_model out")
        return value


class PrefillPlacement(Frozen):
    """Prefill engines of a prefill/decode-disaggregated rollout (vLLM's kv_role kv_producer with a KV connector,
    SGLang's --disaggregation-mode prefill): `gpus` GPUs, possibly of another pool, cut into engines of `tp` GPUs that
    only prefill; each request's KV cache then moves to a decode engine (placement.rollout's engines)."""

    pool: str | None = Field(
        None, description="pool of the prefill GPUs (RollArt's hardware affinity: compute-bound prefill on H800/H100-"
        "class GPUs, bandwidth-bound decode on H20-class ones); default: the rollout pool")
    gpus: PositiveInt = Field(description="GPUs that run prefill engines, beside the decode engines' placement.rollout.gpus")
    tp: PositiveInt = Field(1, description="tensor-parallel GPUs per prefill engine")
    gpu_memory_utilization: Fraction = Field(
        0.9, description="fraction of HBM a prefill engine may use, weights and the KV cache of the prompts it "
        "prefills and holds until their transfer (vLLM's gpu_memory_utilization)")
    max_num_seqs: PositiveInt = Field(
        256, description="cap on sequences a prefill engine holds, prefilling or waiting for their KV cache to be "
        "fetched (vLLM's max_num_seqs on the prefill instance)")
    max_num_batched_tokens: PositiveInt = Field(
        8192, description="prompt tokens a prefill iteration processes, longer prompts chunked to fit (vLLM's "
        "max_num_batched_tokens on the prefill instance, SGLang's --chunked-prefill-size)")

    @property
    def engines(self) -> int:
        return self.gpus // self.tp


# The order an engine serves its queue in: a policy registered in rlsim/sim/engine/queue_order.py.
QueueOrderName = Annotated[str, Registered(QUEUE_ORDERS)]


class RolloutPlacement(Frozen):
    """Generation engines (vLLM/SGLang): `gpus` GPUs cut into engines of `tp` GPUs each; with `prefill`, these are the
    decode engines and the prompts are prefilled on engines of their own."""

    pool: str | None = Field(None, description="default: the first pool")
    gpus: PositiveInt = Field(description="GPUs that run generation engines (colocated: every GPU of the placement)")
    tp: PositiveInt = Field(
        1, description="tensor-parallel GPUs per engine (verl actor_rollout_ref.rollout.tensor_model_parallel_size, whose "
        "default is 2)")
    ep: PositiveInt = Field(1, description="expert parallelism inside an engine (MoE models)")
    gpu_memory_utilization: Fraction = Field(
        0.9, description="fraction of HBM the engine may use, weights and KV cache (vLLM's gpu_memory_utilization and "
        "its default 0.9; verl actor_rollout_ref.rollout.gpu_memory_utilization, default 0.5 there)")
    # 256 and 8,192 are vllm.LLM's defaults on GPUs under 70 GiB and on A100s; what a framework's engines get depends on
    # how it builds them (docs/validation.md, "the engines' batch limits").
    max_num_seqs: PositiveInt = Field(
        256, description="cap on sequences decoded together per engine (vLLM's max_num_seqs; vllm.LLM on an H100-class "
        "GPU: 1024, AsyncLLM: 128; verl actor_rollout_ref.rollout.max_num_seqs, default 1024)")
    max_num_batched_tokens: PositiveInt = Field(
        8192, description="tokens an engine iteration processes, prefills chunked to fit (vLLM's max_num_batched_tokens "
        "with enable_chunked_prefill; vllm.LLM on an H100-class GPU: 16384, AsyncLLM: 2048; verl "
        "actor_rollout_ref.rollout.max_num_batched_tokens, default 8192)")
    engine: Literal["vllm", "sglang", "hf"] = Field(
        "vllm", description="the inference engine (verl actor_rollout_ref.rollout.name); hf: Hugging Face transformers "
        "generate(), static batches of max_num_seqs prompts run eagerly (DeepSpeed-Chat's baseline, TRL before vLLM)")
    pad_prompts: Literal["longest", "max_prompt_tokens"] = Field(
        "longest", description="engine hf: what each batch's prompts are left-padded to: the batch's longest "
        "(the tokenizer's padding=True, as vLLM's HF baseline), or algorithm.max_prompt_tokens (DeepSpeed-Chat's "
        "DataCollatorRLHF, verl's RL dataset before its HF rollout)")
    kv_cache_dtype: Literal["auto", "fp8"] = Field(
        "auto", description="the KV cache's element type (vLLM kv_cache_dtype; verl passes it through engine_kwargs): "
        "auto keeps the model's 16-bit type, fp8 halves every token's bytes, so the cache holds twice the tokens and "
        "decode attention reads half as much")
    expert_load_imbalance: float = Field(
        1.0, ge=1.0, le=64.0, allow_inf_nan=False,
        description="MoE engines with ep > 1: the busiest expert-parallel GPU's (token, expert) assignments over the "
        "mean; every GPU waits for it at the combine. TensorRT-LLM measured ~2.56 for DeepSeek-R1 decoding on 32 "
        "GB200s (EP32) and ~1.11 with its expert-parallel load balancer (EPLB); 1: even routing")
    admission: Literal["current_kv", "past_future"] = Field(
        "current_kv", description="when an engine admits the queue's head: current_kv, when its context fits the KV cache "
        "now (vLLM V1's and SGLang's schedulers; a full cache then preempts the latest admitted, which recompute); "
        "past_future, only when the running sequences' predicted peak KV with it fits too, each predicted to end at "
        "its length predictor's figure (schedule.length_predictor_noise) — the Past-Future scheduler of LightLLM "
        "(Gong et al., ASPLOS 2025, arXiv 2507.10150): fewer recompute preemptions, more queueing")
    scheduling_policy: QueueOrderName = Field(
        "fcfs", description="the order an engine serves its waiting queue in (vLLM's --scheduling-policy): fcfs, first "
        "come, first served (vLLM's and SGLang's default), or a length-predicted priority, each waiting rollout ranked "
        "by its remaining tokens as its length predictor (schedule.length_predictor_noise) re-predicts them whenever it "
        "queues, as the Length Value Model does token by token (arXiv 2604.27039): longest_predicted_first, for a "
        "synchronous step's makespan (the longest responses start first instead of forming its tail), or "
        "shortest_predicted_first, the serving systems' shortest-job-first for mean latency (Learning to Rank, arXiv "
        "2408.15792)")
    speculative: SpeculativeDecoding | None = Field(
        None, description="speculative decoding: drafts verified in one pass of the policy; null: off")
    cuda_graphs: Flag = Field(
        True, description="decode steps replay captured CUDA graphs instead of launching kernels one by one (false is verl "
        "actor_rollout_ref.rollout.enforce_eager: true)")
    prefill: PrefillPlacement | None = Field(
        None, description="prefill/decode disaggregation: prompts (and each later turn's new tokens) are prefilled on "
        "engines of their own, possibly on another GPU type, and their KV cache is shipped to these engines, which "
        "only decode (vLLM's NixlConnector P/D, SGLang's disaggregation mode; Splitwise, DistServe, RollArt); null: "
        "every engine prefills its own requests")
    sleep_level: Literal[1, 2] = Field(
        2, description="what a colocated engine keeps while training runs: 1 copies its weights into pinned host "
        "memory when it sleeps and back when it wakes (vLLM sleep level 1: verl's default until verl#3019, summer 2025, and "
        "since then for expert-parallel engines on vLLM < 0.11, layered summon or LoRA; NeMo-RL's default), 2 discards "
        "them and takes the update's (vLLM sleep level 2, verl's default since; SGLang's hybrid engine without a CPU "
        "backup)")

    @property
    def engines(self) -> int:
        return self.gpus // self.tp


HostMemory = Literal["pinned", "pageable"]


class OffloadWhileGenerating(Frozen):
    """Which training state moves to host memory before the engines generate and back before training."""

    weights: Flag = Field(False, description="the weights (and their gradient buffers): verl's param_offload")
    optimizer: Flag = Field(False, description="the optimizer state: verl's optimizer_offload")

    @property
    def any(self) -> bool:
        return self.weights or self.optimizer


class OffloadHostMemory(Frozen):
    """The host memory each kind of offloaded training state is copied into between phases: pinned (a reused
    page-locked buffer, or a non-blocking .to('cpu'), which PyTorch allocates pinned) or pageable (a blocking
    .to('cpu') into fresh memory, tensor by tensor, several times slower)."""

    weights: HostMemory = Field(
        "pinned", description="pinned: verl's FSDP offload (non-blocking), Megatron-Core's parameter buffer (NeMo-RL's "
        "Megatron worker); pageable: NeMo-RL's DTensor worker (model.to('cpu'))"
    )
    optimizer: HostMemory = Field(
        "pinned", description="the Adam moments; pinned: verl (non-blocking); pageable: NeMo-RL's Megatron and DTensor "
        "workers (state[k] = v.to('cpu'))"
    )


class TrainingPlacement(Frozen):
    """The training layout (actor, and critic/reference when used): parallel degrees with tp·pp·cp·dp = gpus."""

    pool: str | None = Field(None, description="default: the rollout pool")
    gpus: PositiveInt | None = Field(None, description="default: the rollout GPUs when colocated")
    tp: PositiveInt = Field(
        1, description="tensor parallelism of training (verl actor_rollout_ref.actor.megatron.tensor_model_parallel_size)")
    pp: PositiveInt = Field(
        1, description="pipeline-parallel stages of training (verl "
        "actor_rollout_ref.actor.megatron.pipeline_model_parallel_size)")
    cp: PositiveInt = Field(
        1, description="context parallelism (Ulysses / ring attention): verl actor_rollout_ref.actor."
        "ulysses_sequence_parallel_size (FSDP), actor_rollout_ref.actor.megatron.context_parallel_size")
    ep: PositiveInt = Field(
        1, description="expert parallelism of training, MoE models (verl "
        "actor_rollout_ref.actor.megatron.expert_model_parallel_size)")
    dp: PositiveInt | None = Field(None, description="default: gpus / (tp·pp·cp)")
    virtual_pipeline_stages: PositiveInt = Field(
        1, description="model chunks per pipeline stage, interleaved 1F1B (verl "
        "actor_rollout_ref.actor.megatron.virtual_pipeline_model_parallel_size)")
    backend: Literal["fsdp", "fsdp2", "megatron"] = Field(
        "fsdp", description="training engine (verl actor_rollout_ref.actor.strategy)")
    zero_stage: Literal[0, 1, 2, 3] = Field(3, description="0 none, 1 optimizer, 2 +gradients, 3 +parameters (FSDP full shard)")
    micro_batch_tokens: PositiveInt = Field(
        16384, description="tokens packed per micro-batch per GPU, so ·cp per micro-batch of a context-parallel group "
        "(verl's actor_rollout_ref.actor.ppo_max_token_len_per_gpu with use_dynamic_bsz; NeMo-RL's train_mb_tokens / cp)"
    )
    logprob_micro_batch_tokens: PositiveInt | None = Field(
        None, description="tokens packed per micro-batch per GPU in the forward-only passes (old log-probs, reference, "
        "values): verl's log_prob_max_token_len_per_gpu, NeMo-RL's logprob_mb_tokens / cp; default: micro_batch_tokens"
    )
    activation_recompute: Literal["none", "selective", "full"] = Field(
        "full", description="activations recomputed in the backward pass instead of stored: none, selective (attention only) or "
        "full (verl actor_rollout_ref.model.enable_gradient_checkpointing is full)")
    overlap_grad_reduce: Flag = Field(
        True, description="ZeRO-0/1: the data-parallel gradient reduction runs layer by layer under the last "
        "micro-batch's backward pass (Megatron's overlap_grad_reduce, NeMo-RL's distributed_data_parallel_config; PyTorch "
        "DDP's buckets); false: all of it after the backward, as verl's Megatron workers do (overlap_grad_reduce=False "
        "in verl/utils/megatron_utils.py unless override_ddp_config sets it)")
    sequence_packing: Flag = Field(
        True, description="pack whole sequences into micro-batches of micro_batch_tokens (verl's use_remove_padding, "
        "NeMo-RL's sequence_packing); false: every sequence is padded to the longest of the step's batch and a "
        "micro-batch holds micro_batch_tokens·cp // that length of them (NeMo-RL without packing: train_micro_batch_size "
        "sequences of the batch's padded length)"
    )
    pp_pads_micro_batches: Flag = Field(
        False, description="with pipeline parallelism (pp > 1), every micro-batch of a rank's batch is padded to the "
        "rank's longest (packed ones differ in length), since the stages exchange activations of one fixed shape (NeMo-RL's "
        "pad_full_seq_to); false: each runs at its own length (Megatron's variable_seq_lengths, which verl sets). The "
        "padding costs the GEMMs, elementwise work, logits and stage-to-stage sends, not attention"
    )
    logprob_kernel: Literal["fused", "fp32_vocab_parallel", "fp32_unfused"] = Field(
        "fused", description="how the log-probabilities are computed from the logits, in training and log-prob passes: "
        "fused (one kernel over the bf16 logits: flash-attn's cross-entropy, verl's FSDP workers); fp32_vocab_parallel "
        "(upcast to fp32, then max, exp, sum and normalise: Megatron-Core's vocab_parallel_cross_entropy, verl's "
        "Megatron workers); fp32_unfused (upcast to fp32 and log-softmax op by op, keeping the softmax for the "
        "backward pass: NeMo-RL's DistributedLogprob)"
    )
    offload_params: Flag = Field(
        False, description="parameters live in host memory throughout and stream in for every use (ZeRO-Offload, FSDP "
        "CPU offload)"
    )
    offload_optimizer: Flag = Field(
        False, description="the optimizer state lives in host memory throughout; the optimizer step streams it (ZeRO-"
        "Offload, Megatron's CPU Adam)"
    )
    offload_while_generating: Flag | OffloadWhileGenerating = Field(
        False, description="colocated: training state moves to host memory while the engines generate and back before "
        "training; true moves the weights and the optimizer state (NeMo-RL's colocated refit, slime's --offload), "
        "{weights, optimizer} one of them (verl's param_offload, optimizer_offload). State that lives on the host "
        "throughout (offload_params, offload_optimizer) has nothing to move"
    )
    offload_weights_per_call: Flag = Field(
        False, description="colocated, with offload_while_generating moving the weights: they also go back to host "
        "memory after every worker call that loads them, as verl's param_offload does: its log-prob pass and its "
        "export to the engines each copy the weights in and out again, besides the update (the log-prob pass's copy "
        "out is booked in old_log_prob, the copy back in update_actor, the export's pair in weight_sync)"
    )
    offload_host_memory: OffloadHostMemory = Field(
        default_factory=OffloadHostMemory,
        description="colocated: the host memory offloaded weights and optimizer state are copied into (and back from)",
    )
    lora_rank: int = Field(
        0, ge=0, le=1024, strict=True,
        description="LoRA: train adapters of this rank on every linear layer (but the MoE router) instead of the "
        "weights, and send only the adapters to the engines, which keep the base weights (verl "
        "actor_rollout_ref.model.lora_rank with target_modules all-linear; NeMo-RL's lora_cfg dim). 0: full training")
    precision: Literal["bf16", "fp8"] = Field(
        "bf16", description="the decoder layers' GEMMs in training, forward and backward: fp8 runs them on FP8 tensor "
        "cores with per-tensor scaling of their inputs and gradients (Megatron with Transformer Engine, --fp8-format "
        "hybrid; NeMo-RL policy.megatron_cfg.fp8_cfg; fsdp2 with torchao float8), attention, the output head and the "
        "optimizer staying 16/32-bit. Needs a GPU with FP8 tensor cores")
    reference_weights: Literal["resident", "host", "swap"] = Field(
        "resident", description="where the reference policy's weights live, when the algorithm has a reference pass: "
        "resident (a frozen copy sharded like the policy's weights, on the training GPUs); host (in host memory, copied "
        "in for each reference pass and back out: verl's Megatron ref param_offload); swap (in host memory, swapped "
        "with the policy's weights for the reference pass and back: NeMo-RL's use_reference_model)"
    )

    @property
    def requested_while_generating(self) -> OffloadWhileGenerating:
        """offload_while_generating as written, `true` meaning both kinds of state."""
        requested = self.offload_while_generating
        if isinstance(requested, bool):
            return OffloadWhileGenerating(weights=requested, optimizer=requested)
        return requested

    @property
    def moved_while_generating(self) -> OffloadWhileGenerating:
        """The GPU-resident state that moves to the host while the engines generate: what offload_while_generating
        names, less what lives on the host throughout."""
        requested = self.requested_while_generating
        return OffloadWhileGenerating(weights=requested.weights and not self.offload_params,
                                      optimizer=requested.optimizer and not self.offload_optimizer)

    @property
    def forward_micro_batch_tokens(self) -> int:
        """Tokens per micro-batch per GPU of a forward-only pass."""
        return self.logprob_micro_batch_tokens or self.micro_batch_tokens


# The roles a scenario may place on GPU groups of their own, by the names verl and OpenRLHF give them; `actor` is the
# policy's training GPUs (placement.training).
GroupRole = Literal["actor", "critic", "reference", "reward_model"]


class RolePlacement(TrainingPlacement):
    """Where the critic or the reference policy runs, with its own training layout: on GPUs of its own (`gpus`, in
    `pool`), or on another role's GPUs (`share_with`), taking turns with that role's stages. Left out, the role runs
    on the actor's training GPUs with the actor's layout."""

    pool: str | None = Field(None, description="default: the pool of the role shared with, else the training pool")
    gpus: PositiveInt | None = Field(
        None, description="GPUs of its own (verl's resource_pool_spec, OpenRLHF's critic_num_nodes × "
        "critic_num_gpus_per_node); with share_with: that role's GPUs")
    share_with: GroupRole | None = Field(
        None, description="run on the GPUs of this role (one that has GPUs of its own), taking turns with it: actor "
        "(the policy's training GPUs), critic, reference or reward_model (OpenRLHF's colocate_critic_reward, "
        "colocate_actor_ref)")


class RewardModelPlacement(Frozen):
    pool: str | None = Field(None, description="default: the rollout pool, or the pool of the role shared with")
    gpus: PositiveInt | None = Field(
        None, description="GPUs of their own that run the reward model or LLM judge; with share_with: that role's")
    tp: PositiveInt = Field(1, description="tensor-parallel GPUs per reward-model or judge engine")
    share_with: Literal["actor", "critic", "reference"] | None = Field(
        None, description="a reward model (not a judge) runs on the GPUs of this role, taking turns with it: actor "
        "(the policy's training GPUs), critic or reference (OpenRLHF's colocate_critic_reward)")


# Which training stages of roles on different GPU groups run at once (Placement.concurrent_stages).
ConcurrentStages = Literal["all", "updates", "none"]
# The two phases of a step's training stages: the forward passes, then the updates.
StagePhase = Literal["forward", "update"]


class Placement(Frozen):
    mode: Literal["colocated", "disaggregated", "hybrid"] = Field(
        description="colocated: roles time-share all GPUs; disaggregated: separate GPUs; "
        "hybrid: training GPUs also generate, plus dedicated rollout GPUs"
    )
    rollout: RolloutPlacement = Field(description="where and how the generation engines run")
    training: TrainingPlacement = Field(
        default_factory=TrainingPlacement, description="where and how the actor (and critic, reference) train")
    reward_model: RewardModelPlacement | None = Field(
        None, description="GPUs of a reward model or LLM judge (workload.reward kind reward_model or llm_judge)")
    critic: RolePlacement | None = Field(
        None, description="where and how the critic (value model) runs; default: on the actor's training GPUs with "
        "its layout (verl's critic in the actor's resource pool)")
    reference: RolePlacement | None = Field(
        None, description="where and how the reference policy runs; default: on the actor's training GPUs with its "
        "layout (training.reference_weights says where its weights live there)")
    concurrent_stages: ConcurrentStages = Field(
        "all", description="which training stages of roles on different GPU groups the driver runs at once: all (the "
        "forward passes — old log-probs, reference, critic values — together, then the critic and actor updates "
        "together; OpenRLHF's make_experience issues the reference, critic and reward-model calls and waits for them "
        "at once); updates (the forward passes one after another, then the two updates at once: verl's worker-group "
        "calls block by default, and its split-placement example issues only update_actor and update_critic without "
        "blocking); none (every stage in turn: verl's trainer as it ships)")

    def runs_at_once(self, phase: StagePhase) -> bool:
        """Whether the stages of `phase` on different GPU groups overlap (`concurrent_stages`)."""
        return self.concurrent_stages == "all" or (self.concurrent_stages == "updates" and phase == "update")

    def group_of(self, role: str) -> str:
        """The role whose GPUs `role` runs on: itself when it has GPUs of its own, else the role it shares with
        (critic and reference default to the actor)."""
        if role == "actor":
            return "actor"
        placed = {"critic": self.critic, "reference": self.reference, "reward_model": self.reward_model}[role]
        if placed is None:
            return "reward_model" if role == "reward_model" else "actor"
        return placed.share_with or role


class PartialRollout(Frozen):
    mode: Literal["off", "april", "interrupt", "in_flight"] = Field(
        "off",
        description="april: over-provision prompts, stop at the target count, carry unfinished sequences over; "
        "interrupt: stop in-flight sequences at a weight update and recompute their KV cache (AReaL); "
        "in_flight: load new weights between two engine iterations, in-flight sequences keep their KV cache and "
        "continue (NeMo-RL in_flight_weight_updates, PipelineRL); off: engines drain before a weight update",
    )
    over_provision: float = Field(1.0, ge=1.0, allow_inf_nan=False, description="prompts launched per prompt needed (april)")

    @field_validator("mode", mode="before")
    @classmethod
    def _bare_off(cls, value: Any) -> Any:
        # YAML 1.1 reads a bare `off` as false; `mode: off` must mean what it says.
        return "off" if value is False else value


# Policies chosen by name: the allowed names are the registry's (rlsim/registry.py), so adding one never touches this file.
ScheduleName = Annotated[str, Registered(SCHEDULES)]
LoadBalancerName = Annotated[str, Registered(LOAD_BALANCERS)]
DPBalancerName = Annotated[str, Registered(DP_BALANCERS)]
# A long-tail remedy of any registered kind (rlsim/sim/long_tail/), with its parameters.
LongTailRemedy = Annotated[LongTailParams, Variants(LONG_TAIL_REMEDIES)]

# What a tensor-by-tensor export broadcasts over the pipeline stages (WeightSync.pp_broadcast).
PPBroadcast = Literal["tp_shards", "full_tensors"]


class WeightSync(Frozen):
    method: Literal["nccl_broadcast", "checkpoint_engine", "per_tensor", "rdma_p2p"] = Field(
        "nccl_broadcast", description="how new weights reach the engines: nccl_broadcast (one collective per bucket), "
        "checkpoint_engine, per_tensor (tensor by tensor), rdma_p2p (point to point over RDMA)")
    bucket_mib: PositiveInt = Field(
        512, description="MiB of weights sent per broadcast (verl actor_rollout_ref.rollout.update_weights_bucket_megabytes, "
        "default 512)")
    every_updates: PositiveInt | None = Field(
        None, description="streaming: push weights to rollout every k optimizer updates; the policy version the "
        "staleness bound counts is one push. Default: once per RL step (algorithm.mini_batches updates), as verl "
        "fully_async's docs recommend (trigger_parameter_sync_step = train_batch_size / (require_batches × "
        "ppo_mini_batch_size)); 1 pushes after every mini-batch, so max_staleness then counts mini-batches")
    pp_broadcast: PPBroadcast = Field(
        "tp_shards", description="what a tensor-by-tensor export broadcasts over the pipeline stages: each TP rank its "
        "shard, gathered over TP after (verl's per_tensor_generator, Megatron-Bridge's stream_weights_megatron_to_hf), "
        "or the full tensor, gathered over TP first on the stage that holds it (NeMo-RL v0.3's gather_params)"
    )


class Schedule(Frozen):
    mode: ScheduleName = Field(
        "sync", description="sync: generate, then train; one_step_off: generation of step k+1 overlaps training of step k; "
        "async: generation runs ahead within max_staleness")
    max_staleness: UnboundedFloat | None = Field(
        None, description="async: the producer admits at most (version + max_staleness + 1) batches, and a sample "
        "generated by policy version v may train version at most v + ⌈max_staleness⌉. A fraction lets part of a batch "
        "run ahead: verl fully_async's staleness_threshold (0.5: half a batch). .inf (or any bound past the run's "
        "steps) is unbounded, AReaL's η = ∞: resolved to the run's steps"
    )
    streaming: Flag = Field(False, description="training consumes mini-batches as they complete")
    fetch_mini_batches: PositiveInt = Field(
        1, description="streaming: mini-batches of complete groups the trainer waits for before it trains on them, "
        "one optimizer update each (verl fully_async's require_batches); must divide algorithm.mini_batches")
    partial_rollout: PartialRollout = Field(
        default_factory=PartialRollout, description="what happens to unfinished sequences at a weight update")
    long_tail: LongTailRemedy | None = Field(
        None, description="sync: a long-tail remedy and its parameters, by kind: tail_batching (RollPacker: "
        "speculative short rounds, the prompts they abort deferred to long rounds), segment_rollout (UloRL: "
        "responses decoded a segment per round, unfinished ones carried over), early_abort (DUET: responses with "
        "no answer by a horizon aborted and left out of the loss), online_pruning (ARRoL: more rollouts a prompt, those a "
        "quality head scores at a pruning point pruned toward balanced successes, the survivors trained); default: none")
    load_balancer: LoadBalancerName = Field(
        "round_robin", description="how requests are routed to engines")
    length_predictor_noise: float = Field(
        0.0, ge=0.0, allow_inf_nan=False,
        description="relative error of the length predictor: a rollout of length L is predicted at L·exp(σ·N(0,1)) "
        "(length_aware balancing, past_future admission, a length-predicted placement.rollout.scheduling_policy)")
    group_placement: Literal["together", "spread"] = Field(
        "spread", description="keep a prompt's samples on one engine, or spread them"
    )
    max_concurrent_groups_per_engine: PositiveInt | None = Field(
        None, description="prompt groups sent to the engines at once, per engine (times the engines for the whole "
        "rollout): the rest wait, and a group's place frees only when its last sample finishes, so a long sample "
        "keeps its group's place. verl's fully_async rollouter sends 16 per server (max_concurrent_samples); "
        "default: every admitted group at once"
    )
    max_concurrent_groups: PositiveInt | None = Field(
        None, description="the same cap for the whole rollout, whatever the number of engines: AReaL's "
        "max_concurrent_rollouts (prompt groups in flight; its v0.3 default is the training batch's prompts). Set "
        "this or max_concurrent_groups_per_engine, not both"
    )
    dp_balance: DPBalancerName = Field(
        "sorted_greedy", description="how sequences are assigned to data-parallel ranks"
    )
    weight_sync: WeightSync = Field(default_factory=WeightSync, description="how new weights move from training to the engines")

    def group_cap(self, engines: int) -> int | None:
        """Prompt groups the engines may hold at once, over the whole rollout of `engines` engines (None: no cap)."""
        if self.max_concurrent_groups_per_engine is not None:
            return self.max_concurrent_groups_per_engine * engines
        return self.max_concurrent_groups


# What a run may simulate by default: ~3.5 minutes and ~5 GB.
DEFAULT_MAX_ROLLOUTS = 2_000_000


class Run(Frozen):
    """How long a run is and which steps it measures. Left unset, a run warms up for its schedule's pipeline fill
    (none for synchronous runs; one-step-off and async runs fill for their staleness bound plus one step) and then
    measures three steps: the steady-state answer. The resolved scenario holds the numbers chosen."""

    steps: PositiveInt | None = Field(
        None, description="steps simulated, warm-up included (default: the warm-up plus three measured steps)")
    warmup_steps: NonNegativeInt | None = Field(
        None, description="leading steps left out of the averages, so the results are steady state (default: the "
        "schedule's pipeline fill: 0 for sync, 2 for one-step-off, ⌈max_staleness⌉ + 1 for async, at most 5)")
    max_rollouts: PositiveInt = Field(
        DEFAULT_MAX_ROLLOUTS, description="the most responses a run may generate (steps × prompts × samples, more "
        "under over-provisioning or dynamic sampling): past it the scenario is refused before simulating, with the "
        "time and memory it would take. Each simulated response costs ~0.1 ms and ~2.5 KB (a 7B GRPO run of 262,144 "
        "responses on 32 H100s: 29 s and 0.9 GB); raise it for a longer run on a machine that has the memory")
    horizon: Duration | None = Field(
        None, description="wall-clock length of the real run to report goodput for (30d, 12h, 90m): failures are "
        "sampled over it, and checkpoints and evaluation passes paid for, around the simulated steady-state step "
        "(sections failures, checkpoint, evaluation). Unset: no goodput")


AGENT_NAME = r"^[A-Za-z][A-Za-z0-9_\-]*$"


class Agent(Frozen):
    """One policy of a multi-agent run (MARFT's agents, FlexMARL's heterogeneous agents): its own model, rollout
    engines and training layout, on GPUs of its own."""

    name: str = Field(pattern=AGENT_NAME, description="how agents.turn_order calls it, and its label in reports")
    model: ModelConfig | None = Field(
        None, description="its policy model (a catalog name, as the scenario's `model`); default: the scenario's")
    placement: Placement | None = Field(
        None, description="its rollout engines and training layout, on pools no other agent uses; default: the "
        "scenario's placement (one agent at most may take it)")


class Agents(Frozen):
    """Several policies trained together on trajectories that call them in turn (multi-agent RL: MARFT, FlexMARL).
    Each call of a trajectory is one generation by the agent it names, whose prompt is the trajectory so far; each
    agent trains on its own calls."""

    turn_order: list[str] = Field(
        min_length=2, max_length=64, description="the agents a trajectory calls, in order (planner, coder, coder: "
        "three calls, two of them the coder's); an agent's share of the calls is how often it appears")
    members: list[Agent] = Field(min_length=2, max_length=16, description="the agents, each on GPUs of its own")
    turn_by_turn: Flag = Field(
        False, description="the batch's k-th calls all end before any (k+1)-th call starts: the workflow run a turn "
        "at a time over the whole batch, each turn one generation call per agent; default: each trajectory sends its "
        "next call as soon as its last returns")


class Scenario(Frozen):
    # Set by rlsim.api: the YAML this scenario was read from, so that `with_` re-applies a change to what the user
    # wrote (derived defaults follow it). Not content: two scenarios with equal fields are equal wherever they came from.
    _source: Any = PrivateAttr(default=None)

    name: str = Field(min_length=1, description="the run's name: its folder under runs/ and its label in reports")
    description: str = Field("", description="one line on what the scenario is for (`rlsim example` lists it)")
    seed: Seed = Field(0, description="random seed of the workload draws; the same seed gives the same run")
    cluster: Cluster = Field(description="the GPUs: pools of identical nodes")
    model: ModelConfig = Field(description="the policy model: a catalog name or Hugging Face id (verl "
                               "actor_rollout_ref.model.path), a local config.json, or a name and an architecture")
    algorithm: Algorithm = Field(description="the RL algorithm and its batch: prompts, samples per prompt, mini-batches, lengths")
    workload: Workload = Field(description="prompt and response lengths, groups, multi-turn tools, rewards")
    placement: Placement = Field(description="which GPUs generate and which train, with their parallel layouts")
    schedule: Schedule = Field(
        default_factory=Schedule, description="how generation and training overlap, routing and weight sync")
    framework: Framework = Field(
        default_factory=Framework, description="framework and host overheads (CPU times, kernel launches); defaults measured on "
        "x86 hosts")
    run: Run = Field(default_factory=Run, description="how many steps to simulate")
    failures: Failures | None = Field(
        None, description="run.horizon: job-stopping GPU failures and the restart after each (default with a "
        "horizon: each GPU profile's published rate)")
    checkpoint: Checkpoint | None = Field(
        None, description="run.horizon: checkpoints every save_freq steps (verl trainer.save_freq); left out, none")
    evaluation: Evaluation | None = Field(
        None, description="run.horizon: a generation-only validation pass every test_freq steps (verl "
        "trainer.test_freq); left out, none")
    agents: Agents | None = Field(
        None, description="multi-agent RL: several policies, each with its own engines and training GPUs, called in "
        "turn by every trajectory; left out, one policy (the scenario's model and placement)")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Scenario) and self.__dict__ == other.__dict__


def scenario_json_schema() -> dict[str, Any]:
    """JSON Schema of a scenario file, including the `model: <catalog name>` shorthand that a before-validator expands."""
    schema = Scenario.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    name_shorthand = {"type": "string", "description": "catalog model name or Hugging Face id (Qwen2.5-7B, "
                      "Qwen/Qwen3-8B), or the path of a config.json or of its folder, relative to the scenario file"}
    schema["properties"]["model"] = {"description": Scenario.model_fields["model"].description,
                                     "anyOf": [name_shorthand, {"$ref": "#/$defs/ModelConfig"}]}
    # An agent's model takes the same shorthand (or is left out: the scenario's).
    schema["$defs"]["Agent"]["properties"]["model"]["anyOf"].insert(0, name_shorthand)
    for (model, field), text in ARCHITECTURE_FIELDS.items():
        schema["$defs"][model]["properties"][field].setdefault("description", text)
    return schema
