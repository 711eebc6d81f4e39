"""Cross-field checks and hardware-dependent defaults: everything a single field's type cannot say.

Each check appends a Problem at the field the user should edit; all are collected so one run of `rlsim check`
lists every mistake, not just the first.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from rlsim.config.long_run_checks import resolve_long_run
from rlsim.config.prefill import check_prefill, prefill_gpus, resolve_prefill
from rlsim.config.role_groups import check_role_groups, data_parallel, own_gpus, resolve_role_groups
from rlsim.config.run_length import max_lead, resolve_run_length
from rlsim.config.schedule_kind import modes, schedule_kind
from rlsim.config.schema import OffloadHostMemory, Placement, Pool, Scenario, TrainingPlacement
from rlsim.config.workload import Workload
from rlsim.errors import Problem, ScenarioError, TraceFormatError, UnknownName
from rlsim.hardware import HardwareCatalog
from rlsim.models import ModelCatalog, ModelSpec
from rlsim.models.hf_config import architecture_from_config, config_file, looks_like_path
from rlsim.registry import LONG_TAIL_REMEDIES
from rlsim.yamlsource import PathKey, YamlDocument


@dataclass
class _Checker:
    doc: YamlDocument
    problems: list[Problem] = field(default_factory=list)

    def fail(self, path: PathKey, message: str, *, value: Any = None, valid: str | None = None,
             suggestion: str | None = None) -> None:
        self.problems.append(self.doc.problem(path, message, value=value, valid=valid, suggestion=suggestion))

    def unknown(self, path: PathKey, err: UnknownName) -> None:
        self.fail(path, f"unknown {err.kind} {err.name!r}", value=err.name,
                  valid=", ".join(err.known), suggestion=err.suggestion)


def resolve_and_check(scenario: Scenario, doc: YamlDocument, base_dir: Path) -> tuple[Scenario, list[Problem]]:
    """Fill hardware- and placement-dependent defaults, then run every cross-field check."""
    check = _Checker(doc)
    profile_dirs = _profile_dirs(scenario, base_dir, check)
    hardware = HardwareCatalog.load(profile_dirs)
    pools = [_resolve_pool(i, pool, hardware, check) for i, pool in enumerate(scenario.cluster.pools)]
    cluster = scenario.cluster.model_copy(update={"pools": pools, "profile_dirs": [str(d) for d in profile_dirs]})
    spec = _model_spec(scenario, base_dir, check)
    model = scenario.model
    if spec is not None and model.architecture is None:
        # The catalog's spelling: `Qwen/Qwen3-8B` and `qwen3-8b` resolve to the same scenario as `Qwen3-8B`.
        model = model.model_copy(update={"name": spec.name, "architecture": spec.architecture})
    placement = _resolve_placement(scenario.placement, pools, check)
    schedule = scenario.schedule
    kind = schedule_kind(schedule.mode)
    if kind.takes_max_staleness and schedule.max_staleness is None:
        schedule = schedule.model_copy(update={"max_staleness": kind.staleness})
    if schedule.weight_sync.every_updates is None:
        # One push per RL step: a policy version is then a whole batch, with or without streaming (verl fully_async
        # counts staleness in parameter syncs, AReaL and NeMo-RL in trainer steps; none in mini-batches).
        sync = schedule.weight_sync.model_copy(update={"every_updates": scenario.algorithm.mini_batches})
        schedule = schedule.model_copy(update={"weight_sync": sync})
    workload = _resolve_trace_paths(scenario.workload, base_dir, check)
    length = resolve_run_length(scenario.run, schedule)
    resolved = scenario.model_copy(update={
        "run": scenario.run.model_copy(update={"steps": length.steps, "warmup_steps": length.warmup_steps}),
        "cluster": cluster, "model": model, "placement": placement, "schedule": schedule, "workload": workload,
    })
    if not any(p.path.startswith("cluster") for p in check.problems):
        resolved = resolved.model_copy(update={"failures": resolve_long_run(resolved, hardware, check.fail)})
    if not any(p.path.startswith(("cluster", "placement")) for p in check.problems):
        _check_capacity(resolved, check)
        if spec is not None:
            _check_parallelism(resolved, spec, hardware, check)
            _check_draft_model(resolved, check)
            _check_training_precision(resolved, hardware, check)
            _check_hf_engine(resolved, spec, check)
            check_prefill(resolved, spec, hardware, check.fail)
    _check_algorithm(resolved, check)
    _check_schedule(scenario, resolved, check)
    _check_reward(resolved, check)
    check_role_groups(resolved, check.fail)
    _check_workload(resolved, check)
    _check_size(resolved, check)
    if resolved.run.warmup_steps >= resolved.run.steps:
        check.fail(("run", "warmup_steps"), "warm-up steps leave no measured step",
                   value=resolved.run.warmup_steps, valid=f"0 to {resolved.run.steps - 1}")
    return resolved, check.problems


def _profile_dirs(scenario: Scenario, base_dir: Path, check: _Checker) -> list[Path]:
    # A `hardware_profiles/` folder beside the scenario is picked up without configuration: adding a GPU is adding a file.
    dirs = [base_dir / "hardware_profiles"] if (base_dir / "hardware_profiles").is_dir() else []
    for i, raw in enumerate(scenario.cluster.profile_dirs):
        path = Path(raw) if Path(raw).is_absolute() else base_dir / raw
        if not path.is_dir():
            check.fail(("cluster", "profile_dirs", i), "no such directory", value=raw)
        else:
            dirs.append(path.resolve())
    return dirs


def _resolve_pool(index: int, pool: Pool, hardware: HardwareCatalog, check: _Checker) -> Pool:
    at: PathKey = ("cluster", "pools", index)
    try:
        gpu = hardware.gpu(pool.gpu)
    except UnknownName as err:
        check.unknown(at + ("gpu",), err)
        return pool.model_copy(update={"gpus_per_node": pool.gpus_per_node or 1})
    updates: dict[str, Any] = {"gpu": gpu.name}
    if pool.gpus_per_node is None:
        updates["gpus_per_node"] = gpu.node.gpus_per_node.value
    elif gpu.scale_up is not None:
        # Nodes are whole scale-up domains (an 8-GPU NVLink board) or a whole number of nodes make one (NVL72).
        domain = gpu.scale_up.domain_gpus.value
        if domain % pool.gpus_per_node and pool.gpus_per_node % domain:
            check.fail(at + ("gpus_per_node",), f"{pool.gpus_per_node} GPUs per node do not tile {gpu.name}'s "
                       f"scale-up domains of {domain} GPUs", value=pool.gpus_per_node,
                       valid=f"a divisor or a multiple of {domain}")
    if pool.nics_per_node is None and gpu.node.nics_per_node is not None:
        updates["nics_per_node"] = gpu.node.nics_per_node.value
    if pool.price_usd_per_gpu_hour is None and gpu.price_usd_per_gpu_hour is not None:
        updates["price_usd_per_gpu_hour"] = gpu.price_usd_per_gpu_hour.value
    # A GPU without a scale-up fabric (PCIe cards) talks to its node peers over the host link.
    intra_default = gpu.scale_up.interconnect if gpu.scale_up else gpu.node.host_link
    for key, default, scopes in (("intra_node", intra_default, ("scale_up", "host")),
                                 ("inter_node", gpu.node.scale_out, ("scale_out",))):
        name = getattr(pool, key) or default
        if name is None:
            if pool.nodes > 1:
                check.fail(at + (key,), f"{gpu.name} nodes have no scale-out network, so a pool of {pool.nodes} "
                           "nodes needs one named", valid=", ".join(_names_in_scope(hardware, scopes)))
            continue
        try:
            link = hardware.interconnect(name)
        except UnknownName as err:
            check.unknown(at + (key,), err)
            continue
        if link.scope not in scopes:
            check.fail(at + (key,), f"{link.name} is a {link.scope} interconnect, not {' or '.join(scopes)}",
                       value=name, valid=", ".join(_names_in_scope(hardware, scopes)))
        updates[key] = link.name
    return pool.model_copy(update=updates)


def _names_in_scope(hardware: HardwareCatalog, scopes: tuple[str, ...]) -> list[str]:
    return [n for n in hardware.interconnect_names() if hardware.interconnect(n).scope in scopes]


def _model_spec(scenario: Scenario, base_dir: Path, check: _Checker) -> ModelSpec | None:
    """The model's spec: written inline, named from the catalog (by name or Hugging Face id), or read from a local
    config.json (a path, relative to the scenario's folder; a bare name only when the catalog does not know it)."""
    model = scenario.model
    if model.architecture is not None:
        return ModelSpec.from_architecture(model.name, model.architecture)
    path: PathKey = ("model", "name") if ("model", "name") in check.doc.lines else ("model",)
    config = config_file(model.name, base_dir)
    if not looks_like_path(model.name):
        try:
            return ModelCatalog.load().spec(model.name)
        except UnknownName as err:
            if not config.is_file():
                check.unknown(path, err)
                return None
    if not config.is_file():
        check.fail(path, f"no Hugging Face config.json at {config}", value=model.name,
                   valid="a catalog name, a Hugging Face id (owner/name), or a config.json or a folder holding one, "
                   "relative to the scenario file")
        return None
    try:
        return ModelSpec.from_architecture(model.name, architecture_from_config(config))
    except ScenarioError as err:
        check.problems.extend(err.problems)
        return None


def _resolve_placement(placement: Placement, pools: list[Pool], check: _Checker) -> Placement:
    names = [p.name for p in pools]
    rollout, training = placement.rollout, placement.training
    at = ("placement",)

    def pool_name(path: PathKey, name: str | None, default: str) -> str:
        if name is None:
            return default
        if name not in names:
            check.fail(path, f"no pool named {name!r}", value=name, valid=", ".join(names))
        return name

    rollout_pool = pool_name(at + ("rollout", "pool"), rollout.pool, names[0])
    rollout = rollout.model_copy(update={"pool": rollout_pool})
    training_gpus = training.gpus
    if training_gpus is None:
        if placement.mode == "colocated":
            training_gpus = rollout.gpus
        else:
            check.fail(at + ("training", "gpus"), f"required when placement.mode is {placement.mode}",
                       valid="the number of GPUs that train")
            training_gpus = rollout.gpus
    training_pool = pool_name(at + ("training", "pool"), training.pool, rollout_pool)
    training = training.model_copy(update={
        "pool": training_pool, "gpus": training_gpus,
        "dp": data_parallel(at + ("training",), training, training_gpus, check.fail),
    })
    reward = placement.reward_model
    if reward is not None and reward.share_with is None:
        reward = reward.model_copy(update={"pool": pool_name(at + ("reward_model", "pool"), reward.pool, rollout_pool)})
    resolved = placement.model_copy(update={"rollout": rollout, "training": training, "reward_model": reward})
    return resolve_prefill(resolve_role_groups(resolved, pool_name, check.fail), pool_name)


def _check_capacity(scenario: Scenario, check: _Checker) -> None:
    """Pools must hold the GPUs of the roles placed on them, in the way the placement mode shares them."""
    placement = scenario.placement
    rollout, training = placement.rollout, placement.training
    assert training.gpus is not None and rollout.pool is not None and training.pool is not None
    if training.requested_while_generating.any and placement.mode != "colocated":
        check.fail(("placement", "training", "offload_while_generating"),
                   "only colocated training moves its state to the host to make room for the engines",
                   value=True, valid="false, or placement.mode: colocated")
    moved, memory = training.moved_while_generating, training.offload_host_memory
    if training.offload_weights_per_call and not moved.weights:
        check.fail(("placement", "training", "offload_weights_per_call"),
                   "copies the weights out and back around each worker call, but they do not move to the host "
                   "between phases",
                   value=True, valid="false, or placement.mode: colocated with training.offload_while_generating "
                   "moving the weights (and not offload_params)")
    for state, what in (("weights", "the weights are"), ("optimizer", "the optimizer state is")):
        if getattr(memory, state) != getattr(OffloadHostMemory(), state) and not getattr(moved, state):
            check.fail(("placement", "training", "offload_host_memory", state),
                       f"says where {what} copied when offloaded, but it does not move to the host between phases",
                       valid=f"leave it out, or placement.mode: colocated with training.offload_while_generating "
                       f"moving the {state} (and not living on the host throughout)")
    if placement.mode == "colocated":
        if training.pool != rollout.pool:
            check.fail(("placement", "training", "pool"), "colocated roles share GPUs, so they must be in the same pool",
                       value=training.pool, valid=rollout.pool)
        if training.gpus != rollout.gpus:
            check.fail(("placement", "training", "gpus"), f"colocated training uses the rollout GPUs ({rollout.gpus})",
                       value=training.gpus, valid=str(rollout.gpus))
    elif placement.mode == "hybrid":  # every training GPU also generates; some rollout GPUs are dedicated
        if training.pool != rollout.pool:
            check.fail(("placement", "training", "pool"), "hybrid shares the training GPUs with rollout, so one pool",
                       value=training.pool, valid=rollout.pool)
        if training.gpus >= rollout.gpus:
            check.fail(("placement", "rollout", "gpus"), f"hybrid needs more rollout GPUs than training GPUs "
                       f"({training.gpus}): the extra ones are the dedicated rollout GPUs",
                       value=rollout.gpus, valid=f"> {training.gpus}")
    demand = placed_gpus(placement)
    for i, pool in enumerate(scenario.cluster.pools):
        if demand.get(pool.name, 0) > pool.gpus:
            check.fail(("cluster", "pools", i, "nodes"),
                       f"pool {pool.name!r} has {pool.gpus} GPUs but the placement needs {demand[pool.name]}",
                       value=pool.nodes, valid=f"nodes ≥ {-(-demand[pool.name] // pool.gpus_per_node)}")
    if rollout.gpus % rollout.tp:
        check.fail(("placement", "rollout", "gpus"), f"rollout GPUs must be whole engines of tp={rollout.tp}",
                   value=rollout.gpus, valid=f"a multiple of {rollout.tp}")


def placed_gpus(placement: Placement) -> dict[str, int]:
    """GPUs the roles occupy in each pool: colocated and hybrid training share the rollout GPUs, disaggregated
    training has its own, and so do a critic, reference or reward model placed on GPUs of their own, and prefill
    engines."""
    rollout, training = placement.rollout, placement.training
    assert rollout.pool is not None and training.pool is not None and training.gpus is not None
    placed = {rollout.pool: rollout.gpus}
    if placement.mode == "disaggregated":
        placed[training.pool] = placed.get(training.pool, 0) + training.gpus
    reward = placement.reward_model
    own = own_gpus(placement)
    if reward is not None and reward.share_with is None:
        assert reward.pool is not None and reward.gpus is not None
        own.append((reward.pool, reward.gpus))
    prefill = prefill_gpus(placement)
    if prefill is not None:
        own.append(prefill)
    for pool, gpus in own:
        placed[pool] = placed.get(pool, 0) + gpus
    return placed


def scenario_warnings(scenario: Scenario, doc: YamlDocument) -> list[Problem]:
    """What a valid, resolved scenario probably did not mean: pool GPUs no role uses. They sit idle in the
    simulation yet count in its cost and per-GPU figures (a colocated placement sized for fewer GPUs than the cluster
    is the usual slip)."""
    placements = [scenario.placement] if scenario.agents is None else [
        member.placement for member in scenario.agents.members if member.placement is not None]
    placed: dict[str, int] = {}
    for placement in placements:
        for pool, gpus in placed_gpus(placement).items():
            placed[pool] = placed.get(pool, 0) + gpus
    found = []
    for i, pool in enumerate(scenario.cluster.pools):
        used = placed.get(pool.name, 0)
        if used < pool.gpus:
            roles = "colocated roles use" if scenario.placement.mode == "colocated" else "placement uses"
            found.append(doc.problem(
                ("cluster", "pools", i, "nodes"),
                f"the {roles} {used} of the {pool.gpus} GPUs of pool {pool.name!r}: the other {pool.gpus - used} sit "
                "idle but count in cost and per-GPU figures", value=pool.nodes,
                valid=f"placement GPUs adding up to {pool.gpus}, or a pool of {used} GPUs"))
    return found


def _check_parallelism(scenario: Scenario, spec: ModelSpec, hardware: HardwareCatalog, check: _Checker) -> None:
    arch = spec.architecture
    heads, kv_heads = arch.num_attention_heads, arch.num_key_value_heads
    rollout, training = scenario.placement.rollout, scenario.placement.training
    ro, tr = ("placement", "rollout"), ("placement", "training")

    if heads % rollout.tp:
        check.fail(ro + ("tp",), f"tp must divide the {heads} attention heads", value=rollout.tp,
                   valid=_divisors(heads))
    elif kv_heads % rollout.tp and rollout.tp % kv_heads:
        # Inference engines replicate KV heads when tp is a multiple of them; anything else cannot be split.
        check.fail(ro + ("tp",), f"tp must divide the {kv_heads} KV heads or be a multiple of them",
                   value=rollout.tp, valid=_divisors(kv_heads) + f" or multiples of {kv_heads}")
    layouts = [(tr, training)] + [(("placement", role), placed) for role in ("critic", "reference")
                                  if (placed := getattr(scenario.placement, role)) is not None]
    for path, layout in layouts:
        _check_training_layout(path, layout, spec, check)

    pool = scenario.cluster.pool(rollout.pool or "")
    gpu = hardware.gpu(pool.gpu)
    domain = gpu.scale_up.domain_gpus.value if gpu.scale_up else pool.gpus_per_node
    if rollout.tp > domain and rollout.tp % domain:
        # vLLM runs tensor parallelism across nodes (NeMo-RL's Qwen3-235B and DeepSeek-V3 recipes: TP16, TP32), its
        # all-reduces then crossing the scale-out network; an engine is whole scale-up domains or fits in one.
        check.fail(ro + ("tp",), f"an engine's tp group must fit in one scale-up domain of {domain} GPUs or span "
                   "whole ones", value=rollout.tp, valid=f"≤ {domain}, or a multiple of {domain}")

    experts = [(ro + ("ep",), rollout.ep, "engine GPUs (tp)", rollout.tp)] + [
        (path + ("ep",), layout.ep, "tp·cp·dp", layout.tp * layout.cp * (layout.dp or 1)) for path, layout in layouts]
    for path, ep, limit_name, limit in experts:
        if ep == 1:
            continue
        if arch.moe is None:
            check.fail(path, f"expert parallelism needs a mixture-of-experts model; {spec.name} is dense",
                       value=ep, valid="1")
        elif arch.moe.num_experts % ep:
            check.fail(path, f"ep must divide the {arch.moe.num_experts} experts", value=ep,
                       valid=_divisors(arch.moe.num_experts))
        elif limit % ep:
            check.fail(path, f"ep must divide the {limit_name} = {limit}", value=ep, valid=_divisors(limit))

    sequences_per_mini_batch = scenario.algorithm.samples_per_step // scenario.algorithm.mini_batches
    # The actor's updates, and a placed critic's (a reference only runs forward passes over the whole batch).
    trained = max((layout.dp or 0 for path, layout in layouts if path[-1] != "reference"), default=0)
    if trained and sequences_per_mini_batch < trained:
        check.fail(("algorithm", "mini_batches"), f"a mini-batch of {sequences_per_mini_batch} sequences leaves some of "
                   f"the {trained} data-parallel ranks without work", value=scenario.algorithm.mini_batches,
                   valid=f"≤ {max(1, scenario.algorithm.samples_per_step // trained)}")


def _check_training_layout(path: PathKey, layout: TrainingPlacement, spec: ModelSpec, check: _Checker) -> None:
    """The shape constraints of a training layout (the actor's, or a placed critic's or reference's)."""
    arch = spec.architecture
    heads, kv_heads = arch.num_attention_heads, arch.num_key_value_heads
    if heads % layout.tp:
        check.fail(path + ("tp",), f"tp must divide the {heads} attention heads", value=layout.tp,
                   valid=_divisors(heads))
    elif kv_heads % layout.tp:
        check.fail(path + ("tp",), f"tp must divide the {kv_heads} KV heads", value=layout.tp,
                   valid=_divisors(kv_heads))
    elif layout.backend != "megatron" and (heads // layout.tp) % layout.cp:
        check.fail(path + ("cp",), f"Ulysses context parallelism splits heads: cp must divide the "
                   f"{heads // layout.tp} heads per TP rank", value=layout.cp, valid=_divisors(heads // layout.tp))
    if layout.pp * layout.virtual_pipeline_stages > arch.num_hidden_layers:
        check.fail(path + ("pp",), f"more pipeline stages than the {arch.num_hidden_layers} layers",
                   value=layout.pp, valid=f"≤ {arch.num_hidden_layers // layout.virtual_pipeline_stages}")


def _check_training_precision(scenario: Scenario, hardware: HardwareCatalog, check: _Checker) -> None:
    """FP8 training needs an FP8 training stack and FP8 tensor cores."""
    training = scenario.placement.training
    if training.precision != "fp8":
        return
    path: PathKey = ("placement", "training", "precision")
    gpu = hardware.gpu(scenario.cluster.pool(training.pool or "").gpu)
    if training.backend not in ("megatron", "fsdp2"):
        check.fail(path, f"FP8 training runs on Megatron with Transformer Engine or on FSDP2 with torchao's float8, "
                   f"not on backend {training.backend}", value="fp8", valid="bf16, or backend megatron or fsdp2")
    elif gpu.peak_tflops.fp8 is None:
        check.fail(path, f"{gpu.name} has no FP8 tensor cores", value="fp8", valid="bf16")


def _check_draft_model(scenario: Scenario, check: _Checker) -> None:
    """A speculative draft model must exist and split over the engine's TP GPUs."""
    speculative, tp = scenario.placement.rollout.speculative, scenario.placement.rollout.tp
    if speculative is None or speculative.draft_model is None:
        return
    path: PathKey = ("placement", "rollout", "speculative", "draft_model")
    try:
        draft = ModelCatalog.load().spec(speculative.draft_model).architecture
    except UnknownName as err:
        check.unknown(path, err)
        return
    if draft.num_attention_heads % tp or (draft.num_key_value_heads % tp and tp % draft.num_key_value_heads):
        check.fail(path, f"the draft model runs on the engine's tp={tp} GPUs, and its {draft.num_attention_heads} "
                   f"attention heads ({draft.num_key_value_heads} KV heads) do not split over them",
                   value=speculative.draft_model, valid="a draft model whose heads divide the engine's tp")


def _check_hf_engine(scenario: Scenario, spec: ModelSpec, check: _Checker) -> None:
    """What HF generate() engines (rlsim.sim.static_batch) do not run: generate() returns only with its whole batch,
    keeps its cache in the model's 16-bit type, and is modelled for dense models in 16-bit weights."""
    rollout = scenario.placement.rollout
    if rollout.engine != "hf":
        if rollout.pad_prompts != "longest":
            check.fail(("placement", "rollout", "pad_prompts"), f"pads the prompts of static batches; "
                       f"{rollout.engine} engines batch continuously and pad nothing", value=rollout.pad_prompts,
                       valid="longest, or engine hf")
        return
    why = "placement.rollout.engine hf (Hugging Face generate())"
    if rollout.admission != "current_kv":
        check.fail(("placement", "rollout", "admission"), f"{why} runs static batches, which admit nothing while one "
                   "decodes", value=rollout.admission, valid="current_kv, or engine vllm / sglang")
    if rollout.scheduling_policy != "fcfs":
        check.fail(("placement", "rollout", "scheduling_policy"), f"{why} fills each static batch with the rollouts "
                   "queued first and runs it to its longest; a priority would only reorder whole batches, which is not "
                   "modelled", value=rollout.scheduling_policy, valid="fcfs, or engine vllm / sglang")
    arch = spec.architecture
    if arch.moe is not None or arch.mla is not None:
        check.fail(("placement", "rollout", "engine"), f"{why} is modelled for dense models; {spec.name} has "
                   f"{'experts' if arch.moe is not None else 'MLA attention'}", value="hf", valid="vllm, sglang")
    if rollout.speculative is not None:
        check.fail(("placement", "rollout", "speculative"), f"{why} decodes without speculation",
                   value=rollout.speculative.method, valid="null, or engine vllm / sglang")
    if rollout.kv_cache_dtype != "auto":
        check.fail(("placement", "rollout", "kv_cache_dtype"), f"{why} keeps its cache in the model's 16-bit type",
                   value=rollout.kv_cache_dtype, valid="auto, or engine vllm / sglang")
    if scenario.model.dtype in ("fp8", "fp4"):
        check.fail(("model", "dtype"), f"{why} runs 16-bit weights (rlsim prices quantized rollout weights with "
                   "vLLM's kernels)", value=scenario.model.dtype, valid="bf16, or engine vllm / sglang")
    partial = scenario.schedule.partial_rollout.mode
    if partial != "off":
        check.fail(("schedule", "partial_rollout", "mode"), f"{why} returns only with its whole batch: it cannot "
                   "stop sequences or take new weights in the middle of one", value=partial,
                   valid="off, or engine vllm / sglang")


def _check_algorithm(scenario: Scenario, check: _Checker) -> None:
    algo = scenario.algorithm
    if algo.prompts_per_step % algo.mini_batches:
        check.fail(("algorithm", "mini_batches"), f"{algo.prompts_per_step} prompts per step do not split into "
                   f"{algo.mini_batches} equal mini-batches", value=algo.mini_batches, valid=_divisors(algo.prompts_per_step))
    if algo.max_sequence_tokens is not None and algo.max_sequence_tokens <= algo.max_prompt_tokens:
        check.fail(("algorithm", "max_sequence_tokens"), f"a prompt of max_prompt_tokens ({algo.max_prompt_tokens}) "
                   "would leave no room to generate", value=algo.max_sequence_tokens,
                   valid=f"> {algo.max_prompt_tokens}")
    if algo.name in ("grpo", "dapo") and algo.samples_per_prompt < 2:
        check.fail(("algorithm", "samples_per_prompt"), f"{algo.name.upper()} compares samples within a group, "
                   "so it needs at least 2 per prompt", value=algo.samples_per_prompt, valid="≥ 2")
    informative = scenario.workload.informative_model
    if algo.dynamic_sampling and informative.kind == "fraction" and informative.fraction == 0:
        path = ("workload", "informative", "fraction") if scenario.workload.informative is not None \
            else ("workload", "informative_group_fraction")
        check.fail(path, "dynamic sampling keeps only informative groups, so with none the batch never fills",
                   value=0.0, valid="a fraction above 0")
    if algo.name == "ppo" and not algo.critic:
        check.fail(("algorithm", "critic"), "PPO estimates advantages with a value model", value=False,
                   valid="true (or use grpo / reinforce, which need no critic)")


def _check_schedule(original: Scenario, scenario: Scenario, check: _Checker) -> None:
    schedule, placement = scenario.schedule, scenario.placement
    kind = schedule_kind(schedule.mode)
    if original.schedule.max_staleness is not None and not kind.takes_max_staleness:
        settable = " or ".join(modes(takes_max_staleness=True))
        fixed = ", ".join(f"{mode} {schedule_kind(mode).staleness:g}" for mode in modes(takes_max_staleness=False))
        check.fail(("schedule", "max_staleness"), f"applies only to schedule.mode {settable} (the others' staleness is "
                   f"fixed: {fixed}); mode is {schedule.mode}", value=original.schedule.max_staleness)
    if kind.off_policy and placement.mode == "colocated":
        check.fail(("schedule", "mode"), f"{schedule.mode} overlaps generation with training, but colocated GPUs "
                   "do one at a time", value=schedule.mode,
                   valid=f"{' / '.join(modes(off_policy=False))}, or placement.mode disaggregated / hybrid")
    partial = schedule.partial_rollout
    if partial.mode == "april" and partial.over_provision <= 1.0:
        check.fail(("schedule", "partial_rollout", "over_provision"), "APRIL launches more prompts than it needs",
                   value=partial.over_provision, valid="> 1, e.g. 2.0")
    if partial.mode != "april" and partial.over_provision != 1.0:
        check.fail(("schedule", "partial_rollout", "over_provision"), "used only by partial_rollout.mode april",
                   value=partial.over_provision)
    if partial.mode in ("interrupt", "in_flight") and not kind.off_policy:
        check.fail(("schedule", "partial_rollout", "mode"), "updating weights under generation in flight needs "
                   f"generation to overlap training (schedule.mode {' or '.join(modes(off_policy=True))})",
                   value=partial.mode, valid="off, april")
    if schedule.max_concurrent_groups is not None and schedule.max_concurrent_groups_per_engine is not None:
        check.fail(("schedule", "max_concurrent_groups"), "caps the groups in flight over the whole rollout, as "
                   "max_concurrent_groups_per_engine does per engine; both are set", value=schedule.max_concurrent_groups,
                   valid="one of the two")
    if schedule.long_tail is not None:
        _check_long_tail(scenario, check)
    if schedule.streaming and not kind.off_policy:
        check.fail(("schedule", "streaming"), f"streaming trains while generation continues, which {schedule.mode} "
                   "forbids", value=True, valid=f"false, or schedule.mode {' or '.join(modes(off_policy=True))}")
    mini_batches = scenario.algorithm.mini_batches
    if schedule.fetch_mini_batches > 1 and not schedule.streaming:
        check.fail(("schedule", "fetch_mini_batches"), "applies to streaming, which trains mini-batches as they "
                   "complete; without it the trainer takes the whole batch", value=schedule.fetch_mini_batches,
                   valid="1, or schedule.streaming: true")
    elif mini_batches % schedule.fetch_mini_batches:
        check.fail(("schedule", "fetch_mini_batches"), f"must divide algorithm.mini_batches ({mini_batches})",
                   value=schedule.fetch_mini_batches,
                   valid=", ".join(str(d) for d in range(1, mini_batches + 1) if mini_batches % d == 0))
    elif schedule.weight_sync.every_updates is not None and schedule.weight_sync.every_updates % schedule.fetch_mini_batches:
        check.fail(("schedule", "weight_sync", "every_updates"), "weights are pushed between two fetches, so every "
                   f"push must come after whole fetches of schedule.fetch_mini_batches ({schedule.fetch_mini_batches})",
                   value=schedule.weight_sync.every_updates, valid=f"a multiple of {schedule.fetch_mini_batches}")


def _check_long_tail(scenario: Scenario, check: _Checker) -> None:
    """A remedy replaces a synchronous step's generation; what every remedy needs, then the remedy's own checks."""
    schedule = scenario.schedule
    assert schedule.long_tail is not None
    remedy = schedule.long_tail.kind
    if schedule_kind(schedule.mode).off_policy:
        check.fail(("schedule", "long_tail"), f"{remedy} reshapes a synchronous step; schedule.mode {schedule.mode} "
                   "already overlaps generation with training", value=remedy,
                   valid=f"null, or schedule.mode {' / '.join(modes(off_policy=False))}")
    if schedule.partial_rollout.mode != "off":
        check.fail(("schedule", "partial_rollout", "mode"), f"{remedy} decides itself what happens to unfinished "
                   "responses", value=schedule.partial_rollout.mode, valid="off")
    if scenario.placement.rollout.engine == "hf":
        check.fail(("placement", "rollout", "engine"), f"{remedy} stops responses in the middle of a batch, which "
                   "Hugging Face generate() cannot", value="hf", valid="vllm, sglang")
    if scenario.workload.multiturn is not None:
        check.fail(("workload", "multiturn"), f"{remedy} is modelled for single-turn responses", value="set",
                   valid="null")
    if scenario.placement.rollout.prefill is not None:
        check.fail(("placement", "rollout", "prefill"), f"{remedy} takes unfinished responses back from the engines' "
                   "queues; responses on their way from a prefill engine are not modelled for it", value="set",
                   valid="null (prefill on the rollout engines)")
    for cap in ("max_concurrent_groups", "max_concurrent_groups_per_engine"):
        if getattr(schedule, cap) is not None:
            check.fail(("schedule", cap), f"{remedy} decides itself which groups generate at once",
                       value=getattr(schedule, cap), valid="null")
    LONG_TAIL_REMEDIES[remedy].check(scenario, check.fail)


def _check_reward(scenario: Scenario, check: _Checker) -> None:
    reward = scenario.workload.reward
    has_gpus = scenario.placement.reward_model is not None
    if reward.kind in ("reward_model", "llm_judge"):
        try:
            ModelCatalog.load().spec(reward.model)
        except UnknownName as err:
            check.unknown(("workload", "reward", "model"), err)
        if not has_gpus:
            check.fail(("placement",), f"a {reward.kind} reward needs placement.reward_model (pool, gpus, tp)",
                       valid="placement.reward_model: {gpus: 8}")
        elif reward.kind == "llm_judge" and (scenario.placement.reward_model.gpus or 0) % scenario.placement.reward_model.tp:
            check.fail(("placement", "reward_model", "gpus"), "the judge's GPUs must be whole engines of its tp",
                       value=scenario.placement.reward_model.gpus,
                       valid=f"a multiple of {scenario.placement.reward_model.tp}")
    elif has_gpus:
        check.fail(("placement", "reward_model"), f"GPUs for a reward model, but workload.reward.kind is {reward.kind}",
                   valid="remove it, or set workload.reward.kind: reward_model")


def resolve_workload_paths(workload: Workload, doc: YamlDocument, base_dir: Path,
                           at: PathKey = ("workload",)) -> Workload:
    """A workload read from its own file (`rlsim workload show`): its trace paths resolved against `base_dir`,
    each missing one a ScenarioError at its line."""
    check = _Checker(doc)
    resolved = _with_resolved_paths(workload, at, base_dir, check)
    if check.problems:
        raise ScenarioError(check.problems)
    return resolved


def _resolve_trace_paths(workload: Workload, base_dir: Path, check: _Checker) -> Workload:
    """Every `path` in the workload (trace length models, replay, recorded filters) made absolute against the
    scenario's folder; a missing file is reported at its field."""
    resolved = _with_resolved_paths(workload, ("workload",), base_dir, check)
    assert isinstance(resolved, Workload)
    return resolved


def _with_resolved_paths(value: Any, at: PathKey, base_dir: Path, check: _Checker) -> Any:
    if isinstance(value, list):
        return [_with_resolved_paths(item, at + (i,), base_dir, check) for i, item in enumerate(value)]
    if not isinstance(value, BaseModel):
        return value
    updates = {}
    for name in type(value).model_fields:
        field = getattr(value, name)
        if name == "path" and isinstance(field, str):
            path = Path(field) if Path(field).is_absolute() else base_dir / field
            if not path.exists():
                check.fail(at + (name,), "no such trace file or directory", value=field)
            else:
                updates[name] = str(path.resolve())
        elif isinstance(field, (BaseModel, list)):
            new = _with_resolved_paths(field, at + (name,), base_dir, check)
            if new is not field:
                updates[name] = new
    return value.model_copy(update=updates) if updates else value


def _check_workload(scenario: Scenario, check: _Checker) -> None:
    """Workload parts that need each other, and traces that must be readable."""
    workload = scenario.workload
    needs_success = []
    if workload.informative is not None and workload.informative.kind == "success_rate":
        needs_success.append(("workload", "informative"))
    if workload.samples_per_prompt.kind == "knapsack":
        needs_success.append(("workload", "samples_per_prompt"))
    for path in needs_success:
        if workload.success_rate is None:
            check.fail(path, "needs each prompt's success rate", valid="workload.success_rate: {mean: 0.5}")
    if workload.step_length_sigma and (workload.replay is not None or workload.multiturn is not None):
        check.fail(("workload", "step_length_sigma"), "scales sampled single-turn responses; a replayed trace keeps "
                   "its recorded lengths and a multi-turn trajectory its turns", value=workload.step_length_sigma,
                   valid="0, or response_tokens without replay or multiturn")
    if workload.replay is not None and workload.samples_per_prompt.kind != "uniform":
        check.fail(("workload", "samples_per_prompt"), "a replayed trace keeps its recorded samples per prompt",
                   value=workload.samples_per_prompt.kind, valid="uniform (or remove replay)")
    if workload.joint_tokens is not None and workload.groups.prompt_response_correlation != 0:
        check.fail(("workload", "groups", "prompt_response_correlation"), "joint_tokens' covariances already "
                   "correlate prompt and response", value=workload.groups.prompt_response_correlation, valid="0")
    if workload.generation_batch_prompts is not None and not scenario.algorithm.dynamic_sampling:
        check.fail(("workload", "generation_batch_prompts"), "sets how dynamic sampling tops up a batch, which "
                   "algorithm.dynamic_sampling turns off", value=workload.generation_batch_prompts)
    for at, read in _trace_readers(workload):
        try:
            read()
        except TraceFormatError as err:
            check.fail(at, str(err))


def _trace_readers(workload: Workload) -> list[tuple[PathKey, Any]]:
    """(field, reader) of every trace the workload names, to parse each once at load time."""
    from rlsim.config.workload import Replay, TraceFilter, TraceLength
    from rlsim.traces import read_filter_indices, read_lengths, read_trace

    readers: list[tuple[PathKey, Any]] = []
    for at, model in _models_with_paths(workload, ("workload",)):
        path = Path(model.path)
        if isinstance(model, Replay):
            readers.append((at, lambda p=path: read_trace(p)))
        elif isinstance(model, TraceFilter):
            readers.append((at, lambda p=path: read_filter_indices(p)))
        elif isinstance(model, TraceLength):
            readers.append((at, lambda p=path: read_lengths(p, "output")))
    return readers


def _models_with_paths(value: Any, at: PathKey):
    """(field path of `path`, model) of every model with a `path` field inside `value`."""
    if isinstance(value, list):
        for i, item in enumerate(value):
            yield from _models_with_paths(item, at + (i,))
    elif isinstance(value, BaseModel):
        for name in type(value).model_fields:
            field = getattr(value, name)
            if name == "path" and isinstance(field, str) and Path(field).exists():
                yield at + (name,), value
            else:
                yield from _models_with_paths(field, at + (name,))


def _divisors(n: int) -> str:
    return ", ".join(str(d) for d in range(1, n + 1) if n % d == 0)


# Measured on a 2-core x86 VM: a 7B GRPO run of 262,144 responses on 32 H100s took 29 s and 0.9 GB in all (simulation,
# metrics, run folder), about 0.1 ms and 2.5 KB a response beyond a ~0.15 GB base.
SECONDS_PER_ROLLOUT = 1.0e-4
BYTES_PER_ROLLOUT = 2.5e3


def simulated_rollouts(scenario: Scenario) -> int:
    """Responses a run generates: every step's prompts × samples, more when APRIL over-provisions or when dynamic
    sampling draws past the groups it drops (by the share of informative groups)."""
    algo, schedule = scenario.algorithm, scenario.schedule
    per_step = algo.prompts_per_step * algo.samples_per_prompt
    if schedule.partial_rollout.mode == "april":
        per_step *= schedule.partial_rollout.over_provision
    if schedule.long_tail is not None:
        per_step *= LONG_TAIL_REMEDIES[schedule.long_tail.kind].launched_per_response(scenario)
    if algo.dynamic_sampling:
        per_step /= max(scenario.workload.informative_group_fraction, 1e-9)
    steps = scenario.run.steps
    if schedule.max_staleness is not None:  # an async producer generates up to its lead past the last step
        steps += min(schedule.max_staleness, max_lead(steps)) + 1
    return math.ceil(steps * per_step)


def _check_size(scenario: Scenario, check: _Checker) -> None:
    """Refuse, before anything runs, a run past `run.max_rollouts`, saying what it would take."""
    rollouts = simulated_rollouts(scenario)
    limit = scenario.run.max_rollouts
    if rollouts <= limit:
        return
    minutes = rollouts * SECONDS_PER_ROLLOUT / 60
    gigabytes = rollouts * BYTES_PER_ROLLOUT / 1e9
    check.fail(("run", "max_rollouts"), f"the run generates {rollouts:,} responses ({scenario.run.steps:,} steps), "
               f"past the limit of {limit:,}: about {minutes:,.0f} min and {gigabytes:,.1f} GB to simulate",
               value=limit, valid=f"fewer steps or prompts, or run.max_rollouts: {rollouts} on a machine with the "
               "memory")
